"""Load recipe sources into one catalog.

A source is either a recipe tree in the upstream layout::

    models/<org>/<repo>.yaml   strategies/*.yaml   kv_store/*.yaml   taxonomy.yaml

or a single recipe in the upstream API JSON format (``<org>/<repo>.json``, the seed's
format).  Sources stack in order: a later tree overrides earlier ones recipe by recipe
(id ``<org>/<repo>`` from the path), strategy by strategy (their ``name`` field), and
hardware profile / KV option by id in the taxonomy.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Tuple, Union

from .yamlio import load_yaml

PathLike = Union[str, "os.PathLike[str]"]
API_ONLY_KEYS = ("hf_id", "recommended_command", "source")


class LoadError(ValueError):
    """A source that cannot be read; the message names the file."""


def _plain(value: Any) -> Any:
    """Dates become ``YYYY-MM-DD`` strings, as in upstream's API build."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, (_dt.date, _dt.datetime)):
        return value.strftime("%Y-%m-%d")
    return value


def read_yaml(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise LoadError(f"{path}: cannot read: {exc.strerror}") from exc
    try:
        return _plain(load_yaml(text))
    except Exception as exc:  # yaml.YAMLError and friends
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1} column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise LoadError(f"{path}:{where}: malformed YAML: {problem}") from exc


def recipe_files(root: Path) -> List[Tuple[str, Path]]:
    """The recipes of a tree, the one rule for the loader and the validator:
    ``models/<org>/[<dirs>/]<repo>.yaml`` -> (``org/repo``: first directory + file stem, as
    upstream), in path order. ``.yml`` files and files directly under ``models/`` are not
    recipes (the validator reports them)."""
    models = root / "models"
    out = []
    for path in sorted(models.rglob("*.yaml")) if models.is_dir() else []:
        rel = path.relative_to(models).parts
        if len(rel) >= 2 and path.is_file():
            out.append((f"{rel[0]}/{path.stem}", path))
    return out


def tree_files(root: Path) -> List[Tuple[str, Optional[str], Path]]:
    """Every file a tree consists of, as (kind, recipe id, path) in stacking order: ``taxonomy``
    (the root's taxonomy.yaml), ``strategy`` (strategies/*.yaml), ``kv_store``
    (kv_store/*.yaml), ``recipe`` (:func:`recipe_files`, with its id; None for the others).
    The one rule of the loader and the validator."""
    out: List[Tuple[str, Optional[str], Path]] = []
    taxonomy = root / "taxonomy.yaml"
    if taxonomy.is_file():
        out.append(("taxonomy", None, taxonomy))
    for kind, sub in (("strategy", "strategies"), ("kv_store", "kv_store")):
        out.extend((kind, None, p) for p in sorted((root / sub).glob("*.yaml")) if p.is_file())
    out.extend(("recipe", hf_id, p) for hf_id, p in recipe_files(root))
    return out


def merge_taxonomy(merged: Dict[str, Any], data: Dict[str, Any]) -> None:
    """Stack one taxonomy document onto ``merged`` in place, entry by entry (:func:`merge_entry`)."""
    for key, value in data.items():
        merged[key] = merge_entry(merged[key], value) if key in merged else value


def merge_entry(old: Any, new: Any) -> Any:
    """Stack one taxonomy entry onto another (later wins): maps merge key by key, lists of
    names or of ``id``'d maps merge by name / id, anything else is replaced."""
    if isinstance(old, dict) and isinstance(new, dict):
        return {**old, **new}
    if isinstance(old, list) and isinstance(new, list):
        if all(isinstance(v, str) for v in old + new):
            return list(dict.fromkeys(old + new))
        if all(isinstance(v, dict) and "id" in v for v in old + new):
            return list({v["id"]: v for v in old + new}.values())
    return new


@dataclass
class Catalog:
    """Recipes, strategies (serving + kv_store) and taxonomy of stacked sources."""

    recipes: Dict[str, Dict[str, Any]] = field(default_factory=dict)
    sources: Dict[str, str] = field(default_factory=dict)
    strategies: Dict[str, Dict[str, Any]] = field(default_factory=dict)
    strategy_sources: Dict[str, str] = field(default_factory=dict)
    taxonomy: Dict[str, Any] = field(default_factory=dict)
    roots: List[str] = field(default_factory=list)

    # -- stacking -------------------------------------------------------------
    def add_tree(self, root: Path) -> None:
        if not root.is_dir():
            raise LoadError(f"{root}: not a directory or recipe file")
        self.roots.append(str(root))
        for kind, hf_id, path in tree_files(root):
            data = read_yaml(path)
            if kind == "taxonomy":
                self.merge_taxonomy(data, str(path))
            elif kind in ("strategy", "kv_store"):
                if not isinstance(data, dict) or not isinstance(data.get("name"), str):
                    raise LoadError(f"{path}: name: expected the strategy's name (a string)")
                self.strategies[data["name"]] = data
                self.strategy_sources[data["name"]] = str(path)
            else:
                if not isinstance(data, dict):
                    raise LoadError(f"{path}: expected a mapping at the top level")
                self.recipes[hf_id] = data
                self.sources[hf_id] = str(path)

    def merge_taxonomy(self, data: Any, where: str) -> None:
        if not isinstance(data, dict):
            raise LoadError(f"{where}: expected a mapping at the top level")
        merge_taxonomy(self.taxonomy, data)

    def add_api_json(self, path: Path) -> None:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise LoadError(f"{path}: not readable as recipe JSON: {exc}") from exc
        if not isinstance(data, dict) or not isinstance(data.get("hf_id"), str):
            raise LoadError(f"{path}: hf_id: expected the recipe id (API JSON format)")
        hf_id, recipe = recipe_from_api(data)
        rec = data.get("recommended_command") or {}
        spec = rec.get("strategy_spec")
        if isinstance(spec, dict) and spec.get("name") and spec["name"] not in self.strategies:
            self.strategies[spec["name"]] = spec
            self.strategy_sources[spec["name"]] = str(path)
        profile = rec.get("hardware_profile")
        hw = rec.get("hardware")
        profiles = self.taxonomy.setdefault("hardware_profiles", {})
        if isinstance(profile, dict) and hw and hw not in profiles:
            profiles[hw] = profile
        self.recipes[hf_id] = recipe
        self.sources[hf_id] = str(path)

    # -- lookups --------------------------------------------------------------
    @property
    def profiles(self) -> Dict[str, Any]:
        return self.taxonomy.get("hardware_profiles") or {}

    def serving_strategies(self) -> List[str]:
        return [n for n, s in self.strategies.items() if s.get("deploy_type") != "kv_store_lb"]

    def kv_stores(self) -> List[str]:
        return [n for n, s in self.strategies.items() if s.get("deploy_type") == "kv_store_lb"]


def recipe_from_api(data: Dict[str, Any]) -> "tuple[str, Dict[str, Any]]":
    """Turn an API JSON document into recipe form.

    The API drops ``compatible_strategies`` and ``strategy_overrides``; the recommended
    strategy and its alternatives stand in for the first, and the recommendation itself
    becomes ``default_strategy`` / ``meta.default_hardware`` so that rendering with no
    choices reproduces it.
    """
    recipe = {k: v for k, v in data.items() if k not in API_ONLY_KEYS}
    recipe["variants"] = {
        name: {k: v for k, v in (variant or {}).items() if k != "json"}
        for name, variant in (data.get("variants") or {}).items()
    }
    rec = data.get("recommended_command") or {}
    if "compatible_strategies" not in recipe:
        listed: List[str] = []
        if rec.get("strategy"):
            listed.append(rec["strategy"])
        for name in (rec.get("alternatives") or {}):
            if not name.startswith("kv_store_") and name not in listed:
                listed.append(name)
        recipe["compatible_strategies"] = listed
    recipe.setdefault("strategy_overrides", {})
    if rec.get("strategy"):
        recipe.setdefault("default_strategy", rec["strategy"])
    meta = dict(recipe.get("meta") or {})
    if rec.get("hardware"):
        meta.setdefault("default_hardware", rec["hardware"])
    recipe["meta"] = meta
    return data["hf_id"], recipe


def load(sources: Iterable[PathLike]) -> Catalog:
    """Load and stack sources (tree directories and/or API JSON / YAML recipe files)."""
    cat = Catalog()
    pending_json: List[Path] = []
    for src in sources:
        path = Path(src)
        if path.is_file() and path.suffix == ".json":
            pending_json.append(path)
        elif path.is_file() and path.suffix in (".yaml", ".yml"):
            data = read_yaml(path)
            if not isinstance(data, dict):
                raise LoadError(f"{path}: expected a mapping at the top level")
            hf_id = f"{path.parent.name}/{path.stem}"
            cat.recipes[hf_id] = data
            cat.sources[hf_id] = str(path)
        elif path.exists():
            cat.add_tree(path)
        else:
            raise LoadError(f"{path}: no such recipe tree or file")
    for path in pending_json:
        cat.add_api_json(path)
    return cat


def default_sources() -> List[str]:
    """The project's own ``recipes/`` tree plus trees listed in ``VLLM_FLEET_RECIPES``."""
    here = Path(__file__).resolve()
    out: List[str] = []
    for parent in here.parents:
        if (parent / "recipes" / "taxonomy.yaml").is_file() and (parent / "plugins").is_dir():
            out.append(str(parent / "recipes"))
            break
    extra = os.environ.get("VLLM_FLEET_RECIPES", "")
    out += [p for p in extra.split(os.pathsep) if p]
    return out


def find_recipe(cat: Catalog, hf_id: str) -> Optional[Dict[str, Any]]:
    return cat.recipes.get(hf_id)

"""Validating stacked recipe trees: each file read with line-aware diagnostics (duplicate
keys, YAML 1.1 / 1.2 traps), the files found and stacked by the loader's rules."""


from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import yaml

from ..loader import merge_taxonomy, tree_files
from ..yamlio import UNREADABLE, NodeScan, Yaml12Loader, load_yaml, read11, scan_nodes, yaml11_traps
from .documents import _taxonomy_problems, validate_kv_store, validate_strategy
from .recipe import _dict, _list, _recipe_problems
from .spec import DOCUMENT, Problem, WARNING, _Ctx, _Vocab, _build_vocab, _kind

# --------------------------------------------------------------------------- #
# YAML loading with line-aware diagnostics
# --------------------------------------------------------------------------- #

def _describe(value: Any) -> str:
    """Type and value of a scalar reading, for trap messages."""
    if value is UNREADABLE:
        return "an error (no constructor)"
    if isinstance(value, str):
        return f"string '{value}'"
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    return f"{_kind(value)} {value!r}"


def _trap_problems(file: str, text: str, scan: NodeScan) -> List[Problem]:
    """Warnings for plain scalars whose YAML 1.1 and 1.2 readings differ."""
    if not scan.suspects:
        return []
    try:
        traps = yaml11_traps(text)
    except yaml.YAMLError:  # one scalar has a 1.1-only tag; read the suspects one by one
        traps = [(line, raw, load_yaml(raw), read11(raw)) for line, raw in scan.suspects]
    problems = []
    for line, raw, v12, v11 in traps:
        path = scan.suspects.get((line, raw))
        if path is None:  # e.g. '.nan', which only differs because nan != nan
            continue
        if raw == "<<":
            message = (f"line {line}: merge key '<<' is read as a plain key '<<' by the YAML 1.2 loader, "
                       f"so nothing is merged; write the keys out")
        else:
            message = (f"line {line}: plain scalar '{raw}' reads as {_describe(v12)} in YAML 1.2 "
                       f"(upstream js-yaml) but as {_describe(v11)} in YAML 1.1; quote it or write it "
                       f"unambiguously")
        problems.append(Problem(file, path, message, WARNING))
    return problems


def _load_file(path: Path, file: str) -> Tuple[Any, List[Problem], bool]:
    """Read and parse one YAML file: ``(data, problems, ok)``."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return None, [Problem(file, DOCUMENT, f"cannot read file: {exc}")], False
    loader = Yaml12Loader(text)
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "unknown line"
        reason = "; ".join(part for part in (exc.context, exc.problem) if part) or "syntax error"
        return None, [Problem(file, DOCUMENT, f"invalid YAML at {where}: {reason}")], False
    except yaml.YAMLError as exc:
        return None, [Problem(file, DOCUMENT, f"invalid YAML: {exc}")], False
    finally:
        loader.dispose()
    scan = scan_nodes(node)
    problems = [
        Problem(file, child, f"duplicate key '{name}' (lines {first} and {line}); upstream js-yaml "
                             f"rejects the file, PyYAML keeps the last value")
        for child, name, first, line in scan.duplicates
    ]
    problems.extend(_trap_problems(file, text, scan))
    return data, problems, True


# --------------------------------------------------------------------------- #
# Trees
# --------------------------------------------------------------------------- #


@dataclass
class _Doc:
    """One loaded file of a tree."""

    kind: str  # "taxonomy", "strategy", "kv_store" or "recipe"
    root_index: int
    file: str
    data: Any
    ok: bool
    problems: List[Problem]


@dataclass
class _Tree:
    """Everything found under the roots, in root order."""

    problems: List[Problem] = field(default_factory=list)
    taxonomies: List[_Doc] = field(default_factory=list)
    strategies: List[_Doc] = field(default_factory=list)
    kv_stores: List[_Doc] = field(default_factory=list)
    recipes: List[_Doc] = field(default_factory=list)

    def documents(self) -> List[_Doc]:
        return self.taxonomies + self.strategies + self.kv_stores + self.recipes


def _load_doc(kind: str, index: int, path: Path) -> _Doc:
    """Load one file of a tree."""
    data, problems, ok = _load_file(path, str(path))
    return _Doc(kind, index, str(path), data, ok, problems)


def _discover(roots: Sequence[Path]) -> _Tree:
    """Load every relevant file of every root."""
    tree = _Tree()
    for index, root in enumerate(roots):
        if not root.is_dir():
            tree.problems.append(Problem(str(root), DOCUMENT, "recipe root is not a directory"))
            continue
        # the loader's rule for which files make a tree (one rule, see loader.tree_files)
        buckets = {"taxonomy": tree.taxonomies, "strategy": tree.strategies, "kv_store": tree.kv_stores,
                   "recipe": tree.recipes}
        for kind, _, path in tree_files(root):
            buckets[kind].append(_load_doc(kind, index, path))
        tree.problems.extend(_stray_files(root))
    return tree


def _stray_files(root: Path) -> List[Problem]:
    """YAML under ``models/`` that upstream would not pick up."""
    models = root / "models"
    problems = []
    for path in sorted(models.rglob("*.y*ml")) if models.is_dir() else []:
        if not path.is_file():
            continue
        if path.suffix == ".yml":
            problems.append(Problem(str(path), DOCUMENT, "ignored: recipe files must end in .yaml",
                                    WARNING))
        elif path.suffix == ".yaml" and len(path.relative_to(models).parts) < 2:
            problems.append(Problem(str(path), DOCUMENT,
                                    "ignored: recipes must live at models/<org>/<repo>.yaml"))
    return problems


def _merged_taxonomy(docs: Sequence[_Doc]) -> Optional[Dict[str, Any]]:
    """Merge the taxonomies of all roots; ``None`` when no root has one."""
    if not docs:
        return None
    merged: Dict[str, Any] = {}
    for doc in docs:
        merge_taxonomy(merged, _dict(doc.data))   # the loader's stacking
    return merged


def _named(docs: Sequence[_Doc], problems: List[Problem], kind: str) -> Dict[str, Dict[str, Any]]:
    """Index strategy-like documents by ``name``; later roots override earlier ones."""
    table: Dict[str, Dict[str, Any]] = {}
    origin: Dict[str, _Doc] = {}
    for doc in docs:
        name = _dict(doc.data).get("name")
        if not isinstance(name, str):
            continue
        first = origin.get(name)
        if first is not None and first.root_index == doc.root_index:
            problems.append(Problem(doc.file, "name", f"duplicate {kind} name '{name}' "
                                                      f"(also defined in {first.file})"))
        origin[name] = doc
        table[name] = doc.data
    return table


def _name_collisions(
    tree: _Tree, strategies: Mapping[str, Any], kv_stores: Mapping[str, Any]
) -> List[Problem]:
    """Strategies and kv_store deployments share one id space upstream."""
    by_name = {_dict(d.data).get("name"): d for d in tree.kv_stores}
    message = "kv_store name '{}' collides with a strategy of the same name"
    return [
        Problem(by_name[name].file, "name", message.format(name))
        for name in sorted(set(strategies) & set(kv_stores))
    ]


def validate_trees(roots: Sequence[Union[str, Path]]) -> List[Problem]:
    """Validate stacked recipe trees and return every problem found.

    Recipes, strategies, kv_store deployments and taxonomies of all roots are
    checked; references are resolved against the merged taxonomy (profiles,
    tasks, kv options, groups) and the merged strategies of all roots.
    """
    paths = [Path(r) for r in roots]
    tree = _discover(paths)
    problems = list(tree.problems)
    for doc in tree.documents():
        problems.extend(doc.problems)
    strategies = _named(tree.strategies, problems, "strategy")
    kv_stores = _named(tree.kv_stores, problems, "kv_store")
    problems.extend(_name_collisions(tree, strategies, kv_stores))
    taxonomy = _merged_taxonomy([d for d in tree.taxonomies if d.ok and isinstance(d.data, dict)])
    problems.extend(_missing_parts(paths, taxonomy, strategies))
    vocab = _build_vocab(taxonomy, strategies or None)
    vocab = replace(vocab, kv_stores=frozenset(kv_stores))
    for doc in tree.documents():
        if doc.ok:
            problems.extend(_check_doc(doc, vocab))
    return problems


def _missing_parts(paths: Sequence[Path], taxonomy: Any, strategies: Mapping[str, Any]) -> List[Problem]:
    """Report a stack without any taxonomy or strategies."""
    where = ", ".join(str(p) for p in paths) or "(no roots)"
    problems = []
    if taxonomy is None:
        problems.append(Problem(where, "taxonomy.yaml", "no readable taxonomy.yaml in any root; hardware, "
                                                        "task and kv_offload references are not checked"))
    if not strategies and not _list(_dict(taxonomy).get("strategies")):
        problems.append(Problem(where, "strategies", "no strategies/*.yaml in any root; strategy "
                                                     "references are not checked"))
    return problems


def _check_doc(doc: _Doc, vocab: _Vocab) -> List[Problem]:
    """Dispatch one loaded document to its validator."""
    ctx = _Ctx(doc.file, vocab)
    if doc.kind == "recipe":
        return _recipe_problems(doc.data, ctx)
    if doc.kind == "taxonomy":
        return _taxonomy_problems(doc.data, ctx)
    if doc.kind == "strategy":
        return validate_strategy(doc.data, doc.file)
    return validate_kv_store(doc.data, doc.file)

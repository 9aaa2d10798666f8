"""``vllm-fleet``: render, validate and list vLLM recipes from the command line.

Bad input (unknown recipe, hardware, strategy, variant, feature, malformed YAML ...)
prints one line naming the choice and the valid values and exits with status 2.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from . import choices, loader
from .corpus import process_outputs, render_lines
from .coerce import as_map
from .render import RenderError, resolve
from .rendermodel import Process, Rendering, Request

EXIT_USAGE = 2


class CliError(Exception):
    pass


def _sources(paths: Optional[Sequence[str]]) -> List[str]:
    """Explicit sources; a lone API JSON file is stacked on the project's own tree."""
    if not paths:
        found = loader.default_sources()
        if not found:
            raise CliError("no recipe source: pass --recipes DIR (or set VLLM_FLEET_RECIPES)")
        return found
    if all(Path(p).suffix == ".json" for p in paths):
        return loader.default_sources() + list(paths)
    return list(paths)


def load_catalog(paths: Optional[Sequence[str]]) -> loader.Catalog:
    try:
        return loader.load(_sources(paths))
    except loader.LoadError as exc:
        raise CliError(str(exc)) from exc


def _parse_modes(pairs: Sequence[str]) -> Dict[str, str]:
    out: Dict[str, str] = {}
    for pair in pairs:
        if "=" not in pair:
            raise CliError(f"--mode {pair!r}: expected FEATURE=MODE")
        key, value = pair.split("=", 1)
        out[key.strip()] = value.strip()
    return out


def _parse_json_arg(name: str, text: Optional[str]) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        if text.isdigit():
            return int(text)
        raise CliError(f"{name} {text!r}: expected a number or JSON") from None


def build_request(args: argparse.Namespace, cat: loader.Catalog) -> Request:
    if args.model not in cat.recipes:
        close = [r for r in cat.recipes if args.model.lower().split("/")[-1] in r.lower()]
        hint = f"; similar: {', '.join(close[:8])}" if close else f"; {len(cat.recipes)} recipes loaded (see 'vllm-fleet list')"
        raise CliError(f"unknown recipe {args.model!r}{hint}")
    if args.nodes is not None and args.nodes < 1:
        raise CliError(f"--nodes {args.nodes}: the node count must be at least 1")
    features = None
    if args.features is not None:
        features = [f.strip() for f in args.features.split(",") if f.strip()]
    return Request(
        hf_id=args.model, variant=args.variant, hardware=args.hardware, strategy=args.strategy,
        node_count=args.nodes or 1, features=features, feature_modes=_parse_modes(args.mode or []),
        advanced_args=list(args.extra_arg or []),
        pd_nodes=_parse_json_arg("--pd-nodes", args.pd_nodes), kv_offload=args.kv_offload,
        kv_instances=_parse_json_arg("--kv-instances", args.kv_instances), omni_task=args.omni_task)


def process_view(rendering: Rendering, proc: Process) -> Dict[str, Any]:
    view: Dict[str, Any] = {"role": proc.role, "rank": proc.rank, "kind": proc.kind}
    view.update(process_outputs(rendering, proc, with_command=True))
    view["argv"] = proc.argv
    if proc.docker:
        view["docker_command"] = proc.docker_command()
    if proc.port is not None:
        view["port"] = proc.port
    if proc.env or proc.kind in ("vllm", "omni"):
        view["env"] = proc.env
    for key, value in proc.extras.items():
        view.setdefault(key, value)
    return view


def render_view(req: Request, rendering: Rendering, rank: Optional[int]) -> Dict[str, Any]:
    procs = rendering.processes
    if rank is not None:
        procs = [p for p in procs if p.rank == rank or p.rank is None]
        if not any(p.rank == rank for p in procs):
            ranks = sorted({p.rank for p in rendering.processes if p.rank is not None})
            raise CliError(f"--rank {rank}: this rendering has ranks {ranks}")
    main = next((p for p in procs if p.kind in ("vllm", "omni")), procs[0])
    view: Dict[str, Any] = {
        "hf_id": req.hf_id, "hardware": req.hardware, "strategy": req.strategy,
        "variant": req.variant, "node_count": req.node_count, "features": req.features,
        "deploy_type": rendering.deploy_type,
        "env": main.env, "docker_image": main.image,
        "command": main.command, "argv": main.argv,
        "docker_command": main.docker_command(),
        "docker_argv": main.docker_argv(),
        "processes": [process_view(rendering, p) for p in procs],
    }
    return view


def shell_view(view: Dict[str, Any]) -> str:
    blocks = []
    for proc in view["processes"]:
        title = proc["role"] + (f" (rank {proc['rank']})" if proc.get("rank") is not None else "")
        lines = [f"# {title}"]
        if proc.get("install"):
            lines.append(f"# install: {proc['install']}")
        for key, value in (proc.get("env") or {}).items():
            text = str(value)
            # placeholders stay expandable; everything else is quoted for the shell
            shown = text if text.startswith("$") and text[1:].replace("_", "").isalnum() else shlex.quote(text)
            lines.append(f"export {key}={shown}")
        lines.append(proc.get("command") or "")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def cmd_render(args: argparse.Namespace) -> int:
    cat = load_catalog(args.recipes)
    req = build_request(args, cat)
    recipe = cat.recipes[req.hf_id]
    choices.complete(recipe, req, cat.strategies, cat.taxonomy)
    rendering = resolve(recipe, req, cat.strategies, cat.taxonomy)
    view = render_view(req, rendering, args.rank)
    if args.format == "shell":
        print(shell_view(view))
    else:
        print(json.dumps(view, indent=2, ensure_ascii=False))
    return 0


def cmd_render_batch(args: argparse.Namespace) -> int:
    cat = load_catalog(args.recipes)
    out = sys.stdout
    try:
        for line in render_lines(cat, sys.stdin):
            out.write(line + "\n")
    except UnicodeDecodeError as exc:
        raise CliError(f"stdin: not UTF-8 text: {exc}") from exc
    out.flush()
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    from . import schema

    roots = _sources(args.recipes)
    trees = [r for r in roots if Path(r).is_dir()]
    missing = [r for r in roots if not Path(r).exists()]
    if missing:
        raise CliError(f"{missing[0]}: no such recipe tree")
    problems = schema.validate_trees(trees)
    errors = [p for p in problems if p.severity == "error"]
    warnings = [p for p in problems if p.severity != "error"]
    if problems:
        print(schema.format_problems(problems))
    cat = load_catalog(trees)
    print(f"{len(cat.recipes)} recipes, {len(cat.strategies)} strategies, "
          f"{len(cat.profiles)} hardware profiles: {len(errors)} errors, {len(warnings)} warnings")
    return 1 if errors else 0


ROLES_DIR = Path(__file__).resolve().parents[3] / "roles"   # the bundle's roles (a source checkout)
_ROLE_OPTIONS: Dict[str, Dict[str, Any]] = {}


def _ansible(argv: List[str], what: str) -> str:
    """stdout of an Ansible command (the deploy extra), or a CliError naming it."""
    import subprocess

    try:
        proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    except FileNotFoundError:
        raise CliError(f"{argv[0]} not found: install the deploy extra (pip install -e '.[deploy]')") from None
    if proc.returncode != 0:
        raise CliError(f"{what} failed: {proc.stderr.strip().splitlines()[-1:]}")
    return proc.stdout


def role_options(roles_dir: Path = ROLES_DIR) -> Dict[str, Dict[str, Any]]:
    """The vllm_fleet_* options the bundle's roles declare (their argument_specs), as Ansible
    itself reads them (`ansible-doc -t role`): {option: its argument spec}, the role tunables an
    inventory may set, which the contract leaves to the roles (the plan action checks them,
    with Ansible's validator). The engine reads no role file; the plan action reads the same
    declarations (and the roles' defaults) on the controller. Read once per process."""
    key = str(roles_dir)
    if key not in _ROLE_OPTIONS:
        from .variables import PREFIX

        base = ["ansible-doc", "-t", "role", "-j", "-r", key]
        names = sorted(n for n in json.loads(_ansible(base + ["-l"], "ansible-doc -t role -l") or "{}")
                       if n.startswith(PREFIX))
        docs = json.loads(_ansible(base + names, "ansible-doc -t role") or "{}") if names else {}
        options: Dict[str, Dict[str, Any]] = {}
        for doc in docs.values():
            for entry in ((doc or {}).get("entry_points") or {}).values() if isinstance(doc, dict) else ():
                for option, spec in ((entry or {}).get("options") or {}).items() if isinstance(entry, dict) else ():
                    if str(option).startswith(PREFIX):
                        options.setdefault(option, dict(spec or {}))
        _ROLE_OPTIONS[key] = options
    return _ROLE_OPTIONS[key]


# roles of hosts that run services only (no engine): `vllm-fleet plan` needs no hardware for them
SERVICE_ROLES = frozenset({"master", "store", "router"})


def _services_only(roles: Any) -> bool:
    roles = [roles] if isinstance(roles, str) else list(roles or [])
    return bool(roles) and not set(roles) - SERVICE_ROLES


def cmd_plan(args: argparse.Namespace) -> int:
    """Per-host plans of an Ansible inventory, as JSON (what deploy.yml would hand the roles),
    from the inventory's variables alone: hosts need not be reachable. The inventory is read by
    `ansible-inventory --list` (the deploy extra); GPU facts are not read, so the hardware comes
    from vllm_fleet_hardware or --hardware. Several --inventory sources are layered as
    ansible-inventory layers them (a later source's host variables win). The roles' tunables
    are known from `ansible-doc -t role` (:func:`role_options`)."""
    from . import contract
    from .plan import host_input, iface_marked, plan_fleet, without_facts

    argv = ["ansible-inventory"]
    for source in args.inventory:
        argv += ["-i", source]
    argv.append("--list")
    if args.limit:
        argv += ["--limit", args.limit]
    data = json.loads(_ansible(argv, f"ansible-inventory {' '.join('-i ' + i for i in args.inventory)}"))
    hostvars = (data.get("_meta") or {}).get("hostvars") or {}
    names = _inventory_order(data)
    declared = role_options()
    checked, problems = {}, []
    for name in names:
        variables = dict(hostvars.get(name) or {})
        if args.hardware and "vllm_fleet_hardware" not in variables:
            variables["vllm_fleet_hardware"] = args.hardware
        if args.iface and "vllm_fleet_iface" not in variables:
            variables["vllm_fleet_iface"] = args.iface
        checked[name], found = contract.check(name, variables, declared)
        problems += found
    # a host that runs no engine (vllm_fleet_role only master, store, router) needs no hardware
    problems += [f"{n}: vllm_fleet_hardware: not set (this command reads no GPU facts): set it or pass --hardware"
                 for n in names if checked[n].get("vllm_fleet_recipe") and not checked[n].get("vllm_fleet_hardware")
                 and not _services_only(checked[n].get("vllm_fleet_role"))]
    if problems:
        print("vllm-fleet: the inventory breaks the contract:\n" + "\n".join(problems), file=sys.stderr)
        return EXIT_USAGE
    # secret values never leave this process: the digest key here is throwaway
    inputs = [host_input(n, checked[n], hostvars.get(n) or {}, b"vllm-fleet plan") for n in names
              if checked[n].get("vllm_fleet_recipe")]
    # the NIC that carries a host's address comes from network facts at deploy time: without
    # them (and without --iface / vllm_fleet_iface) the plan shows a marker where it goes
    inputs = [without_facts(inp) for inp in inputs]
    markers = {inp.name: inp.iface for inp in inputs if iface_marked(inp)}
    plans, problems = plan_fleet(load_catalog(args.recipes), inputs)
    if problems:
        print("\n".join(problems), file=sys.stderr)
        return EXIT_USAGE
    text = json.dumps(plans, indent=2)
    shown = [f"{host} ({marker})" for host, marker in markers.items() if marker in text]
    if shown:
        print("vllm-fleet plan: no network facts read: $IFACE_NAME is shown as a marker for "
              + ", ".join(shown) + "; at deploy time the facts fill it (or pass --iface / set vllm_fleet_iface)",
              file=sys.stderr)
    print(text)
    return 0


def _inventory_order(data: Dict[str, Any]) -> List[str]:
    """Hosts of `ansible-inventory --list` output in inventory order (groups depth first)."""
    seen: Dict[str, None] = {}

    def walk(group: str) -> None:
        entry = data.get(group) or {}
        for host in entry.get("hosts") or []:
            seen.setdefault(host, None)
        for child in entry.get("children") or []:
            walk(child)

    walk("all")
    return list(seen)


def table(rows: List[List[str]], header: List[str]) -> str:
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    fmt = "  ".join("{:<%d}" % w for w in widths)
    lines = [fmt.format(*header), fmt.format(*["-" * w for w in widths])]
    lines += [fmt.format(*[str(c) for c in r]) for r in rows]
    return "\n".join(line.rstrip() for line in lines)


def cmd_list(args: argparse.Namespace) -> int:
    cat = load_catalog(args.recipes)
    what = args.what
    if what in ("recipes", "all"):
        rows = []
        for hf_id, recipe in sorted(cat.recipes.items()):
            variants = as_map(recipe.get("variants"))
            default = as_map(variants.get("default"))
            hw = choices.default_hardware(recipe, default, cat.taxonomy) or "-"
            rows.append([hf_id, ",".join(variants), hw,
                         ",".join(recipe.get("compatible_strategies") or []) or "(omni)"])
        print(table(rows, ["RECIPE", "VARIANTS", "DEFAULT HW", "STRATEGIES"]))
    if what in ("hardware", "all"):
        rows = [[hw_id, p.get("brand"), p.get("generation"), p.get("gpu_count"), p.get("vram_gb"),
                 "no" if p.get("scalable") is False else "yes"]
                for hw_id, p in cat.profiles.items()]
        print(table(rows, ["HARDWARE", "BRAND", "GENERATION", "GPUS", "VRAM GB/NODE", "MULTI-NODE"]))
    if what in ("strategies", "all"):
        rows = [[name, s.get("deploy_type"), s.get("parallel_flag") or "-",
                 " ".join(s.get("vllm_args") or []) or "-"]
                for name, s in cat.strategies.items()]
        print(table(rows, ["STRATEGY", "DEPLOY TYPE", "PARALLEL FLAG", "ARGS"]))
    return 0


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="vllm-fleet", description="Render and check vLLM recipes.")
    sub = ap.add_subparsers(dest="command", required=True)

    def with_recipes(p: argparse.ArgumentParser) -> None:
        p.add_argument("--recipes", nargs="+", metavar="DIR",
                       help="recipe trees or API JSON files, later ones win (default: ./recipes)")

    r = sub.add_parser("render", help="render the processes of one recipe choice")
    with_recipes(r)
    r.add_argument("--model", required=True, help="recipe id, e.g. baidu/ERNIE-4.5-VL-28B-A3B-PT")
    r.add_argument("--variant", default="default")
    r.add_argument("--hardware", help="taxonomy hardware id (default: upstream's pick)")
    r.add_argument("--strategy", help="serving strategy (default: upstream's recommendation)")
    r.add_argument("--nodes", type=int, default=None, help="node count for multi-node strategies")
    r.add_argument("--rank", type=int, default=None, help="only the processes of this node rank")
    r.add_argument("--features", help="comma-separated enabled features (default: recipe defaults)")
    r.add_argument("--mode", action="append", metavar="FEATURE=MODE", help="feature mode, repeatable")
    r.add_argument("--kv-offload", metavar="ID", help="taxonomy kv_offload option or kv_store id")
    r.add_argument("--kv-instances", metavar="N|JSON", help='Mooncake instances, or {"count":N,"current":I}')
    r.add_argument("--pd-nodes", metavar="JSON", help='P/D pools, e.g. {"prefill":1,"decode":2}')
    r.add_argument("--omni-task", help="omni task id")
    r.add_argument("--extra-arg", action="append", metavar="ARG", help="extra vLLM arg (advanced), repeatable")
    r.add_argument("--format", choices=("json", "shell"), default="json")
    r.set_defaults(func=cmd_render)

    b = sub.add_parser("render-batch", help="JSON Lines of corpus-style records on stdin -> outputs")
    with_recipes(b)
    b.set_defaults(func=cmd_render_batch)

    v = sub.add_parser("validate", help="check recipe trees against the schema")
    with_recipes(v)
    v.set_defaults(func=cmd_validate)

    pl = sub.add_parser("plan", help="per-host plans of an Ansible inventory (JSON), without contacting hosts")
    with_recipes(pl)
    pl.add_argument("--inventory", "-i", required=True, action="append",
                    help="inventory file or directory (repeat to layer sources: a later one's host variables win)")
    pl.add_argument("--limit", "-l", help="host pattern, e.g. a deployment group")
    pl.add_argument("--hardware", help="hardware id for hosts without vllm_fleet_hardware (GPU facts are not read)")
    pl.add_argument("--iface", help="NIC for hosts without vllm_fleet_iface (network facts are not read)")
    pl.set_defaults(func=cmd_plan)

    ls = sub.add_parser("list", help="list recipes, hardware profiles, strategies")
    with_recipes(ls)
    ls.add_argument("what", nargs="?", choices=("recipes", "hardware", "strategies", "all"),
                    default="recipes")
    ls.set_defaults(func=cmd_list)
    return ap


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.func(args)
    except (CliError, RenderError, loader.LoadError) as exc:
        print(f"vllm-fleet: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())

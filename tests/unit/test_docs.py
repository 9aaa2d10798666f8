"""README.md and docs/*.md stay true: every relative link resolves (its file, and its ``#anchor``
as a heading of that file), every command in a shell code block is one a test runs, every code
block says what it holds, the README stays short and links every docs page, and the plan's
fields are all described in docs/architecture.md.

"Run by a test" is checked against the files that run things: the Python of ``tests/`` (string
literals and argv lists, not comments or docstrings; ``tests/fixtures`` is data), its shell
scripts and YAML, ``noxfile.py`` and ``.ci/run``. A command shown in a ``bash`` / ``sh`` /
``shell`` block (in a ``console`` block: the lines starting with ``$``) is run when

* a test's shell text runs it as one whole command (between ``&&``, ``|``, ``;`` or a line's
  ends; ``-q`` / ``--quiet`` aside), or
* a test builds exactly its argv: a list of string literals, ``cli.main([...])`` (the
  ``vllm-fleet`` command) or the e2e helper ``playbook("NAME.yml", inventory, ...)`` (the
  ``ansible-playbook playbooks/NAME.yml ...`` command, the inventory aside), or
* it is one of RUN_BY, the few a test runs in another form, each naming the file and the text
  there that runs it.

Output and illustrations go in ``text`` blocks. Nothing here adds a command to a test: a command
no test runs is taken out of the docs, or changed to the form a test runs.
"""

from __future__ import annotations

import ast
import json
import re
import shlex
from pathlib import Path
from typing import Dict, Iterable, Iterator, List, Optional, Sequence, Set, Tuple

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = ("architecture", "inventory", "operations", "testing", "glossary")
README_MAX_LINES = 250

SHELL_INFO = {"bash", "sh", "shell", "console"}
BLOCK_INFO = SHELL_INFO | {"text", "yaml", "json"}
EXTERNAL_OK: Tuple[str, ...] = ()          # http(s) links the docs may make: none

# Commands a test runs in another form: doc command -> (file, the text in it that runs it).
RUN_BY: Dict[str, Tuple[str, str]] = {
    # the quick start: test_demo.py runs the demo (naming its fleet e2e-demo; nox as .ci/run installs it)
    "python3 -m pip install nox && python3 -m nox -s demo":
        ("tests/e2e/test_demo.py", 'f"cd {ROOT} && python3 -m nox -s demo -- --name {NAME}"'),
    # CI's entry point: CI runs this file, which runs the test command
    "bash .ci/run": (".ci/run", "python3 -m nox --non-interactive"),
    # the demo prints these with the checkout's path; test_demo.py runs every printed line in a new
    # shell (down --purge with --dry-run: the testbed stays for the tests after it)
    "cd /path/to/checkout && python3 -m nox -s demo -- status": ("tests/testbed/demo.py", 'nox_command(name, "status")'),
    "cd /path/to/checkout && python3 -m nox -s demo -- redeploy": ("tests/testbed/demo.py", 'nox_command(name, "redeploy")'),
    "cd /path/to/checkout && python3 -m nox -s demo -- down": ("tests/testbed/demo.py", 'nox_command(name, "down")'),
    "cd /path/to/checkout && python3 -m nox -s demo -- down --purge":
        ("tests/testbed/demo.py", 'nox_command(name, "down", "--purge")'),
}

FENCE = re.compile(r"^(?P<fence>```+|~~~+)[ \t]*(?P<info>[^\n`]*)\n(?P<body>.*?)^(?P=fence)[ \t]*$", re.M | re.S)
LINK = re.compile(r"!?\[(?P<text>[^\]]*)\]\((?P<target>[^)\s]+)(?:\s+\"[^\"]*\")?\)")
SEPARATORS = {"&&", "||", "|", ";", "&"}
QUIET = {"-q", "--quiet"}


def doc_files() -> List[Path]:
    return [README, *sorted(DOCS.glob("*.md")), *sorted((ROOT / "roles").glob("*/README.md"))]


# -- links ---------------------------------------------------------------------------------------

def _prose(text: str) -> str:
    """The text outside fenced blocks and inline code spans."""
    text = FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    return re.sub(r"(`+)(?:(?!\1).)+?\1", "", text, flags=re.S)


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: link text kept, lower case, punctuation (but - and _) dropped,
    spaces to -."""
    text = LINK.sub(lambda m: m.group("text"), heading.strip())
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def anchors(text: str) -> Set[str]:
    """The anchors of a markdown file's headings (GitHub numbers repeats: -1, -2, ...)."""
    seen: Dict[str, int] = {}
    out = set()
    for line in FENCE.sub("", text).splitlines():
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        base = slug(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def link_problems(where: Path, text: str) -> List[str]:
    """Every link of ``text`` (the file ``where``) that does not resolve."""
    problems = []
    for m in LINK.finditer(_prose(text)):
        target = m.group("target")
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):
            if not (EXTERNAL_OK and target.startswith(EXTERNAL_OK)):
                problems.append(f"{where.name}: {target}: an external link (allowed: {EXTERNAL_OK or 'none'})")
            continue
        path, _, anchor = target.partition("#")
        file = (where.parent / path).resolve() if path else where
        if not file.exists():
            problems.append(f"{where.name}: {target}: no file {path}")
            continue
        if anchor:
            if file.suffix != ".md":
                problems.append(f"{where.name}: {target}: an anchor into a file that is not markdown")
            elif anchor not in anchors(file.read_text(encoding="utf-8") if file != where else text):
                problems.append(f"{where.name}: {target}: no heading #{anchor} in {file.name}")
    return problems


# -- commands ------------------------------------------------------------------------------------

def fences(text: str) -> Iterator[Tuple[int, str, str]]:
    """(line, info string, body) of every fenced block."""
    for m in FENCE.finditer(text):
        yield text[: m.start()].count("\n") + 1, m.group("info").strip(), m.group("body")


def commands(info: str, body: str) -> List[str]:
    """The commands of a shell block: lines joined at a trailing backslash, without blank lines
    and comments; in a console block only the lines after a ``$`` prompt."""
    out = []
    for line in re.sub(r"\\\n[ \t]*", " ", body).splitlines():
        line = line.strip()
        if info == "console":
            if not line.startswith("$ "):
                continue
            line = line[2:].strip()
        if line and not line.startswith("#"):
            out.append(line)
    return out


def words(command: str) -> Optional[List[str]]:
    """A shell command as words, operators (&&, |, ;, >) apart; comments dropped. None: not shell."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    try:
        return [w for w in lexer if w not in QUIET]
    except ValueError:
        return None


def _is_operator(word: str) -> bool:
    return word in SEPARATORS or (bool(word) and set(word) <= set("&|;<>"))


def _runs_within(command: Sequence[str], line: Sequence[str]) -> bool:
    """``command`` appears in ``line`` as one whole command: an operator or the line's end on
    either side."""
    n = len(command)
    for i in range(len(line) - n + 1):
        if list(line[i: i + n]) == list(command):
            before = line[i - 1] if i else None
            after = line[i + n] if i + n < len(line) else None
            if (before is None or before in SEPARATORS) and (after is None or _is_operator(after)):
                return True
    return False


class Runs:
    """What the tests run: shell lines (as words) and argvs."""

    def __init__(self) -> None:
        self.lines: List[List[str]] = []
        self.argvs: Set[Tuple[str, ...]] = set()

    def shell(self, text: str) -> None:
        for line in re.sub(r"\\\n[ \t]*", " ", text).splitlines():
            got = words(line)
            if got:
                self.lines.append(got)

    def argv(self, argv: Sequence[str]) -> None:
        if len(argv) >= 2:
            self.argvs.add(tuple(a for a in argv if a not in QUIET))

    def run(self, command: str) -> bool:
        got = words(command)
        if not got:
            return False
        if any(_runs_within(got, line) for line in self.lines):
            return True
        if any(_is_operator(w) for w in got):
            return False
        if tuple(got) in self.argvs:
            return True
        if got[0] == "ansible-playbook":   # the inventory aside: the tests give their own
            bare = [w for i, w in enumerate(got) if w != "-i" and (i == 0 or got[i - 1] != "-i")]
            return ("ansible-playbook@", *bare[1:]) in self.argvs
        return False


class _Static:
    """The string value of an expression a test file spells out (literals, json.dumps of
    literals, module-level names bound to literals); None when it depends on the run."""

    def __init__(self, tree: ast.Module):
        self.names: Dict[str, ast.AST] = {}
        for node in tree.body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                self.names[node.targets[0].id] = node.value

    def value(self, node: ast.AST, depth: int = 0):
        if depth > 5:
            raise ValueError
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name) and node.id in self.names:
            return self.value(self.names[node.id], depth + 1)
        if isinstance(node, (ast.List, ast.Tuple)):
            return [self.value(e, depth + 1) for e in node.elts]
        if isinstance(node, ast.Dict) and None not in node.keys:
            return {self.value(k, depth + 1): self.value(v, depth + 1) for k, v in zip(node.keys, node.values)}
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            return self.value(node.left, depth + 1) + self.value(node.right, depth + 1)
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "dumps"
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "json"
                and len(node.args) == 1 and not node.keywords):
            return json.dumps(self.value(node.args[0], depth + 1))
        raise ValueError

    def string(self, node: ast.AST) -> Optional[str]:
        try:
            value = self.value(node)
        except (ValueError, TypeError):
            return None
        return value if isinstance(value, str) else None

    def strings(self, nodes: Iterable[ast.AST]) -> Optional[List[str]]:
        out = [self.string(n) for n in nodes]
        return None if any(v is None for v in out) else out  # type: ignore[return-value]


def _docstrings(tree: ast.Module) -> Set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
    return ids


def _python(runs: Runs, source: str) -> None:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return
    static, skip = _Static(tree), _docstrings(tree)
    for node in ast.walk(tree):   # text a test looks for in output (`"..." in out`) is not run
        if isinstance(node, ast.Compare) and any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops):
            skip.add(id(node.left))
        if isinstance(node, ast.JoinedStr):   # an f-string: its fixed parts, a word nothing matches for each value
            skip.update(id(v) for v in node.values)
            runs.shell("".join(v.value if isinstance(v, ast.Constant) else "\x00" for v in node.values))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            runs.shell(node.value)
        elif isinstance(node, (ast.List, ast.Tuple)):
            argv = static.strings(node.elts)
            if argv:
                runs.argv(argv)
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            args = [a for a in node.args if not isinstance(a, ast.Starred)]
            if len(args) != len(node.args):
                continue
            if name == "playbook" and len(args) >= 2:      # the e2e helper: (NAME.yml, inventory, *args)
                first, rest = static.string(args[0]), static.strings(args[2:])
                if first and first.endswith(".yml") and rest is not None:
                    runs.argv(["ansible-playbook@", f"playbooks/{first}", *rest])
            elif name == "main" and isinstance(func, ast.Attribute) and getattr(func.value, "id", "") == "cli" and args:
                argv = static.strings(getattr(args[0], "elts", [None]))
                if argv:
                    runs.argv(["vllm-fleet", *argv])


def _yaml(runs: Runs, source: str) -> None:
    try:
        docs = list(yaml.safe_load_all(source))
    except yaml.YAMLError:
        return
    stack: List[object] = list(docs)
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            runs.shell(item)
        elif isinstance(item, list):
            if item and all(isinstance(i, str) for i in item):
                runs.argv(item)
            stack.extend(item)
        elif isinstance(item, dict):
            stack.extend(item.values())


def collect_runs() -> Runs:
    """What the repository's tests, nox sessions and CI run (not this file)."""
    runs = Runs()
    files = [p for p in (ROOT / "tests").rglob("*") if p.is_file()]
    for path in [*files, ROOT / "noxfile.py", ROOT / ".ci" / "run"]:
        rel = path.relative_to(ROOT)
        if path == Path(__file__).resolve() or rel.parts[:2] == ("tests", "fixtures") or "__pycache__" in rel.parts:
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        if path.suffix == ".py":
            _python(runs, text)
        elif path.suffix in (".yml", ".yaml"):
            _yaml(runs, text)
        elif path.suffix == ".sh" or rel == Path(".ci/run"):
            runs.shell("\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#")))
    return runs



def command_problems(where: str, text: str, runs: Runs, run_by: Dict[str, Tuple[str, str]]) -> List[str]:
    """Every code block without an info string, and every shell command no test runs."""
    problems = []
    for line, info, body in fences(text):
        if info.split()[:1] and info.split()[0] in BLOCK_INFO:
            info = info.split()[0]
        else:
            problems.append(f"{where}:{line}: a code block must say what it holds ({', '.join(sorted(BLOCK_INFO))}),"
                            f" not {info!r}")
            continue
        if info not in SHELL_INFO:
            continue
        for command in commands(info, body):
            shown = shown_command(command)
            if shown in run_by or runs.run(command):
                continue
            problems.append(f"{where}:{line}: no test runs `{shown}`")
    return problems


def shown_command(command: str) -> str:
    """A command as the docs show it, whitespace collapsed, its trailing comment left out."""
    full = words(command)
    for m in re.finditer(r"\s#", command):
        if words(command[: m.start()]) == full:
            command = command[: m.start()]
            break
    return " ".join(command.split())


@pytest.fixture(scope="module")
def runs() -> Runs:
    return collect_runs()


# -- the docs ------------------------------------------------------------------------------------

@pytest.mark.parametrize("path", doc_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_resolves(path):
    assert link_problems(path, path.read_text(encoding="utf-8")) == []


@pytest.mark.parametrize("path", doc_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_command_is_one_a_test_runs(path, runs):
    rel = str(path.relative_to(ROOT))
    assert command_problems(rel, path.read_text(encoding="utf-8"), runs, RUN_BY) == []


def test_run_by_names_what_runs_each_and_each_is_shown():
    shown = {shown_command(c) for p in doc_files() for _, info, body in fences(p.read_text(encoding="utf-8"))
             if info in SHELL_INFO for c in commands(info, body)}
    for command, (file, text) in RUN_BY.items():
        assert text in (ROOT / file).read_text(encoding="utf-8"), (command, file, text)
        assert command in shown, f"RUN_BY: {command!r} is in no doc any more"


def test_readme_is_short_and_links_every_page():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) < README_MAX_LINES
    for page in PAGES:
        assert (DOCS / f"{page}.md").is_file(), page
        assert f"](docs/{page}.md)" in text, f"README.md does not link docs/{page}.md"


def test_architecture_describes_every_field_of_the_plan():
    import dataclasses

    from vllm_fleet import hostplan

    text = (DOCS / "architecture.md").read_text(encoding="utf-8")
    for cls in (hostplan.HostPlan, hostplan.PlannedProcess):
        missing = [f.name for f in dataclasses.fields(cls) if f"`{f.name}`" not in text]
        assert not missing, f"docs/architecture.md: {cls.__name__} fields not described: {missing}"


# -- the checkers catch what they are for --------------------------------------------------------

PAGE = "# Title\n\n## A section, with `code`\n\ntext\n"


@pytest.mark.parametrize("link, problem", [
    ("[ok](#title)", None),
    ("[ok](#a-section-with-code)", None),
    ("[ok](page.md#title)", None),
    ("[gone](missing.md)", "no file missing.md"),
    ("[gone](page.md#no-such-heading)", "no heading #no-such-heading"),
    ("[gone](#compared)", "no heading #compared"),          # a heading inside a code block is no anchor
    ("[out](https://example.com/)", "an external link"),
])
def test_link_checker(tmp_path, link, problem):
    (tmp_path / "page.md").write_text(PAGE)
    doc = tmp_path / "doc.md"
    text = PAGE + "\n```text\n## Compared\n```\n\n" + f"See {link}.\n"
    doc.write_text(text)
    got = link_problems(doc, text)
    if problem is None:
        assert got == []
    else:
        assert len(got) == 1 and problem in got[0], got


SYNTHETIC_TEST = '''
import json
from vllm_fleet import cli
def test_x(fleet):
    playbook("deploy.yml", fleet.inventory, "-l", "grp", "-e", json.dumps({"vllm_fleet_force": True}))
    cli.main(["list", "hardware"])
    subprocess.run(f"cd {ROOT} && tool --flag value >/dev/null && other", shell=True)
    assert "tool --expected" in out
    # a comment that mentions: tool --forgotten
'''


@pytest.mark.parametrize("block, problem", [
    ("```bash\nansible-playbook playbooks/deploy.yml -l grp -e '{\"vllm_fleet_force\": true}'\n```", None),
    ("```bash\nansible-playbook -i inv.yml playbooks/deploy.yml -l grp \\\n  -e '{\"vllm_fleet_force\": true}'\n```",
     None),
    ("```bash\nvllm-fleet list hardware   # the profiles\n```", None),
    ("```console\n$ tool --flag value\noutput line nobody types\n```", None),
    ("```text\nanything at all\n```", None),
    ("```bash\nansible-playbook playbooks/deploy.yml -l other\n```", "no test runs `ansible-playbook playbooks/deploy.yml -l other`"),
    ("```bash\ntool --forgotten\n```", "no test runs `tool --forgotten`"),      # only a comment has it
    ("```bash\ntool --expected\n```", "no test runs `tool --expected`"),        # only looked for in output
    ("```bash\ntool --flag\n```", "no test runs `tool --flag`"),               # part of a command is not it
    ("```bash\nvllm-fleet list recipes\n```", "no test runs `vllm-fleet list recipes`"),
    ("```\nansible-playbook playbooks/deploy.yml -l grp\n```", "must say what it holds"),
])
def test_command_checker(block, problem):
    runs = Runs()
    _python(runs, SYNTHETIC_TEST)
    got = command_problems("doc.md", f"# Doc\n\n{block}\n", runs, {})
    if problem is None:
        assert got == []
    else:
        assert len(got) == 1 and problem in got[0], got


@pytest.mark.parametrize("role", sorted(p.name for p in (ROOT / "roles").iterdir() if (p / "meta").is_dir()))
def test_each_role_has_a_readme_naming_its_entry_points_and_tunables(role):
    """A short README per role: what it does, its entry points, every tunable its
    meta/argument_specs.yml declares under the role's own prefix, and what it needs."""
    path = ROOT / "roles" / role / "README.md"
    assert path.is_file(), f"roles/{role}: no README.md"
    text = path.read_text(encoding="utf-8")
    for heading in ("## Entry points", "## Tunables", "## Needs"):
        assert heading in text, f"roles/{role}/README.md: no {heading!r} section"
    specs = yaml.safe_load((ROOT / "roles" / role / "meta" / "argument_specs.yml").read_text())["argument_specs"]
    missing = [f"{entry} (entry point)" for entry in specs if f"`{entry}`" not in text]
    missing += sorted({o for spec in specs.values() for o in (spec.get("options") or {})
                       if o.startswith(role + "_") and f"`{o}`" not in text})
    assert not missing, f"roles/{role}/README.md does not name: {', '.join(missing)}"

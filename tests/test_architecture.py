"""The package's rooms keep their boundaries: every module imports only the rooms its row of docs/architecture.md's
"may import" table names, the analysis room is pure and opens no file, doctor's verdicts are pure, no module uses
another module's private name, only the CLI knows argparse and it imports the heavy rooms only when a command runs
(the rules under the table of docs/architecture.md)."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import ztbp

PKG = Path(ztbp.__file__).resolve().parent
DOC = PKG.parents[1] / "docs" / "architecture.md"
#: What an analysis module may not import: the command line, argument parsing, the report driver, file paths,
#: reading runs, or printing helpers.
ANALYSIS_FORBIDDEN = ("argparse", "ztbp.cli", "ztbp.report", "ztbp.paths", "ztbp.io", "ztbp.present", "tqdm",
                      "ztbp.stages", "subprocess")


def imports_of(path: Path) -> set[str]:
    """Absolute module names a file imports (relative imports resolved against the package)."""
    mod = "ztbp." + ".".join(path.relative_to(PKG).with_suffix("").parts)
    pkg_parts = mod.split(".")[:-1]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join(pkg_parts[: len(pkg_parts) - node.level + 1])
                name = f"{base}.{node.module}" if node.module else base
                out.add(name)
                out.update(f"{name}.{a.name}" for a in node.names)
            else:
                out.add(node.module or "")
    return out


def forbidden(imports: set[str], banned: tuple[str, ...]) -> list[str]:
    return sorted(i for i in imports if any(i == b or i.startswith(b + ".") for b in banned))


@pytest.mark.parametrize("path", sorted((PKG / "analysis").glob("*.py")), ids=lambda p: p.name)
def test_analysis_modules_are_pure(path: Path) -> None:
    assert forbidden(imports_of(path), ANALYSIS_FORBIDDEN) == []
    assert "print(" not in path.read_text(), f"{path.name} prints; return results and let present/ show them"


def test_only_the_cli_imports_argparse() -> None:
    users = [p.relative_to(PKG).as_posix() for p in PKG.rglob("*.py") if "argparse" in imports_of(p)]
    assert all(u.startswith("cli/") for u in users), users


def test_the_checker_sees_a_forbidden_import(tmp_path: Path) -> None:
    f = PKG / "analysis" / "zones.py"
    assert forbidden(imports_of(f) | {"ztbp.cli", "argparse"}, ANALYSIS_FORBIDDEN) == ["argparse", "ztbp.cli"]


def test_building_the_parser_loads_no_stage() -> None:
    """`ztbp --help` stays fast: building the parser of the `ztbp` entry point (pyproject.toml) imports no heavy
    dependency and no package module beyond CLI_LIGHT (below) — no stage, analysis, report or control module."""
    import tomllib

    entry = tomllib.loads((PKG.parents[1] / "pyproject.toml").read_text())["project"]["scripts"]["ztbp"]
    module = entry.split(":")[0]
    code = (f"import sys, {module}; {module}.build_parser(); "
            "print(' '.join(sorted(m for m in sys.modules if m.startswith('ztbp') or m.split('.')[0] in "
            f"{HEAVY!r})))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert [m for m in loaded if m.split(".")[0] in HEAVY] == []
    assert [m for m in loaded if m.startswith("ztbp") and not is_light(m)] == []
    assert f"{module}.common" in loaded  # the check sees the package's modules


def test_every_command_is_registered() -> None:
    from ztbp.cli import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    assert {"synth", "ingest", "zones", "chains", "frag", "cluster", "cachesim", "config", "layers", "opcodes",
            "workload", "capture", "capture-host", "apply", "report"} <= set(sub.choices)


# ---- the "may import" table of docs/architecture.md, held for every module ------------------------------------
def room_of(path: Path) -> str:
    """A module's room: its folder under the package, or the module itself at the package root."""
    rel = path.relative_to(PKG)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def rooms_table() -> dict[str, set[str] | None]:
    """room -> the rooms it may import (None: everything) from the doc's table."""
    table: dict[str, set[str] | None] = {}
    for line in DOC.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not cells[0].startswith("`"):
            continue
        rooms = [r.removesuffix("/").removesuffix(".py") for r in re.findall(r"`([^`]+)`", cells[0])]
        named = set(re.findall(r"`([^`]+)`", cells[2]))
        allowed: set[str] | None = named
        if cells[2].startswith("everything"):
            allowed = None
        elif cells[2].startswith("every room but"):
            allowed = {f"!{r}" for r in named}  # every room but the ones named
        elif cells[2].startswith("nothing"):
            allowed = set()
        for r in rooms:
            table[r] = allowed
    return table


def package_imports(path: Path) -> set[str]:
    """The package modules `path` imports, as room names (`analysis.params` kept apart: a parameter module)."""
    out = set()
    for name in imports_of(path):
        parts = name.split(".")
        if parts[0] != "ztbp" or len(parts) < 2 or parts[1] == "__version__":
            continue
        sub = f"{parts[1]}.{parts[2]}" if len(parts) > 2 and f"{parts[1]}.{parts[2]}" in PARAM_MODULES else parts[1]
        out.add(sub)
    return out


#: modules of a room that a row may name on their own (parameters, defaults and closed-form models, importable
#: without numpy: building the CLI's parser loads acquire/vm.py)
PARAM_MODULES = ("analysis.params", "analysis.device_params", "analysis.device_model", "analysis.read_model")


def breaches(path: Path, table: dict[str, set[str] | None]) -> list[str]:
    room = room_of(path)
    allowed = table[room]
    if allowed is None:
        return []
    out = []
    for dep in sorted(package_imports(path)):
        top = dep.split(".")[0]
        if top == room:
            continue
        excluding = any(a.startswith("!") for a in allowed)
        if (f"!{top}" in allowed) if excluding else (dep not in allowed and top not in allowed):
            out.append(dep)
    return out


MODULES = sorted(p for p in PKG.rglob("*.py") if p.name != "__init__.py" or p.parent != PKG)


def test_every_room_has_a_row() -> None:
    table = rooms_table()
    missing = sorted({room_of(p) for p in MODULES} - set(table))
    assert missing == [], f"rooms with no row in docs/architecture.md's table: {missing}"
    assert set(table) - {room_of(p) for p in MODULES} == set(), "rows for rooms that do not exist"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.relative_to(PKG).as_posix())
def test_every_module_keeps_its_row(path: Path) -> None:
    assert breaches(path, rooms_table()) == [], f"{path.relative_to(PKG)} imports outside its row"


def test_the_table_checker_sees_a_breach(tmp_path: Path) -> None:
    """The checker is not vacuous: an acquire module importing stages, or io importing present, breaks its row."""
    table = rooms_table()
    assert table["acquire"] is not None and "stages" not in table["acquire"]
    assert table["io"] is not None and "present" not in table["io"]
    assert table["control"] is not None and "!cli" in table["control"]
    fake = PKG / "acquire" / "capture.py"
    assert breaches(fake, {**table, "acquire": {"io"}}) != []


# ---- no module imports another module's private name ------------------------------------------------------------
def module_name(path: Path) -> str:
    """`ztbp.present.figures` for present/figures.py, `ztbp.cli` for cli/__init__.py."""
    parts = path.relative_to(PKG).with_suffix("").parts
    return ".".join(("ztbp", *(parts[:-1] if parts[-1] == "__init__" else parts)))


def is_package_module(name: str) -> bool:
    """Whether `ztbp.a.b` names a module (a file or a folder with __init__.py) of the package."""
    parts = name.split(".")
    if parts[0] != "ztbp":
        return False
    base = PKG.joinpath(*parts[1:])
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def from_module(node: ast.ImportFrom, path: Path) -> str:
    """The absolute module of a `from X import …` (relative X resolved against the importing file)."""
    if not node.level:
        return node.module or ""
    pkg = module_name(path).split(".")
    if path.name != "__init__.py":
        pkg = pkg[:-1]
    base = ".".join(pkg[: len(pkg) - node.level + 1])
    return f"{base}.{node.module}" if node.module else base


def private_uses(path: Path, source: str | None = None) -> list[str]:
    """`file:line module._name` for every private name of another package module that `path` imports
    (`from X import _y`) or reaches through a module it imported (`import X` / `from . import X`, then `X._y`)."""
    rel = path.relative_to(PKG).as_posix()
    tree = ast.parse(path.read_text() if source is None else source)
    modules: dict[str, str] = {}  # local name -> the package module it is bound to
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.asname:
                    modules[a.asname] = a.name
                else:
                    modules[a.name.split(".")[0]] = a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module != "__future__":
            src = from_module(node, path)
            if not is_package_module(src):
                continue
            for a in node.names:
                if is_private(a.name):
                    out.append(f"{rel}:{node.lineno} {src.removeprefix('ztbp.')}.{a.name}")
                elif is_package_module(f"{src}.{a.name}"):
                    modules[a.asname or a.name] = f"{src}.{a.name}"
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and is_private(node.attr):
            chain = ast.unparse(node.value).split(".")
            if chain[0] in modules:
                target = ".".join((modules[chain[0]], *chain[1:]))
                if is_package_module(target) and target != module_name(path):
                    out.append(f"{rel}:{node.lineno} {target.removeprefix('ztbp.')}.{node.attr}")
    return out


#: Private names still imported across files in modules another branch rewrites; each goes when that branch merges.
PRIVATE_ALLOWED: set[str] = set()


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.relative_to(PKG).as_posix())
def test_no_module_imports_another_modules_private_name(path: Path) -> None:
    found = [u for u in private_uses(path) if u not in PRIVATE_ALLOWED]
    assert found == [], f"private names used across files (make them public or move them): {found}"


def test_the_private_name_checker_sees_both_forms() -> None:
    src = ("from __future__ import annotations\nfrom .figures import Note, _hidden\nfrom . import figures\n"
           "from ..cli import common as c\nx = figures._other + c._bounded\ny = figures.__name__ + Note._own\n")
    assert sorted(private_uses(PKG / "present" / "new.py", src)) == [
        "present/new.py:2 present.figures._hidden", "present/new.py:5 cli.common._bounded",
        "present/new.py:5 present.figures._other"]


# ---- the analysis room opens no file and redirects no descriptor; doctor's verdicts are pure -------------------
#: calls that read or write a file or move a descriptor, whatever object they are called on (Path, io, os, numpy)
FILE_CALLS = ("open", "read_text", "read_bytes", "write_text", "write_bytes", "tofile", "dup", "dup2")
#: modules and names whose mere use means files, processes or redirected output
FILE_NAMES = ("tempfile", "subprocess", "redirect_stdout", "redirect_stderr")


def file_uses(tree: ast.AST) -> list[str]:
    """`line what` for every file opened or written, descriptor redirected, process started or line printed."""
    out = []
    for node in ast.walk(tree):
        what = ""
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("open", "print"):
            what = f"{node.func.id}()"
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in FILE_CALLS:
            what = f"{ast.unparse(node.func)}()"
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names = [(node.module or "") if isinstance(node, ast.ImportFrom) else "", *(a.name for a in node.names)]
            what = " ".join(n for n in names if n.split(".")[0] in FILE_NAMES)
        elif isinstance(node, ast.Name | ast.Attribute) and (getattr(node, "id", None) or node.attr) in FILE_NAMES:
            what = ast.unparse(node)
        elif isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            what = " ".join(ast.unparse(t) for t in targets if ast.unparse(t) in ("sys.stdout", "sys.stderr"))
        if what:
            out.append(f"{node.lineno} {what}")
    return sorted(set(out), key=lambda s: int(s.split()[0]))


#: File use still in analysis modules another branch rewrites (file:line what); each goes when that branch merges.
ANALYSIS_FILE_ALLOWED: set[str] = set()


@pytest.mark.parametrize("path", sorted((PKG / "analysis").rglob("*.py")), ids=lambda p: p.name)
def test_the_analysis_room_opens_no_file(path: Path) -> None:
    """Data in, results out: the stages and io/ read and write files (io/libcachesim.py runs libCacheSim's
    trace file for the cache model)."""
    rel = path.relative_to(PKG).as_posix()
    found = [f"{rel}:{u}" for u in file_uses(ast.parse(path.read_text()))]
    assert [f for f in found if f not in ANALYSIS_FILE_ALLOWED] == []


def test_the_file_checker_sees_each_kind() -> None:
    src = ("import tempfile\nfrom contextlib import redirect_stdout\nimport os, sys\nfrom pathlib import Path\n"
           "a = open('x')\nb = Path('x').read_text()\nos.dup2(1, 2)\nsys.stdout = None\nprint(a)\n"
           "c = tempfile.mkdtemp()\nd = Path('x').write_bytes(b'')\n")
    assert file_uses(ast.parse(src)) == [
        "1 tempfile", "2 redirect_stdout", "5 open()", "6 Path('x').read_text()", "7 os.dup2()", "8 sys.stdout",
        "9 print()", "10 tempfile", "11 Path('x').write_bytes()"]
    assert file_uses(ast.parse("x = path.name\ny = sys.stdout.isatty()\nz = run.events.open_zones\n")) == []


#: what doctor's verdicts may not import: commands, processes, the file system, the package's I/O
VERDICT_FORBIDDEN = ("subprocess", "os", "shutil", "pathlib", "tempfile", "glob", "io", "ztbp.commands",
                     "ztbp.paths", "ztbp.files", "ztbp.io")


def test_the_doctor_verdicts_are_pure() -> None:
    """Facts in, verdicts out: doctor/verdicts.py runs nothing, opens, prints and reads no environment, and takes
    from facts.py only its types and constants (no gathering function)."""
    path = PKG / "doctor" / "verdicts.py"
    tree = ast.parse(path.read_text())
    assert forbidden(imports_of(path), VERDICT_FORBIDDEN) == []
    assert file_uses(tree) == []
    env = [ast.unparse(n) for n in ast.walk(tree) if isinstance(n, ast.Name | ast.Attribute)
           and (getattr(n, "id", None) or n.attr) in ("environ", "getenv", "input")]
    assert env == [], f"verdicts.py reads the environment or the terminal: {env}"
    from_facts = [a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module == "facts"
                  for a in n.names]
    assert from_facts and all(n[0].isupper() for n in from_facts), from_facts


# ---- the CLI imports the heavy rooms lazily -------------------------------------------------------------------
#: package modules the parser is built from: defaults, choices and bounds the options show, importable without
#: numpy or polars (their packages' __init__ files import nothing)
CLI_LIGHT = ("ztbp.errors", "ztbp.units", "ztbp.paths", "ztbp.files", "ztbp.schema", "ztbp.contract", "ztbp.cli",
             "ztbp.devices", "ztbp.analysis.params", "ztbp.analysis.device_params", "ztbp.analysis.device_model",
             "ztbp.analysis.read_model", "ztbp.acquire.vm", "ztbp.acquire.patterns", "ztbp.acquire.workload",
             "ztbp.io.layout")
#: third-party packages a command may import only when it runs
HEAVY = ("numpy", "polars", "plotly", "numba", "pandas", "pyarrow", "sklearn", "scipy", "papermill", "dask",
         "libcachesim")


def is_light(name: str) -> bool:
    """A package module the parser may load: one of CLI_LIGHT, within one, or a package holding one."""
    return name == "ztbp" or any(name == m or name.startswith(m + ".") or m.startswith(name + ".")
                                 for m in CLI_LIGHT)


def module_level_imports(path: Path) -> set[str]:
    """What a module imports when it is imported: its top-level imports, those under a top-level `if`/`try`
    included, those for type checkers only and those inside functions left out."""
    out: set[str] = set()

    def walk(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.Import):
                out.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module != "__future__":
                src = from_module(node, path)
                out.update(f"{src}.{a.name}" if is_package_module(f"{src}.{a.name}") else src for a in node.names)
            elif isinstance(node, ast.If) and "TYPE_CHECKING" not in ast.unparse(node.test):
                walk(node.body)
                walk(node.orelse)
            elif isinstance(node, ast.Try):
                walk(node.body)
                walk(node.orelse)
                walk(node.finalbody)
                for h in node.handlers:
                    walk(h.body)

    walk(ast.parse(path.read_text()).body)
    return out


@pytest.mark.parametrize("path", sorted((PKG / "cli").glob("*.py")), ids=lambda p: p.name)
def test_the_cli_imports_its_stages_when_a_command_runs(path: Path) -> None:
    heavy = sorted(m for m in module_level_imports(path)
                   if m.split(".")[0] in HEAVY or (m.startswith("ztbp") and not is_light(m)))
    assert heavy == [], f"cli/{path.name} imports at module level: {heavy} (import it in the command's function)"


#: what a command that reads the events but neither clusters nor simulates a cache must not load (numba's import
#: alone took about a second of `ztbp ingest`, through the cache simulator's text view)
NOT_FOR_TABLES = ("numba", "sklearn", "scipy", "plotly", "libcachesim", "dask", "papermill")


@pytest.mark.parametrize("command", ["ingest", "zones", "opcodes"])
def test_a_table_command_loads_no_simulator(command: str, tmp_path: Path) -> None:
    """`ztbp ingest`, `zones` and `opcodes` on the committed sample run import only what they use: the views of
    present/text.py import the cache simulator and frag when they show their results."""
    run = tmp_path / "run"
    shutil.copytree(PKG.parents[1] / "tests" / "data" / "runs" / "sample-paper80", run)
    code = ("import contextlib, io, sys\nfrom ztbp.cli import main\n"
            f"with contextlib.redirect_stdout(io.StringIO()):\n    rc = main([{command!r}, {str(run)!r}])\n"
            "print(rc, ' '.join(sorted({m.split('.')[0] for m in sys.modules})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out[0] == "0" and "polars" in out  # the command ran and read the events
    assert sorted(set(out[1:]) & set(NOT_FOR_TABLES)) == []

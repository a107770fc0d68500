"""The package's rooms keep their boundaries: every module imports only the rooms its row of docs/architecture.md's
"may import" table names, the analysis room is pure, and only the CLI knows argparse."""

from __future__ import annotations

import ast
import re
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
    """`ztbp --help` stays fast: building the parser imports no heavy dependency and no analysis module."""
    code = ("import sys, ztbp.cli; ztbp.cli.build_parser(); "
            "print(','.join(m for m in sys.modules if m.split('.')[0] in "
            "('numpy', 'polars', 'sklearn', 'numba', 'plotly', 'papermill', 'pyarrow')))")
    heavy = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert heavy == ""


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
PARAM_MODULES = ("analysis.params", "analysis.device_params", "analysis.device_model")


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

"""The package's rooms keep their boundaries: the analysis room is pure, and only the CLI knows argparse."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import ztbp

PKG = Path(ztbp.__file__).resolve().parent
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
    assert all(u.startswith("cli/") or u.startswith("bench") for u in users), users  # benchmarks are scripts


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

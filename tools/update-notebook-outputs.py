#!/usr/bin/env python3
"""Run each notebook of notebooks/ on its defaults (the committed samples its parameters cell names) and store the
outputs of its checked cells in the notebook (`just update-notebooks`).

nbval (`pytest --nbval-lax notebooks/`, part of `just test`) compares the cells marked `# NBVAL_CHECK_OUTPUT` with
the outputs stored in the notebook; every other cell is stored without output. Run this after changing a notebook's
summary cells, a package function they print, or a sample run, then review the diff.

Usage: update-notebook-outputs.py [NOTEBOOKS]   (comma-separated numbers or names, e.g. 1,6-cache; default: all)
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import nbformat
import papermill

from ztbp.errors import ZtbpError
from ztbp.paths import NOTEBOOKS
from ztbp.report.notebooks import CHECK_MARK, notebooks
from ztbp.report.render import KERNEL_ARGUMENTS


def store_outputs(path: Path) -> None:
    """Execute `path` on its defaults and keep only the checked cells' outputs in it."""
    with tempfile.TemporaryDirectory() as td:
        executed = papermill.execute_notebook(str(path), str(Path(td) / path.name), kernel_name="python3",
                                              cwd=str(NOTEBOOKS), progress_bar=False, log_output=False,
                                              extra_arguments=KERNEL_ARGUMENTS)
    by_id = {c.get("id"): c for c in executed.cells}
    nb = nbformat.read(str(path), as_version=4)
    code_cells = [c for c in nb.cells if c.cell_type == "code"]
    for n, cell in enumerate(code_cells, start=1):
        ran = by_id.get(cell.get("id"))
        keep = CHECK_MARK in cell.source and ran is not None
        cell.outputs = [nbformat.from_dict(dict(o)) for o in ran.outputs] if keep else []
        cell.execution_count = n if keep else None  # nbval refuses stored outputs of an "unrun" cell
        for o in cell.outputs:
            if "execution_count" in o:
                o["execution_count"] = n
        cell.metadata.pop("papermill", None)
        cell.metadata.pop("execution", None)
    nb.metadata.pop("papermill", None)
    nbformat.write(nb, str(path))


def main(argv: list[str]) -> int:
    if len(argv) > 1 or (argv and argv[0].startswith("-")):
        print("usage: update-notebook-outputs.py [NOTEBOOKS]  (comma-separated numbers or names; default: all)",
              file=sys.stderr)
        return 2
    only = [s for s in argv[0].split(",") if s] if argv else None
    try:
        paths = notebooks(only or None)
    except ZtbpError as e:
        print(f"update-notebook-outputs: error: {e}", file=sys.stderr)
        return 1
    for path in paths:
        print(f"update-notebook-outputs: executing {path.name} on its defaults ...")
        store_outputs(path)
    print(f"update-notebook-outputs: stored the checked outputs of {len(paths)} notebooks")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

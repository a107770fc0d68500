"""Reading raw/layers.csv (probes/layers.bt, `# ztbp layers v1`) and raw/bench.json of a layer run.

Every line that does not parse is counted with its reason (io/rows.py, the rule of every probe file); nothing is
dropped silently.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl

from ..contract import LAYER_MODES, LAYER_OPS, LAYERS_COLUMNS
from ..errors import FormatError, MissingRunError
from ..paths import RunPaths
from .rows import RowSpec, RowsReport, file_rows, read_header

#: What reading raw/layers.csv kept and skipped.
LayersReadReport = RowsReport
_STRINGS = ("mode", "op", "dev", "stack")
SPEC = RowSpec(LAYERS_COLUMNS, {c: pl.Int64() for c in LAYERS_COLUMNS if c not in _STRINGS},
               {"mode": LAYER_MODES, "op": LAYER_OPS})


def read_layers(path: Path) -> tuple[pl.DataFrame, RowsReport]:
    """Read a `# ztbp layers v1` file: typed rows, and a report of the lines that were skipped."""
    header, _ = read_header(path, "layers", 1, LAYERS_COLUMNS)
    rep = RowsReport(file="raw/layers.csv")
    return file_rows(path, header, SPEC, rep), rep


def load_layers(run: RunPaths) -> tuple[pl.DataFrame, LayersReadReport]:
    csv = run.probe_csv("layers")
    if not csv.is_file():
        raise MissingRunError(f"layer breakdown: not captured in this run ({csv} is missing). Capture one with the "
                              "layer probe: `just capture-layers` (see probes/layers.bt).")
    return read_layers(csv)


def read_bench(run: RunPaths) -> dict[str, Any] | None:
    """raw/bench.json (written by `just bench-layers`): fio IOPS without and with the layer probe, same boot."""
    path = run.bench_json
    if not path.is_file():
        return None
    try:
        b = json.loads(path.read_text())
        without = [float(v) for v in b["iops_without"]]
        with_probe = [float(v) for v in b["iops_with"]]
    except (KeyError, TypeError, ValueError, RecursionError) as e:  # ValueError: JSON, UTF-8 or a number
        raise FormatError(f"{path} is not a bench result ({type(e).__name__}); re-run `just bench-layers`.") from None
    if not without or not with_probe:
        raise FormatError(f"{path} holds no IOPS figures; re-run `just bench-layers`.")
    return {**b, "iops_without": without, "iops_with": with_probe}

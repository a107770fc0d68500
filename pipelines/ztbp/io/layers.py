"""Reading raw/layers.csv (probes/layers.bt, `# ztbp layers v1`) and raw/bench.json of a layer run.

Every line that does not parse is counted with its reason (LayersReadReport); nothing is dropped silently.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from ..contract import LAYER_MODES, LAYER_OPS, LAYERS_COLUMNS, parse_version_line
from ..errors import FormatError, MissingRunError
from ..paths import RunPaths

_INT_COLS = [c for c in LAYERS_COLUMNS if c not in ("mode", "op", "dev", "stack")]
_SCHEMA: dict[str, Any] = {c: pl.Int64 for c in _INT_COLS} | {"mode": pl.Utf8, "op": pl.Utf8, "dev": pl.Utf8,
                                                               "stack": pl.Utf8}
_MAX_SHOWN = 5


@dataclass
class LayersReadReport:
    """What reading raw/layers.csv kept and skipped (never silently)."""

    rows: int = 0
    skipped: int = 0
    reasons: dict[str, int] = field(default_factory=dict)
    first_lines: list[tuple[int, str]] = field(default_factory=list)

    def skip(self, line_no: int, reason: str) -> None:
        self.skipped += 1
        self.reasons[reason] = self.reasons.get(reason, 0) + 1
        if len(self.first_lines) < _MAX_SHOWN:
            self.first_lines.append((line_no, reason))

    def as_dict(self) -> dict[str, Any]:
        return {"rows": self.rows, "skipped": self.skipped, "reasons": self.reasons,
                "first_skipped_lines": [{"line": n, "reason": r} for n, r in self.first_lines]}


def _parse_line(parts: list[str]) -> dict[str, Any] | str:
    """One data line → a row dict, or the reason it does not parse."""
    if len(parts) < len(LAYERS_COLUMNS):
        return f"{len(parts)} fields, expected {len(LAYERS_COLUMNS)}"
    row: dict[str, Any] = {}
    for name, val in zip(LAYERS_COLUMNS, parts, strict=False):
        if name in _INT_COLS:
            try:
                row[name] = int(val)
            except ValueError:
                return f"non-numeric {name}"
        else:
            row[name] = val
    if row["mode"] not in LAYER_MODES:
        return "unknown mode"
    if row["op"] not in LAYER_OPS:
        return "unknown op"
    return row


def read_layers(path: Path) -> tuple[pl.DataFrame, LayersReadReport]:
    """Read a `# ztbp layers v1` file: typed rows, and a report of the lines that were skipped."""
    rep = LayersReadReport()
    with path.open(encoding="utf-8", errors="replace") as f:
        first = f.readline()
        parse_version_line(first, "layers", 1, path)
        header = f.readline().rstrip("\r\n").split(",")
        if header[: len(LAYERS_COLUMNS)] != list(LAYERS_COLUMNS):
            raise FormatError(f"{path}: line 2 is not the layers v1 header; expected "
                              f"{','.join(LAYERS_COLUMNS)} (see probes/FORMAT.md).")
        rows: list[dict[str, Any]] = []
        for line_no, line in enumerate(f, start=3):
            text = line.strip()
            if not text:
                continue
            parsed = _parse_line(text.split(","))
            if isinstance(parsed, str):
                rep.skip(line_no, parsed)
            else:
                rows.append(parsed)
    rep.rows = len(rows)
    df = pl.DataFrame(rows, schema=_SCHEMA) if rows else pl.DataFrame(schema=_SCHEMA)
    return df.select(LAYERS_COLUMNS), rep


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
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
        raise FormatError(f"{path} is not a bench result ({e}); re-run `just bench-layers`.") from None
    if not without or not with_probe:
        raise FormatError(f"{path} holds no IOPS figures; re-run `just bench-layers`.")
    return {**b, "iops_without": without, "iops_with": with_probe}

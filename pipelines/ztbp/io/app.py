"""Readers of an application run's raw files: raw/appops.csv, raw/cachestat.csv, raw/files.csv (probes/FORMAT.md)
and the NVMe rows with the submitting thread. They follow the rule of every probe file (io/rows.py): a wrong version
line or header is refused with one line; a row that does not parse (garbage, not UTF-8, a field beyond its type, the
last line cut without its newline) is skipped and counted with its line number, and each reader returns what it
skipped (RowsReport) beside the rows."""

from __future__ import annotations

import polars as pl

from ..contract import NVME_COLUMNS, OPS, PROBE_FILES, ZONE_ACTIONS
from ..errors import FormatError, MissingRunError
from ..paths import RunPaths
from .rows import RowSpec, RowsReport, file_rows, read_header

_STRINGS = ("op", "path", "flags", "zone_action")
CAPTURE_APP = "capture an application run with `ztbp capture-app rocksdb`"


def _spec(columns: tuple[str, ...], enums: dict[str, tuple[str, ...]] | None = None) -> RowSpec:
    """Every column an Int64 but the named strings."""
    return RowSpec(columns, {c: pl.Int64() for c in columns if c not in _STRINGS}, enums or {})


def _read(run: RunPaths, probe: str, spec: RowSpec, what_makes_it: str, file: str | None = None
          ) -> tuple[pl.DataFrame, RowsReport]:
    path = run.probe_csv(file or probe)
    if not path.is_file():
        raise MissingRunError(f"{path} is missing: {what_makes_it}")
    header, _ = read_header(path, probe, 1, PROBE_FILES[probe][1])
    if any(c not in header for c in spec.columns):
        raise FormatError(f"{path} has no {spec.columns[-1]} column: operations cannot be attributed by thread. "
                          "Capture with `ztbp capture-app` (its NVMe probe, nvme_zone_stream.bt, records the "
                          "submitting thread).")
    report = RowsReport(file=f"raw/{path.name}")
    return file_rows(path, header, spec, report), report


def load_appops(run: RunPaths) -> tuple[pl.DataFrame, RowsReport]:
    return _read(run, "appops", _spec(PROBE_FILES["appops"][1]), CAPTURE_APP)


def load_cachestat(run: RunPaths) -> tuple[pl.DataFrame, RowsReport]:
    return _read(run, "cachestat", _spec(PROBE_FILES["cachestat"][1]), CAPTURE_APP)


def load_files(run: RunPaths) -> tuple[pl.DataFrame, RowsReport]:
    return _read(run, "files", _spec(PROBE_FILES["files"][1]),
                 f"{CAPTURE_APP} (it records every file's extents)")


def load_nvme_tid(run: RunPaths) -> tuple[pl.DataFrame, RowsReport]:
    """raw/nvme.csv with its `tid` column (written by probes/nvme_zone_stream.bt); an error when it has none."""
    actions = tuple(a + s for a in ZONE_ACTIONS if a for s in ("", "_all")) + ("",)
    spec = _spec((*NVME_COLUMNS, "tid"), {"op": OPS, "zone_action": actions})
    return _read(run, "nvme", spec, "this run has no NVMe trace")

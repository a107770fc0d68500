"""Readers of an application run's raw files: raw/appops.csv, raw/cachestat.csv, raw/files.csv (probes/FORMAT.md)
and the NVMe rows with the submitting thread. Header lines are checked; a row that does not parse stops the read
with an error naming the file (these files are small and written in one piece at the end of a capture, so a bad
row means a damaged file, not a lost event)."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from ..contract import (
    APPOPS_COLUMNS,
    APPOPS_VERSION_LINE,
    CACHESTAT_COLUMNS,
    CACHESTAT_VERSION_LINE,
    FILES_COLUMNS,
    FILES_VERSION_LINE,
    NVME_COLUMNS,
    parse_version_line,
)
from ..errors import FormatError, MissingRunError
from ..paths import RunPaths

_TYPES: dict[str, pl.DataType] = {
    "op": pl.String(), "path": pl.String(), "flags": pl.String(), "status": pl.Int64(), "dev_bytes": pl.Int64(),
}


def _read(path: Path, probe: str, version: str, columns: tuple[str, ...], what_makes_it: str) -> pl.DataFrame:
    if not path.is_file():
        raise MissingRunError(f"{path} is missing: {what_makes_it}")
    with path.open() as f:
        first, second = f.readline(), f.readline()
    parse_version_line(first, probe, int(version.rsplit("v", 1)[1]), path)
    cols = second.strip().split(",")
    if tuple(cols[: len(columns)]) != columns:
        raise FormatError(f"{path}: line 2 must be '{','.join(columns)}', found {second.strip()[:100]!r}")
    schema = {c: _TYPES.get(c, pl.Int64()) for c in cols}
    return _csv(path, schema).select(columns)


def _csv(path: Path, schema: dict[str, pl.DataType]) -> pl.DataFrame:
    try:
        return pl.read_csv(path, skip_rows=1, schema=schema)
    except (pl.exceptions.ComputeError, pl.exceptions.SchemaError) as e:
        why = str(e).splitlines()[0][:160]
        raise FormatError(f"{path}: a row does not parse ({why}); re-capture the run") from None


def load_appops(run: RunPaths) -> pl.DataFrame:
    return _read(run.probe_csv("appops"), "appops", APPOPS_VERSION_LINE, APPOPS_COLUMNS,
                 "capture an application run with `ztbp capture-app rocksdb`")


def load_cachestat(run: RunPaths) -> pl.DataFrame:
    return _read(run.probe_csv("cachestat"), "cachestat", CACHESTAT_VERSION_LINE, CACHESTAT_COLUMNS,
                 "capture an application run with `ztbp capture-app rocksdb`")


def load_files(run: RunPaths) -> pl.DataFrame:
    return _read(run.probe_csv("files"), "files", FILES_VERSION_LINE, FILES_COLUMNS,
                 "capture an application run with `ztbp capture-app rocksdb` (it records every file's extents)")


def load_nvme_tid(run: RunPaths) -> pl.DataFrame:
    """raw/nvme.csv with its `tid` column (written by probes/nvme_zone_stream.bt); an error when it has none."""
    path = run.nvme_csv
    with path.open() as f:
        f.readline()
        cols = f.readline().strip().split(",")
    if "tid" not in cols:
        raise FormatError(f"{path} has no tid column: operations cannot be attributed by thread. Capture with "
                          "`ztbp capture-app` (its NVMe probe, nvme_zone_stream.bt, records the submitting thread).")
    schema = {c: (pl.String() if c in ("op", "zone_action") else pl.Int64()) for c in cols}
    return _csv(path, schema).select([*NVME_COLUMNS, "tid"])

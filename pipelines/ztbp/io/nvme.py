"""Ingest: raw/nvme.csv -> derived/events.parquet (typed, sorted by submission time).

Two paths, one result. The fast path lets polars parse the whole file with the contract's schema; when the file
has anything it cannot take as it is (a truncated last line, a garbage row, an unknown op), the careful path reads
it line by line, keeps every row that parses, and reports each skipped line's number and reason. Nothing is
dropped silently: `derived/ingest.json` and the command's output count every skipped line.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from ..contract import NVME_COLUMNS, NVME_VERSION_LINE, OPS, ZONE_ACTIONS, parse_version_line, read_meta
from ..errors import FormatError, MissingRunError
from ..files import atomic_path, locked, make_dir, write_json
from ..paths import RunPaths, resolve_run

OP_DTYPE = pl.Enum(list(OPS))
ACTION_DTYPE = pl.Enum([a + s for a in ZONE_ACTIONS if a for s in ("", "_all")] + [""])
#: Column -> polars type in events.parquet (the op / zone_action enums are applied after validation).
INT_TYPES: dict[str, pl.DataType] = {
    "ts_ns": pl.UInt64, "lat_ns": pl.UInt64, "ctrl": pl.UInt32, "qid": pl.UInt32, "cid": pl.UInt32,
    "nsid": pl.UInt32, "opcode": pl.UInt8, "slba": pl.UInt64, "nlb": pl.UInt32, "status": pl.UInt16,
}
SHOW_SKIPPED = 5


@dataclass
class IngestReport:
    source: str
    rows: int = 0
    skipped: int = 0
    blank_lines: int = 0
    skipped_examples: list[dict[str, Any]] = field(default_factory=list)
    skip_reasons: dict[str, int] = field(default_factory=dict)
    out_of_range_zones: int = 0
    lost_events: dict[str, int] = field(default_factory=dict)
    source_size: int = 0
    source_mtime_ns: int = 0
    #: meta.json's geometry the zone ids were computed with: a change re-ingests (the zone column depends on it)
    geometry: dict[str, int] = field(default_factory=dict)
    path: str = "fast"

    def skip(self, line_no: int, reason: str, count_only: bool = False) -> None:
        self.skipped += 1
        key = reason.split(":")[0]
        self.skip_reasons[key] = self.skip_reasons.get(key, 0) + 1
        if not count_only and len(self.skipped_examples) < SHOW_SKIPPED:
            self.skipped_examples.append({"line": line_no, "reason": reason})


def _check_header(path: Path) -> list[str]:
    """Validate the version line and header; return the header's column names."""
    try:
        with path.open("rb") as f:
            first = f.readline().decode("utf-8", "replace")
            second = f.readline().decode("utf-8", "replace")
    except OSError as e:
        raise MissingRunError(f"cannot read {path}: {e.strerror}") from None
    if not first:
        raise FormatError(f"{path} is empty: expected '{NVME_VERSION_LINE}' and a header. "
                          "The probe wrote nothing — was it attached? Check console.log of the run.")
    parse_version_line(first, "nvme", 1, path)
    cols = [c.strip() for c in second.strip().split(",")]
    if tuple(cols[: len(NVME_COLUMNS)]) != NVME_COLUMNS:
        raise FormatError(f"{path}: line 2 must be the header '{','.join(NVME_COLUMNS)}' "
                          f"(extra columns may follow), found {second.strip()[:120]!r}.")
    return cols


def _validate(df: pl.DataFrame) -> pl.DataFrame:
    """Apply the enum types; raises if an op / zone_action is not in the contract."""
    return df.with_columns(
        pl.col("op").cast(OP_DTYPE),
        pl.col("zone_action").cast(ACTION_DTYPE).fill_null(""),
    )


def _fast_path(path: Path | bytes, header: list[str]) -> pl.DataFrame | None:
    """Parse the whole file (or a chunk of its data lines, as bytes) with the schema; None when anything needs the
    careful path."""
    typed = {**INT_TYPES, "op": OP_DTYPE, "zone_action": ACTION_DTYPE}
    schema = {c: typed.get(c, pl.String) for c in header}
    whole = isinstance(path, Path)
    try:
        df = pl.read_csv(path, skip_rows=1 if whole else 0, has_header=whole, schema=schema,
                         columns=list(NVME_COLUMNS) if whole else None).select(NVME_COLUMNS)
    except Exception:  # noqa: BLE001 - any parse failure means: take the careful path
        return None
    required = [c for c in NVME_COLUMNS if c != "zone_action"]
    if df.select(pl.any_horizontal(pl.col(required).is_null()).any()).item():
        return None
    try:
        return _validate(df)
    except Exception:  # noqa: BLE001 - unknown op / action: careful path reports the lines
        return None


def _careful_path(path: Path, report: IngestReport) -> pl.DataFrame:
    """Line-by-line: keep what parses, count and explain the rest."""
    raw = path.read_bytes()
    lines = raw.split(b"\n")
    truncated_last = not raw.endswith(b"\n") and len(lines) > 2
    if lines and lines[-1] == b"":
        lines.pop()
    body = [ln.decode("utf-8", "replace").rstrip("\r") for ln in lines[2:]]
    return careful_rows(body, 3, truncated_last, report)


def careful_rows(body: list[str], first_line_no: int, truncated_last: bool, report: IngestReport) -> pl.DataFrame:
    """The rows of data lines `body` (the first is line `first_line_no` of the file) that parse; the rest are
    counted in `report`. `truncated_last`: the last line of `body` is the file's last and has no newline."""
    s = pl.DataFrame({"line": body}, schema={"line": pl.String}).with_row_index("line_no", offset=first_line_no)
    blank = s.filter(pl.col("line").str.strip_chars() == "")
    report.blank_lines += blank.height
    s = s.filter(pl.col("line").str.strip_chars() != "")
    parts = pl.col("line").str.split(",")
    s = s.with_columns(parts.list.len().alias("_n"), parts.alias("_p"))
    n = len(NVME_COLUMNS)
    exprs = []
    for i, c in enumerate(NVME_COLUMNS):
        e = pl.col("_p").list.get(i, null_on_oob=True).str.strip_chars(" \"")
        if c in INT_TYPES:
            e = e.cast(INT_TYPES[c], strict=False)
        exprs.append(e.alias(c))
    s = s.with_columns(exprs)
    last_no = first_line_no + len(body) - 1
    reason = (
        pl.when(pl.col("_n") < n)
        .then(pl.when(pl.lit(truncated_last) & (pl.col("line_no") == last_no))
              .then(pl.format("truncated last line: {} of {} fields", pl.col("_n"), pl.lit(n)))
              .otherwise(pl.format("wrong field count: {} of {}", pl.col("_n"), pl.lit(n))))
    )
    for c in INT_TYPES:
        reason = reason.when(pl.col(c).is_null()).then(pl.lit(f"bad value: {c} is not a valid {INT_TYPES[c]}"))
    reason = (reason.when(~pl.col("op").is_in(list(OPS)))
              .then(pl.format("unknown op: {}", pl.col("op")))
              .when(~pl.col("zone_action").is_in(list(ACTION_DTYPE.categories)))
              .then(pl.format("unknown zone_action: {}", pl.col("zone_action")))
              .otherwise(None))
    s = s.with_columns(reason.alias("_why"))
    bad = s.filter(pl.col("_why").is_not_null()).select("line_no", "_why")
    for line_no, why in bad.head(SHOW_SKIPPED).iter_rows():
        report.skip(int(line_no), str(why))
    for why in bad["_why"].slice(SHOW_SKIPPED):
        report.skip(0, str(why), count_only=True)
    report.path = "careful"
    good = s.filter(pl.col("_why").is_null()).select(NVME_COLUMNS)
    return _validate(good)


def open_source(run: RunPaths) -> tuple[dict[str, Any], list[str], IngestReport]:
    """meta.json, the header of raw/nvme.csv (checked) and an empty report keyed by the file's size and mtime."""
    meta = read_meta(run)
    src = run.nvme_csv
    if not src.is_file():
        raise MissingRunError(f"{src} is missing: this run has no NVMe trace. Was the nvme probe attached? "
                              "See console.log of the run.")
    header = _check_header(src)
    st = src.stat()
    report = IngestReport(source=str(src), source_size=st.st_size, source_mtime_ns=st.st_mtime_ns,
                          lost_events={k: int(v) for k, v in meta.get("lost_events", {}).items()},
                          geometry=geometry_of(meta))
    return meta, header, report


def geometry_of(meta: dict[str, Any]) -> dict[str, int]:
    """The fields of meta.json that derived data depends on (zone ids, zone counts)."""
    return {k: int(meta[k]) for k in ("lba_bytes", "zone_size_lba", "zone_cap_lba", "nr_zones")}


@contextmanager
def derived_lock(run: RunPaths) -> Iterator[bool]:
    """The lock on the run's derived/ (files.locked on derived/.lock), held while derived results are made, so two
    commands on one run make them once; yields whether another process held it first. A folder that is no run (no
    meta.json: a typo) is refused before derived/ is made in it."""
    read_meta(run)
    with locked(make_dir(run.derived) / ".lock", str(run.root)) as waited:
        yield waited


def ingest(run: RunPaths) -> IngestReport:
    """Read raw/nvme.csv of a run and write derived/events.parquet and derived/ingest.json, under the run's
    derived_lock; a command that waited for another one's ingest of the same trace keeps that one's result."""
    with derived_lock(run) as waited:
        done = _fresh_report(run) if waited else None
        return done or _ingest(run)


def _fresh_report(run: RunPaths) -> IngestReport | None:
    """derived/ingest.json as a report, when events.parquet is fresh (None: ingest again)."""
    if not _is_fresh(run):
        return None
    try:
        return IngestReport(**json.loads(run.ingest_report.read_text()))
    except (OSError, ValueError, TypeError):
        return None


def _ingest(run: RunPaths) -> IngestReport:
    meta, header, report = open_source(run)
    src = run.nvme_csv
    df = _fast_path(src, header)
    if df is None:
        df = _careful_path(src, report)
    zone = (pl.col("slba") // meta["zone_size_lba"]).cast(pl.UInt32)
    df = df.with_columns(zone.alias("zone"))
    # Probes print in completion order; the contract of events.parquet is submission order.
    df = df.set_sorted("ts_ns") if df["ts_ns"].is_sorted() else df.sort("ts_ns", maintain_order=True)
    report.rows = df.height
    report.out_of_range_zones = int(df.select((pl.col("zone") >= meta["nr_zones"]).sum()).item())
    make_dir(run.derived)
    with atomic_path(run.events) as tmp:
        df.write_parquet(tmp, compression="uncompressed", statistics=False)  # fastest to write and to read back
    write_json(run.ingest_report, asdict(report))  # last: a fresh ingest.json means events.parquet is whole
    return report


def _is_fresh(run: RunPaths) -> bool:
    """events.parquet was made from this raw/nvme.csv with this meta.json geometry."""
    if not run.events.is_file() or not run.ingest_report.is_file():
        return False
    try:
        rep = json.loads(run.ingest_report.read_text())
        st = run.nvme_csv.stat()
        geometry = geometry_of(read_meta(run))
    except (OSError, json.JSONDecodeError):
        return False
    return (isinstance(rep, dict) and rep.get("source_size") == st.st_size
            and rep.get("source_mtime_ns") == st.st_mtime_ns and rep.get("geometry") == geometry)


def load_events(run: RunPaths | str | Path) -> pl.DataFrame:
    """events.parquet of a run, ingesting first when it is missing or older than raw/nvme.csv."""
    rp = run if isinstance(run, RunPaths) else resolve_run(run)
    if not _is_fresh(rp):
        with derived_lock(rp):
            if not _is_fresh(rp):  # another command may have ingested it meanwhile
                _ingest(rp)
    return pl.read_parquet(rp.events)

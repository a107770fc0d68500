"""Ingest: raw/nvme.csv -> derived/events.parquet (typed, sorted by submission time).

The rows are read as io/rows.py reads every probe file: the fast polars parse, else the careful line-by-line one
that keeps every row that parses and reports each skipped line's number and reason. Nothing is dropped silently:
`derived/ingest.json` and the command's output count every skipped line. Besides the contract's types, a row must
address a zone below 2^24 (units.MAX_ZONES) and keep ts_ns + lat_ns and slba + nlb below 2^63, so that every analysis
can compute in int64.

events.parquet is reused only while it matches what made it: ingest.json keeps the stamp (io/stamp.py: size, times,
inode, digest) of raw/nvme.csv, read once for the parse and the digest, the stamp of events.parquet as written, and
meta.json's geometry. Anything that does not match — the trace edited (even keeping its size and mtime), the
geometry changed, events.parquet replaced — re-ingests, and the reason is kept in ingest.json (`reingest`);
derived data that no longer matches its record is also said on the log (a warning).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from ..contract import NVME_COLUMNS, OPS, ZONE_ACTIONS, read_meta
from ..errors import MissingRunError
from ..files import atomic_writer, byte_chunks, locked, make_dir, write_atomic
from ..paths import RunPaths, resolve_run
from ..units import MAX_NS, MAX_ZONES
from . import stamp as stamps
from .rows import (
    CHUNK_BYTES,
    SHOW_SKIPPED,
    Rows,
    RowSpec,
    examples,
    long_lines,
    read_header,
    read_rows,
    reason_counts,
)

log = logging.getLogger("ztbp")
OP_DTYPE = pl.Enum(list(OPS))
ACTION_DTYPE = pl.Enum([a + s for a in ZONE_ACTIONS if a for s in ("", "_all")] + [""])
#: Column -> polars type in events.parquet (the op / zone_action enums are applied after validation).
INT_TYPES: dict[str, pl.DataType] = {
    "ts_ns": pl.UInt64(), "lat_ns": pl.UInt64(), "ctrl": pl.UInt32(), "qid": pl.UInt32(), "cid": pl.UInt32(),
    "nsid": pl.UInt32(), "opcode": pl.UInt8(), "slba": pl.UInt64(), "nlb": pl.UInt32(), "status": pl.UInt16(),
}


def row_spec(zone_size_lba: int) -> RowSpec:
    """What a row of nvme.csv must hold, for a run of this zone size."""
    slba, nlb, ts, lat = pl.col("slba"), pl.col("nlb"), pl.col("ts_ns"), pl.col("lat_ns")
    zone = slba // zone_size_lba
    checks = (
        (zone >= MAX_ZONES, pl.format(f"bad value: slba {{}} is in zone {{}}, beyond the {MAX_ZONES} zones a run may "
                                      "have", slba, zone)),
        ((ts >= MAX_NS) | (lat >= pl.lit(MAX_NS, pl.UInt64) - ts),
         pl.lit("bad value: ts_ns + lat_ns is beyond 2^63 ns")),
        (slba >= pl.lit(MAX_NS, pl.UInt64) - nlb, pl.lit("bad value: slba + nlb is beyond 2^63 LBAs")),
    )
    top = pl.lit(MAX_NS, pl.UInt64)
    quick = (slba.max() // zone_size_lba < MAX_ZONES, ts.max() < MAX_NS, lat.max() < top - ts.max(),
             slba.max() < top - nlb.max())
    return RowSpec(NVME_COLUMNS, INT_TYPES, {"op": OPS, "zone_action": tuple(ACTION_DTYPE.categories)}, checks, quick,
                   enum_types=True)


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
    #: raw/nvme.csv's full stamp (io/stamp.py) and events.parquet's as written: what later loads check
    source_stamp: dict[str, Any] = field(default_factory=dict)
    events_stamp: dict[str, Any] = field(default_factory=dict)
    #: meta.json's geometry the zone ids were computed with: a change re-ingests (the zone column depends on it)
    geometry: dict[str, int] = field(default_factory=dict)
    path: str = "fast"
    #: why the derived data there before was not reused ("" for a first ingest or an unchanged one)
    reingest: str = ""

    def add(self, rows: Rows) -> None:
        """Count what reading a body skipped (its first lines kept as examples)."""
        self.blank_lines += rows.blank
        self.skipped += rows.bad.height
        for why, n in reason_counts(rows.bad).items():
            self.skip_reasons[why] = self.skip_reasons.get(why, 0) + n
        self.skipped_examples += examples(rows.bad, SHOW_SKIPPED - len(self.skipped_examples))
        if rows.careful:
            self.path = "careful"

    def long_line(self, line_no: int) -> None:
        """Count a line dropped for its length (files.byte_chunks' on_long)."""
        self.add(Rows(pl.DataFrame(schema=dict.fromkeys(NVME_COLUMNS, pl.String)), long_lines([line_no])))


def _validate(df: pl.DataFrame) -> pl.DataFrame:
    """Apply the enum types (the rows are checked: every op and zone_action is in the contract)."""
    return df.with_columns(
        pl.col("op").cast(OP_DTYPE),
        pl.col("zone_action").fill_null("").cast(ACTION_DTYPE),
    )


def body_rows(body: bytes, header: list[str], zone_size_lba: int, first_line_no: int, report: IngestReport
              ) -> pl.DataFrame:
    """The typed rows of data lines `body` (the first is line `first_line_no`); what is skipped is counted."""
    rows = read_rows(body, header, row_spec(zone_size_lba), first_line_no)
    report.add(rows)
    return _validate(rows.frame)


def with_zone(df: pl.DataFrame, zone_size_lba: int) -> pl.DataFrame:
    """The rows with their zone id (every row's zone is below MAX_ZONES: row_spec checked it)."""
    return df.with_columns((pl.col("slba") // zone_size_lba).cast(pl.UInt32).alias("zone"))


def open_source(run: RunPaths) -> tuple[dict[str, Any], list[str], IngestReport]:
    """meta.json, the header of raw/nvme.csv (checked) and an empty report; the body is read after its two header
    lines (files.byte_chunks' skip_lines)."""
    meta = read_meta(run)
    src = run.nvme_csv
    if not src.is_file():
        raise MissingRunError(f"{src} is missing: this run has no NVMe trace. Was the nvme probe attached? "
                              "See console.log of the run.")
    header, _ = read_header(src, "nvme", 1, NVME_COLUMNS, "The probe wrote nothing — was it attached? Check "
                                 "console.log of the run.")
    report = IngestReport(source=str(src), lost_events=dict(meta.get("lost_events", {})), geometry=geometry_of(meta))
    return meta, header, report


def set_source_stamp(report: IngestReport, stamp: stamps.Stamp) -> None:
    report.source_size, report.source_mtime_ns = stamp.size, stamp.mtime_ns
    report.source_stamp = stamp.as_dict()


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


def _read_body(src: Path, header: list[str], zone_size_lba: int, report: IngestReport
               ) -> tuple[pl.DataFrame, os.stat_result, str]:
    """raw/nvme.csv's rows read chunk by chunk (files.byte_chunks: a line longer than MAX_LINE_BYTES is skipped and
    counted, never held), its stat taken before the read (a file changed meanwhile is ingested again) and the digest
    of every byte read."""
    frames = []
    with stamps.BackgroundDigest() as digest:  # each chunk digested while it is parsed
        try:
            st = src.stat()
            for chunk, first in byte_chunks(src, CHUNK_BYTES, skip_lines=2, digest=digest,
                                            on_long=report.long_line):
                frames.append(body_rows(chunk, header, zone_size_lba, first, report))
        except OSError as e:
            raise MissingRunError(f"cannot read {src}: {e.strerror}") from None
        df = pl.concat(frames) if frames else body_rows(b"", header, zone_size_lba, 3, report)
        return df, st, digest.hexdigest()


def ingest(run: RunPaths, why: str | None = None) -> IngestReport:
    """Read raw/nvme.csv of a run and write derived/events.parquet and derived/ingest.json, under the run's
    derived_lock; a command that waited for another one's ingest of the same trace keeps that one's result. `why`:
    what stale_reason said (found again when not given), kept as the report's `reingest`."""
    with derived_lock(run) as waited:
        done = _fresh_report(run) if waited else None
        return done or _ingest(run, why)


def _fresh_report(run: RunPaths) -> IngestReport | None:
    """derived/ingest.json as a report, when events.parquet is fresh (None: ingest again)."""
    if stale_reason(run):
        return None
    try:
        return IngestReport(**json.loads(run.ingest_report.read_text()))
    except (OSError, ValueError, TypeError):
        return None


def _ingest(run: RunPaths, why: str | None) -> IngestReport:
    why = stale_reason(run) if why is None else why
    meta, header, report = open_source(run)
    report.reingest = "" if why == "first ingest" else why
    df, st, digest = _read_body(run.nvme_csv, header, meta["zone_size_lba"], report)
    df = with_zone(df, meta["zone_size_lba"])
    set_source_stamp(report, stamps.Stamp.of(st, digest))
    df = submission_order(df)
    report.rows = df.height
    report.out_of_range_zones = int(df.select((pl.col("zone") >= meta["nr_zones"]).sum()).item())
    make_dir(run.derived)
    report.events_stamp = _write_events(df, run.events).as_dict()
    write_atomic(run.ingest_report, json.dumps(asdict(report), indent=2) + "\n")
    return report


def submission_order(df: pl.DataFrame) -> pl.DataFrame:
    """Probes print in completion order; the contract of events.parquet is submission order (stable in ts_ns)."""
    return df.set_sorted("ts_ns") if df["ts_ns"].is_sorted() else df.sort("ts_ns", maintain_order=True)


def _write_events(df: pl.DataFrame, path: Path) -> stamps.Stamp:
    """events.parquet written whole, and its stamp (the digest of the bytes written)."""
    import io

    buf = io.BytesIO()
    df.write_parquet(buf, compression="uncompressed", statistics=False)  # fastest to write and to read back
    data = buf.getvalue()
    with atomic_writer(path) as f:
        f.write(data)
    return stamps.Stamp.of(path.stat(), stamps.digest_bytes(data))


def ingest_record(run: RunPaths) -> dict[str, Any] | None:
    """derived/ingest.json as written, None when it is missing, unreadable or not an object."""
    try:
        rec = json.loads(run.ingest_report.read_bytes())
    except (OSError, ValueError, RecursionError):
        return None
    return rec if isinstance(rec, dict) else None


def stale_reason(run: RunPaths) -> str:
    """Why events.parquet cannot be reused ("" when it can): it was made from this raw/nvme.csv with this meta.json
    geometry and is the file the ingest wrote. A stamp that moved while the bytes did not is written back."""
    if not run.events.exists():
        return "first ingest"
    rec = ingest_record(run)
    if rec is None:
        return "derived/ingest.json is missing or unreadable"
    if "events_stamp" not in rec:
        return "derived/ingest.json has no stamps (an earlier version of ztbp wrote it)"
    if rec.get("geometry") != geometry_of(read_meta(run)):
        return "meta.json's geometry changed"
    src = stamps.check(run.nvme_csv, stamps.Stamp.from_dict(rec.get("source_stamp")))
    if isinstance(src, str):
        return {"content": "raw/nvme.csv changed although its size did not"}.get(src, "raw/nvme.csv changed")
    ev = stamps.check(run.events, stamps.Stamp.from_dict(rec.get("events_stamp")))
    if isinstance(ev, str):
        return "derived/events.parquet is not the file the last ingest wrote"
    if (src.as_dict(), ev.as_dict()) != (rec["source_stamp"], rec["events_stamp"]):
        _restamp(run, rec, src, ev)
    return ""


def _restamp(run: RunPaths, rec: dict[str, Any], src: stamps.Stamp, ev: stamps.Stamp) -> None:
    """Keep the stamps of files whose stat moved but whose bytes did not (a copied run), so the next load does not
    read them again; a run folder that cannot be written is only read again."""
    rec.update(source_stamp=src.as_dict(), events_stamp=ev.as_dict(), source_mtime_ns=src.mtime_ns)
    with contextlib.suppress(OSError):
        write_atomic(run.ingest_report, json.dumps(rec, indent=2) + "\n")


#: Reasons that mean derived data was changed behind the package's back (said as a warning when re-ingesting).
SUSPICIOUS = ("derived/events.parquet is not the file the last ingest wrote",
              "raw/nvme.csv changed although its size did not", "derived/ingest.json is missing or unreadable")


def load_events(run: RunPaths | str | Path) -> pl.DataFrame:
    """events.parquet of a run, ingesting first when it is missing or does not match raw/nvme.csv (stale_reason)."""
    rp = run if isinstance(run, RunPaths) else resolve_run(run)
    why = stale_reason(rp)
    if why:
        with derived_lock(rp):
            why = stale_reason(rp)  # another command may have ingested it meanwhile
            if why:
                if why in SUSPICIOUS:
                    log.warning("%s: %s; ingesting raw/nvme.csv again", rp.root, why)
                _ingest(rp, why)
    return pl.read_parquet(rp.events)

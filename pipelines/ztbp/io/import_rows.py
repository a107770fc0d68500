"""What every importer shares: the report of what was read, skipped and ignored, source devices as nsids, and the
conversion of a format's rows to the contract's columns (io/importers.py is the entry point).

Mapping to the contract: ts_ns is the source's time in ns (Unix epoch for the cloud traces and MSR; from the start
of the trace for blkparse and fio); lat_ns is the source's latency where it has one (blkparse, MSR), else 0 (the
meta records `"latency": "none"`); each source device (blkparse major,minor; a cloud trace's device / volume / disk
id; a fio file) becomes one nsid 1, 2, ... in order of first appearance (meta.json `import.devices` maps them back);
byte offsets become LBAs of `lba_bytes` (slba rounded down, the end rounded up; such commands are counted as
`unaligned`); ctrl, qid and cid are 0, status is 0 except a blkparse completion with an error. A field beyond 64 bits,
or one whose time in ns or byte range would pass 2^63 once converted, is a skipped line (counted), never a value
that wraps around.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import polars as pl

from ..contract import NVME_COLUMNS
from ..files import LONG_LINE, MAX_LINE_BYTES
from ..units import MAX_NS

SHOW_SKIPPED = 5
SECTOR = 512
#: Every time in ns and every byte offset and end stays at or below this (units.MAX_NS - 1).
LIMIT = MAX_NS - 1
#: op -> NVMe opcode written to raw/nvme.csv (contract.OPCODE_OP, and 0xFF for "other").
OP_OPCODE: dict[str, int] = {"read": 0x02, "write": 0x01, "flush": 0x00, "dsm": 0x09, "other": 0xFF}


@dataclass
class ImportReport:
    format: str
    source: str
    lines: int = 0
    rows: int = 0
    skipped: int = 0
    skip_reasons: dict[str, int] = field(default_factory=dict)
    skipped_examples: list[dict[str, Any]] = field(default_factory=list)
    ignored: dict[str, int] = field(default_factory=dict)
    unaligned: int = 0
    other_device: int = 0
    devices: dict[str, int] = field(default_factory=dict)
    max_end_lba: int = 0
    latency: str = "none"
    extra: dict[str, int] = field(default_factory=dict)

    def skip_rows(self, bad: pl.DataFrame, reason: str) -> None:
        """Count the rows of `bad` (columns line_no) as skipped for `reason`."""
        if bad.height == 0:
            return
        self.skipped += bad.height
        self.skip_reasons[reason] = self.skip_reasons.get(reason, 0) + bad.height
        room = SHOW_SKIPPED - len(self.skipped_examples)
        for line_no, line in bad.select("line_no", "line").head(max(0, room)).iter_rows():
            self.skipped_examples.append({"line": int(line_no), "reason": reason, "text": str(line)[:120]})

    def skip_line(self, line_no: int, reason: str) -> None:
        """Count one line skipped for `reason` that was never held (a line too long: files.byte_chunks)."""
        self.lines += 1
        self.skip_rows(pl.DataFrame({"line_no": [line_no], "line": [""]}), reason)

    def ignore(self, what: str, n: int) -> None:
        if n:
            self.ignored[what] = self.ignored.get(what, 0) + int(n)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class Devices:
    """Source device id -> nsid 1, 2, ... in order of first appearance (stable across chunks)."""

    def __init__(self, report: ImportReport, keep: str | None) -> None:
        self.report = report
        self.keep = keep

    def nsid(self, df: pl.DataFrame, col: str = "dev") -> pl.DataFrame:
        if self.keep is not None:
            other = df.filter(pl.col(col) != self.keep)
            self.report.other_device += other.height
            df = df.filter(pl.col(col) == self.keep)
        for d in df[col].unique(maintain_order=True).to_list():
            self.report.devices.setdefault(str(d), len(self.report.devices) + 1)
        mapping = {k: v for k, v in self.report.devices.items()}
        return df.with_columns(pl.col(col).cast(pl.String).replace_strict(mapping, return_dtype=pl.UInt32)
                               .alias("nsid"))


def split_lines(chunk: bytes, first_line_no: int, report: ImportReport) -> pl.DataFrame:
    """The chunk's lines (line_no, line); a line longer than files.MAX_LINE_BYTES is skipped and counted."""
    text = chunk.decode("utf-8", "replace").split("\n")
    if text and text[-1] == "":
        text.pop()
    lines = pl.DataFrame({"line": [t.rstrip("\r") for t in text]}).with_row_index("line_no", offset=first_line_no)
    report.lines += lines.height
    return keep(lines, pl.col("line").str.len_bytes() <= MAX_LINE_BYTES, report, LONG_LINE)


def extract(lines: pl.DataFrame, pattern: str, names: list[str]) -> pl.DataFrame:
    """The regex groups of every line as string columns named `names` (null where the line does not match)."""
    g = pl.col("line").str.extract_groups(pattern)
    return lines.with_columns(g.struct.rename_fields(names).alias("_g")).unnest("_g")


def keep(df: pl.DataFrame, ok: pl.Expr, report: ImportReport, reason: str) -> pl.DataFrame:
    """The rows where `ok` holds; the others are skipped for `reason` (counted with their lines)."""
    df = df.with_columns(ok.fill_null(False).alias("_ok"))
    report.skip_rows(df.filter(~pl.col("_ok")), reason)
    return df.filter(pl.col("_ok")).drop("_ok")


def at_most(limits: dict[str, int]) -> pl.Expr:
    """Every named column at or below its limit (the columns are typed)."""
    return pl.all_horizontal(pl.col(c) <= lim for c, lim in limits.items())


def fits_u64(columns: tuple[str, ...]) -> pl.Expr:
    """Every named string column that holds a number holds one that fits 64 bits."""
    return pl.all_horizontal(pl.col(c).is_null() | (pl.col(c) == "") | pl.col(c).cast(pl.UInt64, strict=False)
                             .is_not_null() for c in columns)


def to_commands(df: pl.DataFrame, lba_bytes: int, report: ImportReport) -> pl.DataFrame:
    """Rows with ts_ns, lat_ns, nsid, op, off (bytes), len (bytes), status -> the contract's columns."""
    within = (pl.col("off").cast(pl.Float64) + pl.col("len").cast(pl.Float64)) < float(LIMIT)
    df = keep(df, at_most({"off": LIMIT, "len": LIMIT}) & within, report, "offset + length beyond 2^63 bytes")
    off = pl.col("off").cast(pl.UInt64)
    end = off + pl.col("len").cast(pl.UInt64)
    slba = off // lba_bytes
    end_lba = (end + (lba_bytes - 1)) // lba_bytes
    unaligned = ((off % lba_bytes) != 0) | ((pl.col("len").cast(pl.UInt64) % lba_bytes) != 0)
    out = df.with_columns(slba.alias("slba"), (end_lba - slba).alias("_nlb"), unaligned.alias("_un"),
                          end_lba.alias("_end"))
    too_long = out.filter(pl.col("_nlb") > 0xFFFF_FFFF)
    report.skip_rows(too_long, "length beyond 2^32 LBAs")
    out = out.filter(pl.col("_nlb") <= 0xFFFF_FFFF)
    if out.height == 0:
        return pl.DataFrame(schema={c: pl.String for c in NVME_COLUMNS})
    report.unaligned += int(out["_un"].sum())
    report.max_end_lba = max(report.max_end_lba, int(out["_end"].max()))
    report.rows += out.height
    return out.select(
        pl.col("ts_ns").cast(pl.UInt64),
        pl.col("lat_ns").cast(pl.UInt64),
        pl.lit(0, pl.UInt32).alias("ctrl"),
        pl.lit(0, pl.UInt32).alias("qid"),
        pl.lit(0, pl.UInt32).alias("cid"),
        pl.col("nsid").cast(pl.UInt32),
        pl.col("op").replace_strict(OP_OPCODE, return_dtype=pl.UInt8).alias("opcode"),
        pl.col("op"),
        pl.col("slba").cast(pl.UInt64),
        pl.col("_nlb").cast(pl.UInt32).alias("nlb"),
        pl.lit("").alias("zone_action"),
        pl.col("status").cast(pl.UInt16),
    )


def typed(df: pl.DataFrame, casts: dict[str, pl.DataType], report: ImportReport) -> pl.DataFrame:
    """Cast string fields; rows where a field does not fit its type are skipped (counted with their lines)."""
    out = df.with_columns(pl.col(c).cast(t, strict=False).alias(c) for c, t in casts.items())
    ok = pl.lit(True)
    for c in casts:  # each bad row counted once, under its first bad field
        report.skip_rows(out.filter(ok & pl.col(c).is_null()), f"bad value: {c}")
        ok = ok & pl.col(c).is_not_null()
    return out.filter(ok)


def header_or_bad(lines: pl.DataFrame, matched: pl.Expr, report: ImportReport, header_hint: str) -> pl.DataFrame:
    """Lines that do not match the record pattern: a header line (first line, naming `header_hint`) is ignored,
    blank lines are ignored, the rest are skipped."""
    miss = lines.filter(~matched)
    is_header = (pl.col("line_no") == 1) & pl.col("line").str.to_lowercase().str.contains(header_hint.lower())
    blank = pl.col("line").str.strip_chars() == ""
    report.ignore("header line", miss.filter(is_header).height)
    report.ignore("blank lines", miss.filter(blank).height)
    report.skip_rows(miss.filter(~is_header & ~blank), "not a record of this format")
    return lines.filter(matched)

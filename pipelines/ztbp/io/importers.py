"""Importers: block traces other tools wrote -> a run in the contract of probes/FORMAT.md.

An import writes `meta.json` (contract.new_meta, backend "import") and `raw/nvme.csv` with the `# ztbp nvme v1`
header, exactly what a capture writes, so every path that reads a run — `ztbp ingest` (in memory), `ztbp import
--stream` / `ingest_stream` (partitioned Parquet), the analyses, the cache model, the reports — takes an imported
trace unchanged. raw/nvme.csv is chosen over writing derived/events.parquet directly because it keeps one ingest
(with its skipped-line accounting and freshness check) for captured and imported runs alike; the price is one CSV
write, about 60 bytes per command.

The source is read in chunks of whole lines (`chunk_bytes`, default 64 MiB) and each chunk's commands are appended
to raw/nvme.csv, so a trace far larger than memory imports in bounded memory. Nothing is dropped silently: lines
that look like a record of the format but do not parse are skipped and counted with their line numbers
(`skip_reasons`, `skipped_examples`); lines the format defines but that are not commands (blkparse's other actions
and summary, fio's file management lines, a CSV header) are counted under `ignored`.

Formats (fields as their publishers document them; zone operations do not exist in any of them, so the zone size
is a parameter and the run has no zone_mgmt commands):

- blkparse: the default text output of `blkparse -i TRACE`. A command is a `D` (issued to the driver) event; its
  latency is the time to the matching `C` (completion: same device, sector, size and direction, first in first
  out). `D` events with no completion keep lat_ns 0 and are counted (`issued_without_completion`); completions
  without an issue are counted (`completions_without_issue`). RWBS: D -> dsm, R -> read, W -> write, F (with no
  data) -> flush, else other. Sectors are 512 bytes.
- fio-iolog: fio's `write_iolog` output, version 2 (`filename action offset length`, time from the `wait` actions)
  or version 3 (`timestamp filename action ...`, timestamps in microseconds from the start of the job as fio 3.33
  writes them). read/write/trim(-> dsm)/sync and datasync(-> flush); add/open/close are ignored (counted).
- alibaba: Alibaba Cloud block traces, `device_id,opcode,offset,length,timestamp` (opcode R/W, bytes, microseconds).
- tencent: Tencent CBS traces, `Timestamp,Offset,Size,IOType,VolumeID` (seconds, 512-byte sectors, 0 read / 1 write).
- msr: MSR Cambridge traces, `Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime` (Windows file time in
  100 ns ticks, Read/Write, bytes, response time in 100 ns ticks).

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

import re
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from ..contract import NVME_COLUMNS, NVME_VERSION_LINE, check_new_run, new_meta, write_meta
from ..errors import FormatError, MissingRunError, ZtbpError
from ..files import atomic_path, make_dir
from ..paths import RunPaths
from ..units import MAX_NS
from .parts import byte_chunks

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

    def ignore(self, what: str, n: int) -> None:
        if n:
            self.ignored[what] = self.ignored.get(what, 0) + int(n)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class _Devices:
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


def _lines(chunk: bytes, first_line_no: int) -> pl.DataFrame:
    text = chunk.decode("utf-8", "replace").split("\n")
    if text and text[-1] == "":
        text.pop()
    return pl.DataFrame({"line": [t.rstrip("\r") for t in text]}).with_row_index("line_no", offset=first_line_no)


def _extract(lines: pl.DataFrame, pattern: str, names: list[str]) -> pl.DataFrame:
    """The regex groups of every line as string columns named `names` (null where the line does not match)."""
    g = pl.col("line").str.extract_groups(pattern)
    return lines.with_columns(g.struct.rename_fields(names).alias("_g")).unnest("_g")


def _keep(df: pl.DataFrame, ok: pl.Expr, report: ImportReport, reason: str) -> pl.DataFrame:
    """The rows where `ok` holds; the others are skipped for `reason` (counted with their lines)."""
    df = df.with_columns(ok.fill_null(False).alias("_ok"))
    report.skip_rows(df.filter(~pl.col("_ok")), reason)
    return df.filter(pl.col("_ok")).drop("_ok")


def _at_most(limits: dict[str, int]) -> pl.Expr:
    """Every named column at or below its limit (the columns are typed)."""
    return pl.all_horizontal(pl.col(c) <= lim for c, lim in limits.items())


def _fits_u64(columns: tuple[str, ...]) -> pl.Expr:
    """Every named string column that holds a number holds one that fits 64 bits."""
    return pl.all_horizontal(pl.col(c).is_null() | (pl.col(c) == "") | pl.col(c).cast(pl.UInt64, strict=False)
                             .is_not_null() for c in columns)


def _to_commands(df: pl.DataFrame, lba_bytes: int, report: ImportReport) -> pl.DataFrame:
    """Rows with ts_ns, lat_ns, nsid, op, off (bytes), len (bytes), status -> the contract's columns."""
    within = (pl.col("off").cast(pl.Float64) + pl.col("len").cast(pl.Float64)) < float(LIMIT)
    df = _keep(df, _at_most({"off": LIMIT, "len": LIMIT}) & within, report, "offset + length beyond 2^63 bytes")
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


def _typed(df: pl.DataFrame, casts: dict[str, pl.DataType], report: ImportReport) -> pl.DataFrame:
    """Cast string fields; rows where a field does not fit its type are skipped (counted with their lines)."""
    out = df.with_columns(pl.col(c).cast(t, strict=False).alias(c) for c, t in casts.items())
    ok = pl.lit(True)
    for c in casts:  # each bad row counted once, under its first bad field
        report.skip_rows(out.filter(ok & pl.col(c).is_null()), f"bad value: {c}")
        ok = ok & pl.col(c).is_not_null()
    return out.filter(ok)


def _header_or_bad(lines: pl.DataFrame, matched: pl.Expr, report: ImportReport, header_hint: str) -> pl.DataFrame:
    """Lines that do not match the record pattern: a header line (first line, naming `header_hint`) is ignored,
    blank lines are ignored, the rest are skipped."""
    miss = lines.filter(~matched)
    is_header = (pl.col("line_no") == 1) & pl.col("line").str.to_lowercase().str.contains(header_hint.lower())
    blank = pl.col("line").str.strip_chars() == ""
    report.ignore("header line", miss.filter(is_header).height)
    report.ignore("blank lines", miss.filter(blank).height)
    report.skip_rows(miss.filter(~is_header & ~blank), "not a record of this format")
    return lines.filter(matched)


# --- the CSV layouts -------------------------------------------------------------------------------------------

_NUM = r"\s*(-?\d+)\s*"


class _CsvFormat:
    """One comma-separated layout: a regex per record, a conversion to commands."""

    pattern: str = ""
    names: list[str] = []
    header_hint: str = ""
    latency: str = "none"

    def __init__(self, report: ImportReport, lba_bytes: int, device: str | None) -> None:
        self.report = report
        self.lba_bytes = lba_bytes
        self.devices = _Devices(report, device)
        report.latency = self.latency

    def convert(self, df: pl.DataFrame) -> pl.DataFrame:
        raise NotImplementedError

    def chunk(self, lines: pl.DataFrame) -> pl.DataFrame:
        df = _extract(lines, self.pattern, self.names)
        df = _header_or_bad(df, pl.col(self.names[0]).is_not_null(), self.report, self.header_hint)
        df = self.convert(df)
        return _to_commands(self.devices.nsid(df), self.lba_bytes, self.report)

    def finish(self) -> pl.DataFrame | None:
        return None


class _Alibaba(_CsvFormat):
    pattern = rf"^{_NUM},\s*([A-Za-z]+)\s*,{_NUM},{_NUM},{_NUM}$"
    names = ["dev", "opcode", "off", "len", "ts"]
    header_hint = "device"

    def convert(self, df: pl.DataFrame) -> pl.DataFrame:
        df = _typed(df, {"off": pl.UInt64, "len": pl.UInt64, "ts": pl.UInt64}, self.report)
        df = _keep(df, _at_most({"ts": LIMIT // 1000}), self.report, "timestamp beyond 2^63 ns")
        op = pl.col("opcode").str.to_uppercase()
        bad = df.filter(~op.is_in(["R", "W"]))
        self.report.skip_rows(bad, "opcode is not R or W")
        return df.filter(op.is_in(["R", "W"])).with_columns(
            pl.when(op == "R").then(pl.lit("read")).otherwise(pl.lit("write")).alias("op"),
            (pl.col("ts") * 1000).alias("ts_ns"), pl.lit(0).alias("lat_ns"), pl.lit(0).alias("status"))


class _Tencent(_CsvFormat):
    pattern = rf"^{_NUM},{_NUM},{_NUM},{_NUM},{_NUM}$"
    names = ["ts", "off", "len", "iotype", "dev"]
    header_hint = "timestamp"

    def convert(self, df: pl.DataFrame) -> pl.DataFrame:
        df = _typed(df, {"ts": pl.UInt64, "off": pl.UInt64, "len": pl.UInt64, "iotype": pl.UInt8}, self.report)
        df = _keep(df, _at_most({"ts": LIMIT // 10**9}), self.report, "timestamp beyond 2^63 ns")
        df = _keep(df, _at_most({"off": LIMIT // SECTOR, "len": LIMIT // SECTOR}), self.report,
                   "offset or size beyond 2^63 bytes")
        bad = df.filter(~pl.col("iotype").is_in([0, 1]))
        self.report.skip_rows(bad, "IOType is not 0 (read) or 1 (write)")
        return df.filter(pl.col("iotype").is_in([0, 1])).with_columns(
            pl.when(pl.col("iotype") == 0).then(pl.lit("read")).otherwise(pl.lit("write")).alias("op"),
            (pl.col("ts") * 1_000_000_000).alias("ts_ns"), (pl.col("off") * SECTOR).alias("off"),
            (pl.col("len") * SECTOR).alias("len"), pl.lit(0).alias("lat_ns"), pl.lit(0).alias("status"))


#: Windows file time (100 ns ticks since 1601-01-01) of the Unix epoch.
FILETIME_UNIX_EPOCH = 116_444_736_000_000_000


class _Msr(_CsvFormat):
    pattern = rf"^{_NUM},\s*([^,]*?)\s*,{_NUM},\s*([A-Za-z]+)\s*,{_NUM},{_NUM},{_NUM}$"
    names = ["ts", "host", "dev", "type", "off", "len", "resp"]
    header_hint = "timestamp"
    latency = "ResponseTime"

    def convert(self, df: pl.DataFrame) -> pl.DataFrame:
        df = _typed(df, {"ts": pl.UInt64, "off": pl.UInt64, "len": pl.UInt64, "resp": pl.UInt64}, self.report)
        df = _keep(df, _at_most({"ts": FILETIME_UNIX_EPOCH + LIMIT // 100, "resp": LIMIT // 100}), self.report,
                   "timestamp or response time beyond 2^63 ns")
        early = df.filter(pl.col("ts") < FILETIME_UNIX_EPOCH)
        self.report.skip_rows(early, "timestamp before 1970 (not a Windows file time)")
        t = pl.col("type").str.to_lowercase()
        df = df.filter(pl.col("ts") >= FILETIME_UNIX_EPOCH)
        self.report.skip_rows(df.filter(~t.is_in(["read", "write"])), "Type is not Read or Write")
        for h in df["host"].unique().to_list():
            self.report.extra[f"host:{h}"] = 1
        return df.filter(t.is_in(["read", "write"])).with_columns(
            t.alias("op"), ((pl.col("ts") - FILETIME_UNIX_EPOCH) * 100).alias("ts_ns"),
            (pl.col("resp") * 100).alias("lat_ns"), pl.lit(0).alias("status"))


# --- fio iolog -------------------------------------------------------------------------------------------------

FIO_ACTIONS = {"read": "read", "write": "write", "trim": "dsm", "sync": "flush", "datasync": "flush"}
FIO_FILE_ACTIONS = ("add", "open", "close")


class _FioIolog:
    """fio iolog v2 / v3; the version comes from the first line."""

    def __init__(self, report: ImportReport, lba_bytes: int, device: str | None) -> None:
        self.report = report
        self.lba_bytes = lba_bytes
        self.devices = _Devices(report, device)
        self.version = 0
        self.clock_us = 0.0  # v2: sum of the wait actions so far

    def _version(self, lines: pl.DataFrame) -> pl.DataFrame:
        if self.version == 0:
            first = lines["line"][0].strip() if lines.height else ""
            m = re.fullmatch(r"fio version (\d+) iolog", first)
            if m is None or m[1] not in ("2", "3"):
                raise FormatError(f"{self.report.source}: first line is {first[:60]!r}, expected 'fio version 2 "
                                  "iolog' or 'fio version 3 iolog' (write one with fio --write_iolog=FILE).")
            self.version = int(m[1])
            self.report.extra["iolog_version"] = self.version
            self.report.ignore("version line", 1)
            lines = lines.slice(1)
        return lines

    def chunk(self, lines: pl.DataFrame) -> pl.DataFrame:
        lines = self._version(lines)
        ts = r"(\d+)\s+" if self.version == 3 else r"()"
        df = _extract(lines, rf"^\s*{ts}(\S+)\s+([a-z]+)(?:\s+(\d+)\s+(\d+))?\s*$",
                      ["ts", "dev", "action", "off", "len"])
        blank = pl.col("line").str.strip_chars() == ""
        self.report.ignore("blank lines", df.filter(blank).height)
        df = df.filter(~blank)
        self.report.skip_rows(df.filter(pl.col("action").is_null()), "not an iolog line")
        df = df.filter(pl.col("action").is_not_null())
        df = _keep(df, _fits_u64(("ts", "off", "len")), self.report, "a number beyond 64 bits")
        mgmt = pl.col("action").is_in(list(FIO_FILE_ACTIONS))
        self.report.ignore("file actions (add/open/close)", df.filter(mgmt).height)
        if self.version == 2:
            df = self._v2_clock(df.filter(~mgmt))
        else:
            wait = df.filter(pl.col("action") == "wait")
            self.report.skip_rows(wait, "wait is not allowed in iolog v3")
            df = df.filter(~mgmt & (pl.col("action") != "wait"))
            df = _keep(df, pl.col("ts").cast(pl.UInt64) <= LIMIT // 1000, self.report, "timestamp beyond 2^63 ns")
            df = df.with_columns((pl.col("ts").cast(pl.UInt64) * 1000).alias("ts_ns"))
        unknown = ~pl.col("action").is_in(list(FIO_ACTIONS))
        self.report.skip_rows(df.filter(unknown), "unknown iolog action")
        df = df.filter(~unknown)
        needs_range = pl.col("action").is_in(["read", "write", "trim"]) & pl.col("off").is_null()
        self.report.skip_rows(df.filter(needs_range), "read/write/trim without offset and length")
        df = df.filter(~needs_range).with_columns(
            pl.col("action").replace_strict(FIO_ACTIONS).alias("op"),
            pl.col("off").cast(pl.UInt64).fill_null(0), pl.col("len").cast(pl.UInt64).fill_null(0),
            pl.lit(0).alias("lat_ns"), pl.lit(0).alias("status"))
        return _to_commands(self.devices.nsid(df), self.lba_bytes, self.report)

    def _v2_clock(self, df: pl.DataFrame) -> pl.DataFrame:
        """v2 has no timestamps: a command's time is the sum of the waits before it (microseconds)."""
        wait = pl.when(pl.col("action") == "wait").then(pl.col("off").cast(pl.Float64)).otherwise(0.0)
        df = df.with_columns((wait.cum_sum() + self.clock_us).alias("_clock"))  # exact below 2^53 us
        if df.height:
            self.clock_us = float(df["_clock"][-1])
        self.report.ignore("wait actions", df.filter(pl.col("action") == "wait").height)
        df = _keep(df.filter(pl.col("action") != "wait"), pl.col("_clock") < float(LIMIT // 1000), self.report,
                   "time (the sum of the waits before it) beyond 2^63 ns")
        return df.with_columns((pl.col("_clock").cast(pl.UInt64) * 1000).alias("ts_ns"))

    def finish(self) -> pl.DataFrame | None:
        return None


# --- blkparse ----------------------------------------------------------------------------------------------------

_BLK_EVENT = (r"^\s*(\d+),(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\.(\d+)\s+(\d+)\s+([A-Za-z]+)\s+([A-Z]+)\s*"
              r"(?:(\d+) \+ (\d+))?\s*(?:\[([^\]]*)\])?\s*(.*)$")
_BLK_NAMES = ["maj", "min", "cpu", "seq", "sec", "frac", "pid", "action", "rwbs", "sector", "nsect", "bracket",
              "tail"]


def _rwbs_op() -> pl.Expr:
    r = pl.col("rwbs")
    return (pl.when(r.str.contains("D")).then(pl.lit("dsm"))
            .when(r.str.contains("R")).then(pl.lit("read"))
            .when(r.str.contains("W") & (pl.col("nsect") > 0)).then(pl.lit("write"))
            .when(r.str.contains("F")).then(pl.lit("flush"))
            .when(r.str.contains("W")).then(pl.lit("write"))
            .otherwise(pl.lit("other")))


class _Blkparse:
    """`D` events matched to their `C` completions first in first out; unmatched `D`s wait for later chunks."""

    KEY = ("dev", "sector", "nsect", "op")

    def __init__(self, report: ImportReport, lba_bytes: int, device: str | None) -> None:
        self.report = report
        self.lba_bytes = lba_bytes
        self.devices = _Devices(report, device)
        self.pending = pl.DataFrame()  # D events not completed yet
        report.latency = "D to C"

    def _events(self, lines: pl.DataFrame) -> pl.DataFrame:
        df = _extract(lines, _BLK_EVENT, _BLK_NAMES)
        blank = pl.col("line").str.strip_chars() == ""
        looks = pl.col("line").str.contains(r"^\s*\d+,\d+\s+\d+\s+\d+\s+\d+\.\d+\s")
        miss = df.filter(pl.col("action").is_null())
        self.report.ignore("blank lines", miss.filter(blank).height)
        self.report.ignore("summary and other non-event lines", miss.filter(~blank & ~looks).height)
        self.report.skip_rows(miss.filter(looks), "event line that does not parse")
        df = df.filter(pl.col("action").is_not_null())
        dc = pl.col("action").is_in(["D", "C"])
        for a, n in df.filter(~dc).group_by("action").len().iter_rows():
            self.report.ignore(f"action {a}", n)
        df = df.filter(dc)
        df = _keep(df, _fits_u64(("sec", "sector", "nsect")), self.report, "a number beyond 64 bits")
        sec, sector, nsect = (pl.col(c).cast(pl.UInt64) for c in ("sec", "sector", "nsect"))
        ok = ((sec <= LIMIT // 10**9 - 1) & (sector <= LIMIT // SECTOR).fill_null(True)
              & (nsect <= LIMIT // SECTOR).fill_null(True))
        df = _keep(df, ok, self.report, "time beyond 2^63 ns or sectors beyond 2^63 bytes")
        ts = pl.col("sec").cast(pl.UInt64) * 1_000_000_000 + pl.col("frac").str.pad_end(9, "0").str.slice(
            0, 9).cast(pl.UInt64)
        df = df.with_columns(ts.alias("ts_ns"), pl.format("{},{}", "maj", "min").alias("dev"),
                             pl.col("sector").cast(pl.UInt64), pl.col("nsect").cast(pl.UInt64))
        df = df.with_columns(_rwbs_op().alias("op"))
        bad = (pl.col("tail") != "") | (pl.col("sector").is_null() & ~pl.col("op").is_in(["flush", "other"]))
        self.report.skip_rows(df.filter(bad), "D/C event without a valid 'sector + size'")
        return df.filter(~bad).with_columns(pl.col("sector", "nsect").fill_null(0))

    def chunk(self, lines: pl.DataFrame) -> pl.DataFrame:
        df = self._events(lines)
        issues = df.filter(pl.col("action") == "D").select("line_no", "ts_ns", *self.KEY)
        done = df.filter(pl.col("action") == "C").with_columns(
            pl.col("bracket").cast(pl.Int64, strict=False).fill_null(0).alias("err")).select(
            "line_no", "ts_ns", "err", *self.KEY)
        if self.pending.height:
            issues = pl.concat([self.pending, issues])
        key = list(self.KEY)
        issues = issues.with_columns(pl.int_range(pl.len()).over(key).alias("_k"))
        done = done.with_columns(pl.int_range(pl.len()).over(key).alias("_k"))
        j = issues.join(done.rename({"ts_ns": "c_ts", "line_no": "c_line"}), on=[*key, "_k"], how="full",
                        coalesce=True)
        matched = j.filter(pl.col("ts_ns").is_not_null() & pl.col("c_ts").is_not_null())
        orphans = j.filter(pl.col("ts_ns").is_null())
        self.report.extra["completions_without_issue"] = (self.report.extra.get("completions_without_issue", 0)
                                                          + orphans.height)
        self.pending = j.filter(pl.col("c_ts").is_null()).select("line_no", "ts_ns", *self.KEY)
        return self._commands(matched.with_columns(
            (pl.col("c_ts").cast(pl.Int64) - pl.col("ts_ns").cast(pl.Int64)).clip(0).alias("lat_ns"),
            (pl.col("err") != 0).cast(pl.UInt16).alias("status")))

    def _commands(self, df: pl.DataFrame) -> pl.DataFrame:
        df = df.sort("line_no").with_columns((pl.col("sector") * SECTOR).alias("off"),
                                             (pl.col("nsect") * SECTOR).alias("len"))
        return _to_commands(self.devices.nsid(df), self.lba_bytes, self.report)

    def finish(self) -> pl.DataFrame | None:
        n = self.pending.height
        self.report.extra["issued_without_completion"] = n
        if n == 0:
            return None
        return self._commands(self.pending.with_columns(pl.lit(0).alias("lat_ns"), pl.lit(0).alias("status")))


FORMATS: dict[str, type] = {"blkparse": _Blkparse, "fio-iolog": _FioIolog, "alibaba": _Alibaba,
                            "tencent": _Tencent, "msr": _Msr}
#: Default LBA size per format (bytes): the sector size the format counts in, else 512.
DEFAULT_LBA_BYTES = 512


def commands(src: Path, fmt: str, report: ImportReport, lba_bytes: int = DEFAULT_LBA_BYTES,
             device: str | None = None, chunk_bytes: int = 64 << 20) -> Iterator[pl.DataFrame]:
    """The commands of a source trace in the contract's columns, one frame per chunk of the source."""
    if fmt not in FORMATS:
        raise ZtbpError(f"unknown trace format {fmt!r}; choose one of {', '.join(FORMATS)}")
    parser = FORMATS[fmt](report, lba_bytes, device)
    for chunk, first_line in byte_chunks(src, chunk_bytes):
        lines = _lines(chunk, first_line)
        report.lines += lines.height
        out = parser.chunk(lines)
        if out.height:
            yield out
    last = parser.finish()
    if last is not None and last.height:
        yield last


def import_trace(src: str | Path, run: RunPaths, fmt: str, *, zone_size_bytes: int,
                 lba_bytes: int = DEFAULT_LBA_BYTES, nr_zones: int | None = None, device: str | None = None,
                 chunk_bytes: int = 64 << 20, overwrite: bool = False) -> ImportReport:
    """Import `src` into the run directory `run`: raw/nvme.csv and meta.json. Returns what was read and skipped."""
    src = Path(src)
    if not src.is_file():
        raise MissingRunError(f"{src} does not exist: give the path of a {fmt} trace file.")
    if lba_bytes <= 0 or lba_bytes % SECTOR:
        raise ZtbpError(f"--lba-bytes {lba_bytes}: use a multiple of 512, e.g. 512 or 4096")
    if zone_size_bytes <= 0 or zone_size_bytes % lba_bytes:
        raise ZtbpError(f"--zone-size {zone_size_bytes}: must be a positive multiple of the LBA size ({lba_bytes})")
    check_new_run(run, overwrite)
    report = ImportReport(format=fmt, source=str(src))
    make_dir(run.raw)
    with atomic_path(run.nvme_csv) as tmp:
        with tmp.open("w") as f:
            f.write(NVME_VERSION_LINE + "\n" + ",".join(NVME_COLUMNS) + "\n")
            f.flush()
            for df in commands(src, fmt, report, lba_bytes, device, chunk_bytes):
                df.write_csv(f, include_header=False, quote_style="never")
                f.flush()
        if report.rows == 0:
            raise FormatError(f"{src}: no {fmt} command found in {report.lines} lines "
                              f"(skipped {report.skipped}: {report.skip_reasons or 'none'}; ignored "
                              f"{report.ignored}). Is this the right --format?")
    zone_lba = zone_size_bytes // lba_bytes
    needed = max(1, -(-report.max_end_lba // zone_lba))
    zones = nr_zones if nr_zones is not None else needed
    meta = new_meta(device=f"import:{src.name}", lba_bytes=lba_bytes, zone_size_lba=zone_lba,
                    zone_cap_lba=zone_lba, nr_zones=zones, synthetic=False, backend="import",
                    workload={"name": f"import-{fmt}", "source": src.name},
                    probes={"nvme": {"file": "raw/nvme.csv", "version": 1, "attach": f"import:{fmt}"}},
                    latency=report.latency, zone_size_source="parameter",
                    **{"import": {k: v for k, v in report.as_dict().items() if k != "skipped_examples"}})
    meta["lost_events"] = {"nvme": 0}
    if nr_zones is not None and nr_zones < needed:
        meta["import"]["beyond_nr_zones"] = True
    write_meta(run, meta)
    return report

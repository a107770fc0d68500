"""The default text output of `blkparse -i TRACE` (io/importers.py registers it as blkparse).

A command is a `D` (issued to the driver) event; its latency is the time to the matching `C` (completion: same
device, sector, size and direction, first in first out). `D` events with no completion keep lat_ns 0 and are counted
(`issued_without_completion`); completions without an issue are counted (`completions_without_issue`). RWBS: D ->
dsm, R -> read, W -> write, F (with no data) -> flush, else other. Sectors are 512 bytes.
"""

from __future__ import annotations

import polars as pl

from .import_rows import LIMIT, SECTOR, Devices, ImportReport, extract, fits_u64, keep, to_commands

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


class Blkparse:
    """`D` events matched to their `C` completions first in first out; unmatched `D`s wait for later chunks."""

    KEY = ("dev", "sector", "nsect", "op")

    def __init__(self, report: ImportReport, lba_bytes: int, device: str | None) -> None:
        self.report = report
        self.lba_bytes = lba_bytes
        self.devices = Devices(report, device)
        self.pending = pl.DataFrame()  # D events not completed yet
        report.latency = "D to C"

    def _events(self, lines: pl.DataFrame) -> pl.DataFrame:
        df = extract(lines, _BLK_EVENT, _BLK_NAMES)
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
        df = keep(df, fits_u64(("sec", "sector", "nsect")), self.report, "a number beyond 64 bits")
        sec, sector, nsect = (pl.col(c).cast(pl.UInt64) for c in ("sec", "sector", "nsect"))
        ok = ((sec <= LIMIT // 10**9 - 1) & (sector <= LIMIT // SECTOR).fill_null(True)
              & (nsect <= LIMIT // SECTOR).fill_null(True))
        df = keep(df, ok, self.report, "time beyond 2^63 ns or sectors beyond 2^63 bytes")
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
        return to_commands(self.devices.nsid(df), self.lba_bytes, self.report)

    def finish(self) -> pl.DataFrame | None:
        n = self.pending.height
        self.report.extra["issued_without_completion"] = n
        if n == 0:
            return None
        return self._commands(self.pending.with_columns(pl.lit(0).alias("lat_ns"), pl.lit(0).alias("status")))

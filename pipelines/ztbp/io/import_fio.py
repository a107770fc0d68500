"""fio's `write_iolog` output (io/importers.py registers it as fio-iolog): version 2 (`filename action offset
length`, time from the `wait` actions) or version 3 (`timestamp filename action ...`, timestamps in microseconds
from the start of the job as fio 3.33 writes them). read/write/trim(-> dsm)/sync and datasync(-> flush);
add/open/close are ignored (counted).
"""

from __future__ import annotations

import re

import polars as pl

from ..errors import FormatError
from .import_rows import LIMIT, Devices, ImportReport, extract, fits_u64, keep, to_commands

FIO_ACTIONS = {"read": "read", "write": "write", "trim": "dsm", "sync": "flush", "datasync": "flush"}
FIO_FILE_ACTIONS = ("add", "open", "close")


class FioIolog:
    """fio iolog v2 / v3; the version comes from the first line."""

    def __init__(self, report: ImportReport, lba_bytes: int, device: str | None) -> None:
        self.report = report
        self.lba_bytes = lba_bytes
        self.devices = Devices(report, device)
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
        df = extract(lines, rf"^\s*{ts}(\S+)\s+([a-z]+)(?:\s+(\d+)\s+(\d+))?\s*$",
                      ["ts", "dev", "action", "off", "len"])
        blank = pl.col("line").str.strip_chars() == ""
        self.report.ignore("blank lines", df.filter(blank).height)
        df = df.filter(~blank)
        self.report.skip_rows(df.filter(pl.col("action").is_null()), "not an iolog line")
        df = df.filter(pl.col("action").is_not_null())
        df = keep(df, fits_u64(("ts", "off", "len")), self.report, "a number beyond 64 bits")
        mgmt = pl.col("action").is_in(list(FIO_FILE_ACTIONS))
        self.report.ignore("file actions (add/open/close)", df.filter(mgmt).height)
        if self.version == 2:
            df = self._v2_clock(df.filter(~mgmt))
        else:
            wait = df.filter(pl.col("action") == "wait")
            self.report.skip_rows(wait, "wait is not allowed in iolog v3")
            df = df.filter(~mgmt & (pl.col("action") != "wait"))
            df = keep(df, pl.col("ts").cast(pl.UInt64) <= LIMIT // 1000, self.report, "timestamp beyond 2^63 ns")
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
        return to_commands(self.devices.nsid(df), self.lba_bytes, self.report)

    def _v2_clock(self, df: pl.DataFrame) -> pl.DataFrame:
        """v2 has no timestamps: a command's time is the sum of the waits before it (microseconds)."""
        wait = pl.when(pl.col("action") == "wait").then(pl.col("off").cast(pl.Float64)).otherwise(0.0)
        df = df.with_columns((wait.cum_sum() + self.clock_us).alias("_clock"))  # exact below 2^53 us
        if df.height:
            self.clock_us = float(df["_clock"][-1])
        self.report.ignore("wait actions", df.filter(pl.col("action") == "wait").height)
        df = keep(df.filter(pl.col("action") != "wait"), pl.col("_clock") < float(LIMIT // 1000), self.report,
                   "time (the sum of the waits before it) beyond 2^63 ns")
        return df.with_columns((pl.col("_clock").cast(pl.UInt64) * 1000).alias("ts_ns"))

    def finish(self) -> pl.DataFrame | None:
        return None

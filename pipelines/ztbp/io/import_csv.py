"""The comma-separated cloud and enterprise traces (io/importers.py registers them):

- alibaba: Alibaba Cloud block traces, `device_id,opcode,offset,length,timestamp` (opcode R/W, bytes, microseconds).
- tencent: Tencent CBS traces, `Timestamp,Offset,Size,IOType,VolumeID` (seconds, 512-byte sectors, 0 read / 1 write).
- msr: MSR Cambridge traces, `Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime` (Windows file time in
  100 ns ticks, Read/Write, bytes, response time in 100 ns ticks).
"""

from __future__ import annotations

import polars as pl

from .import_rows import (
    LIMIT,
    SECTOR,
    Devices,
    ImportReport,
    at_most,
    extract,
    header_or_bad,
    keep,
    to_commands,
    typed,
)

_NUM = r"\s*(-?\d+)\s*"


class CsvFormat:
    """One comma-separated layout: a regex per record, a conversion to commands."""

    pattern: str = ""
    names: list[str] = []
    header_hint: str = ""
    latency: str = "none"

    def __init__(self, report: ImportReport, lba_bytes: int, device: str | None) -> None:
        self.report = report
        self.lba_bytes = lba_bytes
        self.devices = Devices(report, device)
        report.latency = self.latency

    def convert(self, df: pl.DataFrame) -> pl.DataFrame:
        raise NotImplementedError

    def chunk(self, lines: pl.DataFrame) -> pl.DataFrame:
        df = extract(lines, self.pattern, self.names)
        df = header_or_bad(df, pl.col(self.names[0]).is_not_null(), self.report, self.header_hint)
        df = self.convert(df)
        return to_commands(self.devices.nsid(df), self.lba_bytes, self.report)

    def finish(self) -> pl.DataFrame | None:
        return None


class Alibaba(CsvFormat):
    pattern = rf"^{_NUM},\s*([A-Za-z]+)\s*,{_NUM},{_NUM},{_NUM}$"
    names = ["dev", "opcode", "off", "len", "ts"]
    header_hint = "device"

    def convert(self, df: pl.DataFrame) -> pl.DataFrame:
        df = typed(df, {"off": pl.UInt64, "len": pl.UInt64, "ts": pl.UInt64}, self.report)
        df = keep(df, at_most({"ts": LIMIT // 1000}), self.report, "timestamp beyond 2^63 ns")
        op = pl.col("opcode").str.to_uppercase()
        bad = df.filter(~op.is_in(["R", "W"]))
        self.report.skip_rows(bad, "opcode is not R or W")
        return df.filter(op.is_in(["R", "W"])).with_columns(
            pl.when(op == "R").then(pl.lit("read")).otherwise(pl.lit("write")).alias("op"),
            (pl.col("ts") * 1000).alias("ts_ns"), pl.lit(0).alias("lat_ns"), pl.lit(0).alias("status"))


class Tencent(CsvFormat):
    pattern = rf"^{_NUM},{_NUM},{_NUM},{_NUM},{_NUM}$"
    names = ["ts", "off", "len", "iotype", "dev"]
    header_hint = "timestamp"

    def convert(self, df: pl.DataFrame) -> pl.DataFrame:
        df = typed(df, {"ts": pl.UInt64, "off": pl.UInt64, "len": pl.UInt64, "iotype": pl.UInt8}, self.report)
        df = keep(df, at_most({"ts": LIMIT // 10**9}), self.report, "timestamp beyond 2^63 ns")
        df = keep(df, at_most({"off": LIMIT // SECTOR, "len": LIMIT // SECTOR}), self.report,
                   "offset or size beyond 2^63 bytes")
        bad = df.filter(~pl.col("iotype").is_in([0, 1]))
        self.report.skip_rows(bad, "IOType is not 0 (read) or 1 (write)")
        return df.filter(pl.col("iotype").is_in([0, 1])).with_columns(
            pl.when(pl.col("iotype") == 0).then(pl.lit("read")).otherwise(pl.lit("write")).alias("op"),
            (pl.col("ts") * 1_000_000_000).alias("ts_ns"), (pl.col("off") * SECTOR).alias("off"),
            (pl.col("len") * SECTOR).alias("len"), pl.lit(0).alias("lat_ns"), pl.lit(0).alias("status"))


#: Windows file time (100 ns ticks since 1601-01-01) of the Unix epoch.
FILETIME_UNIX_EPOCH = 116_444_736_000_000_000


class Msr(CsvFormat):
    pattern = rf"^{_NUM},\s*([^,]*?)\s*,{_NUM},\s*([A-Za-z]+)\s*,{_NUM},{_NUM},{_NUM}$"
    names = ["ts", "host", "dev", "type", "off", "len", "resp"]
    header_hint = "timestamp"
    latency = "ResponseTime"

    def convert(self, df: pl.DataFrame) -> pl.DataFrame:
        df = typed(df, {"ts": pl.UInt64, "off": pl.UInt64, "len": pl.UInt64, "resp": pl.UInt64}, self.report)
        df = keep(df, at_most({"ts": FILETIME_UNIX_EPOCH + LIMIT // 100, "resp": LIMIT // 100}), self.report,
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

"""Streaming ingest: raw/nvme.csv -> a partitioned Parquet dataset, never holding the CSV (or the run) in memory.

The CSV is read in chunks of whole lines (`chunk_bytes`, default 128 MiB). Each chunk is parsed like the in-memory
ingest (io/nvme.py: the fast typed parse, else the careful line-by-line parse that counts every skipped line), gets
its `zone` and a `row` number (the row's position among the file's kept rows), and is written as one Parquet file
per partition it touches:

    derived/events-parts/tw=<ts_ns // window_ns, 16 digits>/zr=<zone // zones_per_part, 4 digits>/part-<chunk>.parquet
    derived/events-parts/dataset.json        (layout, rows, partitions, the source's stamp and meta.json's geometry,
                                             what was skipped)

Time windows keep order-dependent passes (chains, the cache model) streaming: a window's files are read together
and sorted by (ts_ns, row), which is exactly the in-memory ingest's stable sort by submission time, window after
window. Zone ranges let per-zone passes (fragmentation) read one range of zones at a time. Order-free aggregates
(zones, opcodes, cells) are lazy polars queries over the whole dataset on the streaming engine.

The dataset is current while raw/nvme.csv holds the bytes it was made from (its stamp, io/stamp.py, the digest taken
from the chunks as they are read), meta.json has the geometry it was made with, and its Parquet files are the ones
written (their number and total size): `ztbp stream` and load_parts make it again otherwise.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from ..contract import read_meta
from ..errors import MissingRunError
from ..files import atomic_dir, byte_chunks
from ..paths import RunPaths, resolve_run
from . import stamp as stamps
from .layout import DATASET_FORMAT, DEFAULT_CHUNK_BYTES, DEFAULT_WINDOW_S, DEFAULT_ZONE_PARTS, Layout
from .nvme import (
    body_rows,
    derived_lock,
    geometry_of,
    open_source,
    set_source_stamp,
    with_zone,
)


@dataclass
class PartsWriter:
    """Writes frames of events (the contract's columns, in file order) into the partitioned dataset."""

    root: Path
    layout: Layout
    compression: str = "lz4"
    rows: int = 0
    chunks: int = 0
    files: int = 0
    bytes_written: int = 0
    out_of_range_zones: int = 0
    partitions: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.root.exists():
            shutil.rmtree(self.root)
        self.root.mkdir(parents=True)

    def write(self, df: pl.DataFrame) -> None:
        lo = self.layout
        df = with_zone(df, lo.zone_size_lba).with_columns(
            pl.int_range(self.rows, self.rows + df.height, dtype=pl.UInt64).alias("row"))
        self.out_of_range_zones += int(df.select((pl.col("zone") >= lo.nr_zones).sum()).item())
        self.rows += df.height
        parts = df.with_columns((pl.col("ts_ns") // lo.window_ns).alias("_tw"),
                                (pl.col("zone") // lo.zones_per_part).alias("_zr"))
        for (tw, zr), part in parts.partition_by(["_tw", "_zr"], as_dict=True).items():
            name = f"tw={int(tw):016d}/zr={int(zr):04d}"
            d = self.root / name
            d.mkdir(parents=True, exist_ok=True)
            path = d / f"part-{self.chunks:06d}.parquet"
            part.drop("_tw", "_zr").write_parquet(path, compression=self.compression)
            self.files += 1
            self.bytes_written += path.stat().st_size
            self.partitions[name] = self.partitions.get(name, 0) + part.height
        self.chunks += 1

    def manifest(self, **extra: Any) -> dict[str, Any]:
        return {"format": DATASET_FORMAT, "layout": asdict(self.layout), "rows": self.rows, "files": self.files,
                "bytes": self.bytes_written, "out_of_range_zones": self.out_of_range_zones,
                "partitions": dict(sorted(self.partitions.items())), **extra}

    def close(self, **extra: Any) -> dict[str, Any]:
        m = self.manifest(**extra)
        (self.root / "dataset.json").write_text(json.dumps(m, indent=1) + "\n")
        return m


def ingest_stream(run: RunPaths, window_s: float = DEFAULT_WINDOW_S, zone_parts: int = DEFAULT_ZONE_PARTS,
                  chunk_bytes: int = DEFAULT_CHUNK_BYTES, compression: str = "lz4") -> dict[str, Any]:
    """raw/nvme.csv -> derived/events-parts/ in chunks; returns the dataset manifest (also written as dataset.json).

    The dataset is written into a temporary folder that replaces derived/events-parts/ when it is whole, under the
    run's derived_lock: an interrupted or failed ingest leaves the earlier dataset (or none), never a part of one."""
    meta, header, report = open_source(run)
    src = run.nvme_csv
    layout = Layout.for_meta(meta, window_s, zone_parts)
    with derived_lock(run), atomic_dir(run.events_parts) as root:
        st = src.stat()
        writer = PartsWriter(root, layout, compression)
        with stamps.BackgroundDigest() as digest:  # digested while each chunk is parsed, as the in-memory ingest
            for chunk, first_line in byte_chunks(src, chunk_bytes, skip_lines=2, digest=digest,
                                                 on_long=report.long_line):
                df = body_rows(chunk, header, layout.zone_size_lba, first_line, report)
                if df.height:
                    writer.write(df)
            set_source_stamp(report, stamps.Stamp.of(st, digest.hexdigest()))
        report.rows = writer.rows
        report.out_of_range_zones = writer.out_of_range_zones
        report.path = "stream-careful" if report.path == "careful" else "stream-fast"  # careful: some chunk needed it
        return writer.close(ingest=asdict(report))


def is_fresh(run: RunPaths) -> bool:
    """The dataset exists, was made from the current raw/nvme.csv with meta.json's geometry, and holds the files it
    was written with (their number and total size)."""
    try:
        m = json.loads(run.events_parts_manifest.read_bytes())
        ing = m["ingest"]
        files = sorted(run.events_parts.glob("*/*/*.parquet"))
        size = sum(f.stat().st_size for f in files)
    except (OSError, ValueError, RecursionError, KeyError, TypeError):
        return False
    if not isinstance(ing, dict) or ing.get("geometry") != geometry_of(read_meta(run)):
        return False
    if (m.get("files"), m.get("bytes")) != (len(files), size):
        return False
    return isinstance(stamps.check(run.nvme_csv, stamps.Stamp.from_dict(ing.get("source_stamp"))), stamps.Stamp)


class Parts:
    """A partitioned events dataset, read lazily: the whole (scan), window by window in submission order
    (ordered), or zone range by zone range, file by file (by_zone_range)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        try:
            self.manifest = json.loads((root / "dataset.json").read_bytes())
            self.layout = Layout(**self.manifest["layout"])
        except (OSError, ValueError, RecursionError, KeyError, TypeError):
            raise MissingRunError(f"{root} holds no events dataset; make one with `ztbp import --stream` or "
                                  "`ztbp stream RUN`.") from None

    @property
    def rows(self) -> int:
        return int(self.manifest["rows"])

    def files(self) -> list[Path]:
        return sorted(self.root.glob("*/*/*.parquet"))

    def scan(self) -> pl.LazyFrame:
        """Every event, in no particular order (for order-free aggregates on the streaming engine)."""
        return pl.scan_parquet(str(self.root / "*" / "*" / "*.parquet"), hive_partitioning=False)

    def windows(self) -> list[str]:
        return sorted({k.split("/")[0] for k in self.manifest["partitions"]})

    def zone_ranges(self) -> list[str]:
        return sorted({k.split("/")[1] for k in self.manifest["partitions"]})

    def ordered(self, columns: list[str], where: pl.Expr | None = None) -> Iterator[pl.DataFrame]:
        """The events in submission order (ts_ns, then file order), one frame per time window."""
        for w in self.windows():
            lf = pl.scan_parquet([str(p) for p in sorted((self.root / w).glob("*/*.parquet"))])
            if where is not None:
                lf = lf.filter(where)
            yield lf.select(*{*columns, "ts_ns", "row"}).sort("ts_ns", "row").select(columns).collect()

    def unordered(self, columns: list[str], where: pl.Expr | None = None) -> Iterator[pl.DataFrame]:
        """The events file by file as they lie, with `ts_ns` and `row` (to order what is kept of them later)."""
        for f in self.files():
            lf = pl.scan_parquet(str(f))
            if where is not None:
                lf = lf.filter(where)
            yield lf.select(*dict.fromkeys([*columns, "ts_ns", "row"])).collect()

    def by_zone_range(self, columns: list[str], where: pl.Expr | None = None
                      ) -> Iterator[Iterator[pl.DataFrame]]:
        """The events of one zone range at a time (ranges hold disjoint zones), each range as its files' frames
        one after another (a hot zone range can hold a good part of the run: it is never read whole)."""
        for zr in self.zone_ranges():
            yield self._files_frames(sorted(self.root.glob(f"*/{zr}/*.parquet")), columns, where)

    @staticmethod
    def _files_frames(files: list[Path], columns: list[str], where: pl.Expr | None) -> Iterator[pl.DataFrame]:
        for f in files:
            lf = pl.scan_parquet(str(f))
            if where is not None:
                lf = lf.filter(where)
            yield lf.select(columns).collect()

    def frames(self, columns: Iterable[str]) -> Iterator[pl.DataFrame]:
        """Each partition's events, one file at a time (for map-reduce over the partitions)."""
        for f in self.files():
            yield pl.read_parquet(f, columns=list(columns))


def load_parts(run: RunPaths | str | Path, **ingest_args: Any) -> Parts:
    """The run's events dataset, streaming-ingesting raw/nvme.csv first when it is missing or stale."""
    rp = run if isinstance(run, RunPaths) else resolve_run(run)
    if not is_fresh(rp):
        with derived_lock(rp):
            if not is_fresh(rp):  # another command may have made it while this one waited
                ingest_stream(rp, **ingest_args)
    return Parts(rp.events_parts)

"""Per-file layout (the object-store study's fragmentation per object) from raw/files.csv, and reads per file.

A *fragment* is a run of a file's extents that is contiguous on the device (FIEMAP may report neighbouring extents
separately); a file's fragments, the zones they sit in and the gaps between consecutive fragments (in file order:
next fragment's device start − previous fragment's device end, in bytes; negative when the file goes backwards)
describe how the file system placed it. Reads per file join the trace's read commands to the extents by namespace
and byte offset; a read that falls in no extent (metadata, files deleted by compaction before the layout was taken)
is counted as outside any file.
"""

from __future__ import annotations

from typing import Any

import polars as pl


def fragments(files: pl.DataFrame, zone_bytes: int) -> pl.DataFrame:
    """One row per fragment: path, nsid, dev_start, dev_end (exclusive), bytes, first and last zone (zoned
    namespace 1 only; null elsewhere). Extents that could not be mapped (dev_bytes < 0) are left out."""
    e = files.filter(pl.col("dev_bytes") >= 0).sort("path", "extent").with_columns(
        (pl.col("dev_bytes") + pl.col("length_bytes")).alias("dev_end"))
    prev_end = pl.col("dev_end").shift(1).over("path")
    prev_ns = pl.col("nsid").shift(1).over("path")
    new = prev_end.is_null() | (prev_end != pl.col("dev_bytes")) | (prev_ns != pl.col("nsid"))
    e = e.with_columns(new.cum_sum().over("path").alias("fragment"))
    f = e.group_by("path", "fragment").agg(
        pl.col("nsid").first(), pl.col("dev_bytes").first().alias("dev_start"), pl.col("dev_end").last(),
        pl.col("length_bytes").sum().alias("bytes"), pl.col("logical_bytes").first()).sort("path", "fragment")
    zoned = pl.col("nsid") == 1
    return f.with_columns(
        pl.when(zoned).then(pl.col("dev_start") // zone_bytes).otherwise(None).alias("zone_first"),
        pl.when(zoned).then((pl.col("dev_end") - 1) // zone_bytes).otherwise(None).alias("zone_last"))


def per_file(files: pl.DataFrame, frags: pl.DataFrame) -> pl.DataFrame:
    """One row per file: size, extents, fragments, zones touched, gap statistics, unmapped extents."""
    size = files.group_by("path").agg(pl.col("file_bytes").first(), pl.len().alias("extents"),
                                      (pl.col("dev_bytes") < 0).sum().alias("unmapped_extents"))
    gaps = frags.sort("path", "fragment").with_columns(
        (pl.col("dev_start") - pl.col("dev_end").shift(1).over("path")).alias("gap"))
    zones = frags.filter(pl.col("zone_first").is_not_null()).with_columns(
        pl.int_ranges(pl.col("zone_first"), pl.col("zone_last") + 1).alias("z")).explode("z")
    zagg = zones.group_by("path").agg(pl.col("z").unique().sort().alias("zones"))
    gagg = gaps.group_by("path").agg(pl.len().alias("fragments"), pl.col("gap").drop_nulls().abs().mean()
                                     .alias("gap_mean_bytes"), pl.col("gap").drop_nulls().abs().max()
                                     .alias("gap_max_bytes"))
    out = size.join(gagg, on="path", how="left").join(zagg, on="path", how="left")
    return out.with_columns(pl.col("fragments").fill_null(0), pl.col("zones").list.len().fill_null(0)
                            .alias("nr_zones")).sort("path")


def reads_per_file(frags: pl.DataFrame, reads: pl.DataFrame, lba_bytes: int) -> tuple[pl.DataFrame, int]:
    """(per file: reads, bytes read; reads outside every file). `reads`: nvme rows (nsid, slba, nlb)."""
    r = reads.select(pl.col("nsid").cast(pl.Int64), (pl.col("slba") * lba_bytes).cast(pl.Int64).alias("off"),
                     (pl.col("nlb") * lba_bytes).cast(pl.Int64).alias("nbytes")).sort("off")
    fr = frags.select(pl.col("nsid").cast(pl.Int64), pl.col("dev_start").cast(pl.Int64), "dev_end", "path"
                      ).sort("dev_start")
    j = r.join_asof(fr, left_on="off", right_on="dev_start", by="nsid", strategy="backward",
                    check_sortedness=False)
    hit = j.filter(pl.col("path").is_not_null() & (pl.col("off") < pl.col("dev_end")))
    per = hit.group_by("path").agg(pl.len().alias("reads"), pl.col("nbytes").sum().alias("bytes_read"))
    return per.sort("reads", descending=True), r.height - hit.height


def layout_summary(table: pl.DataFrame, reads: pl.DataFrame, outside: int, suffix: str = ".sst") -> dict[str, Any]:
    """Headline figures: files, SST files, fragments per SST file, zones per SST file, reads on the hottest files."""
    sst = table.filter(pl.col("path").str.ends_with(suffix))
    total = int(reads["reads"].sum()) if reads.height else 0
    top = reads.head(5)
    return {"files": table.height, "sst_files": sst.height,
            "fragments_per_sst_mean": float(sst["fragments"].mean() or 0) if sst.height else 0.0,
            "fragments_per_sst_max": int(sst["fragments"].max() or 0) if sst.height else 0,
            "zones_per_sst_mean": float(sst["nr_zones"].mean() or 0) if sst.height else 0.0,
            "reads_in_files": total, "reads_outside_files": outside,
            "hot_files": [{"path": p, "reads": int(n), "share": n / total if total else 0.0}
                          for p, n in zip(top["path"], top["reads"], strict=True)]}

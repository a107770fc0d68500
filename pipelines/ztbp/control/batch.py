"""`ztbp batch`: the analyses (and, with report=True, the papermill reports) of many runs in parallel on Dask, and
the per-zone and per-cell aggregates of one huge run computed over its partitions on the cluster.

The engine is `dask.distributed`: a LocalCluster of `workers` single-threaded worker processes by default, or an
existing scheduler by address (`--scheduler tls://host:8786`, e.g. one started by dask-jobqueue on a lab's Slurm
cluster; the workers need this package installed and the run directories on a shared file system; the address and
its TLS settings are checked first, control/scheduler.py: a scheduler runs code and sends back what this client
unpickles). Each run is one task: `analyse_run` does exactly what the sequential loop does (`sequential=True`), so
both give the same results, and writes them to the run's derived/batch.json. A run that fails reports its error;
the others go on.

A huge run's aggregates: each task reads a group of the run's partition files (io/parts.py) and computes partial
aggregates — counts and bytes per zone, reads per cell, and the radix-select histograms of the read latency
percentiles (analysis/chunked.RadixSelect) — which the client sums. The result equals the streaming path's
zone_table_lazy and cell_counts_lazy, and so the in-memory zone table.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import polars as pl

from ..errors import ZtbpError
from ..files import make_dir, write_atomic
from ..stages import MEMORY as ANALYSES
from .scheduler import Scheduler, connect_args

#: how long to keep trying to reach a scheduler given with --scheduler (dask's connect timeout)
CONNECT_TIMEOUT_S = 20

#: a local worker is one task at a time on one core: its libraries' thread pools would only fight the other workers
ONE_THREAD = {k: "1" for k in ("POLARS_MAX_THREADS", "NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                               "MKL_NUM_THREADS")}


def analyse_run(run_dir: str, analyses: tuple[str, ...] = ANALYSES, report: bool = False,
                report_dir: str | None = None) -> dict[str, Any]:
    """Every chosen analysis of one run (the stages registry, in memory), as plain data, written to
    derived/batch.json; errors are returned."""
    from .. import stages
    from ..io.run import load

    t0 = time.perf_counter()
    try:
        run = load(run_dir)
        res = {name: stages.STAGES[name].keep(result) for name, result in stages.analyse(run, analyses).items()}
        if report:
            from ..report.render import render

            out = Path(report_dir) / run.run_id if report_dir else None
            page = render(run_dir, out, log=lambda _s: None)
            res["report"] = {"index": page["index"], "ok": page["ok"]}
    except ZtbpError as e:
        return {"run": str(run_dir), "error": str(e), "seconds": time.perf_counter() - t0}
    text = json.dumps(res, sort_keys=True, default=str)
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    make_dir(run.paths.derived)
    write_atomic(run.paths.derived / "batch.json", json.dumps({"digest": digest, "result": res}, default=str) + "\n")
    return {"run": str(run_dir), "digest": digest, "result": res, "seconds": time.perf_counter() - t0}


@contextlib.contextmanager
def client(scheduler: str | Scheduler | None = None, workers: int = 2) -> Iterator[Any]:
    """A dask.distributed Client: of an existing scheduler (its address checked first, control/scheduler.py), else
    of a LocalCluster of `workers` processes."""
    from dask.distributed import Client, LocalCluster

    if scheduler:
        s = scheduler if isinstance(scheduler, Scheduler) else Scheduler(scheduler)
        address, security = connect_args(s)
        try:
            c = Client(address, timeout=f"{CONNECT_TIMEOUT_S}s", security=security)
        except (OSError, ValueError) as e:  # refused, timed out, a TLS handshake or certificate refused
            raise ZtbpError(f"cannot reach the Dask scheduler {address}: {e}. Start one (dask scheduler) or "
                            "leave out --scheduler for a local cluster.") from None
        with c:
            yield c
        return
    if workers < 1:
        raise ZtbpError("--workers must be ≥ 1")
    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=":0",
                      env=ONE_THREAD) as lc, Client(lc) as c:
        yield c


def run_batch(runs: list[str], scheduler: str | Scheduler | None = None, workers: int = 2, sequential: bool = False,
              analyses: tuple[str, ...] = ANALYSES, report: bool = False, report_dir: str | None = None
              ) -> dict[str, Any]:
    """analyse_run over every run: in this process one after another (sequential), or as tasks on a cluster."""
    if not runs:
        raise ZtbpError("no run given: pass run directories (or run ids under runs/)")
    t0 = time.perf_counter()
    if sequential:
        results = [analyse_run(r, analyses, report, report_dir) for r in runs]
        where, n = "sequential", 1
    else:
        with client(scheduler, workers) as c:
            futures = c.map(analyse_run, runs, analyses=analyses, report=report, report_dir=report_dir, pure=False)
            results = c.gather(futures)
            where, n = c.scheduler.address, len(c.scheduler_info()["workers"])
    return {"runs": results, "seconds": time.perf_counter() - t0, "scheduler": where, "workers": n}


# --- one huge run over its partitions -------------------------------------------------------------------------

def _partial(files: list[str], query: Callable[[pl.LazyFrame], pl.LazyFrame]) -> pl.DataFrame:
    return query(pl.scan_parquet(files)).collect(engine="streaming")


#: the group keys of the partial aggregates below; every other column is a count to sum (or a maximum)
GROUP_KEYS = ("zone", "cell", "_hi", "_d")


def _combine(parts: list[pl.DataFrame]) -> pl.DataFrame:
    """Sum the partial aggregates of every partition group; `_max` columns take the maximum."""
    df = pl.concat(parts)
    keys = [k for k in GROUP_KEYS if k in df.columns]
    return df.group_by(keys).agg(pl.col("_max").max() if c == "_max" else pl.col(c).sum()
                                 for c in df.columns if c not in keys)


def partition_aggregates(parts_root: str | Path, meta: dict[str, Any], c: Any, cells_per_zone: int = 32,
                         files_per_task: int = 8) -> dict[str, pl.DataFrame]:
    """The zone table and the reads per cell of a partitioned run, each task reading a few partition files."""
    from ..analysis.chunked import RadixSelect, cell_counts_lazy
    from ..analysis.zones import zone_count_exprs, zone_frame
    from ..io.parts import Parts

    files = [str(f) for f in Parts(Path(parts_root)).files()]
    groups = [files[i:i + files_per_task] for i in range(0, len(files), files_per_task)]

    def run(query: Callable[[pl.LazyFrame], pl.LazyFrame]) -> pl.DataFrame:
        return _combine(c.gather(c.map(_partial, groups, query=query, pure=False)))

    lba = meta["lba_bytes"]
    counts = run(lambda lf: lf.group_by("zone").agg(*zone_count_exprs(lba)))
    rs = RadixSelect(["zone"], "lat_ns", {"p50": 0.5, "p99": 0.99})
    lat = rs.run(lambda query: run(lambda lf: query(lf.filter(pl.col("op") == "read"))))
    zones = zone_frame(counts.join(lat, on="zone", how="left").with_columns(
        (pl.col("p50") / 1000).alias("read_lat_p50_us"), (pl.col("p99") / 1000).alias("read_lat_p99_us")),
        meta["nr_zones"])
    cells = run(lambda lf: cell_counts_lazy(lf, meta, cells_per_zone).lazy()).sort("cell")
    return {"zones": zones, "cells": cells}

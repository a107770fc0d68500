"""Commands for traces beyond one machine's memory and for many runs: import, stream, shards, batch."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ..analysis.params import CACHE_MIB, PAGE_KIB
from ..errors import ZtbpError
from ..io.layout import DEFAULT_CHUNK_BYTES, DEFAULT_WINDOW_S, DEFAULT_ZONE_PARTS
from ..units import parse_zone_list
from . import emit
from .common import BoundedList, BoundedSize, bounded, mib

IMPORT_FORMATS = ("blkparse", "fio-iolog", "alibaba", "tencent", "msr")
#: stages.STREAMED (spelled out: building the parser loads no stage; tests/test_streaming.py checks they agree)
STREAM_ANALYSES = ("zones", "opcodes", "cells", "chains", "frag", "cluster", "cachesim")


def _stream_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--window-s", type=bounded("window-s"), default=DEFAULT_WINDOW_S,
                   help=f"time window of a partition, seconds (default {DEFAULT_WINDOW_S:g})")
    p.add_argument("--zone-parts", type=bounded("zone-parts"), default=DEFAULT_ZONE_PARTS,
                   help=f"zone ranges the device is cut into (default {DEFAULT_ZONE_PARTS})")
    p.add_argument("--chunk-mib", type=bounded("chunk-mib"), default=DEFAULT_CHUNK_BYTES >> 20,
                   help=f"CSV read per chunk, MiB (default {DEFAULT_CHUNK_BYTES >> 20})")


def _stream_args(args: argparse.Namespace) -> dict[str, Any]:
    return {"window_s": args.window_s, "zone_parts": args.zone_parts, "chunk_bytes": args.chunk_mib << 20}


def _import(args: argparse.Namespace) -> int:
    from ..io.importers import import_trace
    from ..io.nvme import ingest
    from ..io.parts import ingest_stream
    from ..paths import RunPaths
    from ..present.scale import import_text

    run = RunPaths(Path(args.run))
    rep = import_trace(args.source, run, args.format, zone_size_bytes=args.zone_size,
                       lba_bytes=args.lba_bytes, nr_zones=args.nr_zones, device=args.device, overwrite=args.force)
    out: dict[str, Any] = {"run": str(run.root), "import": rep.as_dict()}
    if args.stream:
        m = ingest_stream(run, **_stream_args(args))
        out["stream"] = {k: m[k] for k in ("rows", "files", "bytes")}
    elif not args.no_ingest:
        out["ingest"] = {"rows": ingest(run).rows}
    emit(out, args.json, import_text(out))
    return 0


def _stream(args: argparse.Namespace) -> int:
    import time

    from .. import stages
    from ..io.parts import ingest_stream, is_fresh
    from ..io.run import load
    from ..present.scale import stream_text

    loaded = load(args.run, events=False)
    run = loaded.paths
    which = tuple(a.strip() for a in args.analyses.split(",") if a.strip())
    bad = [a for a in which if a not in STREAM_ANALYSES]
    if bad:
        raise ZtbpError(f"--analyses: unknown {bad[0]!r}; choose from {','.join(STREAM_ANALYSES)}")
    out: dict[str, Any] = {"run": str(run.root)}
    if args.reingest or not is_fresh(run):
        t = time.perf_counter()
        m = ingest_stream(run, **_stream_args(args))
        out["ingest"] = {"rows": m["rows"], "files": m["files"], "bytes": m["bytes"],
                         "skipped": m["ingest"]["skipped"], "seconds": time.perf_counter() - t}
    out["rows"] = loaded.parts.rows
    out.update(stages.analyse_timed(loaded, which, "streamed"))
    emit(out, args.json, stream_text(out))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("import", help="import a blkparse / fio iolog / Alibaba / Tencent / MSR trace as a run")
    p.add_argument("source", help="the trace file")
    p.add_argument("run", help="run directory to create")
    p.add_argument("--format", required=True, choices=IMPORT_FORMATS, help="layout of the trace file")
    p.add_argument("--zone-size", required=True, type=BoundedSize("zone-size"),
                   help="zone size to cut the address space into, e.g. 256M (the traces have no zones)")
    p.add_argument("--lba-bytes", type=bounded("lba-bytes"), default=512, help="LBA size of the run (default 512)")
    p.add_argument("--nr-zones", type=bounded("zones"),
                   help="zones of the device (default: enough for the highest LBA)")
    p.add_argument("--device", help="keep only this device / volume / disk id (blkparse: MAJOR,MINOR)")
    p.add_argument("--force", action="store_true", help="replace a run already in the directory")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--stream", action="store_true",
                   help="ingest in chunks to partitioned Parquet (derived/events-parts/) instead of in memory")
    g.add_argument("--no-ingest", action="store_true", help="only write raw/nvme.csv and meta.json")
    _stream_options(p)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_import)

    p = sub.add_parser("stream", help="streaming ingest to partitioned Parquet and the analyses over it, for runs "
                                      "larger than memory")
    p.add_argument("run", help="run directory (or a run id under runs/)")
    p.add_argument("--analyses", default=",".join(STREAM_ANALYSES),
                   help=f"comma list of {','.join(STREAM_ANALYSES)} (default all)")
    p.add_argument("--reingest", action="store_true", help="re-ingest even when the dataset is current")
    _stream_options(p)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_stream)
    _register_shards(sub)
    _register_batch(sub)


def _shards(args: argparse.Namespace) -> int:
    from ..io.run import load
    from ..present.scale import shards_text
    from ..stages import check_zones

    rates = args.rates
    run = load(args.run)
    hot = (list(parse_zone_list(args.hot_zones, "--hot-zones")) if args.hot_zones is not None
           else list(run.meta.get("workload", {}).get("hot_zones") or []))
    from ..analysis.shards import compare
    from ..io.libcachesim import sampled

    res = compare(run.events, run.meta, args.cache_mib, args.page_kib, check_zones(run, hot), rates,
                  seed=args.seed, seeds=args.seeds, peer=sampled)
    res["run"] = run.run_id
    emit(res, args.json, shards_text(res))
    return 0


def _register_shards(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("shards", help="SHARDS spatially sampled cache simulation vs the exact one, every policy")
    p.add_argument("run", help="run directory (or a run id under runs/)")
    p.add_argument("--rates", type=BoundedList("rate"), default="0.01,0.001",
                   help="sampling rates (default 0.01,0.001)")
    p.add_argument("--cache-mib", type=mib, default=CACHE_MIB, help=f"cache size in MiB (default {CACHE_MIB})")
    p.add_argument("--page-kib", type=bounded("page-kib"), default=PAGE_KIB,
                   help=f"cache page in KiB (default {PAGE_KIB})")
    p.add_argument("--hot-zones", help="hot zones for zone_lru (default: the workload's in meta.json)")
    p.add_argument("--seed", type=bounded("seed"), default=0, help="hash seed of the sampler (default 0)")
    p.add_argument("--seeds", type=bounded("seeds"), default=1,
                   help="samples per rate (seeds SEED, SEED+1, …) for the mean absolute error (default 1)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_shards)


#: stages.MEMORY (spelled out: building the parser loads no stage; tests/test_batch.py checks they agree)
BATCH_ANALYSES = ("zones", "opcodes", "chains", "frag", "cluster", "cachesim")


def _scheduler(args: argparse.Namespace) -> Any:
    """--scheduler and its TLS options as a control.scheduler.Scheduler (None: a local cluster)."""
    from ..control.scheduler import Scheduler

    s = Scheduler(args.scheduler or "", args.tls_ca_file, args.tls_cert, args.tls_key, args.insecure)
    if not args.scheduler:
        if s.tls_files or s.insecure:
            given = [*s.tls_files, *(["--insecure"] if s.insecure else [])]
            raise ZtbpError(f"{', '.join(given)} given without --scheduler (they are for an existing scheduler)")
        return None
    return s


def _batch(args: argparse.Namespace) -> int:
    from ..paths import resolve_run
    from ..present.scale import aggregates_text, batch_text

    scheduler = _scheduler(args)
    runs = [str(resolve_run(r).root) for r in args.runs]
    if args.partition_aggregates:
        return _aggregates(args, runs, aggregates_text, scheduler)
    from ..control.batch import run_batch

    which = tuple(a.strip() for a in args.analyses.split(",") if a.strip())
    bad = [a for a in which if a not in BATCH_ANALYSES]
    if bad:
        raise ZtbpError(f"--analyses: unknown {bad[0]!r}; choose from {','.join(BATCH_ANALYSES)}")
    res = run_batch(runs, scheduler, args.workers, args.sequential, which, args.report, args.report_dir)
    emit(res, args.json, batch_text(res))
    return 1 if any(r.get("error") for r in res["runs"]) else 0


def _aggregates(args: argparse.Namespace, runs: list[str], text: Any, scheduler: Any) -> int:
    from ..contract import read_meta
    from ..control.batch import client, partition_aggregates
    from ..io.parts import load_parts
    from ..paths import RunPaths

    out = []
    with client(scheduler, args.workers) as c:
        for r in runs:
            rp = RunPaths(Path(r))
            parts = load_parts(rp)
            agg = partition_aggregates(parts.root, read_meta(rp), c)
            out.append({"run": r, "files": len(parts.files()), **{k: v.to_dicts() for k, v in agg.items()}})
    emit(out, args.json, text(out))
    return 0


def _register_batch(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("batch", help="the analyses (and reports) of many runs in parallel on a Dask cluster")
    p.add_argument("runs", nargs="+", help="run directories (or run ids under runs/)")
    p.add_argument("--scheduler", metavar="ADDRESS",
                   help="an existing Dask scheduler, tls://HOST:PORT or tcp://HOST:PORT (default: a local cluster); "
                        "it runs code and sends back what this command unpickles: only one you control "
                        "(docs/scale.md)")
    p.add_argument("--tls-ca-file", metavar="PEM", help="tls:// scheduler: the CA that signed its certificate")
    p.add_argument("--tls-cert", metavar="PEM", help="tls:// scheduler: this client's certificate")
    p.add_argument("--tls-key", metavar="PEM", help="tls:// scheduler: this client's key (when not in --tls-cert)")
    p.add_argument("--insecure", action="store_true",
                   help="accept a plain tcp:// scheduler on another machine (no encryption, no authentication)")
    p.add_argument("--workers", type=bounded("workers"), default=2, help="local cluster worker processes (default 2)")
    p.add_argument("--sequential", action="store_true", help="no cluster: one run after another in this process")
    p.add_argument("--analyses", default=",".join(BATCH_ANALYSES),
                   help=f"comma list of {','.join(BATCH_ANALYSES)} (default all)")
    p.add_argument("--report", action="store_true", help="also render each run's papermill report")
    p.add_argument("--report-dir", help="folder for the reports (default reports/RUN)")
    p.add_argument("--partition-aggregates", action="store_true",
                   help="instead: each run's per-zone and per-cell aggregates over its Parquet partitions on the "
                        "cluster (streaming-ingests a run first when needed)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_batch)

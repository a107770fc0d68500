"""Analysis commands: ingest, zones, chains, frag, cluster, cachesim, config, layers, opcodes."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ..analysis.params import CACHE_MIB, CHAIN_OPS, CHAIN_WINDOW, LAYER_GROUP_KEYS, NTS_MIB, PAGE_KIB, SWEEP_MIB
from ..contract import LAYER_MODES, LAYER_OPS, OPS
from ..errors import ZtbpError
from ..units import parse_zone_list
from . import emit
from .common import add_cluster_args, add_config_args, add_run, bounded, cluster_params, mib, progress_bar


def _run(args: argparse.Namespace) -> Any:
    from ..io.run import load

    return load(args.run)


def _ingest(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from ..io.nvme import ingest
    from ..paths import resolve_run
    from ..present.text import ingest_text

    rep = ingest(resolve_run(args.run))
    emit(asdict(rep), args.json, ingest_text(rep))
    return 0


def _zones(args: argparse.Namespace) -> int:
    from .. import stages
    from ..analysis.zones import zones_json
    from ..present.text import zones_text

    table = stages.zones(_run(args))
    emit(zones_json(table), args.json, zones_text(table, args.top))
    return 0


def _chains(args: argparse.Namespace) -> int:
    from .. import stages
    from ..present.text import chains_text

    r = stages.chains(_run(args), args.op, args.nts_mib, args.window)
    emit(r, args.json, chains_text(r))
    return 0


def _frag(args: argparse.Namespace) -> int:
    from .. import stages
    from ..analysis.frag import frag_summary
    from ..present.text import frag_text

    table = stages.frag(_run(args))
    summary = frag_summary(table)
    emit({"summary": summary, "zones": table.to_dicts()}, args.json, frag_text(table, summary))
    return 0


def _cluster(args: argparse.Namespace) -> int:
    from .. import stages
    from ..present.text import cluster_text

    bar = progress_bar(not args.json and sys.stderr.isatty(), "cluster grid", "fit")
    res = stages.cluster(_run(args), cluster_params(args), bar)
    emit(res, args.json, cluster_text(res))
    return 0


def _hot_zones(run: Any, hot_zones: str | None, config: str | None) -> tuple[list[int], str]:
    """Hot zones from --hot-zones, else --config, else `ztbp cluster` of the run."""
    from .. import stages

    if hot_zones is not None and config is not None:
        raise ZtbpError("give --hot-zones or --config, not both")
    if hot_zones is not None:
        return list(parse_zone_list(hot_zones, "--hot-zones")), "--hot-zones"
    if config is not None:
        from ..writeback.config import read_config

        return read_config(Path(config))["hot_zones"], f"config {config}"
    return stages.cluster(run)["hot_zones"], "cluster"


def _cachesim(args: argparse.Namespace) -> int:
    from .. import stages
    from ..present.text import cachesim_text

    run = _run(args)
    hot, source = _hot_zones(run, args.hot_zones, args.config)
    r = stages.simulate(run, args.cache_mib, args.page_kib, hot, args.sweep, not args.no_general)
    r["hot_zones_source"] = source
    emit(r, args.json, cachesim_text(r))
    return 0


def _config(args: argparse.Namespace) -> int:
    from .. import stages
    from ..present.text import config_written_text
    from ..writeback.config import check_output, write_config

    out = check_output(Path(args.output))
    cfg = stages.config(_run(args), args.cache_mib, args.page_kib, cluster_params(args), args.train_share,
                        args.min_gain)
    write_config(cfg, out)
    emit(cfg, args.json, config_written_text(cfg, out))
    return 0


def _parse_by(text: str | None) -> list[str]:
    if not text:
        return []
    keys = [k.strip() for k in text.split(",") if k.strip()]
    bad = [k for k in keys if k not in LAYER_GROUP_KEYS]
    if bad:
        raise ZtbpError(f"--by {text!r}: unknown key {bad[0]!r}; use a comma list of {', '.join(LAYER_GROUP_KEYS)}")
    return keys


def _layers(args: argparse.Namespace) -> int:
    from .. import stages
    from ..io.run import load
    from ..present.text import layers_text

    by = _parse_by(args.by)
    res = stages.layers(load(args.run, events=False), by, args.op, args.mode)
    emit(res, args.json, layers_text(res))
    return 0


def _opcodes(args: argparse.Namespace) -> int:
    from .. import stages
    from ..analysis.opcodes import opcodes_json
    from ..present.text import opcodes_text

    run = _run(args)
    table = stages.opcodes(run, args.op)
    emit(opcodes_json(table, run.run_id), args.json, opcodes_text(table))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("ingest", help="raw/nvme.csv -> derived/events.parquet, reporting skipped lines")
    add_run(p)
    p.set_defaults(func=_ingest)

    p = sub.add_parser("zones", help="per-zone reads, writes, appends, resets, bytes, read latency")
    add_run(p, "machine-readable output (all zones)")
    p.add_argument("--top", type=bounded("top"), default=16, help="text output: the N most-read zones (0 = all)")
    p.set_defaults(func=_zones)

    p = sub.add_parser("chains", help="sequential chains, share ≥ NTS, I/O size and chain-length CDFs")
    add_run(p)
    p.add_argument("--op", default="read", choices=CHAIN_OPS, help="which op's chains (default read)")
    p.add_argument("--nts-mib", type=bounded("nts-mib"), default=NTS_MIB,
                   help=f"Natural Transfer Size in MiB (default {NTS_MIB:g})")
    p.add_argument("--window", type=bounded("chain-window"), default=CHAIN_WINDOW,
                   help=f"a chain stays open while its last request is among the N most recent (default "
                        f"{CHAIN_WINDOW}; 0 = unlimited)")
    p.set_defaults(func=_chains)

    p = sub.add_parser("frag", help="contiguous fragments read / written per zone and their gaps")
    add_run(p)
    p.set_defaults(func=_frag)

    p = sub.add_parser("cluster", help="hot zones: DBSCAN tuned on the run and a zone significance test")
    add_run(p)
    add_cluster_args(p)
    p.set_defaults(func=_cluster)

    p = sub.add_parser("cachesim", help="hit ratios of LRU, zone-recognition LRU, static best, Belady and "
                                        "libCacheSim's general policies")
    add_run(p)
    p.add_argument("--cache-mib", type=mib, default=CACHE_MIB,
                   help=f"device cache size in MiB (default {CACHE_MIB}, the paper's)")
    p.add_argument("--page-kib", type=bounded("page-kib"), default=PAGE_KIB,
                   help=f"cache page size in KiB (default {PAGE_KIB})")
    p.add_argument("--hot-zones", help="hot zone ids, e.g. 1,7,11,15,19 (default: from `ztbp cluster`)")
    p.add_argument("--config", help="take the hot zones from a cache-config.json")
    p.add_argument("--sweep", action="store_true", help=f"also every policy at {', '.join(map(str, SWEEP_MIB))} MiB")
    p.add_argument("--no-general", action="store_true",
                   help="leave out libCacheSim's general policies (ARC, LIRS, S3-FIFO, 2Q, W-TinyLFU, Sieve)")
    p.set_defaults(func=_cachesim)

    p = sub.add_parser("config", help="write the hot-zone cache configuration (input of ztbp-ctl): learnt on the "
                                      "run's first part, judged on the rest, with \"recommend\": true|false")
    add_run(p, "print the configuration as JSON")
    p.add_argument("-o", "--output", required=True, help="file to write, e.g. RUN/derived/cache-config.json")
    p.add_argument("--cache-mib", type=mib, default=CACHE_MIB, help=f"device cache size in MiB (default {CACHE_MIB})")
    p.add_argument("--page-kib", type=bounded("page-kib"), default=PAGE_KIB,
                   help=f"cache page size in KiB (default {PAGE_KIB})")
    add_config_args(p)
    add_cluster_args(p)
    p.set_defaults(func=_config)

    p = sub.add_parser("layers", help="Table-I latency breakdown by layer (needs raw/layers.csv)")
    add_run(p)
    p.add_argument("--by", help=f"also split by these keys: comma list of {','.join(LAYER_GROUP_KEYS)}")
    p.add_argument("--op", choices=LAYER_OPS, help="only requests of this op")
    p.add_argument("--mode", choices=LAYER_MODES, help="only requests of this submission mode")
    p.set_defaults(func=_layers)

    p = sub.add_parser("opcodes", help="latency percentiles and counts per NVMe op and zone action")
    add_run(p)
    p.add_argument("--op", choices=OPS, help="only this op")
    p.set_defaults(func=_opcodes)

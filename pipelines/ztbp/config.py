"""`ztbp config`: the hot-zone cache configuration of a run — the input of the `ztbp-ctl` ioctl helper."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from .cachesim import mib, simulate
from .cli import emit
from .cluster import ClusterParams, add_cluster_args, cached_cluster, params_from_args
from .contract import CONFIG_FORMAT, read_meta, utc_now
from .errors import ZtbpError
from .paths import RunPaths, run_paths

#: The device protocol takes at most this many zones per SET (cdw11..cdw15).
DEVICE_MAX_ZONES = 5


def make_config(run: RunPaths, cache_mib: float = 64, page_kib: int = 4,
                params: ClusterParams = ClusterParams()) -> dict[str, Any]:
    meta = read_meta(run)
    cl = cached_cluster(run, params)
    hot = cl["hot_zones"]
    predicted = simulate(run, cache_mib, page_kib, hot)
    predicted.pop("hot_zones", None)
    return {
        "format": CONFIG_FORMAT,
        "hot_zones": hot,
        "zone_scores": cl.get("zone_scores", []),
        "zone_size_lba": meta["zone_size_lba"],
        "lba_bytes": meta["lba_bytes"],
        "nr_zones": meta["nr_zones"],
        "cache_mib": cache_mib,
        "source_run": run.run_id,
        "predicted": predicted,
        "cluster": {"eps": cl["eps"], "min_samples": cl["min_samples"], "silhouette": cl["silhouette"],
                    "hot_factor": params.hot_factor, "seed": params.seed},
        "created": utc_now(),
    }


def config_text(cfg: dict[str, Any], out: Path) -> str:
    p = cfg["predicted"]
    lines = [f"config: wrote {out}", f"  hot zones {cfg['hot_zones']} from run {cfg['source_run']}",
             f"  predicted hit ratio at {cfg['cache_mib']} MiB: lru {p['lru']:.4f} -> zone_lru {p['zone_lru']:.4f} "
             f"(static best {p['static_best']:.4f}, belady {p['belady']:.4f})"]
    if len(cfg["hot_zones"]) > DEVICE_MAX_ZONES:
        lines.append(f"  note: {len(cfg['hot_zones'])} hot zones; the device protocol takes {DEVICE_MAX_ZONES} per "
                     "SET — `ztbp-ctl set --top5` sends the five with the most reads")
    if not cfg["hot_zones"]:
        lines.append("  note: no hot zone was found; applying this configuration clears nothing and sets nothing")
    return "\n".join(lines)


def _cmd(args: argparse.Namespace) -> int:
    rp = run_paths(args.run)
    out = Path(args.output)
    if out.is_dir():
        raise ZtbpError(f"-o {out} is a directory; give a file name, e.g. {out / 'cache-config.json'}")
    cfg = make_config(rp, args.cache_mib, args.page_kib, params_from_args(args))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(cfg, indent=2) + "\n")
    emit(cfg, args.json, config_text(cfg, out))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("config", help="write the hot-zone cache configuration (input of ztbp-ctl)")
    p.add_argument("run", help="run directory")
    p.add_argument("-o", "--output", required=True, help="file to write, e.g. RUN/derived/cache-config.json")
    p.add_argument("--cache-mib", type=mib, default=64, help="device cache size in MiB (default 64)")
    p.add_argument("--page-kib", type=int, default=4, help="cache page size in KiB (default 4)")
    add_cluster_args(p)
    p.add_argument("--json", action="store_true", help="print the configuration as JSON")
    p.set_defaults(func=_cmd)

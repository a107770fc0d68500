"""`ztbp apply`: write a run's cache configuration and send it with ztbp-ctl (a dry run without --device)."""

from __future__ import annotations

import argparse

from ..analysis.params import CACHE_MIB, PAGE_KIB
from . import emit
from .common import add_cluster_args, add_config_args, add_run, bounded, cluster_params, mib


def _apply(args: argparse.Namespace) -> int:
    from .. import stages
    from ..io.run import load
    from ..present.text import apply_text
    from ..writeback.ctl import apply, check_device

    check_device(args.device)  # before the configuration is computed

    run = load(args.run)
    cfg = stages.config(run, args.cache_mib, args.page_kib, cluster_params(args), args.train_share, args.min_gain)
    res = apply(run.paths, cfg, args.device, args.force)
    emit(res, args.json, apply_text(res))
    return 0 if res["ok"] else int(res["exit_code"]) or 1


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("apply", help="write RUN's cache config and send it with ztbp-ctl (dry run without --device)")
    add_run(p)
    p.add_argument("--device", help="NVMe namespace to send to, e.g. /dev/nvme0n1 (default: dry run, nothing sent)")
    p.add_argument("--cache-mib", type=mib, default=CACHE_MIB, help=f"device cache size in MiB (default {CACHE_MIB})")
    p.add_argument("--page-kib", type=bounded("page-kib"), default=PAGE_KIB,
                   help=f"cache page size in KiB (default {PAGE_KIB})")
    p.add_argument("--force", action="store_true",
                   help="send a configuration that says \"recommend\": false (ztbp-ctl refuses it with exit code 16 "
                        "otherwise)")
    add_config_args(p)
    add_cluster_args(p)
    p.set_defaults(func=_apply)

"""Application runs: `ztbp capture-app` (db_bench in the VM), `ztbp appops RUN` (I/Os per operation), `ztbp files RUN`
(per-file layout and reads per file)."""

from __future__ import annotations

import argparse

from ..units import parse_size
from .common import add_geometry_args, bounded, device_geometry, shown


def _capture_app(args: argparse.Namespace) -> int:
    from ..acquire.app import AppCapture, run_app_capture
    from .acquire import finish_capture

    geometry = device_geometry(args)
    req = AppCapture(app=args.app, fs=args.fs, keys=args.keys, value_bytes=args.value_size, reads=args.reads,
                     cache_bytes=parse_size(args.cache_size), duration_s=args.duration, buffered=args.buffered,
                     functions=tuple(args.function or ()), library=args.library,
                     geometry=geometry, out=args.out, timeout=args.timeout, verbose=args.verbose)
    return finish_capture(run_app_capture(req), args.json)


def _appops(args: argparse.Namespace) -> int:
    from .. import stages
    from ..io.run import load
    from ..present.app import appops_text

    r = stages.appops(load(args.run, events=False), args.phase)
    return shown(r, args, appops_text(r))


def _files(args: argparse.Namespace) -> int:
    from .. import stages
    from ..io.run import load
    from ..present.app import files_text

    r = stages.files(load(args.run, events=False), args.phase)
    return shown(r, args, files_text(r))


def register(sub: argparse._SubParsersAction) -> None:
    c = sub.add_parser("capture-app", help="run an application (db_bench) on a file system in the VM, traced",
                       description="Boot the VM, make the file system, run db_bench (fillrandom, readrandom with "
                                   "direct reads, optional readwhilewriting) under the NVMe probe (with threads), "
                                   "the application-operation probe and the cache probe; record every file's "
                                   "extents. Analyse with `ztbp appops RUN` and `ztbp files RUN`.")
    c.add_argument("app", choices=("rocksdb",), help="the application")
    c.add_argument("--fs", default="btrfs", choices=("btrfs", "f2fs", "ext4"),
                   help="btrfs (zoned, default), f2fs (zoned, metadata on --conv-ns) or ext4 (on --conv-ns)")
    c.add_argument("--keys", type=bounded("keys"), default=20_000,
                   help="keys written by the fill (default: %(default)s)")
    c.add_argument("--value-size", type=bounded("value-size"), default=400, help="value bytes (default: %(default)s)")
    c.add_argument("--reads", type=bounded("app-reads"), default=2_000,
                   help="Gets of readrandom (default: %(default)s)")
    c.add_argument("--cache-size", default="64K", help="RocksDB block cache (default: %(default)s)")
    c.add_argument("--duration", type=bounded("duration"), default=0,
                   help="seconds of readwhilewriting (default: 0, none)")
    c.add_argument("--buffered", action="store_true", help="reads through the page cache (no O_DIRECT)")
    c.add_argument("--function", action="append", metavar="OP=FUNCTION",
                   help="trace FUNCTION as operation OP (repeat it; FUNCTION: a symbol or a demangled name prefix, "
                        "e.g. compact=rocksdb::CompactionJob::Run; default: get=rocksdb::DBImpl::GetImpl and "
                        "write=rocksdb::DBImpl::WriteImpl)")
    c.add_argument("--library", help="resolve the functions in this binary or library of the guest (default: "
                                     "db_bench's librocksdb)")
    add_geometry_args(c, lba=False, conv_ns="1G")
    c.add_argument("--timeout", type=bounded("timeout"), default=3600, help="kill the guest after this many seconds")
    c.add_argument("--out", help="run directory (default: runs/<UTC timestamp>-app-<app>-<fs>)")
    c.add_argument("-v", "--verbose", action="store_true", help="also show the guest console")
    c.add_argument("--json", action="store_true", help="print the summary as JSON")
    c.set_defaults(func=_capture_app)

    for name, func, text in (("appops", _appops, "I/Os per application operation (distribution, chain depth)"),
                             ("files", _files, "per-file layout (extents, fragments, zones) and reads per file")):
        p = sub.add_parser(name, help=text)
        p.add_argument("run", help="run directory of `ztbp capture-app`")
        p.add_argument("--phase", default="readrandom", help="phase of the run, or 'all' (default: %(default)s)")
        p.add_argument("--json", action="store_true", help="JSON output")
        p.set_defaults(func=func)

"""Acquisition commands: synth, workload, capture (the VM), capture-host (a real zoned drive), capture-layers."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..acquire.patterns import PATTERNS
from ..acquire.vm import SUITES
from ..acquire.workload import PAPER_HOT_ZONES, PAPER_READS, PRESETS, READ_REGION, WorkloadError, WorkloadOptions
from ..errors import ZtbpError
from ..files import write_atomic
from ..units import MIB, parse_size, parse_zone_list
from .common import add_backend_args, add_geometry_args, add_module_args, bounded, device_geometry, device_module


def add_workload_arg(p: argparse.ArgumentParser) -> None:
    """The preset workload, a positional with paper80 by default (capture, loop, regime)."""
    p.add_argument("workload", nargs="?", default="paper80", help=f"one of {', '.join(PRESETS)} (default: paper80)")


def add_workload_options(p: argparse.ArgumentParser) -> None:
    """Workload options shared by `ztbp workload` and `ztbp capture`."""
    p.add_argument("--reads", type=bounded("reads"), default=PAPER_READS,
                   help="total 4 KiB reads (default: %(default)s)")
    p.add_argument("--jobs", type=bounded("jobs"), default=0,
                   help="fio jobs (default: the workload's, e.g. 36 for paper80)")
    p.add_argument("--iodepth", type=bounded("iodepth"), default=0,
                   help="queue depth per job (default: the workload's)")
    p.add_argument("--hot-zones", default=",".join(map(str, PAPER_HOT_ZONES)),
                   help="hot zone ids of paper80/paper60 (default: %(default)s)")
    p.add_argument("--hot-share", type=bounded("hot-share"), default=None,
                   help="share of reads on hot zones (default: preset)")
    p.add_argument("--ioengine", default="io_uring", help="fio ioengine (default: %(default)s)")
    p.add_argument("--seed", type=bounded("seed"), default=1, help="fio randseed (default: %(default)s)")
    p.add_argument("--region", default=f"{READ_REGION // MIB}M", help="read region from LBA 0 (default: %(default)s)")


def add_fio_file_option(p: argparse.ArgumentParser, each: str) -> None:
    """--fio-file, the same for `ztbp capture` and `ztbp loop` (`each`: when the job runs)."""
    p.add_argument("--fio-file", type=Path, default=None, metavar="FILE",
                   help=f"run this fio job {each} instead of the preset's: only read/write options are allowed (no "
                        "commands, other files or engine plug-ins: one line names what is refused, before anything "
                        "boots); every filename= is set to the traced namespace; the preset still chooses the zones "
                        "reset and prefilled first, and --reads the room in the probe's map; the trace is checked "
                        "against fio's own count of reads")


def workload_options(args: argparse.Namespace) -> WorkloadOptions:
    return WorkloadOptions(name=args.workload, reads=args.reads, jobs=args.jobs, iodepth=args.iodepth,
                           hot_zones=parse_zone_list(args.hot_zones, "--hot-zones"), hot_share=args.hot_share,
                           ioengine=args.ioengine, seed=args.seed, region_bytes=parse_size(args.region))


def _workload(args: argparse.Namespace) -> int:
    cap = parse_size(args.zone_cap) if args.zone_cap else None
    wl = workload_options(args).build(device=args.device, zone_bytes=args.zone_size,
                                      nr_zones=args.device_zones, zone_cap_bytes=cap)
    out = Path(args.output)
    if out.parent and not out.parent.exists():
        raise WorkloadError(f"folder {out.parent} does not exist; create it or choose another -o path")
    write_atomic(out, wl.fio_job())
    print(f"wrote {out}: {wl.name}, {wl.describe_line()}")
    if args.prefill:
        pre = wl.prefill_job()
        if pre is None:
            print(f"{wl.name} reads nothing: no prefill job")
        else:
            write_atomic(Path(args.prefill), pre)
            print(f"wrote {args.prefill}: prefill of zones {wl.prefill_zones.start}..{wl.prefill_zones.stop - 1}")
    return 0


def finish_capture(outcome: object, as_json: bool) -> int:
    """Print a capture's summary (JSON with --json, else one line); its error as a CaptureError, else its exit code."""
    from ..acquire.capture import CaptureError, CaptureOutcome
    from ..acquire.meta import summary_line

    assert isinstance(outcome, CaptureOutcome)
    if as_json:
        json.dump(outcome.summary, sys.stdout, indent=2)
        print()
    else:
        print(summary_line(outcome.summary))
    if outcome.error:
        raise CaptureError(outcome.error)
    return outcome.exit_code


def _capture(args: argparse.Namespace) -> int:
    from ..acquire.capture import VmCapture, run_capture

    req = VmCapture(workload=workload_options(args), geometry=device_geometry(args), backend=args.backend,
                    nvmevirt_ko=args.nvmevirt_ko,
                    nvmevirt_storage_bytes=parse_size(args.nvmevirt_storage),
                    nvmevirt_reserve_bytes=args.nvmevirt_reserve or 0, nvmevirt_params=args.nvmevirt_params,
                    out=args.out, timeout=args.timeout,
                    verbose=args.verbose, probe=args.probe, suite=args.suite, fio_file=args.fio_file)
    return finish_capture(run_capture(req), args.json)


def _capture_host(args: argparse.Namespace) -> int:
    from ..acquire.host import HostCapture, run_capture_host

    req = HostCapture(device=args.device, workload=workload_options(args), destructive=args.destructive,
                      no_prefill=args.no_prefill, out=args.out, verbose=args.verbose, probe=args.probe,
                      module=device_module(args))
    return finish_capture(run_capture_host(req), args.json)


def _capture_layers(args: argparse.Namespace) -> int:
    from ..acquire.layers import LayersCapture, run_layers_capture

    probes = tuple(p.strip() for p in args.probes.split(",") if p.strip())
    geometry = device_geometry(args)
    req = LayersCapture(fs=args.fs, engine=args.engine, iodepth=args.iodepth, jobs=args.jobs,
                        runtime_s=args.runtime, reads=args.reads or 0, size=args.size, probes=probes,
                        trace_prep=args.trace_prep,
                        bench=args.bench, bench_rounds=args.bench_rounds, geometry=geometry, out=args.out,
                        timeout=args.timeout, verbose=args.verbose, suite=args.suite)
    return finish_capture(run_layers_capture(req), args.json)


def _region(text: str) -> tuple[int, int] | None:
    """--region START:END in bytes (K/M/G suffixes), or 'all' for the whole device."""
    if text.strip().lower() == "all":
        return None
    start, sep, end = text.partition(":")
    if not sep:
        raise ZtbpError(f"--region {text!r}: give START:END, e.g. 10M:1G, or 'all'")
    return (0 if start.strip() in ("", "0") else parse_size(start)), parse_size(end)


def _synth(args: argparse.Namespace) -> int:
    from ..acquire.synth import SynthGeometry, SynthOptions, write_run

    zone_bytes = args.zone_size
    if zone_bytes % args.lba_size:
        raise ZtbpError(f"--zone-size {args.zone_size} is not a whole number of {args.lba_size}-byte LBAs")
    geo = SynthGeometry(lba_bytes=args.lba_size, zone_size_lba=zone_bytes // args.lba_size,
                        nr_zones=args.device_zones)
    opts = SynthOptions(hot_zones=None if args.hot_zones is None else parse_zone_list(args.hot_zones, "--hot-zones"),
                        hot_share=args.hot_share, zipf=args.zipf, region=_region(args.region),
                        prefill=not args.no_prefill)
    res = write_run(Path(args.run), args.pattern, args.reads, args.seed, geo, opts, overwrite=args.force)
    print(f"synth: wrote {res['commands']} commands ({args.pattern}, seed {args.seed}) to {res['run']}")
    return 0


def _output_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", help="run directory (default: runs/<UTC timestamp>-<workload>)")
    p.add_argument("-v", "--verbose", action="store_true", help="also show the guest console")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")


def _common(p: argparse.ArgumentParser) -> None:
    add_workload_options(p)
    _output_options(p)
    p.add_argument("--probe", default=None, metavar="FILE",
                   help="NVMe probe in probes/: nvme_zone.bt (default; rows kept in a map) or nvme_zone_stream.bt "
                        "(rows printed as they come); meta.json names the one that ran")


def _suite_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--suite", choices=SUITES, default=None,
                   help="guest image: bookworm (Debian 12, Linux 6.1, bpftrace 0.17; the default) or trixie "
                        "(Debian 13, Linux 6.12, bpftrace 0.23); meta.json versions record it")


def register_synth(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("synth", help="write a synthetic run in the run-directory contract")
    p.add_argument("run", help="run directory to create (e.g. runs/synth-paper80)")
    p.add_argument("--pattern", choices=PATTERNS, default="paper80", help="access pattern (default paper80)")
    p.add_argument("--reads", type=bounded("synth-reads"), default=1_000_000, help="read commands (default 1,000,000)")
    p.add_argument("--seed", type=bounded("seed"), default=1, help="random seed (default 1)")
    p.add_argument("--hot-zones", help="hot zones (paper80/paper60/hotzones), the hot page's zone (hotpage) or the "
                                       "zones holding one hot 1 MiB cell each (hotcells), e.g. 1,7,11,15,19")
    p.add_argument("--hot-share", type=bounded("hot-share"), help="share of the reads on the hot zones, page or cells "
                                                   "(default: 0.8 paper80/hotzones, 0.6 paper60, 0.3 hotpage, "
                                                   "0.5 hotcells)")
    p.add_argument("--zipf", type=bounded("zipf"),
                   help="Zipf exponent of the zipf pattern's page popularity (default 1.1)")
    add_geometry_args(p, lba_choices=True)
    p.add_argument("--region", default="10M:1G",
                   help="cold reads in START:END of the device, or 'all' (default: %(default)s, the paper's)")
    p.add_argument("--no-prefill", action="store_true", help="no zone resets and fill writes before the reads")
    p.add_argument("--force", action="store_true", help="replace a run already in the directory")
    p.set_defaults(func=_synth)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("workload", help="write a fio job file for a capture workload",
                       description="Write the fio job file of a named workload. " +
                       "; ".join(f"{k}: {v.help}" for k, v in PRESETS.items()))
    p.add_argument("workload", metavar="NAME", help=f"one of {', '.join(PRESETS)}")
    p.add_argument("-o", "--output", required=True, help="fio job file to write")
    p.add_argument("--prefill", metavar="FILE", help="also write the prefill job (sequential zone fill) here")
    p.add_argument("--device", default="/dev/nvme0n1", help="block device in the job file (default: %(default)s)")
    add_geometry_args(p, lba=False)
    p.add_argument("--zone-cap", default=None,
                   help="zone capacity (default: the zone size): the prefill and the reads keep within it")
    add_workload_options(p)
    p.set_defaults(func=_workload)

    p = sub.add_parser("capture", help="trace a workload in the QEMU VM (zoned NVMe) into a run directory",
                       description="Boot the VM with a zoned NVMe namespace, run WORKLOAD under the NVMe probe, "
                                   "write runs/<UTC timestamp>-<workload>/ (probes/FORMAT.md).")
    add_workload_arg(p)
    _common(p)
    add_fio_file_option(p, "once")
    g = p.add_argument_group("zoned namespace (QEMU backend)")
    add_geometry_args(g, limits=True, conv_ns=None)
    add_backend_args(p, "device backend (default qemu)")
    p.add_argument("--timeout", type=bounded("timeout"), default=3600, help="kill the guest after this many seconds")
    _suite_option(p)
    p.set_defaults(func=_capture)

    h = sub.add_parser("capture-host", help="trace a workload on a real zoned drive of this machine",
                       description="Run the NVMe probe and a workload on a real ZNS namespace. Refuses a "
                                   "non-zoned device, and any workload that writes unless --destructive.")
    h.add_argument("device", metavar="DEV", help="zoned namespace, e.g. /dev/nvme0n1")
    h.add_argument("workload", help=f"one of {', '.join(PRESETS)}")
    _common(h)
    h.add_argument("--destructive", action="store_true", help="allow zone resets and writes (destroys data)")
    h.add_argument("--no-prefill", action="store_true", help="read what is on the drive; no resets, no writes")
    add_module_args(h)
    h.set_defaults(func=_capture_host)

    c = sub.add_parser("capture-layers", help="trace fio random reads layer by layer in the VM (probes/layers.bt)",
                       description="Boot the VM, build one storage stack, run fio 4 KiB random reads on it under the "
                                   "layer probe and the streaming NVMe probe, write runs/<UTC timestamp>-layers-<fs>-"
                                   "<engine>/ (probes/FORMAT.md). Analyse it with `ztbp layers RUN`.")
    c.add_argument("--fs", default="raw", help="raw (the zoned namespace; default), ext4 (on the conventional "
                                               "namespace) or btrfs (mkfs.btrfs -O zoned on the zoned namespace)")
    c.add_argument("--engine", default="psync", help="fio ioengine: psync (default), io_uring or libaio")
    c.add_argument("--iodepth", type=bounded("iodepth"), default=0,
                   help="queue depth (default: 1 for psync, 4 otherwise)")
    c.add_argument("--jobs", type=bounded("layer-jobs"), default=1,
                   help="fio jobs reading at once (default: %(default)s)")
    c.add_argument("--runtime", type=bounded("runtime"), default=5,
                   help="seconds of random reads (default: %(default)s)")
    c.add_argument("--reads", type=bounded("reads"), default=None,
                   help="this many random reads instead of --runtime (READS / --jobs a job, rounded up): a count "
                        "that does not depend on the machine's speed (default: --runtime)")
    c.add_argument("--size", default="256M", help="file or device region read (default: %(default)s)")
    c.add_argument("--probes", default="nvme,layers", help="nvme,layers (default) or layers")
    c.add_argument("--trace-prep", action="store_true",
                   help="also trace building the stack (mkfs, prefill) with the NVMe probe")
    c.add_argument("--bench", action="store_true",
                   help="first measure fio IOPS without and with the layer probe, same boot (raw/bench.json)")
    c.add_argument("--bench-rounds", type=bounded("bench-rounds"), default=2,
                   help="rounds of --bench, each fio without then with the probe (default: %(default)s)")
    add_geometry_args(c, lba=False, conv_ns="1G")
    c.add_argument("--timeout", type=bounded("timeout"), default=1800, help="kill the guest after this many seconds")
    _output_options(c)
    _suite_option(c)
    c.set_defaults(func=_capture_layers)

"""meta.json of a capture: written first (`capture_meta`, `"complete": false`) and finished from what the guest
reported in .capture/guest.env (`finish_meta`): geometry, versions, each probe's script, attach kind and counters,
lost events, fio's totals. The summary line a capture prints comes from finish_meta's summary."""

from __future__ import annotations

import re
import shutil
import time
from pathlib import Path
from typing import Any

from .. import paths
from ..contract import new_meta, write_meta
from ..devices import Device
from ..files import hand_over_tree, read_env
from ..io.fio import fio_totals
from ..paths import RunPaths
from .vm import VmDevice, nvmevirt_notes

STAGING = ".capture"


def capture_meta(*, device: str, lba: int, zone_bytes: int, nr_zones: int, workload: dict[str, Any], kind: Device,
                 probes: dict[str, str], zone_cap_bytes: int | None = None, module: Path | None = None,
                 module_params: str = "") -> dict[str, Any]:
    """meta.json of a capture on the namespace `device` of the device `kind` before it runs: the geometry asked for
    (the guest's report replaces it), the probes (name -> script) and, on a device whose read service the project
    models (NVMeVirt), what the emulator does not model and its read service model (of `module`, the nvmev.ko
    booted)."""
    meta = new_meta(device=device, lba_bytes=lba, zone_size_lba=zone_bytes // lba,
                    zone_cap_lba=(zone_cap_bytes or zone_bytes) // lba, nr_zones=nr_zones, synthetic=False,
                    workload=workload, backend=kind.name,
                    probes={name: probe_meta(name, script) for name, script in probes.items()})
    if kind.has_read_model:
        meta["emulator"] = nvmevirt_notes(module, module_params)  # what NVMeVirt does not model (probes/FORMAT.md)
    return meta


def device_meta(dev: VmDevice, workload: dict[str, Any], probes: dict[str, str]) -> dict[str, Any]:
    """capture_meta of a VM capture on `dev` (the guest's namespace nvme0n1)."""
    return capture_meta(device="nvme0n1", lba=dev.lba_bytes, zone_bytes=dev.zone_bytes, nr_zones=dev.nr_zones,
                        workload=workload, kind=dev.device, probes=probes, zone_cap_bytes=dev.zone_cap_bytes,
                        module=dev.module, module_params=dev.module_params)


def guest_env_file(run: RunPaths) -> Path:
    """Where the guest script leaves its KEY=VALUE report of a capture (read with files.read_env)."""
    return run.root / STAGING / "guest.env"


def count_commands(csv: Path) -> dict[str, int]:
    counts: dict[str, int] = {}
    if not csv.is_file():
        return counts
    with csv.open() as f:
        for i, line in enumerate(f):
            if i < 2:
                continue
            parts = line.split(",")
            if len(parts) >= 12:
                counts[parts[7]] = counts.get(parts[7], 0) + 1
    return counts

#: meta.json statistics object of each probe (probes/FORMAT.md) and the guest.env counters it holds.
PROBE_STATS_KEY = {"nvme": "probe_stats", "layers": "layer_stats"}
_STAT_COUNTERS = ("setups", "completed", "rows", "perf_lost", "max_rows", "recursion_misses", "attach_s", "drain_s",
                  "dump_s", "stop_s")
_ATTACH_KINDS = {"kfunc": "fentry", "kretfunc": "fexit", "tracepoint": "tracepoint", "kprobe": "kprobe",
                 "kretprobe": "kretprobe", "rawtracepoint": "rawtracepoint", "uprobe": "uprobe", "usdt": "usdt"}
_PROBE_POINT = re.compile(r"^(?P<kind>[a-z]+):[^\s]", re.M)


def attach_types(script: str) -> str:
    """How a bpftrace script attaches, from its probe points: "fentry", "fentry+fexit+tracepoint", ..."""
    kinds = {_ATTACH_KINDS[m["kind"]] for m in _PROBE_POINT.finditer(script) if m["kind"] in _ATTACH_KINDS}
    return "+".join(sorted(kinds)) or "unknown"


def probe_meta(name: str, script: str) -> dict[str, Any]:
    """meta.json `probes.<name>`: its CSV, format version, the script that ran and how it attaches."""
    path = Path(script) if Path(script).is_absolute() else paths.ROOT / script
    try:
        attach = attach_types(path.read_text(errors="replace"))
    except OSError:
        attach = "unknown"
    return {"file": f"raw/{name}.csv", "version": 1, "attach": attach, "script": script}


def probe_stats(name: str, genv: dict[str, str]) -> dict[str, Any]:
    """The counters probe-lib.sh reported for one probe (probe_<name>_* in guest.env)."""
    stats: dict[str, Any] = {"mode": genv.get(f"probe_{name}_mode", "stream")}
    for key in _STAT_COUNTERS:
        stats[key] = int(genv.get(f"probe_{name}_{key}", 0) or 0)
    if name == "layers":
        stats["dropped"] = int(genv.get("probe_layers_dropped", 0) or 0)
        stats["unsure"] = int(genv.get("probe_layers_unsure", 0) or 0)
    return stats


def _geometry_from_guest(meta: dict[str, Any], genv: dict[str, str]) -> None:
    if not genv.get("lba_bytes"):
        return
    lba = int(genv["lba_bytes"])
    zone_sectors = int(genv.get("zone_sectors", "0") or 0)
    cap_sectors = int(genv.get("zone_cap_sectors", "0") or 0)
    if zone_sectors:
        meta["lba_bytes"] = lba
        meta["zone_size_lba"] = zone_sectors * 512 // lba
        meta["zone_cap_lba"] = (cap_sectors or zone_sectors) * 512 // lba
        meta["nr_zones"] = int(genv.get("nr_zones", meta["nr_zones"]))
    meta["device"] = genv.get("device", meta["device"])
    meta["zone_limits"] = {"max_open": int(genv.get("max_open_zones", 0) or 0),
                           "max_active": int(genv.get("max_active_zones", 0) or 0)}


def finish_meta(run: RunPaths, meta: dict[str, Any], result_status: int | None, interrupted: bool,
                started: float, extra_versions: dict[str, str]) -> dict[str, Any]:
    """Merge what the guest reported into meta.json (every probe in meta["probes"]); return a summary."""
    genv = read_env(guest_env_file(run))
    _geometry_from_guest(meta, genv)
    versions = {k: genv[k] for k in ("suite", "debian", "kernel", "kernel_version", "bpftrace", "fio", "nvme_cli",
                                     "blkzone")
                if k in genv}
    versions.update(extra_versions)
    meta["versions"] = versions
    lost: dict[str, int] = {}
    for name in list(meta.get("probes", {})):
        script = genv.get(f"probe_{name}_script")
        if script:
            meta["probes"][name] = probe_meta(name, script)
        if run.probe_csv(name).is_file():
            lost[name] = int(genv.get(f"lost_events_{name}", 0) or 0)
            meta[PROBE_STATS_KEY.get(name, f"{name}_stats")] = probe_stats(name, genv)
    meta["lost_events"] = lost
    if "fs_device" in genv:
        meta["workload"]["fs_device"] = genv["fs_device"]
    fio = fio_totals(run.fio_json)
    if fio:
        meta["fio"] = fio
    prefill = fio_totals(run.root / STAGING / "prefill-fio.json")
    if prefill:
        meta["prefill"] = {"write_ios": prefill["write_ios"], "seconds": int(genv.get("prefill_s", 0))}
    counts = count_commands(run.nvme_csv)
    if run.nvme_csv.is_file():
        meta["commands"] = counts
    status = genv.get("status", "failed")
    all_files = all(run.probe_csv(name).is_file() for name in meta.get("probes", {}))
    meta["complete"] = bool(status == "complete" and result_status == 0 and not interrupted and all_files)
    meta["capture"] = {"guest_status": result_status, "status": status, "interrupted": interrupted,
                       "seconds": round(time.monotonic() - started, 1),
                       "workload_s": float(genv.get("workload_s", 0) or 0)}
    write_meta(run, meta)
    shutil.rmtree(run.root / STAGING, ignore_errors=True)
    hand_over_tree(run.root)  # what the capture script wrote as root under sudo goes to the user
    rows = {name: int(genv.get(f"probe_{name}_rows", 0) or 0) for name in lost}
    return {"run": str(run.root), "commands": sum(counts.values()), "reads": counts.get("read", 0),
            "fio_reads": fio.get("read_ios", 0), "lost": lost.get("nvme"), "probes": {
                name: {"rows": rows[name], "lost": lost[name]} for name in lost},
            "seconds": meta["capture"]["seconds"], "iops": fio.get("read_iops", 0) + fio.get("write_iops", 0),
            "complete": meta["complete"]}


def summary_line(s: dict[str, Any]) -> str:
    state = "complete" if s["complete"] else "INCOMPLETE (partial data, \"complete\": false)"
    probes = s.get("probes", {})
    if set(probes) <= {"nvme"}:
        traced = f"{s['commands']:,} commands traced ({s['reads']:,} reads; fio {s['fio_reads']:,}), " \
                 f"lost events {s['lost']}"
    else:
        traced = ", ".join(f"{name} {p['rows']:,} rows" for name, p in sorted(probes.items())) + \
            f" (fio {s['fio_reads']:,} reads), lost events " + \
            ", ".join(f"{name} {p['lost']}" for name, p in sorted(probes.items()))
    return f"capture {state}: {traced}, {s['seconds']:.0f} s, {s['iops']:,.0f} IOPS -> {s['run']}"


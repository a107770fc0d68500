"""The closed loop (`ztbp loop`): capture -> analyse -> apply -> capture again, in one VM boot (or on this machine).

The host is the brain, the guest the body (vm/guest/loop.sh). One bpftrace session and one device live for the
whole loop (NVMeVirt's busy-polling threads stall the RCU-tasks grace periods that attaching and detaching fentry
programs need, so nothing attaches or detaches while the module is loaded). They talk through files in the loop
directory, which is the VM's shared folder /ztbp/out: the guest writes round-NN/ (a run directory) and
.loop/ready-NN, the host analyses the round (cluster, config with its recommendation), writes round-NN/loop.json,
the next round's fio job and .loop/decision-NN ("apply CONFIG", "stop REASON"); the guest applies the config with
`ztbp-ctl set`, reads it back (`info`, the kernel log) and runs the next round. Both sides wait with bounds; the
harness's timeout ends a hung guest. Ctrl-C stops after the round in progress; every finished round stays valid
(its run directory and loop.json are complete when written).

Stop rule: after `rounds` rounds; when a round's config is not recommended (nothing is sent: "nothing
recommended"); or when the measured gain falls below `min_gain`: the hit ratio of the cache model replayed on this
round's trace with the zones in force during it, minus the same figure of the round before (round 1: plain LRU).
"""

from __future__ import annotations

import copy
import os
import re
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from .. import devices, paths
from ..acquire.capture import CaptureError, start_run, write_jobs
from ..acquire.channel import run_here
from ..acquire.host import device_geometry, host_tools
from ..acquire.meta import capture_meta
from ..acquire.module import DeviceModule
from ..acquire.progress import Progress
from ..acquire.userjob import read_user_job, user_job, user_job_meta
from ..acquire.vm import Geometry, nvmevirt_module, qemu_version, run_in_guest, vm_device
from ..acquire.workload import PRESETS, Workload, WorkloadOptions
from ..analysis.params import AB_READS, CACHE_MIB, PAGE_KIB, RECOMMEND_GAIN
from ..contract import LOOP_FORMAT, utc_now
from ..errors import ZtbpError
from ..files import hand_over_tree, write_json
from ..io import loop as loopfiles
from ..present.loop import round_line
from ..units import check_limit
from . import round as rounds
from .ab import AbPlan, ab_doc, ab_next, ab_service, abba

GUEST_SCRIPT = paths.VM / "guest" / "loop.sh"
LOOP_PROBE = "probes/nvme_zone.bt"
STOP_NOTHING = "nothing recommended"
STOP_INVALID = "incomplete trace"
_READY = re.compile(r"^ZTBP: loop round (\d+) ready")


class LoopError(ZtbpError):
    """The loop cannot run or failed."""


@dataclass(frozen=True)
class LoopRequest:
    """What `ztbp loop` was asked for."""

    workload: WorkloadOptions
    rounds: int = 3
    min_gain: float = RECOMMEND_GAIN
    backend: str = devices.QEMU.name  # the device's name: a --backend value, or "host" (--host DEV)
    nvmevirt_ko: Path | None = None
    nvmevirt_reserve_bytes: int = 0  # guest memory kept for NVMeVirt (0: its storage)
    geometry: Geometry = Geometry()
    host_device: str | None = None
    fio_file: Path | None = None
    cache_mib: int = CACHE_MIB
    page_kib: int = PAGE_KIB
    out: str | None = None
    timeout: int = 7200
    verbose: bool = False
    ab_pairs: int = 0  # > 0: the A/B mode (round 1, then this many pairs of on/off blocks)
    ab_reads: int = AB_READS
    module: DeviceModule | None = None  # --host: the module that creates the device (NVMeVirt), checked

    @property
    def device(self) -> devices.Device:
        return devices.get(self.backend)

    def validate(self) -> None:
        dev = self.device  # an unknown name is refused first
        check_limit("rounds", self.rounds)
        check_limit("min-gain", self.min_gain)
        check_limit("loop-cache-mib", self.cache_mib, "--cache-mib")
        check_limit("page-kib", self.page_kib)
        check_limit("timeout", self.timeout)
        check_limit("ab", self.ab_pairs)
        if self.ab_pairs == 1:
            raise LoopError("--ab 1: give at least 2 pairs of blocks (an interval needs 2), or 0 for no A/B blocks")
        check_limit("ab-reads", self.ab_reads)
        if self.workload.name not in PRESETS:
            raise LoopError(f"unknown workload '{self.workload.name}'; choose one of: {', '.join(PRESETS)}")
        if dev.checks_geometry_early:  # its namespace is known now: the workload must fit it before a boot
            self.geometry.validate()
            self.workload.build(device="/dev/nvme0n1", zone_bytes=self.geometry.zone_bytes,
                                zone_cap_bytes=self.geometry.zone_cap_bytes,
                                nr_zones=self.geometry.zones)
        if dev.in_vm and dev.probe_before_appears:  # NVMeVirt in the guest: its module is given
            nvmevirt_module(self.nvmevirt_ko, LoopError)
        if self.module is not None and dev.in_vm:
            raise LoopError("--module is for --host DEV (a device module on this machine); in the VM NVMeVirt is "
                            "--backend nvmevirt --nvmevirt-ko KO")
        if self.fio_file is not None:  # its options are checked before a VM boots or a device is touched
            read_user_job(self.fio_file)


# ---- the loop ---------------------------------------------------------------------------------------------
@dataclass
class LoopState:
    req: LoopRequest
    root: Path
    workload: Workload
    meta_base: dict[str, Any]
    progress: Progress
    rounds: list[dict[str, Any]]
    guest_prefix: str  # how the guest names the loop directory (/ztbp/out in the VM)
    in_force: list[int]  # zones the device holds (set and accepted), [] when none
    pending: dict[str, Any] | None = None  # the config sent after the last round, its prediction
    stopped: str | None = None
    started: float = 0.0

    ab: AbPlan | None = None  # the A/B blocks, once round 1 recommended a configuration

    @property
    def model(self) -> rounds.CacheModel:
        return rounds.CacheModel(self.req.cache_mib, self.req.page_kib, self.req.min_gain)

    @property
    def versions(self) -> dict[str, str]:
        """The versions every round records beside the guest's: QEMU's, on a device the VM harness boots."""
        return {"qemu": qemu_version()} if self.req.device.needs_qemu_version else {}

    def rnd_dir(self, r: int) -> Path:
        return self.root / f"round-{r:02d}"

    @property
    def total_rounds(self) -> int:
        return 1 + 2 * self.req.ab_pairs if self.req.ab_pairs else self.req.rounds


def job_text(st: LoopState, r: int) -> str:
    if st.req.fio_file is not None:
        return user_job(read_user_job(st.req.fio_file), st.workload.device)
    wl = replace(st.workload, seed=st.workload.seed + r - 1)
    if st.ab is not None and r > 1:
        wl = replace(wl, reads=st.ab.reads)
    return wl.fio_job()


def _measure(st: LoopState, r: int, guest: loopfiles.RoundFiles, zones_model: list[int], listed: list[int],
             loop_meta: dict[str, Any]) -> rounds.Measured:
    """Round r's run directory finished and measured (control/round.py), with the zones in force during it."""
    meta = copy.deepcopy(st.meta_base)
    meta["loop"] = {"round": r, "loop_dir": "..", "zones_in_force": st.in_force, **loop_meta}
    return rounds.measure(st.rnd_dir(r), meta, st.started, st.versions, guest, zones_model, listed, st.model,
                          st.progress.say)


def analyse_round(st: LoopState, r: int, guest: loopfiles.RoundFiles) -> dict[str, Any]:
    """Finish round r's run directory, analyse it with what the guest reported and return its loop.json entry."""
    # the model runs with the zones sent after the previous round, whether the device took them or not (QEMU)
    zones_model = st.pending["hot_zones"] if st.pending else []
    m = _measure(st, r, guest, zones_model, st.in_force, {})
    return rounds.analyse(m, st.root, st.model, st.pending, st.rounds[-1] if st.rounds else None)


def decide(st: LoopState, entry: dict[str, Any]) -> tuple[str, str]:
    """("apply", config path as the guest sees it) or ("stop", why)."""
    r = entry["round"]
    cfg = entry["config"]
    if entry["lost"] or entry["read_rows"] != entry["fio_reads"]:
        return "stop", (f"{STOP_INVALID}: round {r} traced {entry['read_rows']:,} reads of fio's "
                        f"{entry['fio_reads']:,} ({entry['lost']:,} lost); no decision is taken on an incomplete "
                        "trace (see console.log and the round's kernel log in .loop/); nothing sent")
    if not cfg["recommend"]:
        return "stop", f"{STOP_NOTHING}: {cfg['recommend_reason']}; nothing sent"
    if r > 1 and entry["measured_gain"] is not None and entry["measured_gain"] < st.req.min_gain:
        return "stop", (f"measured gain {entry['measured_gain']:+.4f} (model hit ratio with the zones sent, "
                        f"round {r - 1} -> {r}) below --min-gain {st.req.min_gain:+.2f}")
    if r >= st.req.rounds and not st.req.ab_pairs:
        return "stop", f"{st.req.rounds} rounds done"
    return "apply", f"{st.guest_prefix}/{cfg['file']}"


def loop_doc(st: LoopState, complete: bool) -> dict[str, Any]:
    return {"format": LOOP_FORMAT, "backend": st.req.backend, "workload": st.meta_base["workload"],
            "rounds_asked": st.total_rounds, "min_gain": st.req.min_gain, "cache_mib": st.req.cache_mib,
            "page_kib": st.req.page_kib, "emulator": st.meta_base.get("emulator"),
            "rounds": st.rounds, "stopped": st.stopped, "complete": complete, "updated": utc_now(),
            **({"ab": ab_doc(st.ab, st.req.ab_pairs)} if st.ab is not None else {})}


def on_round(st: LoopState, r: int, guest: loopfiles.RoundFiles) -> None:
    """The host's turn after round r: analyse, record, decide, hand the decision to the guest."""
    entry = analyse_round(st, r, guest)
    action, arg = decide(st, entry)
    if st.req.ab_pairs and action == "apply":  # the A/B blocks start: block 1 runs with the configuration on
        st.ab = AbPlan(config=arg, listed=entry["config"]["hot_zones"], arms=abba(st.req.ab_pairs),
                       reads=st.req.ab_reads)
        st.progress.expected = st.ab.reads if st.req.fio_file is None else 0
    elif st.req.ab_pairs:
        arg += "; no A/B blocks (nothing to switch on)"
    entry["decision"] = {"action": action, "detail": arg}
    st.rounds.append(entry)
    if action == "apply":
        st.pending = {"round": r, "hot_zones": entry["config"]["hot_zones"], "held_out": entry["config"]["held_out"]}
    else:  # nothing is sent after this round: the last apply's answer is already folded in (no second "refused")
        st.stopped = arg
        st.pending = None
    _record(st, r, entry, f"{action} {arg}", action == "apply", "")
    st.progress.say(f"round {r}: sending zones {entry['config']['hot_zones']} to the device" if action == "apply"
                    else f"loop stops: {arg}")


def on_block(st: LoopState, r: int, guest: loopfiles.RoundFiles) -> None:
    """The host's turn after an A/B block (round r > 1): measure it with the configuration's zones as the listed
    class in both arms, record it, and switch the configuration for the next block."""
    assert st.ab is not None
    ab, block = st.ab, r - 1
    arm, pair = ab.arms[block - 1]
    res = guest.applied_before  # what the guest did before this block: SET, STOP or nothing
    if res is not None:
        st.in_force = ab.listed if res.get("set_ok") else [] if res.get("action") == "clear" else st.in_force
    zones = ab.listed if arm == "on" else []
    m = _measure(st, r, guest, zones, ab.listed, {"ab": {"arm": arm, "pair": pair}})
    entry = m.entry
    warm, ab.history = rounds.warm_score(m, ab.history, st.rnd_dir(1), st.model, zones)
    entry["model"]["warm_hit_ratio"] = warm  # the device's cache carries over from block to block: so does this one
    entry["ab"] = {"block": block, "arm": arm, "pair": pair, "device_holds": bool(st.in_force)}
    entry["applied_before"] = res
    action, arg = ab_next(ab, block)
    entry["decision"] = {"action": action, "detail": arg}
    st.rounds.append(entry)
    ab.blocks.append({"round": r, "run": entry["run"], "block": block, "arm": arm, "pair": pair,
                      "device_holds": bool(st.in_force), "trace_complete": entry["lost"] == 0
                      and entry["read_rows"] == entry["fio_reads"], "fio": entry["fio"], "latency": entry["latency"],
                      "model": {"hit_ratio": warm}})
    if action == "stop":
        st.stopped = arg
        ab.service = ab_service(ab, st.root, st.meta_base)
    _record(st, r, entry, f"{action} {arg}".rstrip(), action != "stop", f"A/B block {block} ({arm}, pair {pair}): ")
    nxt = {"apply": "configuration on (SET)", "clear": "configuration off (STOP)"}.get(action, arg)
    st.progress.say(f"loop stops: {arg}" if action == "stop" else f"block {block + 1}: {nxt}")


def _record(st: LoopState, r: int, entry: dict[str, Any], decision: str, go_on: bool, label: str) -> None:
    """Round r's record and the hand-over, written once (io/loop.write_round: the next job when the loop goes on),
    and its progress line."""
    loopfiles.write_round(st.root, r, entry, loop_doc(st, complete=False), decision,
                          job_text(st, r + 1) if go_on else None)
    st.progress.say(label + round_line(entry))


def after_apply(st: LoopState, res: dict[str, Any] | None) -> None:
    """Fold the last apply's result (what the guest reported, None: nothing applied) into the rounds: the zones the
    device holds for the next round."""
    if st.pending is None:
        return
    st.pending["applied"] = res
    if res is None:
        return
    if res["set_ok"]:
        st.in_force = st.pending["hot_zones"]
        st.progress.say(f"device holds zones {res['zones_reported']} (sent {sorted(st.pending['hot_zones'])})")
    else:
        what = "the device refused SET" if res["set_exit_code"] == 30 else "ztbp-ctl set failed"
        st.progress.say(f"{what} (ztbp-ctl exit code {res['set_exit_code']}: {res['set_message']}); the loop goes on "
                        "with the model only (out of sample on the next round)")


def _new_state(req: LoopRequest, root: Path, wl: Workload, place: Place, progress: Progress) -> LoopState:
    workload = wl.meta() if req.fio_file is None else user_job_meta(wl, req.fio_file)
    meta = capture_meta(device=Path(wl.device).name, lba=place.lba_bytes, zone_bytes=place.zone_bytes,
                        nr_zones=place.nr_zones, workload=workload, kind=req.device, probes={"nvme": LOOP_PROBE},
                        zone_cap_bytes=place.zone_cap_bytes, module=req.nvmevirt_ko)
    if req.module is not None:
        meta["device_module"] = {"ko": str(req.module.ko), "params": req.module.params}
    return LoopState(req=req, root=root, workload=wl, meta_base=meta, progress=progress, rounds=[],
                     guest_prefix=place.prefix(root), in_force=[], started=time.monotonic())


def _handler(st: LoopState) -> Any:
    def on_line(line: str) -> None:
        m = _READY.match(line)
        if not m:
            st.progress(line)
            return
        r = int(m.group(1))
        if st.ab is not None:  # an A/B block: the decision before it is the previous round's
            on_block(st, r, loopfiles.read_round(st.root, r, r - 1))
            return
        guest = loopfiles.read_round(st.root, r, st.pending["round"] if st.pending else None)
        after_apply(st, guest.applied_before)
        on_round(st, r, guest)
    return on_line


def guest_env(wl: Workload, pre: str | None, rounds: int) -> dict[str, str]:
    # ZTBP_EXPECTED sizes the probe's map (vm/guest/probe-lib.sh, MAP SIZE): emptied after the set-up and after each
    # round, it holds at most the set-up's commands or one round's (an A/B block has fewer reads than round 1)
    env = {"ZTBP_DEV": wl.device, "ZTBP_ROUNDS": str(rounds), "ZTBP_EXPECTED": str(wl.expected_commands)}
    if pre:
        env["ZTBP_PREFILL"] = pre
    if len(wl.reset_zones):
        env["ZTBP_RESET"] = f"{wl.reset_zones.start} {len(wl.reset_zones)}"
    return env


@dataclass(frozen=True)
class Place:
    """Where the loop runs: the namespace the guest script traces and its geometry, and how the host names the loop
    directory to that script (the VM's /ztbp/out, or the folder itself on this machine)."""

    device: str
    lba_bytes: int
    zone_bytes: int
    nr_zones: int
    vm: Any = None  # acquire.vm.VmDevice in the VM, None on this machine
    zone_cap_bytes: int | None = None  # None: the zones hold their size

    def prefix(self, root: Path) -> str:
        return "/ztbp/out" if self.vm is not None else str(root)


def host_place(dev: str | None, module: DeviceModule | None = None) -> Place:
    """This machine's zoned namespace `dev`, checked: the tools there, root, zoned. With a device module, `dev`
    exists only while it is loaded: it is loaded for the moment of reading the geometry and unloaded (loop.sh loads
    it again after its probe attached)."""
    if not dev:
        raise LoopError("--host needs the zoned namespace, e.g. --host /dev/nvme0n1")
    host_tools(LoopError, "loop --host")
    try:
        lba, zone_bytes, nr, cap = device_geometry(dev, Path(os.environ.get("ZTBP_SYSFS", "/sys")), module)
    except CaptureError as e:
        raise LoopError(str(e)) from None
    return Place(dev, lba, zone_bytes, nr, zone_cap_bytes=cap)


def run_loop(req: LoopRequest) -> dict[str, Any]:
    """Run the loop; return loop.json's content (also written to the loop directory)."""
    req.validate()
    from ..writeback.ctl import ensure_ctl

    ensure_ctl()
    progress = Progress(0, req.verbose)
    if not req.device.in_vm:
        place = host_place(req.host_device, req.module)
    else:
        dev = vm_device(req.device, req.geometry, req.nvmevirt_ko, error=LoopError,
                        reserve_bytes=req.nvmevirt_reserve_bytes)
        place = Place("/dev/nvme0n1", dev.lba_bytes, dev.zone_bytes, dev.nr_zones, vm=dev,
                      zone_cap_bytes=dev.zone_cap_bytes)
    wl = req.workload.build(device=place.device, zone_bytes=place.zone_bytes, nr_zones=place.nr_zones,
                            zone_cap_bytes=place.zone_cap_bytes)
    progress.expected = wl.total_reads if req.fio_file is None else 0  # each round's countdown (A/B: on_round)
    # the capture preamble: the guest image (in the VM), a new empty loop directory (--out or
    # runs/<stamp>-loop-<name>); its rounds get their meta.json as they are captured
    root = start_run(f"loop-{wl.name if req.fio_file is None else 'fio-file'}", req.out, None, vm=place.vm is not None,
                     echo=progress.say, error=LoopError).root
    root = root if place.vm is not None else root.resolve()
    st = _new_state(req, root, wl, place, progress)
    plan = (f"round 1 of {wl.describe_line()}, then {req.ab_pairs} pairs of A/B blocks of {req.ab_reads:,} reads "
            "(the configuration on and off)" if req.ab_pairs else f"up to {req.rounds} rounds of {wl.describe_line()}")
    progress.say(f"loop {wl.name}: {plan}, backend {req.backend} -> {root}")
    loopfiles.start_loop(root, loop_doc(st, complete=False), job_text(st, 1))
    with tempfile.TemporaryDirectory(prefix="ztbp-loop.") as tmp:
        _, pre = write_jobs(wl, Path(tmp))
        if place.vm is not None:
            status, interrupted = _in_vm(st, place, pre)
        else:
            status, interrupted = _here(st, pre, Path(tmp) / "stop")
    return _finish(st, status, interrupted)


def _in_vm(st: LoopState, place: Place, pre: Path | None) -> tuple[int, bool]:
    """The guest script in one VM boot; (exit status, interrupted)."""
    env = guest_env(st.workload, f"/ztbp/ctl/{pre.name}" if pre else None, st.total_rounds)
    env["ZTBP_PROBE"] = f"/ztbp/src/{LOOP_PROBE}"
    # the guest's kernel log is kept (.loop/dmesg-end.txt) whatever the script's end, for a crash's cause
    cmd = ("bash /ztbp/src/vm/guest/loop.sh; rc=$?; cat /proc/cmdline > /ztbp/out/.loop/cmdline.txt; "
           "dmesg > /ztbp/out/.loop/dmesg-end.txt; exit $rc")
    result = run_in_guest(cmd, st.root, geometry=place.vm.geometry, timeout=st.req.timeout,
                          files=[pre] if pre else [], env=env, extra_args=place.vm.extra_args, on_line=_handler(st))
    return result.status, result.interrupted


def _here(st: LoopState, pre: Path | None, stop_file: Path) -> tuple[int, bool]:
    """The same guest script on this machine (root, bpftrace, fio); (exit status, interrupted)."""
    from ..writeback.ctl import ensure_ctl

    env = guest_env(st.workload, str(pre) if pre else None, st.total_rounds)
    env.update(ZTBP_OUT=str(st.root), ZTBP_PROBE=str(paths.ROOT / LOOP_PROBE), ZTBP_CTL=str(ensure_ctl()))
    if st.req.module is not None:  # loop.sh: the probe, then insmod; rmmod, then the probe stops
        env.update(st.req.module.env())

    def after_stop(line: str) -> None:  # no new round is taken on once the user stopped the loop
        if not _READY.match(line):
            st.progress(line)

    return run_here(GUEST_SCRIPT, env, stop_file, _handler(st), after_stop)


def _finish(st: LoopState, status: int, interrupted: bool) -> dict[str, Any]:
    if st.ab is None:
        after_apply(st, loopfiles.read_applied(st.root, st.pending["round"]) if st.pending else None)
    session = loopfiles.read_session(st.root)
    doc = loop_doc(st, complete=bool(status == 0 and not interrupted and st.stopped))
    doc["guest_status"] = status
    doc["interrupted"] = interrupted
    if session:
        doc["session"] = session
    write_json(st.root / loopfiles.LOOP_FILE, doc)
    hand_over_tree(st.root)  # what the loop script wrote as root under sudo goes to the user
    if interrupted:
        st.progress.say(f"interrupted: {len(st.rounds)} finished round(s) kept in {st.root}")
    elif status != 0:
        raise LoopError(f"the guest reported status {status} after {len(st.rounds)} round(s); finished rounds are in "
                        f"{st.root} (loop.json), see console.log there")
    doc["dir"] = str(st.root)
    return doc



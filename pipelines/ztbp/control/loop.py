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

import tempfile
import time
from pathlib import Path
from typing import Any

from .. import paths
from ..acquire.capture import start_run, write_jobs
from ..acquire.channel import run_here
from ..acquire.host import Place, host_place
from ..acquire.meta import capture_meta
from ..acquire.progress import Progress
from ..acquire.userjob import loop_job, user_job_meta
from ..acquire.vm import run_in_guest, vm_device
from ..io.loop import start_loop
from .request import LoopError, LoopRequest
from .round import READY, LoopState, close_loop, line_handler, loop_doc

GUEST_SCRIPT = paths.VM / "guest" / "loop.sh"
LOOP_PROBE = "probes/nvme_zone.bt"


# ---- the loop ---------------------------------------------------------------------------------------------
def resolve(req: LoopRequest, tmp: Path) -> tuple[LoopState, Place, dict[str, str], list[Path]]:
    """The request resolved once, before the first round: checked, the place (the VM's namespace or this machine's
    drive), the workload and its prefill job (in `tmp`), the loop directory opened (--out or
    runs/<stamp>-loop-<name>; the guest image in the VM) with loop.json and the first fio job, the runs' first
    meta.json content, the guest script's environment and the files it is given."""
    req.validate()
    from ..writeback.ctl import ensure_ctl

    ensure_ctl()
    if req.device.in_vm:
        dev = vm_device(req.device, req.geometry, req.nvmevirt_ko, error=LoopError,
                        reserve_bytes=req.nvmevirt_reserve_bytes)
        place = Place("/dev/nvme0n1", dev.lba_bytes, dev.zone_bytes, dev.nr_zones, vm=dev,
                      zone_cap_bytes=dev.zone_cap_bytes)
    else:
        place = host_place(req.host_device, req.module, LoopError)
    progress = Progress(0, req.verbose)
    wl = req.workload.build(device=place.device, zone_bytes=place.zone_bytes, nr_zones=place.nr_zones,
                            zone_cap_bytes=place.zone_cap_bytes)
    progress.expected = wl.total_reads if req.fio_file is None else 0  # each round's countdown (A/B: round_turn)
    root = start_run(f"loop-{wl.name if req.fio_file is None else 'fio-file'}", req.out, None, vm=place.vm is not None,
                     echo=progress.say, error=LoopError).root
    root = root if place.vm is not None else root.resolve()
    _, pre = write_jobs(wl, tmp)
    workload = wl.meta() if req.fio_file is None else user_job_meta(wl, req.fio_file)
    first_job = loop_job(wl, req.fio_file, 1)
    meta = capture_meta(device=Path(wl.device).name, lba=place.lba_bytes, zone_bytes=place.zone_bytes,
                        nr_zones=place.nr_zones, workload=workload, kind=req.device, probes={"nvme": LOOP_PROBE},
                        zone_cap_bytes=place.zone_cap_bytes, module=req.nvmevirt_ko)
    if req.module is not None:
        meta["device_module"] = {"ko": str(req.module.ko), "params": req.module.params}
    st = LoopState(req=req, root=root, workload=wl, meta_base=meta, progress=progress, rounds=[],
                   guest_prefix=place.prefix(root), in_force=[], started=time.monotonic())
    plan = (f"round 1 of {wl.describe_line()}, then {req.ab_pairs} pairs of A/B blocks of {req.ab_reads:,} reads "
            "(the configuration on and off)" if req.ab_pairs else f"up to {req.rounds} rounds of {wl.describe_line()}")
    progress.say(f"loop {wl.name}: {plan}, backend {req.backend} -> {root}")
    start_loop(root, loop_doc(st, complete=False), first_job)
    # ZTBP_EXPECTED sizes the probe's map (vm/guest/probe-lib.sh, MAP SIZE): emptied after the set-up and after each
    # round, it holds at most the set-up's commands or one round's (an A/B block has fewer reads than round 1)
    env = {"ZTBP_DEV": wl.device, "ZTBP_ROUNDS": str(st.total_rounds), "ZTBP_EXPECTED": str(wl.expected_commands)}
    if pre:
        env["ZTBP_PREFILL"] = f"/ztbp/ctl/{pre.name}" if place.vm is not None else str(pre)
    if len(wl.reset_zones):
        env["ZTBP_RESET"] = f"{wl.reset_zones.start} {len(wl.reset_zones)}"
    if place.vm is not None:
        env["ZTBP_PROBE"] = f"/ztbp/src/{LOOP_PROBE}"
    else:
        env.update(ZTBP_OUT=str(root), ZTBP_PROBE=str(paths.ROOT / LOOP_PROBE), ZTBP_CTL=str(ensure_ctl()))
        if req.module is not None:  # loop.sh: the probe, then insmod; rmmod, then the probe stops
            env.update(req.module.env())
    return st, place, env, [pre] if pre else []


def run_loop(req: LoopRequest) -> dict[str, Any]:
    """Run the loop; return loop.json's content (also written to the loop directory)."""
    with tempfile.TemporaryDirectory(prefix="ztbp-loop.") as tmp:
        st, place, env, files = resolve(req, Path(tmp))
        on_line = line_handler(st)
        if place.vm is not None:  # the guest script in one VM boot; its kernel log is kept (.loop/dmesg-end.txt)
            # whatever the script's end, for a crash's cause
            cmd = ("bash /ztbp/src/vm/guest/loop.sh; rc=$?; cat /proc/cmdline > /ztbp/out/.loop/cmdline.txt; "
                   "dmesg > /ztbp/out/.loop/dmesg-end.txt; exit $rc")
            result = run_in_guest(cmd, st.root, geometry=place.vm.geometry, timeout=req.timeout, files=files,
                                  env=env, extra_args=place.vm.extra_args, on_line=on_line)
            status, interrupted = result.status, result.interrupted
        else:  # the same guest script on this machine (root, bpftrace, fio)

            def after_stop(line: str) -> None:  # no new round is taken on once the user stopped the loop
                if not READY.match(line):
                    st.progress(line)

            status, interrupted = run_here(GUEST_SCRIPT, env, Path(tmp) / "stop", on_line, after_stop)
    doc = close_loop(st, status, interrupted)
    if not interrupted and status != 0:
        raise LoopError(f"the guest reported status {status} after {len(st.rounds)} round(s); finished rounds are in "
                        f"{st.root} (loop.json), see console.log there")
    doc["dir"] = str(st.root)
    return doc

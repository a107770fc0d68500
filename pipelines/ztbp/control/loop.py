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
from pathlib import Path
from typing import Any

from .. import paths
from ..acquire.channel import run_here
from ..acquire.loop import LoopError, set_up_loop
from ..acquire.progress import Progress
from ..acquire.vm import run_in_guest
from .request import LoopRequest
from .round import READY, close_loop, line_handler, open_loop

GUEST_SCRIPT = paths.VM / "guest" / "loop.sh"


# ---- the loop ---------------------------------------------------------------------------------------------
def run_loop(req: LoopRequest) -> dict[str, Any]:
    """Run the loop; return loop.json's content (also written to the loop directory)."""
    from ..writeback.ctl import ensure_ctl

    req.check_settings()
    progress = Progress(0, req.verbose)
    with tempfile.TemporaryDirectory(prefix="ztbp-loop.") as tmp:
        setup = set_up_loop(req, req.total_rounds, Path(tmp), progress.say, ensure_ctl,
                            block_reads=req.ab_reads if req.ab_pairs else 0)
        st = open_loop(req, setup, progress)
        on_line = line_handler(st)
        place = setup.place
        if place.vm is not None:  # the guest script in one VM boot; its kernel log is kept (.loop/dmesg-end.txt)
            # whatever the script's end, for a crash's cause
            cmd = ("bash /ztbp/src/vm/guest/loop.sh; rc=$?; cat /proc/cmdline > /ztbp/out/.loop/cmdline.txt; "
                   "dmesg > /ztbp/out/.loop/dmesg-end.txt; exit $rc")
            result = run_in_guest(cmd, setup.root, geometry=place.vm.geometry, timeout=req.timeout,
                                  files=setup.files, env=setup.env, extra_args=place.vm.extra_args, on_line=on_line)
            status, interrupted = result.status, result.interrupted
        else:  # the same guest script on this machine (root, bpftrace, fio)

            def after_stop(line: str) -> None:  # no new round is taken on once the user stopped the loop
                if not READY.match(line):
                    st.progress(line)

            status, interrupted = run_here(GUEST_SCRIPT, setup.env, Path(tmp) / "stop", on_line, after_stop)
    doc = close_loop(st, status, interrupted)
    if not interrupted and status != 0:
        raise LoopError(f"the guest reported status {status} after {len(st.rounds)} round(s); finished rounds are in "
                        f"{setup.root} (loop.json), see console.log there")
    doc["dir"] = str(setup.root)
    return doc

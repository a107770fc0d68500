"""`ztbp doctor`: can this machine run the host path, and what to do about what it lacks; `ztbp build-ctl`: build
ztbp-ctl now (in a checkout into tools/ztbp-ctl/build/, installed into the user's cache folder)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from . import emit

#: doctor's exit code when a check failed: the host path cannot run here
NOT_READY = 1
DESCRIPTION = ("Checks this machine, one line a check, and says what to do about each that does not pass. Only reads: "
               "nothing is attached, built or written, and a device is asked the ZTBP protocol's STATUS only. Exit "
               f"code 0 when the host path (capture-host, loop --host) can run, {NOT_READY} otherwise.")


def _doctor(args: argparse.Namespace) -> int:
    from ..doctor.facts import gather
    from ..doctor.verdicts import report, text

    doc = report(gather(sysfs=Path(os.environ.get("ZTBP_SYSFS", "/sys"))))
    emit(doc, args.json, text(doc))
    return 0 if doc["ready"] else NOT_READY


def _build_ctl(args: argparse.Namespace) -> int:
    from ..writeback.ctl import build_ctl

    ctl = build_ctl()
    emit({"ztbp_ctl": str(ctl)}, args.json, f"build-ctl: {ctl}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("doctor", help="check this machine for the host path (kernel, BTF, bpftrace, zoned NVMe, "
                                      "permissions, tools, space) and say what to do about what is missing",
                       description=DESCRIPTION)
    p.add_argument("--json", action="store_true", help="print the checks and the facts as JSON")
    p.set_defaults(func=_doctor)
    b = sub.add_parser("build-ctl", help="build ztbp-ctl from its source with make and the machine's C compiler")
    b.add_argument("--json", action="store_true", help="print the binary's path as JSON")
    b.set_defaults(func=_build_ctl)

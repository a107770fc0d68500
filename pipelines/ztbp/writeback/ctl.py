"""Sending a cache configuration with `ztbp-ctl set` (a dry run unless a device is given).

`apply(run, cfg)` is what `just apply RUN [DEV]` does, for the notebooks: it writes `derived/cache-config.json`, builds
ztbp-ctl with make when it is missing (`tools/ztbp-ctl/build/` in a checkout, the user's cache folder when the
package is installed: `build_ctl`, `ztbp build-ctl`), runs `ztbp-ctl set --dry-run --top5 --config …`
(or `ztbp-ctl set DEV --top5 --config …`) and returns ztbp-ctl's JSON with its exit code. A refusal by ztbp-ctl
(no hot zone, a configuration that says "recommend": false — sent with `force` —, a device without the ZTBP protocol,
no permission) is a result with `ok: false` and ztbp-ctl's message, not an exception: see tools/ztbp-ctl/README.md
for the exit codes.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import ZtbpError
from ..files import hand_over_tree, make_dir
from ..paths import CHECKOUT, CTL_BUILD, CTL_SRC, RunPaths
from .config import write_config

CTL_DIR: Path = CTL_SRC
CTL: Path = CTL_BUILD / "ztbp-ctl"
CTL_TIMEOUT_S = 120


def missing_tools(which: Callable[[str], str | None] = shutil.which) -> list[str]:
    """The build tools of ztbp-ctl this machine lacks (make, and a C compiler: $CC, else cc)."""
    cc = os.environ.get("CC") or "cc"
    return [t for t in ("make", cc) if which(t) is None]


def build_ctl() -> Path:
    """Build ztbp-ctl from its source with make (nothing is done when the binary is newer than its source); its
    path. One clear line when make or the compiler is missing or the build fails."""
    missing = missing_tools()
    if missing:
        how = "`just deps`" if CHECKOUT else "e.g. `sudo apt-get install make gcc`"
        raise ZtbpError(f"cannot build ztbp-ctl: {' and '.join(missing)} not found; install make and a C compiler "
                        f"({how}), then `ztbp build-ctl`")
    make_dir(CTL.parent)
    try:
        proc = subprocess.run(["make", "-s", "-C", str(CTL_DIR), f"BUILD={CTL.parent}"], capture_output=True,
                              text=True, check=False, timeout=300)
    except subprocess.TimeoutExpired:
        raise ZtbpError("building ztbp-ctl did not finish within 300 s") from None
    hand_over_tree(CTL.parent)  # built under sudo: the user's build folder stays theirs
    if proc.returncode != 0 or not CTL.is_file():
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-5:])
        raise ZtbpError(f"building ztbp-ctl failed (make -C {CTL_DIR}):\n{tail}")
    return CTL


def ensure_ctl() -> Path:
    """The ztbp-ctl binary, built with make (`build_ctl`) when it is missing."""
    return CTL if CTL.is_file() else build_ctl()


def check_device(dev: str | None) -> None:
    """A device path for ztbp-ctl: one that starts with '-' would read as an option (`--device=--dry-run`)."""
    if dev and dev.startswith("-"):
        raise ZtbpError(f"--device {dev!r} starts with '-', which ztbp-ctl would read as an option; give the device "
                        "path, e.g. /dev/nvme0n1")


def apply(run: RunPaths, cfg: dict[str, Any], dev: str | None = None, force: bool = False) -> dict[str, Any]:
    """Write cfg as the run's derived/cache-config.json and send its five best zones to `dev` with ztbp-ctl
    (a dry run when dev is None or empty: nothing is sent). ztbp-ctl refuses a configuration that says
    "recommend": false (exit code 16) unless force."""
    check_device(dev)
    cfg_path = write_config(cfg, run.cache_config)
    ctl = ensure_ctl()
    options = ["--top5", "--config", str(cfg_path), "--json", *(["--force"] if force else [])]
    # the device goes after `--`, where ztbp-ctl never reads an option
    argv = [str(ctl), "set", *options, *(["--dry-run"] if not dev else ["--", dev])]
    proc, out, message = _run_ctl(argv)
    shown = ["ztbp-ctl", "set", *(["--dry-run"] if not dev else [dev]), "--top5", "--config",
             "derived/cache-config.json", "--json", *(["--force"] if force else [])]
    return {"ok": proc.returncode == 0, "exit_code": proc.returncode, "dry_run": not dev, "device": dev or None,
            "command": " ".join(shown), "config": str(cfg_path), "hot_zones": cfg["hot_zones"], "result": out,
            "message": message}


def _run_ctl(argv: list[str]) -> tuple[subprocess.CompletedProcess[str], dict[str, Any] | None, str]:
    """Run ztbp-ctl: the process, its JSON answer (the last line of stdout, None without one) and its message."""
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=CTL_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise ZtbpError(f"ztbp-ctl did not finish within {CTL_TIMEOUT_S} s") from None
    try:
        out = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.stdout.strip() else None
    except json.JSONDecodeError:
        out = None
    message = (out or {}).get("message") or proc.stderr.strip().removeprefix("ztbp-ctl: error: ")
    return proc, out if isinstance(out, dict) else None, message


def command(name: str, dev: str, *options: str) -> dict[str, Any]:
    """`ztbp-ctl NAME OPTIONS --json -- DEV` (set --zones, stop, status): ok, exit code, JSON answer, message. A
    refusal by the device (exit code 30: no ZTBP protocol) is a result with ok false, not an exception."""
    check_device(dev)
    proc, out, message = _run_ctl([str(ensure_ctl()), name, *options, "--json", "--", dev])
    return {"ok": proc.returncode == 0, "exit_code": proc.returncode, "command": f"ztbp-ctl {name} {dev}",
            "result": out, "message": message}

"""NVMeVirt's module for the VM tests, built by ../shared/nvmevirt/build.sh once per set of inputs and kept in the
project's cache, as the guest images are: ZTBP_CACHE/nvmevirt-builds/<key>/<release>-<profile>[-slow<N>][-m<hash>]/
nvmev.ko (build.sh's own folder name: the loop reads the emulator's read model from it; -m<hash> names a build with
the project's read model, `--read-model FILE.c`). The key hashes what the module is made of: build.sh, the source
tarball, the kernel release and its headers' Module.symvers, the profile, --slow, the read model file and the
compiler's version. A build took 12-20 s of the README test line's critical chain, twice (the prototype before
NVMeVirt's profile, zn540 before its loop), in every run.

`prebuild` builds the chain's modules in the background (at nice 10, when NVMeVirt's chain starts), so a machine
without them in its cache builds them while the other guests run; a build waits for one of the same key that is
on its way (a lock per key)."""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import signal
import subprocess
import tempfile
import threading
from pathlib import Path

from ztbp import paths

NVMEVIRT = paths.ROOT.parent / "shared" / "nvmevirt"
#: build.sh's processes on their way (`stop` ends them)
_RUNNING: set[subprocess.Popen[str]] = set()
#: NVMeVirt's prototype at --slow 20 (test_device_vm.py): a 256 KiB write takes ~84 ms of die time, slower than the
#: emulator's own per-command cost under TCG, so the modelled dies shape the bandwidth (README of ../shared/nvmevirt)
PROTOTYPE_SLOW = 20
#: the builds NVMeVirt's tests in `just test` ask for, in their order: (profile, --slow) — test_loop_vm.py's zn540,
#: then test_device_vm.py's prototype
CHAIN_BUILDS = (("zn540", 1), ("prototype", PROTOTYPE_SLOW))


class BuildError(RuntimeError):
    """build.sh failed (its exit status and the end of its stderr)."""


def available() -> str | None:
    """Why NVMeVirt cannot be built here, or None."""
    if not (NVMEVIRT / "build.sh").is_file():
        return f"NVMeVirt is not here ({NVMEVIRT}/build.sh missing)"
    if shutil.which("make") is None:
        return "make is missing: NVMeVirt cannot be built here"
    return None


def guest_release(image: Path) -> str:
    """The kernel release of a guest image folder (vm/image.sh writes it), the release a module is built for."""
    return (image / "kernel-release").read_text().strip()


def folder_name(release: str, profile: str, slow: int, read_model: Path | None = None) -> str:
    """build.sh's default folder for a build: <release>-<profile>[-slow<N>][-m<first 12 hex of the read model's
    sha256>]."""
    name = f"{release}-{profile}" + ("" if slow == 1 else f"-slow{slow}")
    return name if read_model is None else f"{name}-m{hashlib.sha256(read_model.read_bytes()).hexdigest()[:12]}"


def build_key(release: str, profile: str, slow: int, source: Path | None = None, read_model: Path | None = None
              ) -> str:
    """A hash of everything the module is made of."""
    source = source or NVMEVIRT
    h = hashlib.sha256(f"{release}\0{profile}\0{slow}\0".encode())
    for name in ("build.sh", "nvmevirt-ztbp-src.tar.gz"):
        h.update((source / name).read_bytes())
    if read_model is not None:  # (a build without one keeps the key it had before read models)
        h.update(b"read model\0" + read_model.read_bytes())
    for headers in (Path("/lib/modules") / release / "build", Path("/usr/src") / f"linux-headers-{release}"):
        if (headers / "Module.symvers").is_file():
            h.update((headers / "Module.symvers").read_bytes())
            break
    cc = subprocess.run(["gcc", "--version"], capture_output=True, text=True, check=False) if shutil.which("gcc") \
        else None
    h.update((cc.stdout.splitlines()[0] if cc and cc.stdout else "no gcc").encode())
    return h.hexdigest()[:16]


def module(release: str, profile: str = "zn540", slow: int = 1, *, cache: Path | None = None,
           source: Path | None = None, nice: int = 0, read_model: Path | None = None) -> Path:
    """nvmev.ko for the guest kernel `release` (with the project's read model FILE.c `read_model`, build.sh
    --read-model): from the cache, or built there by build.sh (raises BuildError)."""
    source = source or NVMEVIRT
    root = (cache or paths.CACHE) / "nvmevirt-builds"
    root.mkdir(parents=True, exist_ok=True)
    key = build_key(release, profile, slow, source, read_model)
    folder = folder_name(release, profile, slow, read_model)
    ko = root / key / folder / "nvmev.ko"
    with open(root / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a build of the same key on its way: wait for it, then take its module
        if ko.is_file():
            return ko
        work = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=root))
        try:
            out = work / folder
            cmd = ["bash", str(source / "build.sh"), release, str(out), "--profile", profile, "--slow", str(slow),
                   *(["--read-model", str(read_model)] if read_model is not None else [])]
            proc = subprocess.Popen(["nice", "-n", str(nice), *cmd] if nice else cmd, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True, start_new_session=True)
            _RUNNING.add(proc)
            try:
                _, err = proc.communicate(timeout=900)
            finally:
                _RUNNING.discard(proc)
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
            if proc.returncode != 0 or not (out / "nvmev.ko").is_file():
                raise BuildError(f"build.sh exited {proc.returncode}: {err[-2000:]}")
            shutil.rmtree(root / key, ignore_errors=True)
            work.rename(root / key)  # whole or not at all
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return ko


def prebuild(release: str, builds: tuple[tuple[str, int], ...] = CHAIN_BUILDS) -> threading.Thread | None:
    """The builds in a background thread at nice 10 (a failure is left to the test that needs the module: it
    builds again and reports build.sh's error); None when NVMeVirt cannot be built here."""
    if available() is not None:
        return None

    def run() -> None:
        for profile, slow in builds:
            try:
                module(release, profile, slow, nice=10)
            except (BuildError, OSError, subprocess.SubprocessError):
                continue

    thread = threading.Thread(target=run, name="nvmevirt-prebuild", daemon=True)
    thread.start()
    return thread


def stop() -> None:
    """End the builds on their way (the session is over: their folders are removed, nothing enters the cache)."""
    for proc in list(_RUNNING):
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except OSError:
            continue

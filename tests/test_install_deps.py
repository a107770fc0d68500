"""vm/install-deps.sh waits for another apt or dpkg instead of failing with apt's exit status 100.

A real process holds a real fcntl lock (what apt and dpkg take) on a stand-in lock file; the script's own functions
(sourced) find it through /proc/locks, say who holds it, wait, and give up after the timeout with what to do.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ztbp import paths

INSTALL_DEPS = paths.ROOT / "vm" / "install-deps.sh"
HOLDER = """
import fcntl, sys, time
f = open(sys.argv[1], "w")
fcntl.lockf(f, fcntl.LOCK_EX)
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
"""


def deps(script: str, locks: list[Path], timeout_s: int) -> tuple[subprocess.CompletedProcess[str], float]:
    env = {**os.environ, "ZTBP_APT_LOCKS": " ".join(map(str, locks)), "ZTBP_APT_LOCK_TIMEOUT": str(timeout_s)}
    t0 = time.monotonic()
    res = subprocess.run(["bash", "-c", f'. "{INSTALL_DEPS}"; set +e; {script}; echo "rc=$?"'], env=env,
                         capture_output=True, text=True, timeout=120, check=False)
    return res, time.monotonic() - t0


@pytest.fixture
def held(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[Path, subprocess.Popen[str]]]:
    """A lock file and the process holding it for request.param seconds."""
    lock = tmp_path / "lock-frontend"
    lock.touch()
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(lock), str(request.param)], stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
    yield lock, proc
    proc.kill()
    proc.wait()


@pytest.mark.parametrize("held", [60], indirect=True)
def test_a_held_lock_is_named_and_waited_for_up_to_the_timeout(held: tuple[Path, subprocess.Popen[str]],
                                                                 tmp_path: Path) -> None:
    lock, proc = held
    free = tmp_path / "lists-lock"
    free.touch()
    res, seconds = deps("wait_for_apt_locks", [free, lock], timeout_s=4)
    assert "rc=1" in res.stdout
    assert f"{lock} held by python" in res.stderr and f"(pid {proc.pid})" in res.stderr
    assert "waiting for another package manager" in res.stderr
    assert "still busy after 4 s" in res.stderr and "ZTBP_APT_LOCK_TIMEOUT" in res.stderr
    assert str(free) not in res.stderr  # only the lock that is held is named
    assert 4 <= seconds < 30


@pytest.mark.parametrize("held", [3], indirect=True)
def test_the_wait_ends_when_the_lock_is_released(held: tuple[Path, subprocess.Popen[str]]) -> None:
    lock, _ = held
    res, seconds = deps("wait_for_apt_locks", [lock], timeout_s=60)
    assert "rc=0" in res.stdout and "waiting for another package manager" in res.stderr
    assert 1 <= seconds < 30


def test_free_locks_and_missing_lock_files_do_not_wait(tmp_path: Path) -> None:
    free = tmp_path / "lock"
    free.touch()
    res, seconds = deps("wait_for_apt_locks", [free, tmp_path / "absent"], timeout_s=60)
    assert "rc=0" in res.stdout and res.stderr == "" and seconds < 5


@pytest.mark.parametrize("held", [3], indirect=True)
def test_apt_get_runs_once_the_lock_is_free(held: tuple[Path, subprocess.Popen[str]], tmp_path: Path) -> None:
    """apt_get waits first, then runs apt-get with apt's own lock timeout (a stand-in apt-get records its call)."""
    lock, proc = held
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "apt-get"
    fake.write_text(f'#!/bin/bash\necho "$@" > "{tmp_path}/apt-args"\nexit 0\n')
    fake.chmod(0o755)
    res, _ = deps(f'PATH="{bindir}:$PATH"; apt_get update -qq', [lock], timeout_s=60)
    assert "rc=0" in res.stdout and proc.poll() is not None  # it ran after the holder had gone
    args = (tmp_path / "apt-args").read_text().split()
    assert args[0] == "-o" and args[1].startswith("DPkg::Lock::Timeout=") and args[2:] == ["update", "-qq"]
    assert 0 < int(args[1].split("=")[1]) <= 60

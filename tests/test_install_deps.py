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


def sourced(script: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """SCRIPT run after sourcing install-deps.sh, with os-release, sources file and ENV of the test's own."""
    base = {**os.environ, "ZTBP_OS_RELEASE": str(tmp_path / "os-release"),
            "ZTBP_BACKPORTS_SOURCES": str(tmp_path / "backports.sources")}
    return subprocess.run(["bash", "-c", f'. "{INSTALL_DEPS}"; set +e; {script}; echo "rc=$?"'],
                          env={**base, **env}, capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.parametrize(("codename", "installed", "opt_out", "wanted"), [
    ("bookworm", "1:7.2+dfsg-7+deb12u18+b3", "", True),        # Debian 12's own QEMU: take 10 from backports
    ("bookworm", "", "", True),                                # none yet
    ("bookworm", "1:10.0.2+ds-2+deb13u1~bpo12+1", "", False),  # already the backports' 10
    ("bookworm", "1:7.2+dfsg-7+deb12u18+b3", "0", False),      # ZTBP_QEMU_BACKPORTS=0
    ("trixie", "1:10.0.7+ds-0+deb13u1", "", False),            # Debian 13 has 10 itself
    ("trixie", "1:7.2+dfsg-7", "", False),                     # no bookworm-backports off bookworm
    ("", "1:7.2+dfsg-7", "", False),                           # os-release without a codename
])
def test_qemu_comes_from_bookworm_backports_only_on_debian_12_below_version_10(
        tmp_path: Path, codename: str, installed: str, opt_out: str, wanted: bool) -> None:
    (tmp_path / "os-release").write_text(f'ID=debian\nVERSION_CODENAME="{codename}"\n' if codename else "ID=other\n")
    env = {"QEMU_VERSION": installed} | ({"ZTBP_QEMU_BACKPORTS": opt_out} if opt_out else {})
    res = sourced("qemu_from_backports", tmp_path, **env)
    assert res.stdout.strip() == ("rc=0" if wanted else "rc=1"), res.stderr


def test_the_backports_source_names_the_suite_and_debians_archive_key(tmp_path: Path) -> None:
    res = sourced("write_backports_sources", tmp_path)
    assert "rc=0" in res.stdout, res.stderr
    fields = dict(line.split(": ", 1) for line in (tmp_path / "backports.sources").read_text().splitlines()
                  if not line.startswith("#"))
    assert fields == {"Types": "deb", "URIs": "http://deb.debian.org/debian", "Suites": "bookworm-backports",
                      "Components": "main", "Signed-By": "/usr/share/keyrings/debian-archive-keyring.gpg"}
    assert list(tmp_path.iterdir()) == [tmp_path / "backports.sources"]  # no temporary file left


def test_the_packages_taken_from_backports_leave_the_missing_list(tmp_path: Path) -> None:
    res = sourced('without "qemu-system-x86 qemu-utils" fio qemu-system-x86 qemu-utils-extra qemu-utils', tmp_path)
    assert res.stdout.split() == ["fio", "qemu-utils-extra", "rc=0"]

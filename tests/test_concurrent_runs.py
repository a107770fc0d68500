"""Two commands on one run at once, and a command interrupted: a run's derived/ is made under a lock
(derived/.lock), so two ingests both succeed — the second waits, says so after a few seconds, and reuses the
first's result —; a reader never sees a partial file (every write is an atomic rename); Ctrl-C during an ingest
prints one line, exits 130 and leaves no temporary file, and the next command ingests again. Every command here
runs in a process of its own, as a user would start it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import polars as pl
import pytest

from ztbp import files
from ztbp.acquire.synth import write_run
from ztbp.errors import ZtbpError
from ztbp.files import locked
from ztbp.io.nvme import derived_lock, ingest
from ztbp.paths import RunPaths

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "pipelines")}


def ztbp(*argv: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "ztbp.cli", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=ENV)


def temporaries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob("*") if p.name.endswith((".tmp", ".old")))


@pytest.fixture(scope="module")
def big_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run whose ingest takes long enough to be caught in the middle (~1.5 M commands, ~70 MB of CSV)."""
    root = tmp_path_factory.mktemp("concurrent") / "big"
    write_run(root, "paper80", 1_500_000, seed=3)
    return root


@pytest.fixture
def fresh(big_run: Path) -> Iterator[Path]:
    """big_run without its derived/ (each test starts from a run never ingested)."""
    import shutil

    shutil.rmtree(big_run / "derived", ignore_errors=True)
    yield big_run
    shutil.rmtree(big_run / "derived", ignore_errors=True)


def test_two_ingests_at_once_both_succeed(fresh: Path) -> None:
    procs = [ztbp("ingest", str(fresh)), ztbp("zones", str(fresh))]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (_, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err
        assert "Traceback" not in err
    rows = pl.read_parquet(fresh / "derived" / "events.parquet").height
    assert f"{rows} rows read" in outs[0][0]
    assert temporaries(fresh) == []


def first_line(proc: subprocess.Popen[str], timeout: float) -> str:
    """The first line `proc` writes to its standard error (or "" at its end), waited for at most `timeout` s."""
    import threading

    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(proc.stderr.readline() if proc.stderr else ""), daemon=True)
    reader.start()
    reader.join(timeout)
    assert got, f"nothing on standard error within {timeout} s"
    return got[0]


def test_a_second_command_waits_says_so_and_reuses_the_result(fresh: Path) -> None:
    """The notice comes LOCK_NOTICE_S after the command reached the lock, however long its start took (a fixed sleep
    here once ended before a command started on a busy machine had even reached it)."""
    rp = RunPaths(fresh)
    with derived_lock(rp):  # this test is the other ztbp: it holds the lock while the command starts
        proc = ztbp("ingest", str(fresh))
        notice = first_line(proc, timeout=120)
        assert proc.poll() is None, proc.communicate()  # still waiting
        ingest(rp)
        made = (fresh / "derived" / "events.parquet").stat().st_mtime_ns
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert notice.strip() == (f"ztbp: waiting for another ztbp on {fresh} (it holds {fresh}/derived/.lock; "
                              f"at most {files.LOCK_WAIT_S / 60:.0f} min)") and err.strip() == "", (notice, err)
    assert "rows read" in out
    assert (fresh / "derived" / "events.parquet").stat().st_mtime_ns == made  # reused, not made again


@contextmanager
def held_elsewhere(lock: Path) -> Iterator[subprocess.Popen[str]]:
    """`lock` held by another process (flock) for the block."""
    code = ("import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT); "
            "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); time.sleep(60)")
    proc = subprocess.Popen([sys.executable, "-c", code, str(lock)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
        yield proc
    finally:
        proc.kill()
        proc.wait()


def test_the_wait_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lock = tmp_path / ".lock"
    monkeypatch.setattr(files, "LOCK_WAIT_S", 0.5)
    said: list[str] = []
    with held_elsewhere(lock), pytest.raises(ZtbpError, match="another ztbp has held"), \
            locked(lock, "the test", said.append):
        pass
    with locked(lock, "the test") as waited:  # the holder is gone: its lock went with it
        assert waited is False


def test_the_same_process_takes_its_lock_again(tmp_path: Path) -> None:
    lock = tmp_path / ".lock"
    with locked(lock, "x") as first, locked(lock, "x") as second:
        assert (first, second) == (False, False)


def test_a_reader_never_sees_a_partial_file(fresh: Path) -> None:
    rp = RunPaths(fresh)
    rows = ingest(rp).rows
    code = ("import sys; from pathlib import Path; from ztbp.io.nvme import ingest; from ztbp.paths import RunPaths; "
            "[ingest(RunPaths(Path(sys.argv[1]))) for _ in range(3)]")
    writer = subprocess.Popen([sys.executable, "-c", code, str(fresh)], env=ENV)
    reads = 0
    while writer.poll() is None:
        assert pl.read_parquet(fresh / "derived" / "events.parquet").height == rows
        reads += 1
    assert writer.returncode == 0 and reads > 0
    assert temporaries(fresh) == []


def _interrupt_when(proc: subprocess.Popen[str], ready: Callable[[], bool], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.001)
    proc.send_signal(signal.SIGINT)


@pytest.mark.parametrize("moment", ["reading", "writing"])
def test_ctrl_c_during_an_ingest(fresh: Path, moment: str) -> None:
    derived = fresh / "derived"
    proc = ztbp("ingest", str(fresh))
    if moment == "reading":  # the lock is taken, the CSV being parsed
        _interrupt_when(proc, lambda: (derived / ".lock").exists())
    else:  # events.parquet being written under its temporary name
        _interrupt_when(proc, lambda: derived.is_dir() and any(p.suffix == ".tmp" for p in derived.iterdir()))
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert err == "ztbp ingest: interrupted\n"
    assert temporaries(fresh) == [] and not (derived / "ingest.json").exists()
    after = ztbp("zones", str(fresh))  # the run is still valid: the next command ingests it
    out, err = after.communicate(timeout=300)
    assert after.returncode == 0, err
    assert pl.read_parquet(derived / "events.parquet").height > 0


def test_another_thread_waits_for_the_lock(tmp_path: Path) -> None:
    import threading

    lock, order = tmp_path / ".lock", []

    def other() -> None:
        with locked(lock, "x", order.append) as waited:
            order.append(waited)

    with locked(lock, "x"):
        t = threading.Thread(target=other)
        t.start()
        time.sleep(0.5)
        order.append("released")
    t.join(timeout=10)
    assert order == ["released", True]  # the thread waited, then got the lock (it held it first: another thread)


def test_no_lock_is_made_in_a_folder_that_is_no_run(tmp_path: Path) -> None:
    with pytest.raises(ZtbpError, match="does not exist"):
        ingest(RunPaths(tmp_path / "typo"))
    assert list(tmp_path.iterdir()) == []

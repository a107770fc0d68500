"""When the file system refuses a write — derived/ unwritable or a file, a full disk, `-o` under a file, synth or
import into a file — a command says so in one line and exits non-zero (74 unless a place has its own code), and no
temporary file or half-written file is left for a later command to trust.

The unwritable folder is real: as root (which writes anywhere) the command runs without CAP_DAC_OVERRIDE through
setpriv, else with the folder's mode 0555. The full disk is real where a small tmpfs can be mounted (root), and a
write that raises ENOSPC (polars' error and an OSError) is simulated everywhere."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest

from ztbp import files
from ztbp.acquire.synth import write_run
from ztbp.cli import main
from ztbp.errors import FileSystemError
from ztbp.files import atomic_dir, make_dir, write_atomic
from ztbp.io.nvme import ingest
from ztbp.io.parts import ingest_stream
from ztbp.paths import RunPaths

ROOT = Path(__file__).resolve().parents[1]
IMPORT_SAMPLE = ROOT / "tests" / "data" / "import" / "msr.csv"


def leftovers(folder: Path) -> list[str]:
    """Temporary files or folders of atomic writes anywhere under `folder`."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.name.endswith((".tmp", ".old")))


def one_line(capsys: pytest.CaptureFixture[str], rc: int, fragment: str, code: int = FileSystemError.code) -> str:
    err = capsys.readouterr().err
    assert rc == code, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert fragment in err, err
    return err


@pytest.fixture
def run(tmp_path: Path) -> Path:
    write_run(tmp_path / "run", "paper80", 500, seed=1)
    return tmp_path / "run"


# ---- a file where a folder should be ----------------------------------------------------------------------------
@pytest.mark.parametrize("command", ["ingest", "zones", "cluster"])
def test_derived_that_is_a_file(run: Path, command: str, capsys: pytest.CaptureFixture[str]) -> None:
    (run / "derived").write_text("not a folder\n")
    one_line(capsys, main([command, str(run)]), "derived is a file, not a folder")
    assert (run / "derived").read_text() == "not a folder\n" and leftovers(run) == []


def test_output_under_a_file(run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    for argv in (["perfetto", str(run), "-o", str(blocker / "t.pftrace")],
                 ["workload", "paper80", "-o", str(blocker / "job.fio")]):
        one_line(capsys, main(argv), f"{blocker} is a file, not a folder")
    # places that check their output first keep their own message and code
    one_line(capsys, main(["config", str(run), "-o", str(blocker / "c.json")]), "is a file, not a folder", code=2)
    one_line(capsys, main(["workload", "paper80", "-o", str(blocker / "sub" / "job.fio")]), "sub does not exist",
             code=2)
    assert blocker.read_text() == "x" and leftovers(tmp_path) == []


@pytest.mark.parametrize("where", ["a-file", "a-file/run"])
def test_synth_and_import_into_a_file(tmp_path: Path, where: str, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "a-file").write_text("x")
    target = str(tmp_path / where)
    # the run itself a file: refused before anything is written (contract.check_new_run, a usage error); a file on
    # the way to it: the file system's refusal
    fragment, code = (("a-file exists and is not a directory", 2) if where == "a-file" else
                      ("a-file is a file, not a folder", FileSystemError.code))
    one_line(capsys, main(["synth", target, "--reads", "100"]), fragment, code)
    one_line(capsys, main(["import", "--format", "msr", "--zone-size", "256M", str(IMPORT_SAMPLE), target]),
             fragment, code)
    assert (tmp_path / "a-file").read_text() == "x" and leftovers(tmp_path) == []


def test_make_dir_names_the_file_in_the_way(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    with pytest.raises(FileSystemError, match=r"cannot write .*f/a/b: .*f is a file, not a folder"):
        make_dir(tmp_path / "f" / "a" / "b")
    assert make_dir(tmp_path / "d" / "e").is_dir()


# ---- an unwritable derived/ -------------------------------------------------------------------------------------
def _without_write_rights(argv: list[str]) -> subprocess.CompletedProcess[str]:
    """`ztbp argv` in a process that cannot write where the folder modes forbid it (as root: without the
    capabilities that let root write anywhere)."""
    cmd = [sys.executable, "-m", "ztbp.cli", *argv]
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("root without setpriv: no way to drop the right to write anywhere")
        cmd = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", *cmd]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "pipelines")}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env, check=False)


@pytest.mark.parametrize("command", ["ingest", "zones", "stream"])
def test_unwritable_derived(run: Path, command: str) -> None:
    derived = run / "derived"
    derived.mkdir()
    derived.chmod(0o555)
    try:
        proc = _without_write_rights([command, str(run)])
    finally:
        derived.chmod(0o755)
    assert proc.returncode == FileSystemError.code, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "Permission denied" in proc.stderr and "not writable by this user" in proc.stderr
    assert list(derived.iterdir()) == []


# ---- a full disk ------------------------------------------------------------------------------------------------
@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs (a small synthetic run and its derived files fit)."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], capture_output=True,
                          check=False)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


def test_full_disk_real(small_disk: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_run(small_disk / "run", "paper80", 200, seed=1)
    filler = small_disk / "filler"
    free = shutil.disk_usage(small_disk).free
    filler.write_bytes(b"\0" * max(0, free - 64 * 1024))  # 64 KiB left: less than events.parquet
    run = small_disk / "run"
    one_line(capsys, main(["ingest", str(run)]), "no space left on its device")
    one_line(capsys, main(["stream", str(run)]), "no space left on its device")
    assert leftovers(small_disk) == []
    assert not (run / "derived" / "events.parquet").exists() and not (run / "derived" / "ingest.json").exists()
    filler.unlink()  # space again: the same run ingests
    assert main(["zones", str(run)]) == 0
    assert pl.read_parquet(run / "derived" / "events.parquet").height > 0


def test_full_disk_simulated_in_polars(run: Path, monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    real = pl.DataFrame.write_parquet

    def full(self: pl.DataFrame, file: object, **kw: object) -> None:
        if not isinstance(file, (str, Path)):  # ingest writes events.parquet to memory first, then whole to disk
            return real(self, file, **kw)  # type: ignore[arg-type]
        Path(file).write_bytes(b"PAR1 half")
        raise pl.exceptions.ComputeError("parquet: File out of specification: underlying IO error: No space left "
                                         "on device (os error 28)")

    monkeypatch.setattr(pl.DataFrame, "write_parquet", full)
    one_line(capsys, main(["stream", str(run)]), "no space left on its device")
    assert leftovers(run) == [] and not (run / "derived" / "events-parts").exists()


def test_full_disk_during_ingest(run: Path, monkeypatch: pytest.MonkeyPatch,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    """events.parquet is written whole from memory: the disk fills at that write (a file opened new)."""
    real_open = Path.open

    def full_open(self: Path, mode: str = "r", *args: object, **kw: object):  # noqa: ANN202
        if "x" in mode and self.name.startswith(".events.parquet"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self))
        return real_open(self, mode, *args, **kw)

    monkeypatch.setattr(Path, "open", full_open)
    one_line(capsys, main(["ingest", str(run)]), "no space left on its device")
    assert leftovers(run) == [] and not (run / "derived" / "events.parquet").exists()


def test_full_disk_simulated_in_a_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_open = Path.open

    def full_open(self: Path, mode: str = "r", *args: object, **kw: object):  # noqa: ANN202
        f = real_open(self, mode, *args, **kw)
        if "x" in mode:
            f.close()
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self))
        return f

    monkeypatch.setattr(Path, "open", full_open)
    with pytest.raises(FileSystemError, match=r"cannot write .*out\.json: no space left on its device"):
        write_atomic(tmp_path / "out.json", "{}")
    assert list(tmp_path.iterdir()) == []


# ---- a folder written whole -------------------------------------------------------------------------------------
def test_atomic_dir_replaces_whole_or_not_at_all(tmp_path: Path) -> None:
    target = tmp_path / "parts"
    with atomic_dir(target) as d:
        d.mkdir()
        (d / "a").write_text("1")
    with pytest.raises(RuntimeError), atomic_dir(target) as d:
        d.mkdir()
        (d / "b").write_text("half")
        raise RuntimeError("stop")
    assert sorted(p.name for p in target.iterdir()) == ["a"] and leftovers(tmp_path) == []
    with atomic_dir(target) as d:
        d.mkdir()
        (d / "c").write_text("2")
    assert sorted(p.name for p in target.iterdir()) == ["c"] and leftovers(tmp_path) == []


def test_stream_ingest_failing_keeps_the_earlier_dataset(run: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rp = RunPaths(run)
    first = ingest_stream(rp)
    monkeypatch.setattr(pl.DataFrame, "write_parquet", lambda *_a, **_k: (_ for _ in ()).throw(
        OSError(errno.ENOSPC, "No space left on device")))
    with pytest.raises(FileSystemError):
        ingest_stream(rp)
    assert (rp.events_parts / "dataset.json").is_file() and leftovers(run) == []
    monkeypatch.undo()
    assert ingest_stream(rp)["rows"] == first["rows"]


# ---- the last resort --------------------------------------------------------------------------------------------
def test_an_unexplained_os_error_is_one_line(run: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    def refuse(_run: RunPaths, _why: str | None = None) -> None:
        raise PermissionError(errno.EACCES, "Permission denied", "/somewhere/file")

    monkeypatch.setattr("ztbp.io.nvme._ingest", refuse)
    err = one_line(capsys, main(["ingest", str(run)]), "Permission denied: /somewhere/file")
    assert err.startswith("ztbp ingest: error: ")


def test_fs_error_reads_polars_and_os_errors(tmp_path: Path) -> None:
    polars_full = pl.exceptions.ComputeError("underlying IO error: No space left on device (os error 28)")
    assert "no space left" in str(files.fs_error(polars_full, tmp_path / "x"))
    assert files.fs_error(ValueError("not a file system error"), tmp_path / "x") is None
    assert files.fs_error(KeyboardInterrupt(), tmp_path / "x") is None
    other = FileNotFoundError(errno.ENOENT, "No such file or directory", str(tmp_path / "src.csv"))
    assert "src.csv" in str(files.fs_error(other, tmp_path / "x"))


def test_ingest_still_works(run: Path) -> None:
    assert ingest(RunPaths(run)).rows > 0 and leftovers(run) == []

"""Outputs never replace or follow what is not a regular file: `-o` naming a link or a device node is refused in
one line with a non-zero exit, and the link or node stays as it was."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ztbp.cli import main
from ztbp.errors import ZtbpError
from ztbp.files import atomic_writer, check_target, write_atomic
from ztbp.writeback.config import write_config

ROOT = Path(__file__).resolve().parents[1]
SAMPLE_RUN = ROOT / "tests" / "data" / "runs" / "sample-paper80"


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A file outside the output folder that a link in it points at."""
    outside = tmp_path / "outside"
    outside.mkdir()
    target = outside / "precious.txt"
    target.write_text("keep me\n")
    return target


def _link(tmp_path: Path, name: str, to: Path) -> Path:
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    link = out / name
    link.symlink_to(to)
    return link


def _one_line_error(capsys: pytest.CaptureFixture[str], rc: int, fragment: str) -> None:
    err = capsys.readouterr().err
    assert rc != 0
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert fragment in err, err


@pytest.mark.parametrize("target", ["/dev/full", "/dev/null"])
def test_device_nodes_are_refused(target: str) -> None:
    with pytest.raises(ZtbpError, match="not a regular file"):
        write_atomic(Path(target), "x")
    assert not Path(target).is_file()  # still a device node


def test_links_are_refused_even_to_regular_files(tmp_path: Path, victim: Path) -> None:
    link = _link(tmp_path, "cache-config.json", victim)
    with pytest.raises(ZtbpError, match="not a regular file"):
        write_config({"format": "x"}, link)
    assert link.is_symlink() and victim.read_text() == "keep me\n"


def test_atomic_writer_leaves_nothing_behind_when_it_fails(tmp_path: Path) -> None:
    dest = tmp_path / "trace.pftrace"
    with pytest.raises(RuntimeError), atomic_writer(dest) as f:
        f.write(b"half")
        raise RuntimeError("stop")
    assert list(tmp_path.iterdir()) == []


def test_atomic_writer_does_not_reuse_a_planted_temporary_name(tmp_path: Path, victim: Path) -> None:
    dest = tmp_path / "trace.pftrace"
    (tmp_path / "trace.pftrace.tmp").symlink_to(victim)  # the old fixed temporary name
    with atomic_writer(dest) as f:
        f.write(b"trace")
    assert dest.read_bytes() == b"trace" and victim.read_text() == "keep me\n"
    umask = os.umask(0o022)
    os.umask(umask)
    assert dest.stat().st_mode & 0o777 == 0o666 & ~umask  # as open() would make it, not mkstemp's 0600


def test_regular_files_are_still_replaced(tmp_path: Path) -> None:
    dest = tmp_path / "a.json"
    dest.write_text("old")
    write_atomic(dest, "new")
    assert check_target(dest).read_text() == "new"


def test_cli_config_refuses_a_link(tmp_path: Path, victim: Path, capsys: pytest.CaptureFixture[str]) -> None:
    link = _link(tmp_path, "cache-config.json", victim)
    _one_line_error(capsys, main(["config", str(SAMPLE_RUN), "-o", str(link)]), "not a regular file")
    assert victim.read_text() == "keep me\n"


def test_cli_config_refuses_a_device(capsys: pytest.CaptureFixture[str]) -> None:
    _one_line_error(capsys, main(["config", str(SAMPLE_RUN), "-o", "/dev/full"]), "not a regular file")
    assert Path("/dev/full").is_char_device()


def test_cli_workload_refuses_a_link(tmp_path: Path, victim: Path, capsys: pytest.CaptureFixture[str]) -> None:
    link = _link(tmp_path, "job.fio", victim)
    _one_line_error(capsys, main(["workload", "paper80", "-o", str(link)]), "not a regular file")
    prefill = _link(tmp_path, "prefill.fio", victim)
    job = tmp_path / "job.fio"
    _one_line_error(capsys, main(["workload", "paper80", "-o", str(job), "--prefill", str(prefill)]),
                    "not a regular file")
    assert victim.read_text() == "keep me\n"


def test_cli_perfetto_refuses_a_link(tmp_path: Path, victim: Path, capsys: pytest.CaptureFixture[str]) -> None:
    link = _link(tmp_path, "t.pftrace", victim)
    _one_line_error(capsys, main(["perfetto", str(SAMPLE_RUN), "-o", str(link)]), "not a regular file")
    assert victim.read_text() == "keep me\n"

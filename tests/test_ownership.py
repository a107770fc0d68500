"""Root under sudo (`sudo ztbp capture-host`, `sudo just apply`) leaves nothing root-owned in the user's tree: what
it creates in a folder of the user behind sudo (SUDO_UID/SUDO_GID) is handed to that user, and no bytecode is
written; numba's cache of compiled functions goes to the user's cache folder, never into the package.

The sudo tests run as root with SUDO_UID set to another user (65534, nobody) and read the owners back."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import ztbp
from ztbp.cli import main
from ztbp.files import hand_over_tree, sudo_owner

ROOT = Path(__file__).resolve().parents[1]
PKG = Path(ztbp.__file__).resolve().parent
USER = 65534
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="handing files to another user needs root")


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder of the user behind sudo, and the environment sudo leaves."""
    home = tmp_path / "home"
    home.mkdir()
    os.chown(home, USER, USER)
    monkeypatch.setenv("SUDO_UID", str(USER))
    monkeypatch.setenv("SUDO_GID", str(USER))
    return home


def owners(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root.parent)): (p.lstat().st_uid, p.lstat().st_gid) for p in [root, *root.rglob("*")]}


@as_root
def test_a_run_made_under_sudo_belongs_to_the_user(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = home / "runs" / "r"
    assert main(["synth", str(run), "--reads", "300"]) == 0
    assert main(["cluster", str(run)]) == 0  # ingest (events.parquet, ingest.json, .lock) and cluster.json
    assert main(["config", str(run), "-o", str(run / "derived" / "cache-config.json")]) == 0
    assert main(["stream", str(run)]) == 0  # the partitioned dataset, written as a folder
    capsys.readouterr()
    got = owners(home / "runs")
    for name in ("runs/r/raw/nvme.csv", "runs/r/derived/.lock", "runs/r/derived/events.parquet",
                 "runs/r/derived/cluster.json", "runs/r/derived/cache-config.json",
                 "runs/r/derived/events-parts/dataset.json"):
        assert name in got
    assert {k: v for k, v in got.items() if v != (USER, USER)} == {}


@as_root
def test_nothing_is_handed_over_outside_the_users_tree(home: Path, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    system = tmp_path / "system"  # root's folder
    system.mkdir()
    assert main(["synth", str(system / "r"), "--reads", "100"]) == 0
    capsys.readouterr()
    assert {v for v in owners(system / "r").values()} == {(0, 0)}


@as_root
def test_what_a_script_left_as_root_is_handed_over(home: Path) -> None:
    (home / "run" / "raw").mkdir(parents=True)
    (home / "run" / "raw" / "nvme.csv").write_text("x")
    (home / "run" / "console.log").write_text("x")
    hand_over_tree(home / "run")
    assert set(owners(home / "run").values()) == {(USER, USER)}


def test_who_is_behind_sudo(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SUDO_UID", raising=False)
    assert sudo_owner() is None
    monkeypatch.setenv("SUDO_UID", "0")  # sudo from root: nobody to hand over to
    assert sudo_owner() is None
    monkeypatch.setenv("SUDO_UID", "1000")
    monkeypatch.setenv("SUDO_GID", "1001")
    assert sudo_owner() == ((1000, 1001) if os.geteuid() == 0 else None)


def _python(code: str, **env: str) -> str:
    unset = ("NUMBA_CACHE_DIR", "SUDO_UID", "SUDO_GID", "PYTHONDONTWRITEBYTECODE")
    clean = {k: v for k, v in os.environ.items() if k not in unset}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300,
                          env={**clean, "PYTHONPATH": str(ROOT / "pipelines"), **env})
    return proc.stdout.strip()


@as_root
def test_no_bytecode_is_written_under_sudo() -> None:
    assert _python("import sys, ztbp; print(sys.dont_write_bytecode)", SUDO_UID=str(USER)) == "True"
    assert _python("import sys, ztbp; print(sys.dont_write_bytecode)") == "False"


def _numba_files() -> dict[Path, int]:
    return {p: p.stat().st_mtime_ns for p in PKG.rglob("*") if p.suffix in (".nbi", ".nbc")}


def test_numba_caches_in_the_users_cache_folder(tmp_path: Path) -> None:
    before = _numba_files()
    code = ("import numpy as np, numba; from ztbp.analysis.chains import chain_slot; "
            "print(chain_slot(np.full(8, -1, dtype=np.int64), 3)); print(numba.config.CACHE_DIR)")
    out = _python(code, ZTBP_CACHE=str(tmp_path / "cache"))
    assert out.splitlines()[1] == str(tmp_path / "cache" / "numba")
    assert any(p.suffix == ".nbi" for p in (tmp_path / "cache" / "numba").rglob("*"))
    assert _numba_files() == before  # nothing new or rewritten in the package folder


def test_numba_cache_folder_set_by_the_user_is_kept(tmp_path: Path) -> None:
    out = _python("import ztbp, numba; print(numba.config.CACHE_DIR)", NUMBA_CACHE_DIR=str(tmp_path / "mine"))
    assert out == str(tmp_path / "mine")


@as_root
def test_the_justfile_hands_what_sudo_just_built_to_the_user(home: Path, tmp_path: Path) -> None:
    """tools/hand-over.sh (after `just build` and `just setup`): the same rule as files.hand_over."""
    build = home / "tools" / "build"
    (build / "obj").mkdir(parents=True)
    (build / "obj" / "ztbp-ctl").write_text("x")
    os.chown(home / "tools", USER, USER)
    system = tmp_path / "system-build"
    system.mkdir()
    script = ROOT / "tools" / "hand-over.sh"
    subprocess.run(["bash", str(script), str(build), str(system), str(home / "missing")], check=True,
                   env={**os.environ, "SUDO_UID": str(USER), "SUDO_GID": str(USER)})
    assert set(owners(build).values()) == {(USER, USER)}
    assert system.stat().st_uid == 0  # not in the user's tree
    other = home / "tools" / "other"
    other.mkdir()
    subprocess.run(["bash", str(script), str(other)], check=True, env={**os.environ, "SUDO_UID": "0"})
    assert other.stat().st_uid == 0  # sudo from root: nothing to do

"""NVMeVirt's module cache of the VM tests (tests/nvmevirt_build.py), with a stand-in build.sh that counts its runs:
one build per set of inputs, a new one when an input changes, a failure that leaves nothing behind, two callers at
once served by one build. The real build.sh runs in NVMeVirt's VM tests (test_device_vm.py, test_loop_vm.py)."""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path

import nvmevirt_build
import pytest

STAND_IN = """#!/usr/bin/env bash
set -eu
rel=$1; out=$2; shift 2
echo "$rel $*" >> "$(dirname "$0")/runs"
sleep "${STAND_IN_SLEEP:-0}"
[ ! -e "$(dirname "$0")/fail" ] || { echo "make: *** [modules] Error 2" >&2; exit 2; }
mkdir -p "$out"
echo "module for $rel $*" > "$out/nvmev.ko"
echo "$out/nvmev.ko"
"""


@pytest.fixture
def source(tmp_path: Path) -> Path:
    src = tmp_path / "nvmevirt"
    src.mkdir()
    (src / "build.sh").write_text(STAND_IN)
    (src / "nvmevirt-ztbp-src.tar.gz").write_bytes(b"source v1")
    return src


def runs(source: Path) -> list[str]:
    return (source / "runs").read_text().splitlines() if (source / "runs").exists() else []


def test_a_module_is_built_once_per_inputs_in_build_shs_folder_name(source: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    first = nvmevirt_build.module("6.1.0-56-amd64", "zn540", cache=cache, source=source)
    again = nvmevirt_build.module("6.1.0-56-amd64", "zn540", cache=cache, source=source)
    assert first == again and first.read_text() == "module for 6.1.0-56-amd64 --profile zn540 --slow 1\n"
    assert first.parent.name == "6.1.0-56-amd64-zn540"  # the loop reads the read model from it
    assert runs(source) == ["6.1.0-56-amd64 --profile zn540 --slow 1"]
    slow = nvmevirt_build.module("6.1.0-56-amd64", "prototype", 20, cache=cache, source=source)
    assert slow.parent.name == "6.1.0-56-amd64-prototype-slow20" and len(runs(source)) == 2
    (source / "nvmevirt-ztbp-src.tar.gz").write_bytes(b"source v2")  # a new source: built again
    assert nvmevirt_build.module("6.1.0-56-amd64", "zn540", cache=cache, source=source) != first
    assert len(runs(source)) == 3
    assert first.is_file()  # the older build stays whole


def test_a_read_model_is_an_input_of_its_own_named_in_the_folder_as_build_sh_names_it(source: Path,
                                                                                       tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    model = tmp_path / "model.c"
    model.write_text("/* v1 */\n")
    v1 = hashlib.sha256(b"/* v1 */\n").hexdigest()[:12]  # build.sh: sha256sum of the file, 12 hex
    plain = nvmevirt_build.module("r", "zn540", cache=cache, source=source)
    first = nvmevirt_build.module("r", "zn540", cache=cache, source=source, read_model=model)
    assert first != plain and first.parent.name == f"r-zn540-m{v1}"
    assert runs(source)[-1] == f"r --profile zn540 --slow 1 --read-model {model}"
    assert nvmevirt_build.module("r", "zn540", cache=cache, source=source, read_model=model) == first
    model.write_text("/* v2 */\n")  # another model: another build, in another folder
    second = nvmevirt_build.module("r", "zn540", cache=cache, source=source, read_model=model)
    assert second.parent.name != first.parent.name and len(runs(source)) == 3 and first.is_file()


def test_a_failed_build_raises_with_its_error_and_leaves_nothing_in_the_cache(source: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    (source / "fail").touch()
    with pytest.raises(nvmevirt_build.BuildError, match="exited 2: make: .* Error 2"):
        nvmevirt_build.module("6.1.0-56-amd64", cache=cache, source=source)
    assert not list((cache / "nvmevirt-builds").glob("*/*/nvmev.ko"))
    assert not [p for p in (cache / "nvmevirt-builds").iterdir() if p.is_dir()]  # no half-made folder
    (source / "fail").unlink()
    assert nvmevirt_build.module("6.1.0-56-amd64", cache=cache, source=source).is_file()


def test_two_callers_at_once_wait_for_one_build(source: Path, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STAND_IN_SLEEP", "1")
    cache = tmp_path / "cache"
    got: list[Path] = []
    callers = [threading.Thread(target=lambda: got.append(nvmevirt_build.module("r", cache=cache, source=source)))
               for _ in range(2)]
    for t in callers:
        t.start()
    for t in callers:
        t.join(timeout=60)
    assert len(got) == 2 and got[0] == got[1] and runs(source) == ["r --profile zn540 --slow 1"]


def test_prebuild_builds_the_chains_modules_in_the_background(source: Path, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nvmevirt_build, "NVMEVIRT", source)
    monkeypatch.setattr(nvmevirt_build.paths, "CACHE", tmp_path / "cache")
    thread = nvmevirt_build.prebuild("r")
    assert thread is not None
    thread.join(timeout=60)
    assert sorted(runs(source)) == ["r --profile prototype --slow 20", "r --profile zn540 --slow 1"]
    nvmevirt_build.module("r", "prototype", nvmevirt_build.PROTOTYPE_SLOW)  # the test's call: from the cache
    assert len(runs(source)) == 2
    monkeypatch.setattr(nvmevirt_build, "NVMEVIRT", tmp_path / "absent")
    assert nvmevirt_build.prebuild("r") is None

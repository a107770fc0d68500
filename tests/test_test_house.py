"""The test house itself (tests/conftest.py): how pytest-xdist's workers get their work — the VM chains first, each
whole on one worker, a test file a unit — and NVMeVirt's tests waiting until the other chain has ended."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from conftest import UNIT_SECONDS, VM_CHAINS, pool_summary, work_order, work_unit

HERE = Path(__file__).resolve().parent


def test_a_chain_and_a_file_are_units() -> None:
    assert work_unit("tests/test_app_vm.py::test_x[bookworm]") == "vm-b"
    assert work_unit("tests/test_loop_vm.py::test_nvmevirt_y") == "vm-a"
    assert work_unit("tests/test_new_thing_vm.py::test_z") == "vm-a"  # a new VM file joins vm-a
    assert work_unit("tests/test_cluster.py::test_a[1]") == work_unit("tests/test_cluster.py::test_b") \
        == "tests/test_cluster.py"
    assert work_unit("notebooks/1-overview.ipynb::Cell 1") == "notebooks/1-overview.ipynb"


def test_work_order_sends_the_vm_chains_first_then_the_longest_then_the_largest_files() -> None:
    ids = (["tests/test_small.py::t"] + [f"tests/test_big.py::t[{i}]" for i in range(5)]
           + ["tests/test_report_browser.py::x", "tests/test_test_house.py::y"]
           + ["tests/test_capture_vm.py::a", "tests/test_app_vm.py::b", "tests/test_loop_vm.py::test_nvmevirt_c"])
    order = work_order(ids)
    assert [work_unit(i) for i in order[:3]] == ["vm-a", "vm-a", "vm-b"]  # chains in the order first met
    assert order[:3] == ["tests/test_capture_vm.py::a", "tests/test_loop_vm.py::test_nvmevirt_c",
                         "tests/test_app_vm.py::b"]
    assert UNIT_SECONDS["tests/test_report_browser.py"] > UNIT_SECONDS["tests/test_test_house.py"]
    assert order[3:5] == ["tests/test_report_browser.py::x", "tests/test_test_house.py::y"]  # measured, longest first
    assert order[5:] == [f"tests/test_big.py::t[{i}]" for i in range(5)] + ["tests/test_small.py::t"]
    assert sorted(order) == sorted(ids)


def test_the_long_units_named_are_test_files_that_exist() -> None:
    from ztbp import paths

    assert all((paths.ROOT / f).is_file() and work_unit(f"{f}::t") == f for f in UNIT_SECONDS)
    assert all(10 <= s <= 600 for s in UNIT_SECONDS.values())
    assert set(VM_CHAINS) == {"vm-a", "vm-b"}


FAKE_VM_TEST = '''
import os, time, pytest
pytestmark = pytest.mark.vm
{mark}
def test_{name}():
    start = time.time()
    time.sleep({sleep})
    with open("{log}", "a") as f:
        f.write(f"{name} {{os.environ['PYTEST_XDIST_WORKER']}} {{start}} {{time.time()}} {{os.nice(0)}}\\n")
'''


def test_nvmevirt_waits_for_the_other_chain_on_another_worker(tmp_path: Path) -> None:
    """Stand-in VM tests (they sleep) run through the project's conftest with two workers: each chain on a worker
    of its own, and NVMeVirt's test only once the other chain has passed its tests that judge timing or count
    events (its one-liner checks, which only compile, may still run)."""
    log = tmp_path / "log"
    shutil.copy(HERE / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    vm: stand-in\n    timing: stand-in\n")
    for file, name, sleep, mark in (("test_app_vm.py", "chain_b", 3, ""), ("test_one_liners_vm.py", "compile_b", 6, ""),
                                    ("test_capture_vm.py", "chain_a", 0, ""),
                                    ("test_loop_vm.py", "nvmevirt", 12, "@pytest.mark.timing")):
        (tmp_path / file).write_text(FAKE_VM_TEST.format(name=name, sleep=sleep, log=log, mark=mark))
    (tmp_path / "test_unit.py").write_text(FAKE_VM_TEST.replace("pytestmark = pytest.mark.vm", "").format(
        name="unit", sleep=0, log=log, mark=""))
    env = {**os.environ, "ZTBP_NO_IMAGE_PREBUILD": "1", "ZTBP_NO_GUEST_POOL": "1", "ZTBP_UNIT_NICE": "5"}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-n", "2",
                           "--basetemp", str(tmp_path / "bt"), "."],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    runs = {name: (worker, float(start), float(end))
            for name, worker, start, end, _ in (line.split() for line in log.read_text().splitlines())}
    nice = {name: int(n) for name, *_, n in (line.split() for line in log.read_text().splitlines())}
    assert runs["chain_a"][0] == runs["nvmevirt"][0] != runs["chain_b"][0] == runs["compile_b"][0]  # a worker a chain
    assert runs["nvmevirt"][1] >= runs["chain_b"][2]  # NVMeVirt after the other chain's timed tests, however late
    assert runs["nvmevirt"][1] < runs["compile_b"][2]  # ... and beside its compile-only checks
    # no test starts beside a timing test (a test already running goes on: compile_b): the unit test, handed to
    # vm-b's worker after compile_b, waits until NVMeVirt's ends (conftest.HUSH)
    assert runs["unit"][0] == runs["chain_b"][0] and runs["compile_b"][2] < runs["nvmevirt"][2] <= runs["unit"][1]
    assert "test_unit.py::test_unit while a timing test ran" in (tmp_path / "bt" / "hush-waits").read_text()
    assert not (tmp_path / "bt" / "hush").exists()
    # the unit tests and vm-b yield the CPU to vm-a's chain, NVMeVirt's at its end (conftest.UNIT_NICE)
    assert nice["unit"] == nice["chain_b"] == nice["compile_b"] == min(19, nice["chain_a"] + 5)  # (the limit: 19)
    assert nice["chain_a"] == nice["nvmevirt"] == os.nice(0)


def test_the_shared_guests_summary_gives_each_boot_and_command_its_seconds(tmp_path: Path) -> None:
    (tmp_path / "k1").mkdir()
    (tmp_path / "k1" / "config").write_text("image=/cache/image-bookworm-abc\nzones=64\nconv=1G\nsmp=2\n")
    (tmp_path / "boots").write_text("boot 2026-11-26T12:00:00Z tcg attempt 1\n")
    (tmp_path / "jobs").write_text("job 2026-11-26T12:01:00Z k1 app0/run\njob 2026-11-26T12:03:00Z k1 cycle0\n")
    (tmp_path / "seconds").write_text("boot k1 61\njob k1 app0/run 120 0\njob k1 cycle0 35 0\n")
    lines = pool_summary(tmp_path)
    assert lines[0] == "shared guests: 2 guest commands in 1 boots; hung boots killed and booted again: 0"
    assert lines[1] == ("  image-bookworm-abc (64 zones + conventional namespace, 2 CPUs; booted in 61 s): "
                        "2 commands: app0 120 s, cycle0 35 s")
    # with the CPU seconds of the guest's QEMU (vm/vmtest.sh; "?" where its pid was not found)
    (tmp_path / "seconds").write_text("boot k1 61 50\njob k1 app0/run 120 0 90\njob k1 cycle0 35 0 ?\n")
    lines = pool_summary(tmp_path)
    assert lines[0].endswith("booted again: 0; the guests' CPU: 140 s"), lines[0]
    assert lines[1] == ("  image-bookworm-abc (64 zones + conventional namespace, 2 CPUs; booted in 61 s (CPU 50 s)): "
                        "2 commands: app0 120 s (CPU 90 s), cycle0 35 s")
    # a hung boot is counted, and its line (where its console was kept, its last line) follows the guests
    hung = ("hung 2026-11-26T12:00:40Z silent for 30 s after 32700 bytes, attempt 1 (console: hung-k1-1.log; "
            "last line: x)")
    (tmp_path / "hung-boots").write_text(hung + "\n")
    (tmp_path / "boots").write_text("boot 2026-11-26T12:00:00Z tcg attempt 1\n"
                                    "boot 2026-11-26T12:00:41Z tcg attempt 2\n")
    lines = pool_summary(tmp_path)
    assert lines[0].startswith("shared guests: 2 guest commands in 2 boots; hung boots killed and booted again: 1;")
    assert lines[2] == f"  {hung}"

"""On a CPU QEMU's TCG emulates, importing the package keeps numpy to its SSE kernels (ztbp._emulated_cpu): there
numpy's AVX2 argsort returned arrays out of order and `ztbp cluster` died with SIGSEGV (the guest check is
tests/test_capture_vm.py's battery)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import ztbp


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No NPY_DISABLE_CPU_FEATURES and numpy not imported yet, as in a new `ztbp` process."""
    monkeypatch.delenv("NPY_DISABLE_CPU_FEATURES", raising=False)
    monkeypatch.delitem(sys.modules, "numpy", raising=False)
    return monkeypatch


def cpuinfo(tmp_path: Path, model: str) -> str:
    path = tmp_path / "cpuinfo"
    path.write_text(f"processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: {model}\nflags\t\t: fpu avx2\n")
    return str(path)


def test_an_emulated_cpu_gets_numpys_sse_kernels(tmp_path: Path, fresh: pytest.MonkeyPatch) -> None:
    import os

    ztbp._emulated_cpu(cpuinfo(tmp_path, "QEMU TCG CPU version 2.5+"))
    assert os.environ["NPY_DISABLE_CPU_FEATURES"] == "X86_V3 X86_V4"


@pytest.mark.parametrize("model", ["AMD EPYC 7B13", "Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz"])
def test_a_real_or_kvm_cpu_keeps_every_kernel(tmp_path: Path, fresh: pytest.MonkeyPatch, model: str) -> None:
    import os

    ztbp._emulated_cpu(cpuinfo(tmp_path, model))
    assert "NPY_DISABLE_CPU_FEATURES" not in os.environ
    ztbp._emulated_cpu(str(tmp_path / "missing"))  # no /proc/cpuinfo: nothing set, nothing raised
    assert "NPY_DISABLE_CPU_FEATURES" not in os.environ


def test_the_users_setting_and_a_loaded_numpy_are_left_alone(tmp_path: Path, fresh: pytest.MonkeyPatch) -> None:
    import os

    fresh.setenv("NPY_DISABLE_CPU_FEATURES", "AVX512F")
    ztbp._emulated_cpu(cpuinfo(tmp_path, "QEMU TCG CPU version 2.5+"))
    assert os.environ["NPY_DISABLE_CPU_FEATURES"] == "AVX512F"
    fresh.delenv("NPY_DISABLE_CPU_FEATURES")
    fresh.setitem(sys.modules, "numpy", object())  # too late: numpy read its setting when it loaded
    ztbp._emulated_cpu(cpuinfo(tmp_path, "QEMU TCG CPU version 2.5+"))
    assert "NPY_DISABLE_CPU_FEATURES" not in os.environ

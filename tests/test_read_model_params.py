"""analysis/read_model.py: the read model as its module parameters say, and its charges."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from ztbp.analysis.device_model import firmware_ns, profile
from ztbp.analysis.read_model import ReadModel
from ztbp.errors import ZtbpError


def test_params_round_trip() -> None:
    for m in (ReadModel(), ReadModel.fork_as_is(), ReadModel(policy="lru", entries=4096, hit_ns=0, miss_ns=None,
                                                              shortcut=True, skip_nand=False)):
        assert ReadModel.from_params(m.params()) == m


def test_other_module_parameters_are_left_to_the_module() -> None:
    m = ReadModel.from_params("memmap_start=4G memmap_size=1025M cpus=1,2 policy=lru skip_nand=N")
    assert m == ReadModel(policy="lru", skip_nand=False)
    assert ReadModel.from_params("") == ReadModel()


@pytest.mark.parametrize("words, says", [("policy=arc", "one of fork"), ("entries=0", "outside"),
                                         ("entries=x", "whole number"), ("hit_ns=1e9", "whole number"),
                                         ("miss_ns=2000000000", "outside"), ("shortcut=maybe", "1 or 0")])
def test_bad_parameters_are_one_clear_error(words: str, says: str) -> None:
    with pytest.raises(ZtbpError, match=says):
        ReadModel.from_params(words)


@pytest.mark.parametrize("slow", [1, 4, 10])
def test_fork_as_is_charges_what_the_fork_charges(slow: int) -> None:
    p, m = profile("zn540", slow), ReadModel.fork_as_is()
    for hit, on, listed, nbytes in itertools.product((False, True), (False, True), (False, True), (4096, 8192)):
        assert m.firmware_ns(p, hit, on, listed, nbytes) == firmware_ns(p, listed, hit, on, nbytes <= 4096)
        assert m.entry_hot(on, listed) == (not on or listed)  # the fork's priority 1


def test_faithful_charges_and_segments() -> None:
    p, m = profile("zn540", 1), ReadModel()
    assert m.firmware_ns(p, True, True, True, 4096) == 6_200
    assert m.firmware_ns(p, False, True, True, 4096) == 65_000  # no shortcut: a listed miss is a miss
    assert ReadModel(shortcut=True).firmware_ns(p, False, True, True, 4096) == 7_000
    assert [m.entry_hot(on, li) for on in (False, True) for li in (False, True)] == [False, False, False, True]
    assert not any(ReadModel(policy="lru").entry_hot(on, li) for on in (False, True) for li in (False, True))
    assert m.scaled(4) == ReadModel(hit_ns=24_800, miss_ns=260_000)
    assert ReadModel.fork_as_is().scaled(4) == ReadModel.fork_as_is()


def test_python_defaults_are_the_c_files() -> None:
    """The module's defaults (vm/read-model/ztbp_read_model.c) and ReadModel()'s: one model, written twice."""
    import re

    from ztbp.paths import ROOT

    src = (ROOT / "vm" / "read-model" / "ztbp_read_model.c").read_text()
    c = {m[1]: m[2] for m in re.finditer(r"^static (?:char \*|unsigned int |long |bool )(\w+)(?: = \"?(\w+)\"?)?;",
                                         src, re.M)}
    d = ReadModel()
    assert (c["policy"], int(c["entries"]), int(c["hit_ns"]), int(c["miss_ns"])) == (d.policy, d.entries, d.hit_ns,
                                                                                   d.miss_ns)
    assert (c["shortcut"] in (None, "false")) == (not d.shortcut) and (c["skip_nand"] == "true") == d.skip_nand


def _ko(tmp: Path, folder: str) -> Path:
    ko = tmp / folder / "nvmev.ko"
    ko.parent.mkdir()
    ko.write_bytes(b"\0")
    return ko


def test_module_parameters_reach_insmod_and_meta_only_for_a_read_model_build(tmp_path: Path) -> None:
    from ztbp.acquire.vm import Geometry, VmError, nvmevirt_build, nvmevirt_notes, vm_device
    from ztbp.devices import NVMEVIRT, QEMU

    built = _ko(tmp_path, "6.1.0-56-amd64-zn540-slow4-m0123456789ab")
    assert nvmevirt_build(built) == ("zn540", 4)
    dev = vm_device(NVMEVIRT, Geometry(), built, module_params="policy=lru hit_ns=100")
    assert dev.module_params == ReadModel(policy="lru", hit_ns=100).params()
    env = [a for a in dev.extra_args if a.startswith("ZTBP_KO_PARAMS=")][0]
    assert env.endswith(dev.module_params) and "memmap_start=" in env
    notes = nvmevirt_notes(built, dev.module_params)["read_service_model"]
    assert ReadModel.from_params(notes["read_model"]) == ReadModel(policy="lru", hit_ns=100)  # type: ignore[index]
    plain = _ko(tmp_path, "6.1.0-56-amd64-zn540")
    assert "read_model" not in nvmevirt_notes(plain)["read_service_model"]  # type: ignore[operator]
    with pytest.raises(VmError, match="not built with it"):
        vm_device(NVMEVIRT, Geometry(), plain, module_params="policy=lru")
    with pytest.raises(VmError, match="--backend nvmevirt"):
        vm_device(QEMU, Geometry(), module_params="policy=lru")
    with pytest.raises(ZtbpError, match="one of fork"):
        vm_device(NVMEVIRT, Geometry(), built, module_params="policy=arc")


def test_the_replay_runs_the_devices_read_model() -> None:
    """predict_service under a page-keyed model: a read hits when all its 4 KiB pages were cached; a DRAM hit has
    no NAND part; plain LRU ignores the zone check; the fork's model is today's replay."""
    import numpy as np
    import polars as pl

    from ztbp.analysis.device_replay import DeviceCache, predict_service

    # 512-byte LBAs: page p is LBAs 8p..8p+7; read 1: pages 0-1, read 2: page 1 (hit), read 3: pages 0-2 (miss: 2)
    slba, nlb = [0, 8, 0, 800], [16, 8, 24, 8]
    ev = pl.DataFrame({"ts_ns": [0, 10**7, 2 * 10**7, 3 * 10**7], "op": ["read"] * 4, "slba": slba, "nlb": nlb,
                       "lat_ns": [1] * 4})
    lru = ReadModel(policy="lru")
    out = predict_service(ev, [0], True, model=lru, cache=DeviceCache(16, lru))
    assert out["hit"].to_list() == [False, True, False, False]
    assert out.filter(pl.col("hit"))["nand_us"].to_list() == [0.0]
    assert out["fw_us"].to_list() == [65.0, 6.2, 65.0, 65.0]
    fork = predict_service(ev, [0], True)
    assert fork["hit"].to_list() == [False, False, True, False]  # keyed by start LBA: LBA 0 again
    assert DeviceCache(4, lru).replay(np.array([0, 0]), np.array([True, False])).tolist() == [False, True]

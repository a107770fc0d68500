"""analysis/read_model.py: the read model as its module parameters say, and its charges."""

from __future__ import annotations

import itertools

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

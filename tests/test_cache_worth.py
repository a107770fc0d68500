"""The A/B loop's one-sentence answer: what the configuration's cache alone is worth on its device
(present/loop_device.py cache_worth), on the loop's front page and in its text."""

from __future__ import annotations

from typing import Any

from loop_fixture import ab_blocks

from ztbp.analysis.read_model import ReadModel
from ztbp.present.loop import headline, speed, speed_text
from ztbp.present.loop_device import cache_worth, device_name


def _doc(model: str | None, holds: bool = True, hit_gain: float = 0.06) -> dict[str, Any]:
    blocks = ab_blocks(0.2, pairs=4, holds=holds)
    for b in blocks:  # the device's own counters: hit ratio up by hit_gain in the on blocks, a little noise
        on = b["arm"] == "on"
        ratio = 0.25 + hit_gain * on + 0.002 * (b["pair"] % 2)
        b["device"] = {"status_reads": 10_000, "status_hits": round(ratio * 10_000), "hit_ratio": ratio}
    arm = {c: {"reads": 100, "hit_ratio": 0.3, "mean_us": 900.0, "measured_mean_us": 1800.0}
           for c in ("all", "listed", "other")}
    service = {"profile": "zn540", "slow": 4, "read_model": model, "off": arm, "on": arm,
               "decomposition": {"change_us": -300.0, "cache_hits_us": -280.0, "listed_shortcut_us": 0.0,
                                 "rest_us": -20.0, "statement": "..."}}
    return {"backend": "nvmevirt", "workload": {"name": "paper80"}, "rounds": [{"round": 1}],
            "ab": {"listed": [1, 7, 11, 15, 19], "device_acted": holds, "blocks": blocks,
                   "service_model": service}}


def test_the_sentence_names_the_device_and_its_own_hit_ratio() -> None:
    doc = _doc(ReadModel().params())
    text = cache_worth(doc, speed(doc))
    assert text is not None
    assert text.startswith("What the configuration's cache alone is worth on NVMeVirt with the project's read "
                           "model: zone-priority LRU (the paper's Algorithm 4), no listed-zone shortcut")
    assert "its own hit ratio +6.0 pp [+6.0, +6.0] (higher)" in text and "read IOPS +19.1 % [" in text
    assert "cache hits explain -280 us and the listed-zone shortcut +0 us" in text
    assert text in speed_text(doc)
    item = [i for i in headline(doc) if i["key"] == "cache_worth"]
    assert item and item[0]["detail"] == text


def test_the_forks_own_build_is_named_by_its_build_record() -> None:
    """A loop on the fork's own build: its A/B replay names the fork's cache in the read model's words
    (control/ab.py writes the model's parameters for every device), its build record has no read model; a build
    with the read model set as the fork has one."""
    fork_words = ReadModel.fork_as_is().params()
    own = {**_doc(fork_words), "emulator": {"read_service_model": {"profile": "zn540", "slow": 4}}}
    assert device_name(own) == "NVMeVirt (ZTBP fork) as it is"
    text = cache_worth(own, speed(own))
    assert text is not None and text.startswith("What the configuration's cache alone is worth on NVMeVirt (ZTBP "
                                                "fork) as it is:")
    as_fork = {**_doc(fork_words), "emulator": {"read_service_model": {"profile": "zn540", "read_model": fork_words}}}
    assert device_name(as_fork) == "NVMeVirt with the project's read model set as the fork"
    lru = ReadModel(policy="lru").params()
    assert "plain LRU" in device_name({**_doc(fork_words), "emulator": {"read_service_model": {"read_model": lru}}})


def test_each_device_by_name() -> None:
    assert device_name(_doc(None)) == "NVMeVirt (ZTBP fork) as it is"
    assert device_name(_doc(ReadModel.fork_as_is().params())) == ("NVMeVirt with the project's read model set as "
                                                                  "the fork")
    assert "plain LRU" in device_name(_doc(ReadModel(policy="lru").params()))


def test_no_sentence_without_blocks_and_a_warning_when_the_device_held_nothing() -> None:
    plain = {"backend": "nvmevirt", "rounds": [{"round": 1}, {"round": 2}]}
    assert cache_worth(plain, speed(plain)) is None
    refused = _doc(None, holds=False)
    text = cache_worth(refused, speed(refused))
    assert text is not None and text.endswith("the device never held the configuration, so none of this is its effect.")

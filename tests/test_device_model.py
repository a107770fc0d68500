"""NVMeVirt's read path as the project models it (analysis/device_model.py, analysis/device_replay.py): its cache
replayed request by request, firmware times by class, per-request predictions and their decomposition."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ztbp.acquire.meta import device_meta
from ztbp.acquire.vm import Geometry, nvmevirt_build, nvmevirt_notes, vm_device
from ztbp.analysis.cache_policies import SegmentedLRU, lru_hits
from ztbp.analysis.device_model import (
    EMULATOR_MODELS,
    Service,
    credits_per_slot,
    firmware_ns,
    profile,
    read_chunks,
    read_service_record,
    service_ns,
    wrap_int32,
)
from ztbp.analysis.device_replay import (
    ZONE_LBAS,
    DeviceCache,
    chunk_table,
    decompose,
    device_times,
    predict_service,
    service_summary,
)
from ztbp.devices import NVMEVIRT, NVMEVIRT_NOTES, QEMU
from ztbp.errors import ZtbpError
from ztbp.paths import PROBES


def firmware_us(profile_name: str, slow: int, listed: bool, hit: bool, cluster_on: bool, small: bool) -> float:
    """firmware_ns in µs for a named profile built with --slow `slow`."""
    return firmware_ns(profile(profile_name, slow), listed, hit, cluster_on, small) / 1000


def device_hits(keys: list[int], priority: list[int], capacity: int) -> list[bool]:
    """The device's cache (priority 1 protected, kept from insertion) over (key, priority) requests."""
    run = SegmentedLRU(capacity, sticky=True)
    return run.feed_hits(np.asarray(keys, dtype=np.int64), np.asarray(priority) == 1).tolist()


def test_priority_two_entries_are_evicted_first_by_hand() -> None:
    # capacity 3, worked by hand (p1 entries | p2 entries, most recent first):
    # 10:1 [10|]  20:2 [10|20]  30:2 [10|30 20]  20:2 hit [10|20 30]  40:1 evicts 30 [40 10|20]
    # 30:2 evicts 20 [40 10|30]  50:2 evicts 30 [40 10|50]  10:1 hit [10 40|50]  60:1 evicts 50 [60 10 40|]
    # 70:2 no p2 left: evicts the LRU p1 entry 40 [60 10|70]  40:1 evicts 70 [40 60 10|]
    keys = [10, 20, 30, 20, 40, 30, 50, 10, 60, 70, 40]
    prio = [1, 2, 2, 2, 1, 2, 2, 1, 1, 2, 1]
    hits = device_hits(keys, prio, 3)
    assert [i for i, h in enumerate(hits) if h] == [3, 7]
    assert lru_hits(keys, 3) == 2  # plain LRU hits 20 and 30 instead (requests 3 and 5)


def test_an_entry_keeps_the_priority_it_entered_with() -> None:
    # entries put while the check is off have priority 1; after SET a hit on them in an unlisted zone keeps it
    keys, prio = [5, 6, 5, 7, 8, 5], [1, 1, 2, 2, 2, 2]
    assert device_hits(keys, prio, 2) == [False, False, True, False, False, True]
    moved = SegmentedLRU(2).feed_hits(np.asarray(keys, dtype=np.int64), np.asarray(prio) == 1)
    assert moved.tolist() == [False, False, True, False, False, False]  # Algorithm 4 moves 5 to the normal segment


@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(0, 40), min_size=1, max_size=300), st.integers(1, 12), st.booleans())
def test_hit_vector_counts_the_hits_of_feed(keys: list[int], cap: int, sticky: bool) -> None:
    ids = np.asarray(keys, dtype=np.int64)
    hot = ids % 3 == 0
    assert SegmentedLRU(cap, sticky=sticky).feed_hits(ids, hot).sum() == SegmentedLRU(cap, sticky=sticky).feed(ids, hot)
    assert SegmentedLRU(cap, zone_aware=False).feed_hits(ids).sum() == lru_hits(keys, cap)


# ---- the closed-form model (analysis/device_model.py) -----------------------------------------------------------

@pytest.mark.parametrize("slow", [1, 2, 5])
def test_zn540_firmware_times_are_the_issues_numbers_times_slow(slow: int) -> None:
    fw = functools.partial(firmware_us, "zn540", slow)
    # (listed, hit, cluster_on, small) -> µs at --slow 1
    known = {(True, False, True, True): 7, (True, False, True, False): 7,  # a listed miss, any size
             (False, False, True, True): 1_000, (False, False, True, False): 130_000,  # other misses
             (True, False, False, True): 1_000,  # the check off: no shortcut
             (True, True, True, True): 130, (False, True, False, False): 130}  # a hit, anywhere
    for args, us in known.items():
        assert fw(*args) == us * slow, args


def test_the_prototype_miss_wraps_in_32_bits() -> None:
    # FW_READ_LATENCY 32,150 x 1,000,000 ns does not fit an int: +2.09 s at --slow 1, -0.12 s at --slow 2
    assert wrap_int32(32_150 * 1_000_000) == 2_085_228_928
    assert firmware_us("prototype", 1, False, False, False, True) == pytest.approx(2_085_228.928)
    assert firmware_us("prototype", 2, False, False, False, False) == pytest.approx(-124_509.44)
    assert firmware_us("prototype", 20, False, True, False, True) == 643_000  # a hit: 32.15 ms x 20


def test_emulator_models_name_the_source_of_every_constant() -> None:
    zn = EMULATOR_MODELS["zn540"]
    assert {k: zn[k]["us"] for k in ("fw_hit_us", "fw_miss_listed_us", "fw_miss_4k_us", "nand_read_4k_us",
                                      "nand_read_us", "channel_4k_us", "pcie_4k_us")} == {
        "fw_hit_us": 130, "fw_miss_listed_us": 7, "fw_miss_4k_us": 1_000, "nand_read_4k_us": 5,
        "nand_read_us": 5.8, "channel_4k_us": 8.672, "pcie_4k_us": 1.28}
    for model in EMULATOR_MODELS.values():
        for key, entry in model.items():
            if key.endswith("_us"):
                assert entry["file"] == "ssd_config.h" and entry["symbol"].isupper() and entry["use"], key


def test_slow_scales_latencies_and_divides_bandwidth_in_integers() -> None:
    p = profile("zn540", 20)
    assert (p.fw_read, p.nand_4kb_read_ns, p.channel_mbs, p.pcie_mbs) == (2_600, 100_000, 22, 152)
    assert credits_per_slot(profile("zn540", 14).channel_mbs) == 1 and credits_per_slot(p.channel_mbs) == 0
    assert any("divides by zero" in c for c in read_service_record("zn540", 15)["caveats"])
    assert read_service_record("zn540", 1)["caveats"] == []
    with pytest.raises(ZtbpError, match="positive integer"):
        profile("zn540", 0)


def test_a_read_is_cut_at_flash_pages_and_spread_over_one_shot_pages() -> None:
    zn, proto = profile("zn540"), profile("prototype")
    kib32 = 32 << 10
    # 128 KiB from a zone's start: four 32 KiB flash pages, three in the first 96 KiB one-shot page (die 0)
    assert read_chunks(zn, 0, 256, ZONE_LBAS) == [(0, kib32), (0, kib32), (0, kib32), (1, kib32)]
    assert read_chunks(proto, 0, 256, ZONE_LBAS) == [(0, 64 << 10), (0, 64 << 10)]  # one die per zone
    assert read_chunks(zn, 4, 8, ZONE_LBAS) == [(0, 8192)]  # 4 KiB not 4 KiB-aligned: two pages, one NAND read


def test_service_times_by_hand() -> None:
    zn = profile("zn540")
    four_k = read_chunks(zn, 0, 8, ZONE_LBAS)
    assert service_ns(zn, 7_000, four_k, 4096).total == 7_000 + 5_000 + 8_672 + 1_280
    # 128 KiB hit: die 0 reads three flash pages one after the other (5.8 µs + 256 units x 271 ns each)
    big = read_chunks(zn, 0, 256, ZONE_LBAS)
    assert service_ns(zn, 130_000, big, 128 << 10) == Service(130_000, 3 * (5_800 + 69_376), 1_024 * 40,
                                                              130_000 + 3 * 75_176 + 40_960)
    # beyond the channel's 393 ms window nothing is transferred; in the past the read completes at once
    slow4 = profile("zn540", 4)
    assert service_ns(slow4, 520_000_000, big, 128 << 10).total == 520_000_000 + 3 * 23_200  # die 0: 3 tR
    assert service_ns(profile("prototype", 2), -124_509_440, four_k, 4096).total == 0
    assert read_service_record("zn540", 1)["read_4k_us"] == {"hit": 144.952, "miss_listed": 21.952,
                                                             "miss_other": 1014.952}


# ---- the replay on a trace and the decomposition (analysis/device_replay.py) ------------------------------------

def reads_frame(slbas: list[int], nlb: int = 8, lat_ns: int = 300_000) -> pl.DataFrame:
    n = len(slbas)
    return pl.DataFrame({"ts_ns": [1_000 * i for i in range(n)], "lat_ns": [lat_ns] * n, "op": ["read"] * n,
                         "slba": slbas, "nlb": [nlb] * n, "status": [0] * n})


def test_predict_service_replays_the_devices_cache_by_hand() -> None:
    # the hand-worked trace above: priority-1 keys in zone 0 (listed), priority-2 keys in zone 1 (zones of 1,024
    # LBAs), 4 KiB-aligned
    keys = [10, 20, 30, 20, 40, 30, 50, 10, 60, 70, 40]
    listed_keys = {10, 40, 60}
    ev = reads_frame([8 * k if k in listed_keys else 1_024 + 8 * k for k in keys])
    on = predict_service(ev, [0], True, cache_entries=3, zone_lbas=1_024)
    assert [i for i, h in enumerate(on["hit"]) if h] == [3, 7]
    assert on["service_us"].to_list()[:4] == [21.952, 1014.952, 1014.952, 144.952]  # listed miss, 2 misses, hit
    off = predict_service(ev, [0], False, cache_entries=3, zone_lbas=1_024)
    assert [i for i, h in enumerate(off["hit"]) if h] == [3, 5]  # plain LRU with the check off
    assert set(off.filter(~pl.col("hit"))["service_us"]) == {1014.952}
    summary = service_summary(on)
    assert (summary["listed"]["reads"], summary["listed"]["hits"], summary["other"]["hits"]) == (5, 1, 1)
    assert summary["all"]["measured_p50_us"] == 300


def test_a_shared_cache_carries_the_first_arms_entries_into_the_second() -> None:
    ev = reads_frame([0, 8, 16])
    cache = DeviceCache(8)
    assert not predict_service(ev, [], False, cache=cache)["hit"].any()
    assert predict_service(ev, [], True, cache=cache)["hit"].all()
    assert not predict_service(ev, [], True)["hit"].any()  # a fresh cache: cold again


def test_decompose_a_known_split() -> None:
    # before: two ordinary misses (1,000 µs); after: a listed hit (130 µs) and a listed miss (7 µs instead of 1,000)
    cols = ("class", "hit", "service_us", "real_us", "miss_real_us")
    before = pl.DataFrame([("other", False, 1000.0, 1000.0, 1000.0)] * 2, schema=cols, orient="row")
    after = pl.DataFrame([("listed", True, 130.0, 130.0, 1000.0), ("listed", False, 7.0, 1000.0, 1000.0)],
                         schema=cols, orient="row")
    d = decompose(before, after)
    assert (d["change_us"], d["cache_hits_us"], d["listed_shortcut_us"], d["rest_us"]) == (-931.5, -435, -496.5, 0)
    assert d["real_drive_keeps_us"] == -435 and d["real_drive_keeps_share"] == pytest.approx(435 / 931.5, abs=1e-4)
    assert "keeps 435.0 us of the 931.5 us gain (47%)" in d["statement"]
    assert decompose(after, before)["real_drive_keeps_share"] is None  # no gain


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 40), st.sampled_from([1, 8, 16, 64])), min_size=1,
                max_size=120), st.lists(st.integers(0, 5), max_size=3), st.integers(1, 10))
def test_with_the_check_off_listing_changes_nothing(reqs, listed, cap) -> None:
    ev = reads_frame([z * 4_096 + 8 * k for z, k, _ in reqs]).with_columns(
        pl.Series("nlb", [n for *_, n in reqs]))
    a = predict_service(ev, listed, False, cache_entries=cap, zone_lbas=4_096)
    b = predict_service(ev, [], False, cache_entries=cap, zone_lbas=4_096)
    assert a.drop("listed", "class").equals(b.drop("listed", "class"))
    # and the split adds up, with no shortcut when the check stays off
    on = predict_service(ev, listed, True, cache_entries=cap, zone_lbas=4_096)
    d = decompose(a, on)
    assert d["cache_hits_us"] + d["listed_shortcut_us"] + d["rest_us"] == pytest.approx(d["change_us"], abs=0.01)
    assert decompose(b, a)["listed_shortcut_us"] == 0 and d["rest_us"] == 0


# ---- the record in meta.json (acquire/vm.py nvmevirt_notes, probes/FORMAT.md) ------------------------------------

def test_the_module_folder_names_the_build(tmp_path: Path) -> None:
    ko = tmp_path / "6.1.0-50-amd64-prototype-slow20" / "nvmev.ko"
    assert nvmevirt_build(ko) == ("prototype", 20)
    assert nvmevirt_build(tmp_path / "6.1.0-50-amd64-zn540" / "nvmev.ko") == ("zn540", 1)
    assert nvmevirt_build(tmp_path / "mine" / "nvmev.ko") is None and nvmevirt_build(None) is None
    notes = nvmevirt_notes(ko)
    assert set(NVMEVIRT_NOTES) < set(notes)
    model = notes["read_service_model"]
    assert (model["profile"], model["slow"], model["constants"]["fw_hit_us"]) == ("prototype", 20, 643_000)
    unknown = nvmevirt_notes(tmp_path / "mine" / "nvmev.ko")["read_service_model"]
    assert unknown["profile"] is None and set(unknown["profiles"]) == {"zn540", "prototype"}
    json.dumps(notes)  # it goes into meta.json as is


def test_format_md_names_every_key_of_the_emulator_section() -> None:
    row = next(line for line in (PROBES / "FORMAT.md").read_text().splitlines() if line.startswith("| `emulator` |"))
    keys = set(NVMEVIRT_NOTES) | set(read_service_record("zn540", 1)) | {"build_from", "profiles"}
    keys |= set(read_service_record("zn540", 1)["constants"]) | set(read_service_record("zn540", 1)["read_4k_us"])
    assert sorted(k for k in keys if f"`{k}`" not in row) == []


def test_a_capture_on_nvmevirt_records_the_model_of_the_module_it_boots(tmp_path: Path) -> None:
    ko = tmp_path / "6.1.0-50-amd64-zn540-slow2" / "nvmev.ko"
    ko.parent.mkdir()
    ko.write_bytes(b"")
    dev = vm_device(NVMEVIRT, Geometry(), ko)
    meta = device_meta(dev, {"name": "test"}, {})
    assert meta["emulator"]["read_service_model"]["read_4k_us"]["miss_listed"] == 43.904  # 14 + 10 + 17.344 + 2.56
    assert "emulator" not in device_meta(vm_device(QEMU, Geometry()), {"name": "test"}, {})


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3 * 65_536 - 600), st.integers(1, 512)), min_size=1, max_size=40),
       st.sampled_from(["zn540", "prototype"]), st.sampled_from([1, 2, 4, 20]), st.integers(-2_000, 2_000_000))
def test_the_array_path_equals_the_closed_form(reqs, name, slow, fw_us) -> None:
    p = profile(name, slow)
    slba, nlb = np.array([r[0] for r in reqs]), np.array([r[1] for r in reqs])
    chunks = chunk_table(p, slba, nlb, ZONE_LBAS)
    assert [chunks.die[chunks.read == i].tolist() for i in range(len(reqs))] == [
        [d for d, _ in read_chunks(p, s, n, ZONE_LBAS)] for s, n in reqs]
    fw = np.full(len(reqs), fw_us * 1000)
    total, _ = device_times(p, chunks, np.arange(len(reqs)) * 10**9, fw, nlb * 512)
    assert total.tolist() == [service_ns(p, fw_us * 1000, read_chunks(p, s, n, ZONE_LBAS), n * 512).total
                              for s, n in reqs]


def test_a_miss_holds_its_die_for_the_reads_dispatched_after_it() -> None:
    # zn540: a 4 KiB miss at t=0 (1,000 µs of firmware time) and, 10 µs later, a hit on the same die (130 µs): the
    # hit's NAND read waits until the miss's has ended (1,013.672 µs) — unless the miss was a listed one (7 µs)
    ev = reads_frame([0, 8]).with_columns(pl.Series("ts_ns", [0, 10_000]))
    cache = DeviceCache()
    cache.replay(np.array([8]), np.array([True]))  # the second LBA is cached already
    off = predict_service(ev, [0], False, cache=cache, queueing=True)
    assert off["hit"].to_list() == [False, True]
    assert off["service_us"].to_list() == [1014.952, 144.952]
    assert off["queued_us"].to_list() == [1014.952, pytest.approx(1013.672 + 5 + 8.672 + 1.28 - 10)]
    cache = DeviceCache()
    cache.replay(np.array([8]), np.array([True]))
    on = predict_service(ev, [0], True, cache=cache, queueing=True)
    assert on["queued_us"].to_list() == [21.952, 144.952]
    d = decompose(off, on, queued=True)
    assert d["change_us"] == pytest.approx((21.952 + 144.952 - 1014.952 - 1018.624) / 2, abs=1e-3)
    assert d["cache_hits_us"] == 0 and d["times"] == "with the dies' queue"  # the same hits in both arms

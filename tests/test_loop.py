"""The loop's host-side rules (control/loop.py, analysis/loop.py, acquire/workload.py) on small inputs: the user's
fio job, the device counters, the kernel log, the latency split, the stop rule.
The real loop (VM, NVMeVirt) is in tests/test_loop_vm.py."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import polars as pl
import pytest
from loop_fixture import ab_blocks

from ztbp.acquire.loop import LoopSetup, Place
from ztbp.acquire.userjob import user_job
from ztbp.acquire.vm import Geometry, vm_device
from ztbp.acquire.workload import WorkloadOptions, fio_seed
from ztbp.analysis.loop import dmesg_figures, latency_split, measured_gain, warm_hit_ratio
from ztbp.control.ab import AbPlan, ab_next, ab_service, abba
from ztbp.control.loop import LoopRequest
from ztbp.control.round import STOP_INVALID, STOP_NOTHING, LoopState, decide
from ztbp.devices import QEMU
from ztbp.errors import ZtbpError
from ztbp.io.loop import read_applied


def test_user_job_points_every_filename_at_the_device() -> None:
    job = "[global]\nioengine=io_uring\nfilename=/dev/sdz\n[a]\nrw=randread\n[b]\nfilename = /tmp/x\nrw=read\n"
    out = user_job(job, "/dev/nvme0n1")
    assert "/dev/sdz" not in out and "/tmp/x" not in out
    assert out.count("filename=/dev/nvme0n1") + out.count("filename =/dev/nvme0n1") == 2


def test_user_job_without_filename_gets_one_in_global() -> None:
    assert "[global]\nfilename=/dev/nvme0n1" in user_job("[global]\nbs=4k\n[a]\nrw=randread\n", "/dev/nvme0n1")
    out = user_job("[a]\nrw=randread\nruntime=5\ntime_based=1\n", "/dev/nvme0n1")
    assert out.index("filename=/dev/nvme0n1") < out.index("[a]")


@pytest.mark.parametrize("bad", ["rw=randread\n", "[a]\ndirectory=/mnt\n"])
def test_user_job_refuses_what_cannot_trace_the_namespace(bad: str) -> None:
    with pytest.raises(ZtbpError):
        user_job(bad, "/dev/nvme0n1")


def test_dmesg_figures_takes_the_last_set_and_the_counters() -> None:
    log = ("[ 1.0] NVMeVirt: ZONE CLUSTER [1]=3\n" * 5 +
           "".join(f"[ 2.0] NVMeVirt: ZONE CLUSTER [{i}]={z}\n" for i, z in enumerate([1, 7, 11, 15, 19], 1)) +
           "[ 3.0] NVMeVirt: [CLUSTERING CURRENT INFO]\n[ 4.0] ZNS: Hit cnt= 12\n[ 4.0] ZNS: Fail cnt= 8\n"
           "[ 4.0] ZNS: Total read cnt= 20\n"
           # a print with no read (the first read after loading takes the counter from -1 to 0): not a wrap
           "[ 5.0] ZNS: Fail cnt= 0\n[ 5.0] ZNS: Hit cnt= 18446744073709551615\n[ 5.0] ZNS: Total read cnt= 0\n"
           "[ 6.0] ZNS: Fail cnt= 70\n[ 6.0] ZNS: Hit cnt= 30\n[ 6.0] ZNS: Total read cnt= 100\n")
    got = dmesg_figures(log)
    assert got["zones"] == [1, 7, 11, 15, 19]
    assert got["counters"] == {"hits": 42, "misses": 78, "reads": 120, "prints": 2, "hit_ratio": 0.35}
    assert dmesg_figures("nothing here") == {"zones": [], "counters": None}


def test_latency_split_listed_against_unlisted() -> None:
    ev = pl.DataFrame({"op": ["read"] * 5 + ["write"], "zone": [1, 1, 2, 3, 4, 1],
                       "lat_ns": [10_000, 20_000, 900_000, 1_000_000, 3_000_000, 5]})
    got = latency_split(ev, [1])
    assert got["listed"]["reads"] == 2 and got["unlisted"]["reads"] == 3 and got["all"]["reads"] == 5
    assert got["listed"]["p99_us"] == 20.0 and got["unlisted"]["p50_us"] == 1000.0
    assert latency_split(ev, [])["listed"] == {"reads": 0, "p50_us": None, "p99_us": None, "mean_us": None}


def _state(rounds: int = 3, min_gain: float = 0.01) -> LoopState:
    """A loop in the VM (the guest names its folder /ztbp/out) before its first round."""
    vm = vm_device(QEMU, Geometry())
    setup = LoopSetup(Place("/dev/nvme0n1", vm.lba_bytes, vm.zone_bytes, vm.nr_zones, vm), workload=None,  # type: ignore
                      fixed_job=None, root=Path("/nonexistent"), meta={}, env={}, files=[])
    req = LoopRequest(workload=WorkloadOptions(), rounds=rounds, min_gain=min_gain)
    return LoopState(req=req, setup=setup, progress=None)  # type: ignore


def test_each_round_runs_the_preset_with_its_own_seed_or_the_user_s_job_as_checked() -> None:
    wl = WorkloadOptions(name="uniform", reads=4000).build(device="/dev/nvme0n1", zone_bytes=32 << 20, nr_zones=64)
    setup = replace(_state().setup, workload=wl)
    assert setup.job(1) == wl.fio_job()
    assert f"randseed={fio_seed(wl.seed + 2)}" in setup.job(3) and setup.job(3) != setup.job(2)
    assert setup.job(3, reads=1000) == replace(wl, seed=wl.seed + 2, reads=1000).fio_job() != setup.job(3)
    user = replace(setup, fixed_job="[a]\nrw=randread\nfilename=/dev/nvme0n1\n")
    assert user.job(1) == user.job(4, reads=1000) == user.fixed_job


def _entry(r: int, recommend: bool, in_force: float, lru: float = 0.2) -> dict:
    return {"round": r, "config": {"recommend": recommend, "recommend_reason": "why", "file": f"round-{r:02d}/c.json"},
            "model": {"sent_hit_ratio": in_force, "lru": lru}, "measured_gain": None,
            "read_rows": 100, "fio_reads": 100, "lost": 0}


def test_decide_not_recommended_stops_with_nothing_sent() -> None:
    action, why = decide(_state(), _entry(1, False, 0.2))
    assert action == "stop" and why.startswith(STOP_NOTHING) and "nothing sent" in why


@pytest.mark.parametrize("rows, lost", [(99, 0), (100, 1), (1727, 12)])
def test_decide_takes_no_decision_on_an_incomplete_trace(rows: int, lost: int) -> None:
    """A round whose trace misses reads (or counted losses) stops the loop before its config is looked at."""
    action, why = decide(_state(), {**_entry(1, True, 0.2), "read_rows": rows, "lost": lost})
    assert action == "stop" and why.startswith(STOP_INVALID) and "nothing sent" in why


def test_decide_applies_until_the_rounds_or_the_gain_run_out() -> None:
    st = _state()
    first = _entry(1, True, 0.2)
    first["measured_gain"] = measured_gain(first, None)
    assert first["measured_gain"] == 0.0
    assert decide(st, first) == ("apply", "/ztbp/out/round-01/c.json")
    st.rounds.append(first)
    rising = _entry(2, True, 0.26)
    rising["measured_gain"] = measured_gain(rising, first)
    assert rising["measured_gain"] == pytest.approx(0.06)
    assert decide(st, rising)[0] == "apply"
    st.rounds.append(rising)
    flat = _entry(3, True, 0.262)
    flat["measured_gain"] = measured_gain(flat, rising)
    assert decide(_state(rounds=5), flat)[1].startswith("measured gain")
    assert decide(st, {**flat, "measured_gain": 0.05}) == ("stop", "3 rounds done")


def test_request_checks() -> None:
    with pytest.raises(ZtbpError, match="rounds"):
        LoopRequest(workload=WorkloadOptions(), rounds=0).validate()
    with pytest.raises(ZtbpError, match="nvmevirt-ko"):
        LoopRequest(workload=WorkloadOptions(), backend="nvmevirt").validate()


# ---- the A/B mode (`ztbp loop --ab PAIRS`) --------------------------------------------------------------------
def test_abba_pairs_alternate_their_order() -> None:
    assert abba(3) == [("on", 1), ("off", 1), ("off", 2), ("on", 2), ("on", 3), ("off", 3)]
    for n in range(2, 9):  # every pair has one block of each arm, and the arms balance over every two pairs
        arms = abba(n)
        assert len(arms) == 2 * n
        assert all({a for a, p in arms if p == k} == {"on", "off"} for k in range(1, n + 1))
        assert sum(i for i, (a, _) in enumerate(arms) if a == "on") - sum(
            i for i, (a, _) in enumerate(arms) if a == "off") == (0 if n % 2 == 0 else -1)


def test_ab_next_switches_only_when_the_arm_changes() -> None:
    ab = AbPlan(config="/ztbp/out/round-01/derived/cache-config.json", listed=[1, 7], arms=abba(2), reads=1000)
    # blocks: on off off on; after round 1 the loop applies (block 1 on)
    assert ab_next(ab, 1) == ("clear", "")
    assert ab_next(ab, 2)[0] == "skip" and "keeps the configuration off" in ab_next(ab, 2)[1]
    assert ab_next(ab, 3) == ("apply", ab.config)
    assert ab_next(ab, 4) == ("stop", "A/B done: 2 pairs of blocks")


def test_ab_request_bounds() -> None:
    for pairs, reads, what in ((1, 20_000, "--ab 1:"), (51, 20_000, "--ab 51 "), (2, 10, "--ab-reads 10 ")):
        with pytest.raises(ZtbpError, match=what):
            LoopRequest(workload=WorkloadOptions(), ab_pairs=pairs, ab_reads=reads).validate()
    LoopRequest(workload=WorkloadOptions(), ab_pairs=5, ab_reads=5000).validate()
    assert LoopRequest(workload=WorkloadOptions()).total_rounds == 3
    assert LoopRequest(workload=WorkloadOptions(), ab_pairs=5).total_rounds == 11


def test_decide_ignores_the_round_count_in_the_ab_mode() -> None:
    st = _state(rounds=1)
    assert decide(st, _entry(1, True, 0.2))[0] == "stop"
    st.req = LoopRequest(workload=WorkloadOptions(), rounds=1, ab_pairs=2)
    assert decide(st, _entry(1, True, 0.2))[0] == "apply"


def test_read_applied_tells_a_stop_from_a_set(tmp_path: Path) -> None:
    box = tmp_path / ".loop"
    box.mkdir()
    (box / "applied-02.env").write_text('stop_rc=0\nstop_json={"result": 0}\nstatus=4242\n')
    (box / "applied-03.env").write_text('set_rc=30\nset_json={"message": "refused"}\ninfo_rc=30\nstatus=\n')
    assert read_applied(tmp_path, 2) == {"action": "clear", "stop_exit_code": 0, "stop_ok": True,
                                         "status_after_stop": 4242}
    got = read_applied(tmp_path, 3)
    assert got is not None and got["action"] == "apply" and not got["set_ok"] and got["set_message"] == "refused"
    assert read_applied(tmp_path, 4) is None


def _reads(pages: list[int], zone_pages: int = 8) -> pl.DataFrame:
    """Read events of 4 KiB pages (512-byte LBAs, zones of `zone_pages` pages)."""
    return pl.DataFrame({"op": ["read"] * len(pages), "slba": [p * 8 for p in pages], "nlb": [8] * len(pages),
                         "zone": [p // zone_pages for p in pages]})


def test_warm_hit_ratio_carries_the_cache_over() -> None:
    meta = {"lba_bytes": 512, "zone_size_lba": 64}
    cache_mib = 4 * 4096 / (1 << 20)  # four pages
    block = _reads([0, 1, 2, 3])
    cold, hist = warm_hit_ratio(None, block, meta, cache_mib, 4, [])
    assert cold == 0.0 and hist.height == 4
    warm, hist = warm_hit_ratio(hist, block, meta, cache_mib, 4, [])
    assert warm == 1.0 and hist.height == 8  # the same four pages again: every one is still cached
    other, _ = warm_hit_ratio(hist, _reads([40, 41, 42, 43]), meta, cache_mib, 4, [])
    assert other == 0.0


def _ab_state(tmp: Path, holds: bool) -> tuple[AbPlan, Path, dict]:
    """An A/B session of synthetic runs: round 1 and two blocks (on, off) of paper80 reads, on an NVMeVirt zn540
    module built with --slow 10 (as its folder's name says): the plan, the loop directory and its runs' meta.json."""
    import json

    from ztbp.acquire.vm import nvmevirt_notes
    from ztbp.cli import main as cli

    for r, seed in ((1, 1), (2, 2), (3, 3)):
        assert cli(["synth", str(tmp / f"round-{r:02d}"), "--reads", "3000", "--seed", str(seed)]) == 0
    meta = json.loads((tmp / "round-01" / "meta.json").read_text())
    meta["emulator"] = nvmevirt_notes(tmp / "6.1.0-56-amd64-zn540-slow10" / "nvmev.ko")
    ab = AbPlan(config="c.json", listed=[1, 7, 11, 15, 19], arms=abba(2), reads=3000, blocks=[
        {"run": "round-02", "arm": "on", "pair": 1, "device_holds": holds},
        {"run": "round-03", "arm": "off", "pair": 1, "device_holds": False}])
    return ab, tmp, meta


@pytest.mark.parametrize("holds", [True, False])
def test_ab_service_splits_the_predicted_change(tmp_path: Path, holds: bool) -> None:
    """The emulator's model over the blocks: with the configuration held, the listed zones' misses take the
    shortcut; when the device never held it (SET refused), the shortcut is zero and so is most of the change."""
    res = ab_service(*_ab_state(tmp_path, holds))
    assert res is not None and (res["profile"], res["slow"], res["cache_entries"]) == ("zn540", 10, 16_384)
    d = res["decomposition"]
    assert d["change_us"] == pytest.approx(d["cache_hits_us"] + d["listed_shortcut_us"] + d["rest_us"], abs=1e-6)
    assert res["off"]["all"]["reads"] == res["on"]["all"]["reads"] == 3000
    if holds:  # zn540 at --slow 10: a listed miss costs 70 us of firmware instead of 10,000 us
        assert d["listed_shortcut_us"] < -1000 and res["on"]["listed"]["mean_us"] < res["off"]["listed"]["mean_us"]
    else:
        assert d["listed_shortcut_us"] == 0


def test_ab_service_needs_a_known_module(tmp_path: Path) -> None:
    ab, root, meta = _ab_state(tmp_path, True)
    meta["emulator"] = None  # QEMU
    assert ab_service(ab, root, meta) is None


def test_speed_text_gives_the_verdict_with_its_interval_and_the_paper_beside() -> None:
    from ztbp.io.loop import read_loop
    from ztbp.present.loop import speed_figure, speed_text

    plain = read_loop(Path(__file__).parent / "data" / "loops" / "sample-nvmevirt")
    text = speed_text(plain)  # two rounds of a plain loop: fio's totals, the run-to-run noise assumed
    assert "no difference within noise" in text and "two separate rounds" in text and "Table II" in text
    doc = {"workload": {"name": "paper60"}, "rounds": [{"round": 1}],
           "ab": {"listed": [1, 7], "device_acted": True, "blocks": ab_blocks(0.5)}}
    text = speed_text(doc)
    assert "verdict: read IOPS (fio) +4" in text and text.count("faster") >= 3 and "Table III" in text
    assert "refused SET" not in text
    refused = {**doc, "ab": {**doc["ab"], "device_acted": False, "blocks": ab_blocks(0.0, holds=False)}}
    text = speed_text(refused)
    assert "refused SET" in text and "verdict: no verdict: the device never held the configuration" in text
    assert text.count("faster") == 0
    assert len(speed_figure(doc).data) >= 1


@pytest.mark.parametrize("holds", [True, False])
def test_each_rounds_cache_replay_is_the_one_ab_service_replays(tmp_path: Path, holds: bool) -> None:
    """The loop replays the device's cache round after round on one cache, each round under the zone check the
    device held (round 1: off): the same hits per block as the emulator's read model over the session."""
    from ztbp.analysis.device_replay import device_cache, replay_hits
    from ztbp.io.run import load

    ab, root, meta = _ab_state(tmp_path, holds)
    res = ab_service(ab, root, meta)
    assert res is not None
    cache, zone_lbas = device_cache(meta), meta["zone_size_lba"]
    first = replay_hits(load(tmp_path / "round-01").events, [], False, cache, zone_lbas)
    on = replay_hits(load(tmp_path / "round-02").events, ab.listed, holds, cache, zone_lbas)
    off = replay_hits(load(tmp_path / "round-03").events, ab.listed, False, cache, zone_lbas)
    assert first["reads"] == on["reads"] == off["reads"] == 3000
    assert (on["hits"], on["hit_ratio"]) == (res["on"]["all"]["hits"], res["on"]["all"]["hit_ratio"])
    assert (off["hits"], off["hit_ratio"]) == (res["off"]["all"]["hits"], res["off"]["all"]["hit_ratio"])
    assert first["hits"] < on["hits"]  # the same hot zones read again: the cache carried over


def test_a_rounds_device_figures_with_the_replay_beside() -> None:
    from ztbp.analysis.loop import with_replay

    dev = {"status_reads": 2000, "status_hits": 700, "hit_ratio": 0.35, "hit_ratio_note": None}
    got = with_replay(dev, {"reads": 2000, "hits": 660, "hit_ratio": 0.33})
    assert got == {**dev, "replay_reads": 2000, "replay_hits": 660, "replay_hit_ratio": 0.33,
                   "device_minus_replay": 0.02}
    none = with_replay({**dev, "hit_ratio": None}, {"reads": 2000, "hits": 660, "hit_ratio": 0.33})
    assert none["device_minus_replay"] is None and none["replay_hit_ratio"] == 0.33
    assert with_replay(dev, None)["replay_hit_ratio"] is None


@pytest.mark.parametrize(("block_reads", "at_least"), [(0, 80_000), (5_000, 80_000), (300_000, 300_000)])
def test_the_probes_map_holds_an_ab_block_longer_than_round_one(tmp_path: Path, block_reads: int,
                                                                at_least: int) -> None:
    """ZTBP_EXPECTED (the probe's map size, probe-lib.sh MAP SIZE) covers the set-up with round 1 and each A/B block:
    blocks of 300,000 reads after a round of 80,000 once lost 117,665 rows a block (counted) to a map sized for
    round 1."""
    from ztbp.acquire.loop import LoopCapture, set_up_loop

    req = LoopCapture(workload=WorkloadOptions(reads=80_000), out=str(tmp_path / "loop"))
    setup = set_up_loop(req, 9, tmp_path, lambda _s: None, lambda: tmp_path / "ztbp-ctl", block_reads=block_reads)
    expected = int(setup.env["ZTBP_EXPECTED"])
    assert expected >= at_least and expected >= setup.workload.expected_commands
    assert expected == max(setup.workload.expected_commands, block_reads)

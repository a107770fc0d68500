"""The read model on the device (vm/read-model/ztbp_read_model.c built into NVMeVirt with build.sh --read-model):
the unmodified module and the read-model module in its fork-as-is setting, each in a guest command of its own and
loaded fresh there, serve the same 2,000 4 KiB reads at QD 1 (O_DIRECT; before SET, after SET of five zones, after
STOP), and the device's STATUS after every read says which hit (vm/guest/read-replay.sh, read-replay.py). The two
builds must hit read for read as the fork's cache replayed in Python does (analysis/device_replay.DeviceCache),
and give every read its latency class. In the read-model command the module is loaded three more times with a
64-entry cache — fork, zone_lru and lru — so that evictions happen, each checked against its Python model.
Skipped without ../shared/nvmevirt.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import nvmevirt_build
import pytest
from test_read_model import Op, python_hits, reads_of

from ztbp import paths
from ztbp.acquire.vm import NvmevirtPlan, ensure_image, run_in_guest
from ztbp.analysis.device_replay import ZONE_LBAS
from ztbp.writeback.ctl import ensure_ctl

pytestmark = pytest.mark.vm

READ_MODEL = paths.ROOT / "vm" / "read-model" / "ztbp_read_model.c"
SECTOR = 512
PAGES_PER_ZONE = ZONE_LBAS * SECTOR // 4096
SET_ZONES = (1, 2, 3, 4, 5)
PHASES = (600, 800, 600)  # reads before SET, after SET, after STOP
HOT_PAGES = 100  # half the reads go to these pages (over zones 0-7), half to pages read once
#: the fork as it is, from the read model: its cache (16,384 entries), its charges and shortcut, the NAND read paid
FORK = "policy=fork,hit_ns=-1,miss_ns=-1,shortcut=1,skip_nand=0"
SMALL = 64  # entries of the three runs whose caches fill
RUNS = {"plain": ("plain", None, 16_384), "fork": ("model", FORK, 16_384),
        "fork64": ("model", f"{FORK},entries={SMALL}", SMALL),
        "zone_lru64": ("model", f"policy=zone_lru,entries={SMALL}", SMALL),
        "lru64": ("model", f"policy=lru,entries={SMALL}", SMALL)}
#: a 4 KiB miss outside the listed zones costs the fork 1,000 us of firmware time: the device completes it no
#: sooner; a hit (130 us) or a listed-zone miss (7 us) is measured far below it
SLOW_US = 1_000


def plan(seed: int = 49) -> list[Op]:
    rng = np.random.default_rng(seed)
    hot = rng.choice(8 * PAGES_PER_ZONE, HOT_PAGES, replace=False)
    steps: list[Op] = []
    for phase, n in enumerate(PHASES):
        steps += [("S", SET_ZONES)] if phase == 1 else [("T",)] if phase == 2 else []
        pages = np.where(rng.random(n) < 0.5, rng.choice(hot, n), rng.integers(8 * PAGES_PER_ZONE, size=n))
        steps += [("R", int(p) * 8, 8, int(p) // PAGES_PER_ZONE) for p in pages]
    return steps


def plan_text(steps: list[Op]) -> str:
    return "".join(f"R {s[1] * SECTOR}\n" if s[0] == "R" else f"S {','.join(map(str, s[1]))}\n" if s[0] == "S"
                   else "T\n" for s in steps)


def device_reads(out: Path, name: str) -> dict[str, np.ndarray]:
    """A run's reads: latency (us), STATUS reads and hits after each, and each read's hit from the hit count."""
    lines = (out / f"{name}.csv").read_text().splitlines()
    before = tuple(int(x) for x in lines[0].split(":")[1].split())
    rows = np.array([[int(x) for x in line.split(",")] for line in lines[2:]], dtype=np.int64)
    reads, hits = rows[:, 3], rows[:, 4]
    # the module's counters start at -1: its first read resets both to 0, so that read's own hit is not counted
    assert before == (0xFFFF_FFFF, 0xFFFF_FFFF) and reads[0] == hits[0] == 0, (name, before, reads[:3], hits[:3])
    assert reads.tolist() == list(range(len(reads))), name  # every read counted once, no other read
    step = np.diff(hits, prepend=0)
    assert set(step.tolist()) <= {0, 1}, name
    return {"lat_us": rows[:, 2] / 1000, "hit": step.astype(bool)}


@pytest.fixture(scope="module")
def replays(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, np.ndarray]]:
    if (why := nvmevirt_build.available()) is not None:
        pytest.skip(f"{why}: the read model is checked on NVMeVirt's module; build it as ../shared/nvmevirt/"
                    "README.md says")
    release = nvmevirt_build.guest_release(ensure_image(echo=lambda s: None))
    modules = {"plain": nvmevirt_build.module(release, "zn540"),
               "model": nvmevirt_build.module(release, "zn540", read_model=READ_MODEL)}
    ensure_ctl()
    text = plan_text(plan())
    got: dict[str, dict[str, np.ndarray]] = {}
    for boot, ko in modules.items():
        runs = [f"{name}:{params}" if params else name for name, (b, params, _) in RUNS.items() if b == boot]
        out = tmp_path_factory.mktemp(f"read-model-{boot}")
        (out / "plan.txt").write_text(text)
        res = run_in_guest("bash /ztbp/src/vm/guest/read-replay.sh", out, timeout=2400,
                           env={"ZTBP_REPLAY_RUNS": " ".join(runs)}, extra_args=NvmevirtPlan().vmtest_args(ko))
        status = dict(line.split("=", 1) for line in (out / "runs.env").read_text().splitlines() if "=" in line)
        assert res.status == 0 and all(status.get(f"{r.split(':')[0]}_rc") == "0" for r in runs), \
            (status, (out / "console.log").read_text(errors="replace")[-3000:])
        for r in runs:
            name = r.split(":")[0]
            got[name] = device_reads(out, name)
            if boot == "model":  # the model's own line at load: the settings it runs with
                said = [line for line in (out / f"{name}-load.txt").read_text().splitlines()
                        if "ztbp_read_model: policy=" in line]
                assert len(said) == 1 and f"policy={RUNS[name][1].split(',')[0].split('=')[1]} " in said[0], said
                print(name, said[0].split("] ", 1)[-1])
    return got


@pytest.mark.timing  # first in the file: the guest runs (the module's fixture) while the other workers wait
def test_nvmevirt_read_model_gives_each_read_the_forks_latency_class(replays: dict[str, dict[str, np.ndarray]]
                                                                     ) -> None:
    """A 1,000 us miss (unlisted, or any while the check is off) against a hit or a listed-zone miss. The device
    completes a miss no sooner than its firmware time, so every predicted miss must measure at least SLOW_US in
    both builds; a fast read measures under it unless the emulation (its busy-polling threads on a shared host
    under TCG) delayed it, which says nothing about its class: the fast class must show, not every fast read."""
    r = reads_of(plan())
    slow = ~python_hits("fork", 16_384, r) & ~(r["check_on"] & r["in_set"])
    measured = {name: replays[run]["lat_us"] >= SLOW_US for name, run in (("plain", "plain"), ("model", "fork"))}
    for name, run in (("plain", "plain"), ("model", "fork")):
        lat = replays[run]["lat_us"]
        print(f"{name}: p50 {np.median(lat[~slow]):,.0f} us over {int((~slow).sum())} hits and listed misses, "
              f"{np.median(lat[slow]):,.0f} us over {int(slow.sum())} 1,000 us misses; of the fast ones "
              f"{int((~measured[name] & ~slow).sum())} measured under {SLOW_US} us")
        assert measured[name][slow].all(), (name, np.flatnonzero(slow & ~measured[name])[:10])
        assert (~measured[name] & ~slow).sum() >= 0.05 * (~slow).sum(), name
    print(f"reads measured fast in both builds {int((~measured['plain'] & ~measured['model']).sum())}, in one "
          f"only {int((measured['plain'] != measured['model']).sum())} (each a predicted fast read delayed in the "
          "other)")


def test_nvmevirt_read_model_hits_as_the_fork_read_for_read(replays: dict[str, dict[str, np.ndarray]]) -> None:
    expected = python_hits("fork", 16_384, reads_of(plan()))
    plain, model = replays["plain"]["hit"], replays["fork"]["hit"]
    print("reads", expected.size, "hits: python", int(expected.sum()), "plain", int(plain.sum()), "model",
          int(model.sum()))
    assert not expected[0]  # read 0: a miss on the empty cache, and uncounted (the counters' reset)
    assert plain[1:].tolist() == expected[1:].tolist()
    assert model[1:].tolist() == plain[1:].tolist()


@pytest.mark.parametrize("name,policy", [("fork64", "fork"), ("zone_lru64", "zone_lru"), ("lru64", "lru")])
def test_nvmevirt_read_model_policies_with_a_full_cache_hit_as_their_python_models(
        replays: dict[str, dict[str, np.ndarray]], name: str, policy: str) -> None:
    expected = python_hits(policy, SMALL, reads_of(plan()))
    run = replays[name]
    lat = run["lat_us"]
    print(f"{name}: {int(expected.sum())} hits of {expected.size}; p50 hit {np.median(lat[run['hit']]):.0f} us, "
          f"miss {np.median(lat[~run['hit']]):.0f} us")
    assert run["hit"][1:].tolist() == expected[1:].tolist()

"""The read model built into NVMeVirt (vm/read-model/ztbp_read_model.c): its core — the cache of each policy and the
firmware charges — compiled outside the kernel with cc (vm/read-model/core_harness.c) and fed traces, read for read
against the project's Python models of the same policy: fork ↔ the device's cache as analysis/device_replay.py
replays it (SegmentedLRU(sticky=True), start LBA as a C int, priority 1 while the check is off or in a listed zone)
and the fork's charges of analysis/device_model.py; lru ↔ SegmentedLRU(zone_aware=False); zone_lru ↔
SegmentedLRU(zone_aware=True), hot = a listed zone while the check is on. A change to either side fails here."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ztbp import paths
from ztbp.acquire.synth import SynthGeometry, SynthOptions, synthesize
from ztbp.analysis.cache_policies import SegmentedLRU, dense_ids
from ztbp.analysis.device_model import SECTOR_BYTES, SMALL_BYTES, firmware_ns, profile
from ztbp.analysis.device_replay import ZONE_LBAS, DeviceCache

READ_MODEL = paths.ROOT / "vm" / "read-model"
POLICIES = ("fork", "lru", "zone_lru")
SECS_PER_PG = 4096 // SECTOR_BYTES
ZN540 = profile("zn540")
#: the fork as it is: its own charges (negative = computed from FW_4KB_READ_LATENCY and FW_READ_LATENCY), the
#: listed-zone shortcut on
FORK_COSTS = (-1, -1, 1)
#: a trace: ("R", slba, nlb, zone) reads, ("S", zones) SET, ("T",) STOP
Op = tuple


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler (cc or gcc): the read model's core cannot be compiled outside the kernel here")
    exe = tmp_path_factory.mktemp("read-model") / "core_harness"
    proc = subprocess.run([cc, "-std=gnu11", "-O2", "-Wall", "-Wextra", "-Werror", "-o", str(exe),
                           str(READ_MODEL / "core_harness.c")], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    return exe


def run_c(exe: Path, policy: str, entries: int, ops: list[Op], costs: tuple[int, int, int] = FORK_COSTS
          ) -> tuple[np.ndarray, np.ndarray]:
    """(hit, firmware ns) of each read of `ops` through the C core."""
    lines = "".join(f"R {o[1]} {o[2]} {o[3]}\n" if o[0] == "R" else f"S {' '.join(map(str, o[1]))}\n"
                    if o[0] == "S" else "T\n" for o in ops)
    hit_ns, miss_ns, shortcut = costs
    proc = subprocess.run([str(exe), policy, str(entries), str(SECS_PER_PG), str(SECTOR_BYTES), str(hit_ns),
                           str(miss_ns), str(shortcut), str(ZN540.fw_4kb_read), str(ZN540.fw_read)],
                          input=lines, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    out = np.array(proc.stdout.split(), dtype=np.int64).reshape(-1, 2)
    return out[:, 0].astype(bool), out[:, 1]


def reads_of(ops: list[Op]) -> dict[str, np.ndarray]:
    """Each read's slba, nlb, zone, whether the check is on, and whether its zone is in the last SET."""
    cols: dict[str, list] = {k: [] for k in ("slba", "nlb", "zone", "check_on", "in_set")}
    check_on, listed = False, frozenset[int]()
    for o in ops:
        if o[0] == "S":
            check_on, listed = True, frozenset(o[1])
        elif o[0] == "T":
            check_on = False
        else:
            for k, v in zip(cols, (o[1], o[2], o[3], check_on, o[3] in listed), strict=True):
                cols[k].append(v)
    return {k: np.asarray(v, dtype=np.bool_ if k in ("check_on", "in_set") else np.int64) for k, v in cols.items()}


def python_hits(policy: str, entries: int, r: dict[str, np.ndarray]) -> np.ndarray:
    """Each read's hit in the project's Python model of `policy`."""
    listed = r["check_on"] & r["in_set"]
    if policy == "fork":
        return DeviceCache(entries).replay(r["slba"], np.where(r["check_on"], r["in_set"], True))
    first, last = r["slba"] // SECS_PER_PG, (r["slba"] + r["nlb"] - 1) // SECS_PER_PG
    n = last - first + 1
    starts = np.cumsum(n) - n
    pages = np.repeat(first, n) + np.arange(int(n.sum())) - np.repeat(starts, n)
    cache = SegmentedLRU(entries, zone_aware=policy == "zone_lru")
    page_hits = cache.feed_hits(dense_ids(pages)[0], np.repeat(listed, n))
    return np.logical_and.reduceat(page_hits, starts) if pages.size else page_hits


def fork_charges(r: dict[str, np.ndarray], hit: np.ndarray) -> np.ndarray:
    """analysis/device_model.firmware_ns of each read on zn540 at --slow 1."""
    small = r["nlb"] * SECTOR_BYTES <= SMALL_BYTES
    return np.array([firmware_ns(ZN540, bool(li), bool(h), bool(on), bool(sm))
                     for li, h, on, sm in zip(r["in_set"], hit, r["check_on"], small, strict=True)], dtype=np.int64)


def check_against_python(exe: Path, policy: str, entries: int, ops: list[Op]) -> np.ndarray:
    c_hit, c_fw = run_c(exe, policy, entries, ops)
    r = reads_of(ops)
    py_hit = python_hits(policy, entries, r)
    assert c_hit.tolist() == py_hit.tolist(), (policy, entries, np.flatnonzero(c_hit != py_hit)[:10])
    assert c_fw.tolist() == fork_charges(r, c_hit).tolist()
    return c_hit


# ---- known answers, worked by hand -------------------------------------------------------------------------------

def page(zone: int, n: int) -> int:
    """The start LBA of the n-th 4 KiB page of a zone."""
    return zone * ZONE_LBAS + n * SECS_PER_PG


def test_each_policy_by_hand(harness: Path) -> None:
    # 2 entries, SET zone 1: A in zone 1 (listed), B and C in zone 2; then STOP: E, F in zone 2.
    # fork:     A p1 [A|]  B p2 [A|B]  C p2 evicts B [A|C]  A hit  | STOP: E p1 evicts C [E A|]  F p1 evicts A
    #           (no p2 entry left) [F E|]  E hit                       -> hits 3, 6
    # zone_lru: A hot, B, C evicts B, A hit | E normal evicts C [A|E]  F evicts E [A|F]  E miss   -> hit 3
    # lru:      A, B [B A]  C evicts A [C B]  A evicts B [A C]  E [E A]  F [F E]  E hit           -> hit 6
    a, b, c, e, f = page(1, 0), page(2, 0), page(2, 1), page(2, 2), page(2, 3)
    ops: list[Op] = [("S", (1,)), ("R", a, 8, 1), ("R", b, 8, 2), ("R", c, 8, 2), ("R", a, 8, 1), ("T",),
                     ("R", e, 8, 2), ("R", f, 8, 2), ("R", e, 8, 2)]
    want = {"fork": [3, 6], "zone_lru": [3], "lru": [6]}
    for policy, hits in want.items():
        got = check_against_python(harness, policy, 2, ops)
        assert np.flatnonzero(got).tolist() == hits, policy
    # a hit takes the segment of this read in zone_lru and keeps its own in the fork: A enters hot (zone 1 listed),
    # is hit once zone 1 is no longer listed, and then B and C fill the cache
    # fork:     A [A|]  A hit, stays hot  B [A|B]  C evicts B [A|C]  A hit          -> hits 1, 4
    # zone_lru: A [A|]  A hit, to normal [|A]  B [|B A]  C evicts A [|C B]  A miss  -> hit 1
    moved: list[Op] = [("S", (1,)), ("R", a, 8, 1), ("S", (2,)), ("R", a, 8, 1), ("R", page(3, 0), 8, 3),
                       ("R", page(3, 1), 8, 3), ("R", a, 8, 1)]
    for policy, hits in {"fork": [1, 4], "zone_lru": [1], "lru": [1]}.items():
        assert np.flatnonzero(check_against_python(harness, policy, 2, moved)).tolist() == hits, policy
    # the fork's charges on zn540: a listed miss 7 us (check on), a hit 130 us, any other 4 KiB miss 1,000 us
    assert run_c(harness, "fork", 2, ops)[1].tolist() == [7_000, 1_000_000, 1_000_000, 130_000, 1_000_000,
                                                         1_000_000, 130_000]


def test_the_fork_keys_by_the_start_lba_as_a_c_int_and_the_others_by_page(harness: Path) -> None:
    # LBA 8 and 8 + 2^32 are one key to the fork, LBA 0 read for 4 KiB and then for 8 KiB another; LBA 4 is a key
    # of its own although its data is cached
    ops: list[Op] = [("R", 8, 8, 0), ("R", 8 + (1 << 32), 8, 0), ("R", 0, 8, 0), ("R", 4, 8, 0), ("R", 0, 16, 0)]
    assert check_against_python(harness, "fork", 8, ops).tolist() == [False, True, False, False, True]
    # lru: pages 1, 2^29 + 1, 0, {0, 1} (both cached: a hit), {0, 1}
    assert check_against_python(harness, "lru", 8, ops).tolist() == [False, False, False, True, True]


def test_a_faithful_device_charges_its_own_figures(harness: Path) -> None:
    ops: list[Op] = [("S", (1,)), ("R", page(1, 0), 8, 1), ("R", page(1, 0), 8, 1), ("R", page(2, 0), 8, 2)]
    hit, fw = run_c(harness, "zone_lru", 16, ops, (6_200, 65_000, 0))
    assert hit.tolist() == [False, True, False] and fw.tolist() == [65_000, 6_200, 65_000]
    hit, fw = run_c(harness, "zone_lru", 16, ops, (6_200, 65_000, 1))  # the shortcut: a listed miss 7 us
    assert fw.tolist() == [7_000, 6_200, 65_000]


def test_a_bad_policy_or_line_is_refused(harness: Path) -> None:
    for args, lines in ((["clock", "4"], ""), (["lru", "0"], ""), (["lru", "4"], "X 1\n")):
        proc = subprocess.run([str(harness), *args, "8", "512", "-1", "-1", "0", "1", "130"], input=lines,
                              capture_output=True, text=True, check=False)
        assert proc.returncode == 2 and proc.stderr.startswith("core_harness: "), (args, proc.stderr)


# ---- random traces with SET and STOP -----------------------------------------------------------------------------

ZONES = 6
read_op = st.builds(lambda p, off, nlb, alias: ("R", page(p % ZONES, p // ZONES) + off + alias * (1 << 32), nlb,
                                                p % ZONES),
                    st.integers(0, 23), st.sampled_from([0, 0, 0, 4]), st.sampled_from([8, 8, 8, 16, 1, 12]),
                    st.sampled_from([0, 0, 0, 0, 1]))
set_op = st.builds(lambda zs: ("S", tuple(zs)), st.lists(st.integers(0, ZONES - 1), min_size=1, max_size=5,
                                                          unique=True))
trace = st.lists(st.one_of(read_op, read_op, read_op, read_op, set_op, st.just(("T",))), min_size=40, max_size=300)


@settings(max_examples=200, deadline=None)
@given(trace, st.integers(1, 12))
def test_random_traces_hit_as_the_python_models(harness: Path, ops: list[Op], entries: int) -> None:
    for policy in POLICIES:
        check_against_python(harness, policy, entries, ops)


# ---- a long run: paper80, 400,000 reads ------------------------------------------------------------------------

def test_400000_paper80_reads_with_two_sets_and_a_stop(harness: Path) -> None:
    geo = SynthGeometry(lba_bytes=SECTOR_BYTES, zone_size_lba=ZONE_LBAS, nr_zones=32)
    cmds = synthesize("paper80", 400_000, seed=49, geo=geo, opts=SynthOptions(prefill=False))
    slba, nlb = cmds["slba"].to_numpy().astype(np.int64), cmds["nlb"].to_numpy().astype(np.int64)
    reads: list[Op] = [("R", s, n, s // ZONE_LBAS) for s, n in zip(slba.tolist(), nlb.tolist(), strict=True)]
    ops = (reads[:100_000] + [("S", (1, 7, 11, 15, 19))] + reads[100_000:250_000] + [("T",)]
           + reads[250_000:320_000] + [("S", (3, 9, 14, 22, 27))] + reads[320_000:])
    ratios = {}
    for policy in POLICIES:
        hit = check_against_python(harness, policy, 16_384, ops)
        ratios[policy] = round(float(hit.mean()), 4)
    print("hit ratios over 400,000 paper80 reads, 16,384 entries:", ratios)
    assert min(ratios.values()) > 0.05 and ratios["zone_lru"] > ratios["lru"]  # the hot segment pays here

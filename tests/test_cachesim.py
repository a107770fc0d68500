"""Cache policies: known answers, properties (hypothesis), and the paper's figures on synthetic paper80/60."""

from __future__ import annotations

import functools
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ztbp import stages
from ztbp.acquire.synth import write_run
from ztbp.analysis.cache_policies import (
    SegmentedLRU,
    belady_hits,
    dense_ids,
    lru_hits,
    lru_sweep,
    static_best_from_counts,
)
from ztbp.analysis.cachesim import GENERAL, Trace, time_split
from ztbp.cli import main
from ztbp.errors import ZtbpError
from ztbp.io import libcachesim
from ztbp.io.run import load

traces = st.lists(st.integers(0, 30), min_size=1, max_size=300)


def zone_lru_hits(pages: np.ndarray | list[int], hot: np.ndarray | list[bool], capacity: int) -> int:
    """Hits of the zone-recognition LRU (Algorithm 4); hot[i] tells whether request i is to a hot zone."""
    return SegmentedLRU(capacity).feed(dense_ids(pages)[0], np.asarray(hot, dtype=np.bool_))


def static_best_hits(ids: np.ndarray, capacity: int) -> int:
    """Hits of a cache reserved for the `capacity` most-requested pages of `ids`."""
    return static_best_from_counts(np.bincount(ids), capacity) if ids.size else 0


def test_lru_known_answer() -> None:
    # capacity 2: a b a c b a -> hits: a(3rd)
    assert lru_hits([0, 1, 0, 2, 1, 0], 2) == 1


def test_belady_known_answer() -> None:
    # capacity 2: a b c a b: MIN keeps a,b (bypasses c) -> 2 hits; LRU gets 0
    ids = np.array([0, 1, 2, 0, 1])
    assert belady_hits(ids, 2) == 2 and lru_hits(ids.tolist(), 2) == 0


def test_zone_lru_keeps_hot_pages_over_normal_ones() -> None:
    pages = [0, 1, 10, 11, 12, 0, 1]          # 0, 1 hot; 10.. normal; capacity 3
    hot = [True, True, False, False, False, True, True]
    assert zone_lru_hits(pages, hot, 3) == 2  # normal pages evict each other, hot survive
    assert lru_hits(pages, 3) == 0


def test_zone_lru_follows_algorithm_4_list_order() -> None:
    # full of hot pages: a new normal page evicts the tail (the LRU hot page), then sits at l_head
    pages = [0, 1, 2, 10, 0, 1, 2]
    hot = [True, True, True, False, True, True, True]
    assert zone_lru_hits(pages, hot, 3) == 2  # page 0 was the tail and got evicted; 1 and 2 hit


@settings(max_examples=80, deadline=None)
@given(traces, st.integers(1, 40))
def test_lru_with_room_for_everything_misses_only_cold(pages, cap) -> None:
    distinct = len(set(pages))
    if cap >= distinct:
        assert lru_hits(pages, cap) == len(pages) - distinct
        assert belady_hits(np.array(pages), cap) == len(pages) - distinct


@settings(max_examples=80, deadline=None)
@given(traces, st.integers(1, 12), st.sets(st.integers(0, 30), max_size=10))
def test_belady_bounds_every_policy(pages, cap, hot_pages) -> None:
    ids = np.array(pages)
    b = belady_hits(ids, cap)
    hot = [p in hot_pages for p in pages]
    assert b >= lru_hits(pages, cap)
    assert b >= zone_lru_hits(pages, hot, cap)
    assert b >= static_best_hits(ids, cap)


@settings(max_examples=60, deadline=None)
@given(traces, st.integers(1, 12))
def test_zone_lru_without_hot_zones_is_lru(pages, cap) -> None:
    assert zone_lru_hits(pages, [False] * len(pages), cap) == lru_hits(pages, cap)
    assert zone_lru_hits(pages, [True] * len(pages), cap) == lru_hits(pages, cap)


@settings(max_examples=60, deadline=None)
@given(traces)
def test_stack_distance_sweep_equals_simulated_lru(pages) -> None:
    caps = [1, 2, 3, 5, 8, 13, 40]
    ratios = lru_sweep(np.array(pages), caps)
    assert ratios == [lru_hits(pages, c) / len(pages) for c in caps]


def _brute_force_belady(pages: list[int], cap: int) -> int:
    """MIN by exhaustive search over every evict/bypass choice (tiny traces only)."""

    @functools.cache
    def best(i: int, cache: frozenset) -> int:
        if i == len(pages):
            return 0
        p = pages[i]
        if p in cache:
            return 1 + best(i + 1, cache)
        options = [best(i + 1, cache)]  # bypass
        if len(cache) < cap:
            options.append(best(i + 1, cache | {p}))
        else:
            options += [best(i + 1, (cache - {q}) | {p}) for q in cache]
        return max(options)

    return best(0, frozenset())


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 5), min_size=1, max_size=12), st.integers(1, 3))
def test_belady_is_optimal(pages, cap) -> None:
    assert belady_hits(np.array(pages), cap) == _brute_force_belady(pages, cap)


def test_static_best_counts_first_touch_as_miss() -> None:
    ids = np.array([5, 5, 5, 1, 1, 2])
    assert static_best_hits(ids, 1) == 2 and static_best_hits(ids, 2) == 3


def _lru_reference(pages: list[int], cap: int) -> int:
    od: OrderedDict[int, None] = OrderedDict()
    hits = 0
    for p in pages:
        if p in od:
            hits += 1
            od.move_to_end(p)
        else:
            od[p] = None
            if len(od) > cap:
                od.popitem(last=False)
    return hits


@settings(max_examples=80, deadline=None)
@given(traces, st.integers(1, 12))
def test_array_lru_matches_an_ordered_dict_lru(pages, cap) -> None:
    assert lru_hits(pages, cap) == _lru_reference(pages, cap)


@settings(max_examples=60, deadline=None)
@given(traces, st.integers(1, 12))
def test_lru_equals_libcachesims_lru_exactly(pages, cap) -> None:
    assert libcachesim.hits(np.array(pages), [cap], ("LRU",))[0]["LRU"] == lru_hits(pages, cap)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(0, 600), min_size=1, max_size=3000), st.integers(1, 400))
def test_general_policies_are_bounded_by_belady_and_miss_only_cold_with_room(pages, cap) -> None:
    ids = np.array(pages)
    names = tuple(GENERAL.values())
    hits = libcachesim.hits(ids, [cap, 1000], names)
    for p in names:  # None below the size the policy is run with (libCacheSim gives 0 hits or aborts there)
        assert (hits[0][p] is None) == (cap < libcachesim.MIN_PAGES[p])
        assert hits[0][p] is None or 0 <= hits[0][p] <= belady_hits(ids, cap)
    assert all(hits[1][p] == len(pages) - len(set(pages)) for p in names)  # room for every page: cold misses only


def test_lru_equals_libcachesims_lru_on_the_paper_trace(paper_runs) -> None:
    run = load(paper_runs["paper60"])
    tr = Trace(run.events, run.meta, 4)
    for cap in (1024, 16384):
        assert libcachesim.hits(tr.ids, [cap], ("LRU",))[0]["LRU"] == lru_hits(tr.ids, cap)


@settings(max_examples=60, deadline=None)
@given(traces, st.integers(1, 12), st.integers(0, 300))
def test_held_out_hits_are_the_hits_after_the_warm_up(pages, cap, cut) -> None:
    """Counting from request `cut` of one simulation = all hits minus the hits of the first `cut` requests."""
    from ztbp.analysis.cache_policies import SegmentedLRU, dense_ids

    ids, _ = dense_ids(pages)
    cut = min(cut, len(pages))
    run = SegmentedLRU(cap, zone_aware=False)
    run.feed(ids[:cut])
    assert run.feed(ids[cut:]) == lru_hits(pages, cap) - lru_hits(pages[:cut], cap)


def test_time_split_cuts_at_the_share_of_reads(run_factory) -> None:
    run = load(run_factory([("write", 0, 8), ("read", 0, 1), ("read", 8, 1), ("write", 16, 8), ("read", 16, 1),
                            ("read", 24, 1)]))
    train, test, k, rest = time_split(run.events, 0.5)
    assert (k, rest) == (2, 2) and train["op"].to_list() == ["write", "read", "read", "write"]
    assert test["slba"].to_list() == [16, 24]
    with pytest.raises(ZtbpError, match="--train-share"):
        time_split(run.events, 1.0)


def test_multi_page_reads_touch_every_page(run_factory) -> None:
    # a 16 KiB read = 4 pages; reading it twice: 4 cold misses then 4 hits
    run = run_factory([("read", 100, 4), ("read", 100, 4)])
    r = stages.simulate(load(run), cache_mib=1, page_kib=4, hot_zones=[])
    assert (r["requests"], r["read_commands"]) == (8, 2)
    assert r["lru"] == r["belady"] == 0.5


@pytest.fixture(scope="module")
def paper_runs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("paper")
    runs = {}
    for pattern in ("paper80", "paper60"):
        runs[pattern] = root / pattern
        write_run(runs[pattern], pattern, 1_000_000, seed=7)
    return runs


@pytest.mark.parametrize(("pattern", "lru_range", "min_gain"), [
    ("paper80", (0.24, 0.28), 0.04),
    ("paper60", (0.15, 0.19), 0.06),
])
def test_paper_hit_ratios_at_64_mib(paper_runs, pattern, lru_range, min_gain) -> None:
    r = stages.simulate(load(paper_runs[pattern]), 64, 4, [1, 7, 11, 15, 19])
    assert r["requests"] == 1_000_000 and r["cache_pages"] == 16384
    assert lru_range[0] <= r["lru"] <= lru_range[1]
    assert r["zone_lru"] - r["lru"] >= min_gain
    assert r["belady"] >= max(r["lru"], r["zone_lru"], r["static_best"], *(r[p] for p in GENERAL))
    assert all(r["lru"] < r[p] for p in GENERAL)  # every general policy beats LRU on a hot/cold mix
    assert r["best_general"]["hit_ratio"] == max(r[p] for p in GENERAL)
    assert r["zone_lru_vs_best_general"] == pytest.approx(r["zone_lru"] - r["best_general"]["hit_ratio"])


def test_cachesim_cli_takes_hot_zones_from_cluster_and_config(paper_runs, tmp_path, capsys) -> None:
    import json

    run = str(paper_runs["paper80"])
    assert main(["cachesim", run, "--json"]) == 0
    from_cluster = json.loads(capsys.readouterr().out)
    assert sorted(from_cluster["hot_zones"]) == [1, 7, 11, 15, 19]
    old_keys = {"requests", "read_commands", "cache_mib", "page_kib", "cache_pages", "hot_zones", "lru", "zone_lru",
                "static_best", "belady", "hot_zones_source"}
    assert old_keys | set(GENERAL) | {"best_general", "zone_lru_vs_best_general", "libcachesim"} == set(from_cluster)
    cfg = tmp_path / "cfg.json"
    assert main(["config", run, "-o", str(cfg)]) == 0
    capsys.readouterr()
    assert main(["cachesim", run, "--config", str(cfg), "--json", "--no-general"]) == 0
    from_config = json.loads(capsys.readouterr().out)
    assert not set(GENERAL) & set(from_config)
    assert from_config["zone_lru"] == from_cluster["zone_lru"]
    saved = json.loads(cfg.read_text())
    assert saved["format"] == "ztbp-cache-config/1" and sorted(saved["hot_zones"]) == [1, 7, 11, 15, 19]
    assert saved["predicted"]["zone_lru"] == from_cluster["zone_lru"]
    assert [z["zone"] for z in saved["zone_scores"]] == saved["hot_zones"]
    assert saved["recommend"] is True and saved["held_out"]["gain"] >= 0.01
    assert saved["held_out"]["hot_zones"] == saved["hot_zones"] and saved["held_out"]["test_reads"] == 500_000


def test_cachesim_rejects_bad_options(run_factory, tmp_path, capsys) -> None:
    run = str(run_factory([("read", 1, 1)]))
    assert main(["cachesim", run, "--hot-zones", "1,x"]) == 2
    assert "comma-separated zone ids" in capsys.readouterr().err
    assert main(["cachesim", run, "--hot-zones", "99"]) == 2
    assert "beyond the device's 64 zones" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "other"}')
    assert main(["cachesim", run, "--config", str(bad)]) == 3
    assert "'format' must be 'ztbp-cache-config/1'" in capsys.readouterr().err
    assert main(["cachesim", run, "--cache-mib", "0", "--hot-zones", "1"]) == 2


def test_whole_cache_sizes_stay_integers_for_ztbp_ctl(paper_runs, tmp_path, capsys) -> None:
    import json

    cfg = tmp_path / "cfg.json"
    assert main(["config", str(paper_runs["paper80"]), "-o", str(cfg), "--cache-mib", "64"]) == 0
    assert json.loads(cfg.read_text())["cache_mib"] == 64 and isinstance(json.loads(cfg.read_text())["cache_mib"], int)
    capsys.readouterr()
    assert main(["cachesim", str(paper_runs["paper80"]), "--cache-mib", "32.5", "--hot-zones", "1", "--json",
                 "--no-general"]) == 0
    assert json.loads(capsys.readouterr().out)["cache_mib"] == 32.5


# ---- the cache model's temporary trace is never left behind ------------------------------------------------------
#: a stand-in libcachesim whose reader says where the trace is and waits (the model running when SIGTERM comes)
SLOW_LIBCACHESIM = """
import sys, time, types
fake = types.ModuleType("libcachesim")
fake.TraceType = types.SimpleNamespace(ORACLE_GENERAL_TRACE=0)
def reader(path, kind, **kw):
    print("TRACE", path, flush=True)
    time.sleep(60)
fake.TraceReader = reader
sys.modules["libcachesim"] = fake
from ztbp.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_sigterm_removes_the_cache_model_s_temporary_trace(tmp_path: Path) -> None:
    import os
    import signal
    import subprocess
    import sys

    run = tmp_path / "run"
    write_run(run, "paper80", 20_000, 1)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp), "PYTHONPATH": str(Path(__file__).parents[1] / "pipelines")}
    p = subprocess.Popen([sys.executable, "-c", SLOW_LIBCACHESIM, "cachesim", str(run), "--json"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = p.stdout.readline()  # type: ignore[union-attr]
        trace = Path(line.split()[1])
        assert line.startswith("TRACE") and trace.is_file() and trace.parent.parent == tmp
        p.send_signal(signal.SIGTERM)
        assert p.wait(60) == 130
    finally:
        p.kill()
    assert "interrupted" in p.stderr.read() and list(tmp.iterdir()) == []  # type: ignore[union-attr]


def test_the_next_trace_removes_what_a_killed_process_left(tmp_path: Path) -> None:
    import os
    import subprocess

    dead = subprocess.Popen(["true"])
    dead.wait()
    left = tmp_path / f"{libcachesim.TRACE_DIR_PREFIX}{dead.pid}-abc"
    left.mkdir()
    (left / "pages.oracleGeneral.bin").write_bytes(b"x" * 24)
    mine = tmp_path / f"{libcachesim.TRACE_DIR_PREFIX}{os.getpid()}-def"  # a live process's: kept
    mine.mkdir()
    assert libcachesim.sweep_leftovers(tmp_path) == [left]
    assert not left.exists() and mine.exists()

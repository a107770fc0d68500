"""Sequential chains and NTS on hand-built traces with known answers, plus properties (hypothesis)."""

from __future__ import annotations

import numpy as np
import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from ztbp.analysis.chains import _chain_ids, chain_summary, chain_table, chains_report
from ztbp.io.nvme import load_events

MIB = 1 << 20


def chains_of(run_factory, reqs, op="read", window=256, **meta):
    ev = load_events(run_factory(reqs, **meta))
    return chain_table(ev, op, meta.get("lba_bytes", 4096), window)


def test_one_sequential_stream_is_one_chain(run_factory) -> None:
    t = chains_of(run_factory, [("read", 100 + 8 * i, 8) for i in range(10)])
    assert t["requests"].to_list() == [10] and t["bytes"].to_list() == [10 * 8 * 4096]


def test_interleaved_streams_are_separate_chains(run_factory) -> None:
    a = [("read", 1000 + 4 * i, 4) for i in range(6)]
    b = [("read", 50_000 + 2 * i, 2) for i in range(6)]
    reqs = [r for pair in zip(a, b, strict=True) for r in pair]
    t = chains_of(run_factory, reqs).sort("slba")
    assert t["requests"].to_list() == [6, 6]
    assert t["bytes"].to_list() == [6 * 4 * 4096, 6 * 2 * 4096]


def test_a_gap_breaks_a_chain(run_factory) -> None:
    reqs = [("read", 0, 8), ("read", 8, 8), ("read", 17, 8), ("read", 25, 8)]  # one LBA skipped at 16
    t = chains_of(run_factory, reqs)
    assert t["requests"].to_list() == [2, 2]


def test_backwards_and_overlapping_do_not_chain(run_factory) -> None:
    reqs = [("read", 100, 8), ("read", 92, 8), ("read", 96, 8)]
    assert chains_of(run_factory, reqs).height == 3


def test_ops_and_namespaces_chain_separately(run_factory) -> None:
    reqs = [("read", 0, 8), ("write", 8, 8), ("read", 8, 8, 2000, 2), ("read", 8, 8)]
    ev = load_events(run_factory(reqs))
    reads = chain_table(ev, "read", 4096)
    assert sorted(reads["requests"].to_list()) == [1, 2]  # nsid 2 read stands alone; nsid 1 reads chain
    assert chain_table(ev, "write", 4096).height == 1


def test_exactly_nts_counts_as_ge_nts(run_factory) -> None:
    # chain A: 4 x 1 MiB = exactly 4 MiB (256 LBAs of 4 KiB each); chain B: 4 MiB - 4 KiB
    a = [("read", 256 * i, 256) for i in range(4)]
    b = [("read", 100_000, 1023), ("read", 100_000 + 1023, 0)]  # nlb 0 is not chained
    ev = load_events(run_factory(a + b))
    r = chains_report(ev, "read", 4 * MIB, 4096)
    assert r["chains"] == 2
    assert r["frac_chains_ge_nts"] == 0.5
    assert r["frac_bytes_ge_nts"] == (4 * MIB) / (4 * MIB + 1023 * 4096)
    assert r["chain_bytes_p90"] == 4 * MIB
    # one byte less NTS threshold than the chain: still >=; one LBA more: not
    assert chains_report(ev, "read", 4 * MIB + 4096, 4096)["frac_chains_ge_nts"] == 0.0


def test_512_byte_lbas(run_factory) -> None:
    reqs = [("read", 8 * i, 8) for i in range(1024)]  # 1024 x 4 KiB in 512-byte LBAs = 4 MiB
    ev = load_events(run_factory(reqs, lba_bytes=512, zone_size_lba=65536, zone_cap_lba=65536, nr_zones=32))
    r = chains_report(ev, "read", 4 * MIB, 512)
    assert (r["chains"], r["bytes"], r["frac_chains_ge_nts"]) == (1, 4 * MIB, 1.0)


def test_window_limits_how_far_back_a_chain_is_continued(run_factory) -> None:
    reqs = [("read", 0, 1)] + [("read", 1000 + 10 * i, 1) for i in range(5)] + [("read", 1, 1)]
    assert chains_of(run_factory, reqs, window=10).height == 6
    assert chains_of(run_factory, reqs, window=3).height == 7
    assert chains_of(run_factory, reqs, window=0).height == 6  # 0 = unlimited


def test_cdfs_are_monotone_and_end_at_one(run_factory) -> None:
    reqs = [("read", 100 * i, 1 + i % 7) for i in range(50)] + [("read", 10_000 + 8 * i, 8) for i in range(40)]
    r = chains_report(load_events(run_factory(reqs)), "read", 4 * MIB, 4096)
    for table, col in ((r["size_cdf"], "cum_frac"), (r["chain_cdf"], "cum_frac_chains"),
                       (r["chain_cdf"], "cum_frac_bytes")):
        vals = [x[col] for x in table]
        assert vals == sorted(vals) and abs(vals[-1] - 1.0) < 1e-12


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 60), st.integers(1, 4)), min_size=1, max_size=200))
def test_chains_partition_the_requests(reqs) -> None:
    group = np.array([g for g, _, _ in reqs], dtype=np.int64)
    slba = np.array([s for _, s, _ in reqs], dtype=np.int64)
    nlb = np.array([n for _, _, n in reqs], dtype=np.int64)
    ids = _chain_ids(group, slba, nlb, 4, 0)
    df = pl.DataFrame({"c": ids, "g": group, "s": slba, "n": nlb, "i": np.arange(len(reqs))})
    for _, part in df.group_by("c"):
        part = part.sort("i")
        assert part["g"].n_unique() == 1  # a chain never mixes groups
        # consecutive members are contiguous
        assert (part["s"][1:].to_numpy() == (part["s"] + part["n"])[:-1].to_numpy()).all()
    # every request belongs to exactly one chain; chain ids are dense from 0
    assert sorted(set(ids.tolist())) == list(range(int(ids.max()) + 1))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 64), min_size=1, max_size=100), st.integers(0, 10_000))
def test_a_single_sequential_stream_of_any_sizes_is_one_chain(sizes, start) -> None:
    slba = start + np.concatenate([[0], np.cumsum(sizes[:-1])]).astype(np.int64)
    ids = _chain_ids(np.zeros(len(sizes), dtype=np.int64), slba, np.array(sizes, dtype=np.int64), 1, 256)
    assert set(ids.tolist()) == {0}


def test_summary_of_nothing_is_zero() -> None:
    empty = pl.DataFrame(schema={"chain": pl.Int64, "requests": pl.UInt32, "bytes": pl.UInt64})
    s = chain_summary(empty, "read", 4 * MIB)
    assert (s["chains"], s["frac_chains_ge_nts"], s["chain_bytes_p50"]) == (0, 0.0, 0)

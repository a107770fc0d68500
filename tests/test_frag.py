"""Fragmentation per zone on hand-built traces with known answers."""

from __future__ import annotations

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import make_run
from ztbp.analysis.frag import DIRECTIONS, frag_summary, frag_table, fragments
from ztbp.io.nvme import load_events


def test_fragments_merge_overlaps_and_adjacent_ranges(run_factory) -> None:
    z = 8192
    reqs = [("read", z + 0, 8), ("read", z + 8, 8),      # adjacent -> one fragment [0, 16)
            ("read", z + 12, 8),                         # overlaps -> extends to 20
            ("read", z + 100, 4),                        # gap of 80 LBAs
            ("read", z + 1000, 1), ("read", z + 1000, 1),  # re-read of the same block
            ("read", 5 * z + 7, 1)]                      # another zone
    ev = load_events(run_factory(reqs))
    f = fragments(ev, ("read",)).sort("zone", "start")
    assert f.filter(f["zone"] == 1).select("start", "end", "gap").rows() == [
        (z + 0, z + 20, None), (z + 100, z + 104, 80), (z + 1000, z + 1001, 896)]
    t = frag_table(ev, 64, 4096)
    r1 = t.filter(t["zone"] == 1).row(0, named=True)
    assert (r1["read_fragments"], r1["read_gaps"], r1["read_gap_bytes_max"]) == (3, 2, 896 * 4096)
    assert r1["read_bytes_covered"] == (20 + 4 + 1) * 4096
    assert r1["read_gap_bytes_mean"] == (80 + 896) / 2 * 4096
    assert t.filter(t["zone"] == 5)["read_fragments"].item() == 1
    assert t.height == 64 and t.filter(t["zone"] == 2)["read_fragments"].item() == 0


def test_sequential_zone_fill_is_one_write_fragment(run_factory) -> None:
    z = 8192
    reqs = [("zone_mgmt_send", 3 * z, 0, 1000, 1, "reset")] + [("write", 3 * z + 32 * i, 32) for i in range(256)]
    reqs += [("zone_append", 4 * z, 8), ("zone_append", 4 * z, 8)]
    t = frag_table(load_events(run_factory(reqs)), 64, 4096)
    r3 = t.filter(t["zone"] == 3).row(0, named=True)
    assert (r3["write_fragments"], r3["write_gaps"], r3["write_bytes_covered"]) == (1, 0, 32 * 1024 * 1024)
    r4 = t.filter(t["zone"] == 4).row(0, named=True)
    assert (r4["appends"], r4["write_fragments"]) == (2, 0)  # appends are counted, not placed
    s = frag_summary(t)
    assert s["write"]["zones_touched"] == 1 and s["read"]["fragments"] == 0


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["read", "write"]), st.integers(0, 4 * 64 - 1), st.integers(1, 20)),
                min_size=1, max_size=120))
def test_zone_table_agrees_with_the_fragment_listing(tmp_path_factory, reqs) -> None:
    run = make_run(tmp_path_factory.mktemp("frag"), reqs, zone_size_lba=64, zone_cap_lba=64, nr_zones=8)
    ev = load_events(run)
    for zone_size in (64, None):  # sorted-by-LBA fast path, and the argsort path without the zone size
        t = frag_table(ev, 8, 4096, zone_size)
        for d in ("read", "write"):
            f = fragments(ev, DIRECTIONS[d])
            by_zone = f.group_by("zone").agg(pl.len().alias("n"), (pl.col("end") - pl.col("start")).sum().alias("cov"),
                                             pl.col("gap").drop_nulls().sum().alias("gs"),
                                             pl.col("gap").drop_nulls().max().alias("gm"))
            expect = {r["zone"]: r for r in by_zone.to_dicts()}
            for r in t.iter_rows(named=True):
                e = expect.get(r["zone"])
                assert r[f"{d}_fragments"] == (e["n"] if e else 0)
                assert r[f"{d}_bytes_covered"] == (e["cov"] * 4096 if e else 0)
                assert r[f"{d}_gap_bytes_max"] == (e["gm"] * 4096 if e and e["gm"] is not None else None)


def test_a_stray_command_far_beyond_the_device_adds_one_row(run_factory) -> None:
    """A command addressing zone 2^24 - 1 of a 64-zone device (kept and counted as out of range) is one more row of
    the table, in memory and streamed, not 16 million rows."""
    from ztbp import stages
    from ztbp.io.run import load

    far = (1 << 24) - 1
    root = run_factory([("read", 8192 * 3, 8), ("read", far * 8192, 1)])
    t = frag_table(load_events(root), 64, 4096, 8192)
    assert t.height == 65 and t["zone"][-1] == far and t["read_fragments"][-1] == 1
    streamed = stages.streamed.frag(load(root, events=False))
    assert streamed.equals(t)

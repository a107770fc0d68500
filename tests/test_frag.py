"""Fragmentation per zone on hand-built traces with known answers."""

from __future__ import annotations

from ztbp.frag import frag_summary, frag_table, fragments
from ztbp.ingest import load_events


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

"""NVMeVirt's read path as the project models it (analysis/device_model.py, analysis/device_replay.py): its cache
replayed request by request, firmware times by class, per-request predictions and their decomposition."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ztbp.analysis.cache_policies import SegmentedLRU, lru_hits


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

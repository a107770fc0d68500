"""The device's read and hit counters between two STATUS answers (analysis/device_counters.py), at their edges: a
fresh device's 0xFFFFFFFF, exactly 1,000,000 reads, a wrap in between with and without the kernel log, no hits
(the 32-bit ioctl), and answers no device gives."""

from __future__ import annotations

import pytest

from ztbp.analysis.device_counters import (
    FRESH,
    NO_HITS_ADMIN32,
    NO_HITS_OLD_GUEST,
    NO_STATUS,
    Counters,
    counter_delta,
    from_answer,
    from_env,
)
from ztbp.analysis.loop import device_figures


def c(reads: int | None, hits: int | None = None) -> Counters:
    return Counters(reads, hits)


def test_a_plain_interval_gives_reads_hits_and_the_ratio() -> None:
    assert counter_delta(c(1_999, 500), c(3_999, 1_100)) == {"reads": 2_000, "hits": 600, "hit_ratio": 0.3,
                                                             "note": None}


def test_a_fresh_device_counts_its_first_read_as_a_miss() -> None:
    # load: both 0xFFFFFFFF; the first read resets both to 0 and is a miss (the cache is empty): 2,000 reads later
    # the device answers 1,999 reads and the hits of the 1,999 reads after the first
    assert counter_delta(c(FRESH, FRESH), c(1_999, 700)) == {"reads": 2_000, "hits": 700, "hit_ratio": 0.35,
                                                             "note": None}
    # no read yet on either side
    got = counter_delta(c(FRESH, FRESH), c(FRESH, FRESH))
    assert got["reads"] == 0 and got["hits"] == 0 and got["hit_ratio"] is None and "no read" in got["note"]


def test_exactly_a_million_reads_is_a_full_turn_with_the_kernel_logs_print() -> None:
    # the counters are back where they were: only the kernel log's print (one wrap, its hits) says a million passed
    got = counter_delta(c(0, 0), c(0, 0), wraps=1, wrap_hits=250_000)
    assert got == {"reads": 1_000_000, "hits": 250_000, "hit_ratio": 0.25, "note": None}
    # without the kernel log, the same answers read as no read at all (fewer than 1,000,000 is assumed)
    assert counter_delta(c(0, 0), c(0, 0))["reads"] == 0


def test_a_wrap_in_between() -> None:
    # 900,000 -> wrap at 1,000,000 (printed: 100,000 hits of that turn, 30,000 of them before the first answer)
    # -> 100,000: 200,000 reads, (100,000 - 30,000) + 40,000 hits
    ok = counter_delta(c(900_000, 30_000), c(100_000, 40_000), wraps=1, wrap_hits=100_000)
    assert ok == {"reads": 200_000, "hits": 110_000, "hit_ratio": 0.55, "note": None}
    # without the kernel log the reads are known (one wrap assumed), the hits printed at the wrap are not
    blind = counter_delta(c(900_000, 30_000), c(100_000, 40_000))
    assert blind["reads"] == 200_000 and blind["hits"] is None and blind["hit_ratio"] is None
    assert "wrapped" in blind["note"]
    # a wrap the kernel log says nothing of, against counters that went down: not the device's counting
    refused = counter_delta(c(900_000, 30_000), c(100_000, 40_000), wraps=0)
    assert refused["reads"] is None and refused["note"].startswith("refused")


def test_more_hits_printed_than_reads_between_is_refused() -> None:
    got = counter_delta(c(900_000, 30_000), c(100_000, 40_000), wraps=1, wrap_hits=300_000)
    assert got["reads"] == 200_000 and got["hits"] is None and got["hit_ratio"] is None
    assert got["note"].startswith("refused") and "310,000 hits for 200,000 reads" in got["note"]


def test_no_hits_from_the_32_bit_ioctl_says_why() -> None:
    before = from_answer({"ok": True, "result": {"reads": 10, "hits": None, "status_ioctl": "admin32",
                                                 "status_note": NO_HITS_ADMIN32}})
    after = from_answer({"ok": True, "result": {"reads": 2_010, "hits": None, "status_ioctl": "admin32"}})
    assert before == Counters(10, None, NO_HITS_ADMIN32) and after.hits is None
    got = counter_delta(before, after)
    assert got == {"reads": 2_000, "hits": None, "hit_ratio": None, "note": NO_HITS_ADMIN32}


@pytest.mark.parametrize(("before", "after", "why"), [
    (c(1_000, 1_200), c(3_000, 1_300), "1,200 hits for 1,000 reads"),     # hits > reads at an answer
    (c(1_000, 100), c(3_000, 2_500), "2,400 hits for 2,000 reads"),       # more hits than reads between
    (c(1_000, 100), c(3_000, 50), "-50 hits"),                            # hits went down without a wrap
    (c(1_000, FRESH), c(3_000, 200), "load value"),                       # one counter fresh, not the other
    (c(FRESH, 5), c(3_000, 200), "5 hits before the first read"),
])
def test_answers_no_device_gives_are_refused(before: Counters, after: Counters, why: str) -> None:
    got = counter_delta(before, after, wraps=0, wrap_hits=0)
    assert got["hits"] is None and got["hit_ratio"] is None
    assert got["note"].startswith("refused") and why in got["note"], got


def test_read_counts_no_device_gives_refuse_the_reads_too() -> None:
    got = counter_delta(c(5, 1), c(2_000_000, 3))
    assert got["reads"] is None and got["note"].startswith("refused") and "2,000,000" in got["note"]
    reloaded = counter_delta(c(5_000, 10), c(FRESH, FRESH))
    assert reloaded["reads"] is None and "reloaded" in reloaded["note"]


def test_no_status_gives_nothing_and_says_why() -> None:
    assert from_answer({"ok": False, "exit_code": 30}) == Counters(None, None, NO_STATUS)
    assert from_answer({"ok": True, "result": {"reads": True, "hits": 3}}).reads is None  # a bool is no count
    got = counter_delta(Counters(None, None, NO_STATUS), c(10, 1))
    assert got == {"reads": None, "hits": None, "hit_ratio": None, "note": NO_STATUS}


def test_the_guests_mailbox_with_and_without_hits() -> None:
    env = {"status_before": "1999", "status_after": "3999", "hits_before": "100", "hits_after": "",
           "status_ioctl": "admin32"}
    assert from_env(env, "before") == Counters(1_999, 100)
    assert from_env(env, "after") == Counters(3_999, None, NO_HITS_ADMIN32)
    old = {"status_before": "1999", "status_after": "3999"}  # a guest script from before hits were carried
    assert from_env(old, "after") == Counters(3_999, None, NO_HITS_OLD_GUEST)
    assert from_env({"status_before": ""}, "before") == Counters(None, None, NO_STATUS)


def test_a_rounds_device_figures_take_the_wraps_and_their_hits_from_the_kernel_log() -> None:
    log = "[ 4.0] ZNS: Fail cnt= 600000\n[ 4.0] ZNS: Hit cnt= 400000\n[ 4.0] ZNS: Total read cnt= 1000000\n"
    got = device_figures(c(900_000, 350_000), c(100_000, 45_000), log)
    assert got["status_reads"] == 200_000 and got["status_hits"] == 95_000 and got["hit_ratio"] == 0.475
    assert got["kernel_log_counters"]["hit_ratio"] == 0.4 and got["hit_ratio_note"] is None
    assert got["hits_before"] == 350_000 and got["hits_after"] == 45_000

"""The device's own read and hit counters — ZTBP STATUS on NVMeVirt answers the reads in completion dword 0 and its
cache's hits in dword 1 — turned into what happened between two answers: the reads, the hits and the device's hit
ratio. The one place that knows the counters' rules (the fork's zns_read, main.c and admin.c):

- Both start at 0xFFFFFFFF when the module loads. The first read takes the read counter to 0 and resets both (it
  is counted by neither: the read counter is "reads since load − 1"); it finds the cache empty, so it is a miss.
  From a fresh answer, the reads between are after.reads + 1 and the hits after.hits.
- Both go back to 0 together on every 1,000,000th read, when the module prints them to the kernel log ("Hit cnt",
  "Total read cnt"). `wraps` is how many such prints fell between the two answers and `wrap_hits` the hits they
  printed (analysis/loop.dmesg_figures reads them). Without the kernel log (wraps None) the reads are taken
  modulo 1,000,000 (fewer than that between the answers is assumed) and the hits are known only when no wrap
  happened between the answers.
- ztbp-ctl answers STATUS through the 64-bit admin ioctl ("status_ioctl": "admin64"); where the kernel lacks it,
  through the 32-bit one, which returns dword 0 only: "hits" is null ("admin32") and the hit ratio is not known.
- At any answer the hits are at most the reads (a subset of the same reads): an answer or a difference that says
  otherwise was not made by the device, and its hits are refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

#: both counters go back to 0 when the read counter reaches this (and the module prints them)
STATUS_WRAP = 1_000_000
#: both counters on a fresh device, before its first read (-1 as an unsigned 32-bit value)
FRESH = 0xFFFFFFFF
#: why a STATUS answer has no hits, by ztbp-ctl's status_ioctl
NO_HITS_ADMIN32 = "the kernel lacks NVME_IOCTL_ADMIN64_CMD: STATUS answered the reads (dword 0) but not the hits"
NO_HITS_OLD_GUEST = "the guest recorded no hit count (a loop from before STATUS's hits were carried)"
NO_STATUS = "the device answered no STATUS (no ZTBP protocol, or ztbp-ctl failed)"


class Counters(NamedTuple):
    """One STATUS answer: the device's read and hit counters (None where it gave none) and why hits is None."""

    reads: int | None
    hits: int | None
    why: str | None = None


def _count(v: Any) -> int | None:
    """A counter value: a whole number of 0..0xFFFFFFFF (never a bool), else None."""
    return v if isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= FRESH else None


def from_answer(answer: Mapping[str, Any]) -> Counters:
    """The counters of ztbp-ctl's STATUS answer (writeback/ctl.command's dict: ok, result = its JSON)."""
    res = answer.get("result")
    if not answer.get("ok") or not isinstance(res, Mapping):
        return Counters(None, None, NO_STATUS)
    reads = _count(res.get("reads", res.get("read_count")))
    if reads is None:
        return Counters(None, None, NO_STATUS)
    hits = _count(res.get("hits"))
    if hits is not None:
        return Counters(reads, hits)
    if res.get("status_ioctl") == "admin32" or res.get("status_note"):
        return Counters(reads, None, str(res.get("status_note") or NO_HITS_ADMIN32))
    return Counters(reads, None, "ztbp-ctl's STATUS answer has no hit count (an older ztbp-ctl)")


def _env_count(text: str | None) -> int | None:
    t = (text or "").strip()
    return int(t) if t.isdigit() and int(t) <= FRESH else None


def from_env(env: Mapping[str, str], side: str) -> Counters:
    """The counters the guest recorded around a loop round (.loop/device-NN.env): `status_SIDE` (reads) and
    `hits_SIDE` (empty when STATUS answered none), `status_ioctl`; side "before" or "after"."""
    reads = _env_count(env.get(f"status_{side}"))
    if reads is None:
        return Counters(None, None, NO_STATUS)
    if f"hits_{side}" not in env:
        return Counters(reads, None, NO_HITS_OLD_GUEST)
    hits = _env_count(env.get(f"hits_{side}"))
    if hits is None:
        why = NO_HITS_ADMIN32 if env.get("status_ioctl") == "admin32" else "STATUS answered no hit count"
        return Counters(reads, None, why)
    return Counters(reads, hits)


def invalid(c: Counters) -> str | None:
    """Why one answer cannot be the device's (None: it can): a read count past the wrap, hits above the reads, or
    one counter at its load value without the other."""
    if c.reads is None or c.reads == FRESH:
        return None if c.hits in (None, FRESH) else f"{c.hits:,} hits before the first read"
    if c.reads >= STATUS_WRAP:
        return f"a read count of {c.reads:,} (the counter goes back to 0 at {STATUS_WRAP:,})"
    if c.hits == FRESH:
        return f"hits at their load value after {c.reads:,} reads"
    if c.hits is not None and c.hits > c.reads:
        return f"{c.hits:,} hits for {c.reads:,} reads (hits are a part of the reads)"
    return None


def _refused(out: dict[str, Any], why: str) -> dict[str, Any]:
    out["note"] = f"refused: {why}: not the device's counting"
    return out


def counter_delta(before: Counters, after: Counters, wraps: int | None = None,
                  wrap_hits: int | None = None) -> dict[str, Any]:
    """What the device counted between two STATUS answers: `reads`, `hits`, `hit_ratio` (hits / reads) and `note`
    (why a figure is None, or what was assumed). `wraps`: the counter prints (each 1,000,000 reads) between the
    answers, None when unknown (no kernel log: the reads are taken modulo 1,000,000); `wrap_hits`: the hits those
    prints said, summed. Pure; the module's docstring has the rules."""
    out: dict[str, Any] = {"reads": None, "hits": None, "hit_ratio": None, "note": None}
    if before.reads is None or after.reads is None:
        out["note"] = before.why if before.reads is None else after.why
        return out
    bad = invalid(before) or invalid(after)
    if bad and any(STATUS_WRAP <= c.reads < FRESH for c in (before, after)):  # a read count no device gives
        return _refused(out, bad)
    if after.reads == FRESH and before.reads != FRESH:
        return _refused(out, "the counters went back to their load value between the answers (a reloaded module)")
    b, a = (-1 if c.reads == FRESH else c.reads for c in (before, after))
    if wraps is None:
        reads = (a - b) % STATUS_WRAP
    elif a - b + STATUS_WRAP * wraps < 0:
        return _refused(out, f"the read counter went from {b:,} to {a:,} with {wraps} wrap(s) between")
    else:
        reads = a - b + STATUS_WRAP * wraps
    out["reads"] = reads
    if before.hits is None or after.hits is None:
        out["note"] = before.why if before.hits is None else after.why
    elif bad:
        _refused(out, bad)
    elif wraps is None and a < b:
        out["note"] = ("the read counter wrapped between the answers (taken as one wrap): the hits it printed then "
                       "are in the kernel log only")
    elif wraps and wrap_hits is None:
        out["note"] = f"{wraps} counter wrap(s) between the answers whose hits are not known"
    else:
        hits = (0 if after.hits == FRESH else after.hits) - (0 if before.hits == FRESH else before.hits)
        hits += wrap_hits or 0
        if not 0 <= hits <= reads:
            return _refused(out, f"{hits:,} hits for {reads:,} reads between the answers")
        out["hits"] = hits
        if reads:
            out["hit_ratio"] = round(hits / reads, 4)
        else:
            out["note"] = "no read between the answers"
    return out

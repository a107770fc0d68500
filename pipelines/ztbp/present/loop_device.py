"""The device's own hit ratio in a loop's lines and on its front page: from STATUS's read and hit counters around
each round (analysis/device_counters.py), beside the project's replay of the device's cache over the same traced
reads (analysis/device_replay.replay_hits) and the difference, device − replay. The kernel log's counter prints
(each 1,000,000 reads) stay a cross-check."""

from __future__ import annotations

from typing import Any


def _pct(v: Any) -> str:
    return "not counted" if not isinstance(v, int | float) or isinstance(v, bool) else f"{100 * v:.1f} %"


def _points(v: Any) -> str:
    return f"{100 * v:+.1f} points" if isinstance(v, int | float) else "n/a"


def device_hit_text(dev: dict[str, Any]) -> str | None:
    """A round's device part for its progress line: STATUS's reads, and its hits and hit ratio with the replay's
    beside (or why there is none); None when the device answered no STATUS (QEMU)."""
    reads = dev.get("status_reads")
    if reads is None:
        return None
    text = f"STATUS +{reads:,} reads"
    ratio = dev.get("hit_ratio")
    if ratio is None:
        why = dev.get("hit_ratio_note") or ("no hit count recorded" if "hit_ratio" in dev else
                                            "a loop from before STATUS's hits were carried")
        text += f", no hit ratio ({why})"
    else:
        text += f", {dev.get('status_hits', 0):,} hits: device hit ratio {ratio:.4f}"
    replay = dev.get("replay_hit_ratio")
    if replay is not None:
        text += f", replay {replay:.4f}"
        if dev.get("device_minus_replay") is not None:
            text += f" (device − replay {dev['device_minus_replay']:+.4f})"
    return text


def arm_ratio(blocks: list[dict[str, Any]], arm: str, key: str = "status") -> float | None:
    """The device's hit ratio over the A/B blocks of one arm: their hits over their reads, summed (blocks without
    a hit count left out); key "replay" for the replay's."""
    reads = hits = 0
    for b in blocks:
        dev = b.get("device") or {}
        r, h = dev.get(f"{key}_reads"), dev.get(f"{key}_hits")
        if b.get("arm") == arm and isinstance(r, int) and isinstance(h, int) and r > 0 and (
                key == "replay" or dev.get("hit_ratio") is not None):
            reads, hits = reads + r, hits + h
    return hits / reads if reads else None


def _kernel_log(first: dict[str, Any], last: dict[str, Any]) -> str:
    a = ((first.get("device") or {}).get("kernel_log_counters") or {}).get("hit_ratio")
    b = ((last.get("device") or {}).get("kernel_log_counters") or {}).get("hit_ratio")
    if a is None and b is None:
        return "no counter print in the kernel log (it prints each 1,000,000 reads)"
    return f"the kernel log's counter prints (a cross-check, each 1,000,000 reads): {_pct(a)} → {_pct(b)}"


def device_hit_item(doc: dict[str, Any], span: str) -> dict[str, str]:
    """The front page's "hit ratio, device": from the device's own counters (STATUS), per arm of the A/B blocks or
    first round against last, with the replay of its cache beside and the kernel log as a cross-check."""
    rs = doc["rounds"]
    first, last = rs[0], rs[-1]
    item = {"key": "hit_device", "label": "hit ratio, device"}
    if all((e.get("device") or {}).get("status_reads") is None for e in rs):
        return {**item, "value": "not counted by this device",
                "detail": "the device answers no STATUS and reports no cache counters (only NVMeVirt's ZTBP fork "
                          "does)"}
    blocks = (doc.get("ab") or {}).get("blocks") or []
    if blocks:
        own = (arm_ratio(blocks, "off"), arm_ratio(blocks, "on"))
        rep = (arm_ratio(blocks, "off", "replay"), arm_ratio(blocks, "on", "replay"))
        diff = tuple(None if o is None or p is None else o - p for o, p in zip(own, rep, strict=True))
        value = f"off {_pct(own[0])} / on {_pct(own[1])}"
        where = "the A/B blocks, each arm's hits over its reads"
    else:
        a, b = (e.get("device") or {} for e in (first, last))
        own, rep = (a.get("hit_ratio"), b.get("hit_ratio")), (a.get("replay_hit_ratio"), b.get("replay_hit_ratio"))
        diff = (a.get("device_minus_replay"), b.get("device_minus_replay"))
        value, where = f"{_pct(own[0])} → {_pct(own[1])}", span
    replay = (f"the replay of its cache over the same traced reads: {_pct(rep[0])}, {_pct(rep[1])} (device − "
              f"replay {_points(diff[0])}, {_points(diff[1])})")
    if own == (None, None):
        value = "not counted by STATUS"
    if None in own:
        note = next((d.get("hit_ratio_note") for d in (e.get("device") or {} for e in rs)
                     if d.get("hit_ratio") is None and d.get("hit_ratio_note")), None)
        replay += f"; no hit ratio from STATUS: {note}" if note else ""
    return {**item, "value": value,
            "detail": f"{where}: the device's own hit and read counters (STATUS before and after each round); "
                      f"{replay}; {_kernel_log(first, last)}"}

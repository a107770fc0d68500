"""The device's own hit ratio in a loop's lines and on its front page: from STATUS's read and hit counters around
each round (analysis/device_counters.py), beside the project's replay of the device's cache over the same traced
reads (analysis/device_replay.replay_hits) and the difference, device − replay. The kernel log's counter prints
(each 1,000,000 reads) stay a cross-check."""

from __future__ import annotations

from typing import Any

from .. import devices


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


def _effect_words(e: dict[str, Any] | None, what: str) -> str:
    """'what +x unit [lo, hi] (verdict)' of one A/B effect, or that it was not measured."""
    if not e:
        return f"{what} not measured"
    ci = e.get("ci") or [None, None]
    span = f" [{ci[0]:+.1f}, {ci[1]:+.1f}]" if all(isinstance(x, int | float) for x in ci) else ""
    unit = " points" if e.get("change_unit") == "points" else f" {e.get('change_unit') or ''}".rstrip()
    return f"{what} {e['change']:+.1f}{unit}{span} ({e.get('verdict') or 'no verdict'})"


def device_name(doc: dict[str, Any]) -> str:
    """The device of an A/B loop in words: the fork as it is, or the project's read model with its policy. The
    module's build record (loop.json's emulator.read_service_model: `read_model` only for a build with the
    project's read model) decides; the A/B replay's model (ab.service_model.read_model) names the fork's own cache
    in the model's words too, so it is read only where the loop has no build record."""
    built = (doc.get("emulator") or {}).get("read_service_model")
    if isinstance(built, dict):
        meta_model = built.get("read_model")
    else:
        meta_model = (((doc.get("ab") or {}).get("service_model")) or {}).get("read_model")
    if not isinstance(meta_model, str):
        dev = devices.find(str(doc.get("backend") or ""))
        if dev is None:
            return str(doc.get("backend") or "an unknown device")
        return f"{dev.title} as it is" if dev.has_read_model else dev.title
    policy = dict(w.split("=", 1) for w in meta_model.split() if "=" in w)
    if policy.get("policy") == "fork" and policy.get("shortcut") == "1" and policy.get("hit_ns") == "-1":
        return "NVMeVirt with the project's read model set as the fork"
    names = {"zone_lru": "zone-priority LRU (the paper's Algorithm 4)", "lru": "plain LRU",
             "fork": "the fork's priority cache"}
    shortcut = ", with the listed-zone shortcut" if policy.get("shortcut") == "1" else ", no listed-zone shortcut"
    return f"NVMeVirt with the project's read model: {names.get(policy.get('policy', ''), '?')}{shortcut}"


def cache_worth(doc: dict[str, Any], res: dict[str, Any] | None) -> str | None:
    """The A/B loop's answer in one sentence: what the configuration's cache alone is worth on this device — the
    device's own hit ratio (STATUS) and read IOPS off → on, each with its interval and verdict, and how much of the
    emulator's predicted change in device time cache hits explain against its listed-zone shortcut. None without
    A/B blocks."""
    ab = doc.get("ab")
    if not ab or not res or "effects" not in res:
        return None
    eff = res["effects"]
    text = (f"What the configuration's cache alone is worth on {device_name(doc)}: "
            f"{_effect_words(eff.get('device_hit_ratio'), 'its own hit ratio')}, "
            f"{_effect_words(eff.get('read_iops'), 'read IOPS')}")
    split = ((ab.get("service_model") or {}).get("decomposition")) or {}
    if split:
        text += (f"; of the predicted change in mean device time ({split['change_us']:+,.0f} us), cache hits explain "
                 f"{split['cache_hits_us']:+,.0f} us and the listed-zone shortcut {split['listed_shortcut_us']:+,.0f}"
                 " us")
    if not ab.get("device_acted"):
        text += "; the device never held the configuration, so none of this is its effect"
    return text + "."

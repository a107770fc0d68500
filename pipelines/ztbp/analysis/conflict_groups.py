"""Inter-zone interference: conflict groups from bandwidth measurements, and whether they are structure or noise.

The ZNS parallelism study (seeds/zns-interference-profiler-slides.txt) sorts zones into conflict groups: zones
that share a flash channel or die slow each other down when used at once. Its profiler sets a threshold
bandwidth, lets the first zone open group 0, and puts each further zone into the first group whose
representative (the group's first zone) it interferes with, else into a new group. Here:

- `profile_zones` runs that algorithm with an injected `measure(zones) -> MiB/s per zone` (the acquire layer
  measures with fio; the tests pass synthetic matrices). A pair interferes when together the two zones reach less
  than `threshold` of twice the median solo bandwidth (reference "median", the default: a threshold bandwidth as
  in the study, set from the device's own solo figures), or of their own summed solo bandwidth (reference
  "pair"), or less than `threshold_mib` MiB/s in all.
- `structure_verdict` says whether the groups are structure or noise: one group holding every zone (one shared
  bottleneck), every zone alone (no pair interferes), a split whose interfering and independent pairs are not
  clearly apart — against their spread and against the noise of one measurement, measured by repeating
  measurements during the profile —, solo bandwidth that drifted between the first and the closing solo pass, or
  a full matrix the groups do not explain all mean "no structure", and the profiler says so instead of inventing
  groups.
- `pair_matrix`, `nvmevirt_layout` and `adjusted_rand` show the measured pairs and score the groups against the
  known layout of an emulated device.

What the groups mean for a captured trace is analysis/dispatch.py.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np
import polars as pl

from .device_params import (
    INTERFERENCE_THRESHOLD,
    MAX_CONTRADICTIONS,
    MAX_DRIFT,
    MIN_REPEATS,
    MIN_SEPARATION,
    NOISE_SEPARATION,
    REFERENCES,
)

#: zones measured together -> MiB/s of each zone.
Measure = Callable[[Sequence[int]], Mapping[int, float]]
UNCLASSIFIED = -1


@dataclass(frozen=True)
class Pair:
    """Two zones measured together."""

    a: int
    b: int
    bw_a: float
    bw_b: float
    ratio: float  # (bw_a + bw_b) / reference: solo_a + solo_b, or twice the median solo bandwidth
    share_a: float  # bw_a / solo_a
    share_b: float  # bw_b / solo_b
    interferes: bool
    measured: int = 1  # times the pair was measured (an interfering pair is measured again: `confirm`)


def pair_of(a: int, b: int, solo: Mapping[int, float], bw: Mapping[int, float], threshold: float,
            threshold_mib: float | None = None, typical: float | None = None) -> Pair:
    """The pair's ratio and verdict. The ratio is the pair's total over its reference: the two zones' own solo
    bandwidths, or twice the typical (median) solo bandwidth when `typical` is given (steadier when single solo
    measurements are noisy). With threshold_mib the pair interferes below that total MiB/s; otherwise when the
    ratio is below `threshold`."""
    sa, sb = solo[a], solo[b]
    ba, bb = bw[a], bw[b]
    ref = 2 * typical if typical is not None else sa + sb
    ratio = (ba + bb) / ref if ref > 0 else math.nan
    hit = (ba + bb) < threshold_mib if threshold_mib is not None else ratio < threshold
    return Pair(a, b, ba, bb, ratio, ba / sa if sa > 0 else math.nan, bb / sb if sb > 0 else math.nan, bool(hit))


def conflict_groups(zones: Sequence[int], interferes: Callable[[int, int], bool],
                    stop: Callable[[], bool] = lambda: False) -> dict[int, int]:
    """The study's algorithm: zone -> conflict group. The first zone opens group 0; each further zone joins the
    first group whose representative (first zone) it interferes with, else opens a new group. When `stop()`
    turns true the remaining zones are left UNCLASSIFIED."""
    groups: list[int] = []  # representative of each group
    out: dict[int, int] = {}
    for z in zones:
        if stop():
            out[z] = UNCLASSIFIED
            continue
        for g, rep in enumerate(groups):
            if interferes(rep, z):
                out[z] = g
                break
            if stop():
                break
        else:
            groups.append(z)
            out[z] = len(groups) - 1
            continue
        out.setdefault(z, UNCLASSIFIED)
    return out


@dataclass(frozen=True)
class Repeat:
    """One configuration measured twice: a zone's solo bandwidth (the first and the closing solo pass), or a pair's
    total (its first measurement and a confirmation)."""

    what: str  # "solo 3", "pair 0-2"
    first: float  # MiB/s
    again: float


def measurement_noise(repeats: Sequence[Repeat], solo_first: Mapping[int, float] | None = None,
                      solo_after: Mapping[int, float] | None = None) -> dict[str, Any]:
    """How far one measurement moves when it is repeated: the standard deviation of log(bandwidth) of a single
    measurement, estimated robustly from the repeats (1.4826 x the median |log(first / again)|, over sqrt 2 since
    each difference holds two measurements' noise), as a relative figure; None with fewer than MIN_REPEATS
    repeats. And the drift: the median over zones of the closing solo pass against the first, relative."""
    moved = [(abs(math.log(r.first / r.again)), r) for r in repeats if r.first > 0 and r.again > 0]
    d = [m for m, _ in moved]
    sd = float(1.4826 * np.median(d) / math.sqrt(2)) if len(d) >= MIN_REPEATS else None
    worst = max(moved, key=lambda mr: mr[0])[1] if moved else None
    out: dict[str, Any] = {"repeats": len(d), "sd": round(sd, 4) if sd is not None else None, "drift": None,
                           "largest": {"what": worst.what, "first": round(worst.first, 4),
                                       "again": round(worst.again, 4)} if worst else None}
    if solo_first and solo_after:
        both = [math.log(solo_after[z] / solo_first[z]) for z in solo_after
                if solo_after[z] > 0 and solo_first.get(z, 0) > 0]
        if both:
            out["drift"] = round(math.exp(float(np.median(both))) - 1, 4)
    return out


@dataclass
class ProfileResult:
    zones: list[int]
    solo: dict[int, float]
    pairs: list[Pair]
    groups: dict[int, int]
    threshold: float
    threshold_mib: float | None
    reference: str
    full_matrix: bool
    measurements: int
    stopped_early: bool
    verdict: dict[str, Any] = field(default_factory=dict)
    solo_after: dict[int, float] = field(default_factory=dict)  # the closing solo pass (`recheck`)
    repeats: list[Repeat] = field(default_factory=list)
    noise: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["solo"] = {str(k): round(v, 4) for k, v in self.solo.items()}
        d["solo_after"] = {str(k): round(v, 4) for k, v in self.solo_after.items()}
        d["repeats"] = [{"what": r.what, "first": round(r.first, 4), "again": round(r.again, 4)}
                        for r in self.repeats]
        d["groups"] = {str(k): v for k, v in self.groups.items()}
        d["pairs"] = [{k: ((round(v, 4) if math.isfinite(v) else None) if isinstance(v, float) else v)
                       for k, v in asdict(p).items()} for p in self.pairs]
        return d


def profile_zones(zones: Sequence[int], measure: Measure, *, threshold: float = INTERFERENCE_THRESHOLD,
                  threshold_mib: float | None = None, reference: str = "median", full_matrix: bool = False,
                  confirm: int = 0, min_separation: float = MIN_SEPARATION, recheck: bool = True,
                  order_seed: int | None = 0,
                  on_step: Callable[[str, int, int], None] | None = None,
                  stop: Callable[[], bool] = lambda: False) -> ProfileResult:
    """Solo bandwidth of every zone, then pairs as the algorithm asks for them (or every pair first with full_matrix),
    then (`recheck`) every zone's solo bandwidth again, then the groups and the verdict. A pair found interfering is
    measured up to `confirm` more times and keeps its best figure: a passing disturbance (another process on the
    host, an emulator's hiccup) only ever lowers bandwidth, so it can fake interference but not hide it. With
    full_matrix the whole matrix is measured in a shuffled order (`order_seed`; None = zone order), then `confirm`
    more times in the same order, every pair, so a disturbance shorter than one pass cannot lower both measurements
    of a pair. Every configuration measured twice (the two solo passes, a pair and its confirmation) is a repeat:
    together they measure the noise of one measurement and the drift over the profile, which the verdict weighs the
    groups against. on_step(kind, done, total) reports progress; `stop()` ends the measuring early (a time budget):
    zones not reached are UNCLASSIFIED."""
    zones = list(dict.fromkeys(zones))
    if len(zones) < 2:
        raise ValueError("a profile needs at least two zones")
    n_meas = 0
    solo: dict[int, float] = {}
    for i, z in enumerate(zones):
        if stop():
            break
        solo[z] = float(measure([z])[z])
        n_meas += 1
        if on_step:
            on_step("solo", i + 1, len(zones))
    dead = [z for z, v in solo.items() if v <= 0]
    usable = [z for z in zones if z in solo and solo[z] > 0]
    if reference not in REFERENCES:
        raise ValueError(f"reference must be one of {REFERENCES}")
    typical = float(np.median([solo[z] for z in usable])) if reference == "median" and usable else None
    pairs: dict[tuple[int, int], Pair] = {}
    repeats: list[Repeat] = []
    max_pairs = len(usable) * (len(usable) - 1) // 2

    first_total: dict[tuple[int, int], float] = {}

    def confirmed(key: tuple[int, int], best: Pair, rounds: int, every: bool = False) -> Pair:
        """Measure an interfering pair (`every`: any pair) again, up to `rounds` times, keeping its best figure."""
        nonlocal n_meas
        for _ in range(rounds):
            if not (best.interferes or every) or stop():
                break
            again = pair_of(key[0], key[1], solo, measure(list(key)), threshold, threshold_mib, typical)
            n_meas += 1
            repeats.append(Repeat(f"pair {key[0]}-{key[1]}", first_total[key], again.bw_a + again.bw_b))
            best = replace(max(best, again, key=lambda p: p.bw_a + p.bw_b), measured=best.measured + 1)
        return best

    def get(a: int, b: int, rounds: int) -> Pair:
        nonlocal n_meas
        key = (min(a, b), max(a, b))
        if key not in pairs:
            bw = measure(list(key))
            n_meas += 1
            first_total[key] = bw[key[0]] + bw[key[1]]
            pairs[key] = confirmed(key, pair_of(key[0], key[1], solo, bw, threshold, threshold_mib, typical), rounds)
            if on_step:
                on_step("pair", len(pairs), max_pairs)
        return pairs[key]

    if full_matrix:
        # the whole matrix once, then `confirm` more times in the same order: a disturbance shorter than one pass
        # (a busy stretch of the host) cannot lower both measurements of a pair, as it can one right after another
        order = pair_order(usable, order_seed)
        for a, b in order:
            if not stop():
                get(a, b, 0)
        for _ in range(confirm):
            for key in order:
                if key in pairs and not stop():
                    pairs[key] = confirmed(key, pairs[key], 1, every=True)
        groups = _groups_from_known(usable, pairs)  # zones whose comparisons the budget cut stay UNCLASSIFIED
    else:
        groups = conflict_groups(usable, lambda a, b: get(a, b, confirm).interferes, stop)
    for z in zones:
        groups.setdefault(z, UNCLASSIFIED)
    stopped = stop() or any(g == UNCLASSIFIED for z, g in groups.items() if z not in dead)
    solo_after: dict[int, float] = {}
    if recheck:
        for i, z in enumerate(usable):
            if stop():
                break
            solo_after[z] = float(measure([z])[z])
            n_meas += 1
            repeats.append(Repeat(f"solo {z}", solo[z], solo_after[z]))
            if on_step:
                on_step("solo again", i + 1, len(usable))
    noise = measurement_noise(repeats, solo, solo_after)
    res = ProfileResult(zones=zones, solo=solo, pairs=list(pairs.values()), groups=groups, threshold=threshold,
                        threshold_mib=threshold_mib, reference=reference, full_matrix=full_matrix,
                        measurements=n_meas, stopped_early=stopped, solo_after=solo_after, repeats=repeats,
                        noise=noise)
    res.verdict = structure_verdict(res.pairs, res.groups, min_separation, noise=noise,
                                    every_pair=full_matrix and len(pairs) == max_pairs)
    if dead:
        res.verdict["zero_bandwidth_zones"] = dead
    return res


def pair_order(zones: Sequence[int], seed: int | None) -> list[tuple[int, int]]:
    """Every pair of `zones`, in a shuffled order (seeded: the same profile asks in the same order), or in
    zone order with seed None. In zone order a slow change of the host or device during the profile lines up with
    the zones (zone 0's pairs all come first): a drift then reads as "zone 0 is independent of the rest", a
    grouping that explains every pair. Shuffled, a drift falls on pairs at random, which mostly contradicts any
    grouping (a triangle of four zones' six pairs is one of the few patterns that does not)."""
    out = [(a, b) for i, a in enumerate(zones) for b in zones[i + 1:]]
    if seed is not None:
        random.Random(seed).shuffle(out)
    return out


def _groups_from_known(zones: Sequence[int], pairs: Mapping[tuple[int, int], Pair]) -> dict[int, int]:
    """The algorithm over measured pairs only: a zone whose comparison was never measured stays UNCLASSIFIED."""
    class Missing(Exception):
        pass

    def known(a: int, b: int) -> bool:
        key = (min(a, b), max(a, b))
        if key not in pairs:
            raise Missing
        return pairs[key].interferes

    out: dict[int, int] = {}
    reps: list[int] = []
    for z in zones:
        try:
            for g, rep in enumerate(reps):
                if known(rep, z):
                    out[z] = g
                    break
            else:
                reps.append(z)
                out[z] = len(reps) - 1
        except Missing:
            out[z] = UNCLASSIFIED
    return out


def _mad(x: Sequence[float]) -> float:
    if not x:
        return 0.0
    a = np.asarray(x, dtype=float)
    return float(1.4826 * np.median(np.abs(a - np.median(a))))


#: pairs needed on each side of the threshold (interfering, independent) before a gap between them counts
MIN_PAIRS_PER_SIDE = 2


def contradictions(pairs: Sequence[Pair], groups: Mapping[int, int]) -> int:
    """Measured pairs of classified zones whose verdict disagrees with the groups: two zones of one group that do
    not interfere, or two zones of different groups that do. A device's conflict groups are an equivalence (zones
    sharing a die or channel interfere with each other), so a grouping that is structure explains every pair."""
    n = 0
    for p in pairs:
        ga, gb = groups.get(p.a, UNCLASSIFIED), groups.get(p.b, UNCLASSIFIED)
        if ga == UNCLASSIFIED or gb == UNCLASSIFIED:
            continue
        n += (ga == gb) != p.interferes
    return n


def structure_verdict(pairs: Sequence[Pair], groups: Mapping[int, int],
                      min_separation: float = MIN_SEPARATION, noise: Mapping[str, Any] | None = None,
                      every_pair: bool = False) -> dict[str, Any]:
    """Is there conflict structure, or does the grouping only reflect the threshold cutting noise?

    No structure when: one group holds every classified zone (every zone interferes with the first: a shared
    bottleneck, nothing to mix); every zone is alone (no pair interferes); either side has fewer than
    MIN_PAIRS_PER_SIDE pairs (a single pair has no spread: on QEMU, where every pair shares one emulator, five pairs
    at 0.58 and one noisy pair at 0.85 once made two "groups"); the pair ratios of interfering and independent
    pairs are less than `min_separation` apart (medians) or overlap beyond twice their spread; the solo bandwidth
    drifted more than MAX_DRIFT between the first and the closing solo pass (`noise["drift"]`); the two sides are
    less than NOISE_SEPARATION standard deviations of one measurement apart (`noise["sd"]`, measured by repeats:
    on QEMU a 3-against-3 split of six pairs once passed the spread test, its sides' spread small by chance); or,
    with `every_pair` measured, more than MAX_CONTRADICTIONS of the pairs contradict the groups.
    """
    classified = {z: g for z, g in groups.items() if g != UNCLASSIFIED}
    n, n_groups = len(classified), len(set(classified.values()))
    lo = [p.ratio for p in pairs if p.interferes and not math.isnan(p.ratio)]
    hi = [p.ratio for p in pairs if not p.interferes and not math.isnan(p.ratio)]
    noise = noise or {}
    out: dict[str, Any] = {"zones": n, "groups": n_groups, "interfering_pairs": len(lo),
                           "independent_pairs": len(hi),
                           "median_ratio_interfering": round(float(np.median(lo)), 4) if lo else None,
                           "median_ratio_independent": round(float(np.median(hi)), 4) if hi else None,
                           "noise_sd": noise.get("sd"), "repeats": noise.get("repeats", 0),
                           "drift": noise.get("drift")}
    if every_pair:
        out["contradicting_pairs"] = contradictions(pairs, classified)
    if n < 2:
        return {**out, "structure": False, "reason": "fewer than two zones were classified"}
    if n_groups == 1:
        return {**out, "structure": False,
                "reason": "no structure: every zone interferes with the first one alike (one shared bottleneck, "
                          "no parallel units to mix)"}
    if n_groups == n:
        return {**out, "structure": False,
                "reason": "no structure: no pair of zones interferes (the zones run in parallel, or something "
                          "other than the device limits them)"}
    if min(len(lo), len(hi)) < MIN_PAIRS_PER_SIDE:
        return {**out, "structure": False,
                "reason": f"no structure shown: {len(lo)} interfering and {len(hi)} independent pair(s); a side of "
                          f"fewer than {MIN_PAIRS_PER_SIDE} pairs has no spread to judge it by (one measurement "
                          "under emulation can be 20 % off): profile more zones or re-measure (--confirm)"}
    gap = float(np.median(hi) - np.median(lo))
    spread = _mad(lo) + _mad(hi)
    out.update(separation=round(gap, 4), spread=round(spread, 4))
    if gap < min_separation or gap < 2 * spread:
        return {**out, "structure": False,
                "reason": f"no structure: interfering and independent pairs are only {gap:.2f} apart (pair "
                          f"ratio medians) against a spread of {spread:.2f}: the threshold cuts noise"}
    drift = noise.get("drift")
    if drift is not None and abs(drift) > MAX_DRIFT:
        return {**out, "structure": False,
                "reason": f"no structure shown: the solo bandwidth moved {drift:+.0%} (median over zones) between "
                          "the first and the closing solo pass, so the device or the host changed during the "
                          "profile and pairs measured at different times are not comparable: profile again on a "
                          "quiet machine"}
    sd = noise.get("sd")
    if sd is not None:
        sd_ratio = sd * (float(np.median(lo)) + float(np.median(hi))) / 2
        out["noise_separation"] = round(gap / sd_ratio, 2) if sd_ratio > 0 else None
        if gap < NOISE_SEPARATION * sd_ratio:
            return {**out, "structure": False,
                    "reason": f"no structure: interfering and independent pairs are {gap:.2f} apart (pair ratio "
                              f"medians), but one measurement moves ±{sd:.0%} when repeated ({noise.get('repeats')} "
                              f"repeats), ±{sd_ratio:.2f} in pair ratio: they are fewer than {NOISE_SEPARATION:g} "
                              "of those apart and the threshold cuts noise; measure longer (--seconds) on a "
                              "quieter host"}
    bad = out.get("contradicting_pairs")
    if bad is not None and bad > MAX_CONTRADICTIONS * len(pairs):
        return {**out, "structure": False,
                "reason": f"no structure: the groups do not explain the matrix: {bad} of {len(pairs)} pairs "
                          "contradict them (zones of different groups that interfere, or of one group that do "
                          "not), while a device's conflict groups are shared dies or channels"}
    if sd is None:
        out["noise_note"] = (f"the noise of one measurement was not measured ({noise.get('repeats', 0)} repeats; "
                             "--confirm and the closing solo pass give them)")
    return {**out, "structure": True,
            "reason": f"{n_groups} conflict groups: interfering pairs reach {np.median(lo):.2f} of their solo "
                      f"bandwidth, independent pairs {np.median(hi):.2f}"}


def verdict_of_profile(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The structure verdict of a profile read back (profile.json, checked by io/profile.PROFILE), computed again
    from its numbers: each pair's interference from its ratio (or its total MiB/s) against the profile's threshold,
    then structure_verdict over its groups, its noise and its request's min_separation; the verdict stored in the
    file is never shown as it stands. A profile from before its pairs were kept keeps its stored verdict, said so."""
    stored = dict(doc.get("verdict") or {})
    if not doc.get("pairs"):
        return {**stored, "recomputed": False}
    threshold, mib = doc.get("threshold") or INTERFERENCE_THRESHOLD, doc.get("threshold_mib")
    def num(v: Any) -> float:  # a figure the file holds as null (it was not finite: pair_of's NaN)
        return math.nan if v is None else float(v)

    pairs = []
    for p in doc["pairs"]:
        ba, bb, ratio = num(p.get("bw_a")), num(p.get("bw_b")), num(p.get("ratio"))
        hit = (ba + bb) < mib if mib is not None else ratio < threshold  # pair_of's rule, NaN never interferes
        pairs.append(Pair(p["a"], p["b"], ba, bb, ratio, math.nan, math.nan, bool(hit), p.get("measured", 1)))
    groups = {int(z): int(g) for z, g in doc["groups"].items()}
    n = len(doc["zones"])
    request = doc.get("request") or {}
    full = bool(request.get("full_matrix", doc.get("full_matrix", False)))
    out = structure_verdict(pairs, groups, request.get("min_separation", MIN_SEPARATION), noise=doc.get("noise"),
                            every_pair=full and len(pairs) == n * (n - 1) // 2)
    if "zero_bandwidth_zones" in stored:
        out["zero_bandwidth_zones"] = stored["zero_bandwidth_zones"]
    return {**out, "recomputed": True}


def pair_matrix(zones: Sequence[int], pairs: Sequence[Pair]) -> list[list[float | None]]:
    """Square matrix of pair ratios in `zones` order (None where a pair was not measured, 1.0 on the diagonal)."""
    idx = {z: i for i, z in enumerate(zones)}
    m: list[list[float | None]] = [[None] * len(zones) for _ in zones]
    for i in range(len(zones)):
        m[i][i] = 1.0
    for p in pairs:
        if p.a in idx and p.b in idx:
            m[idx[p.a]][idx[p.b]] = m[idx[p.b]][idx[p.a]] = round(p.ratio, 4)
    return m


# ---- the answer key of a device whose layout is known ----------------------------------------------------------
def nvmevirt_layout(zones: Sequence[int], channels: int = 8, luns_per_channel: int = 16,
                    dies_per_zone: int = 1) -> pl.DataFrame:
    """Channel and die of each zone of NVMeVirt's ZNS target. Its FTL puts a zone's first die at
    (zone x dies_per_zone) mod (channels x luns_per_channel) and numbers dies channel-first (channel = die mod
    channels, LUN = die div channels). The prototype profile has one die per zone, 8 channels x 16 LUNs; with
    dies_per_zone = all dies (zn540) every zone spans every die and the key has a single group."""
    total = channels * luns_per_channel
    rows = []
    for z in zones:
        die = (z * dies_per_zone) % total
        rows.append({"zone": z, "die": die, "channel": die % channels, "lun": die // channels,
                     "striped": dies_per_zone >= total})
    return pl.DataFrame(rows)


def adjusted_rand(truth: Mapping[int, Any], found: Mapping[int, int]) -> float | None:
    """Adjusted Rand index of the groups found against a key, over the zones both classify."""
    from sklearn.metrics import adjusted_rand_score

    zones = [z for z in found if found[z] != UNCLASSIFIED and z in truth]
    if len(zones) < 2:
        return None
    return float(adjusted_rand_score([str(truth[z]) for z in zones], [found[z] for z in zones]))

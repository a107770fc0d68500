"""Did a change make reads faster, slower, or no different within the noise? Effect sizes with intervals and a
verdict in words, for a loop's A/B blocks or for two runs.

Every comparison gives the same *effect*: each side's mean, the change (in % on the log scale; in the metric's own
units on the difference scale), its interval and p-value, a verdict and a one-sentence `line`. The verdict is
"faster" or "slower" ("higher" or "lower" for a hit ratio) when the interval excludes no change, by which side the
metric is better; else "no difference within noise".

- Paired blocks (`paired_effect`, `ab_effects`): the loop's A/B mode switches the configuration off and on in
  alternating blocks, in ABBA order. Each pair gives one log ratio log(B/A); the effect is their mean with a t
  interval on n-1 degrees of freedom (exact for log-normal block noise; a bootstrap of 5 pairs is too narrow). The
  ABBA order cancels a linear drift over the loop from the mean of an even number of pairs: it widens the interval
  instead of biasing the estimate.
- Two runs (`run_effect`): no pairing is possible. Each run's reads are cut into equal time blocks; the effect is
  the difference of the mean log block values with a Welch interval whose variance also holds the run-to-run noise
  that one run each cannot measure, as an assumed coefficient of variation per run (`noise_cv`). fio's totals are
  one number per run: their interval is that assumed noise alone.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from ..errors import CompareError
from .family import NOT_HELD, effect_line, family_verdicts
from .params import COMPARE_ALPHA, COMPARE_BLOCKS, COMPARE_MAX_BLOCKS, RUN_NOISE_CV
from .robust import hodges_lehmann

NO_DIFFERENCE = "no difference within noise"
#: the verdicts of a speed metric (IOPS, latency): better, worse, neither
VERDICTS: tuple[str, str, str] = ("faster", "slower", NO_DIFFERENCE)
#: the verdicts of a level (the model's hit ratio): better, worse, neither
LEVEL_VERDICTS: tuple[str, str, str] = ("higher", "lower", NO_DIFFERENCE)
SCALES = ("log", "difference")
#: the arms of the loop's A/B blocks: A (the configuration off), B (on)
ARMS = ("off", "on")
#: a time block's latency quantiles of a zone class need this many of its reads; blocks with fewer are left out
MIN_BLOCK_READS = 10
#: the largest log ratio whose change in % is a finite float (e^709 is near the largest double)
MAX_LOG_RATIO = 700.0
#: the zone classes of the reads, as analysis/loop.latency_split names them
CLASSES = ("all", "listed", "unlisted")


class Metric(NamedTuple):
    """What is compared: its key in the results, its label, unit, which side is better, scale, verdict words and
    whether it is one of the device's measures (the family whose verdicts are controlled together: Holm)."""

    key: str
    label: str
    unit: str
    better: str
    scale: str = "log"
    words: tuple[str, str, str] = VERDICTS
    family: bool = True


# ---- the interval and the effect --------------------------------------------------------------------------------
def _interval(est: float, se: float, df: float, alpha: float) -> tuple[float, float, float]:
    """(low, high, two-sided p) of an estimate with standard error `se` on `df` degrees of freedom (inf: normal)."""
    from scipy import stats

    if se == 0:
        return est, est, 1.0 if est == 0 else 0.0
    q = float(stats.t.ppf(1 - alpha / 2, df))
    return est - q * se, est + q * se, float(2 * stats.t.sf(abs(est) / se, df))


def _pct(log_ratio: float) -> float:
    return 100 * math.expm1(log_ratio)


def _effect(m: Metric, est: float, se: float, df: float, alpha: float, means: tuple[float, float], method: str,
            basis: str) -> dict[str, Any]:
    """The effect of `est` (a log ratio or a difference, B - A) with its interval, verdict and line."""
    lo, hi, p = _interval(est, se, df, alpha)
    if m.scale == "log" and max(abs(lo), abs(hi)) > MAX_LOG_RATIO:
        raise CompareError(f"{m.label}: the interval of the change spans a factor beyond e^{MAX_LOG_RATIO:g}: the "
                           "values differ beyond any measure")
    if m.scale == "log":
        change, ci, unit = _pct(est), [_pct(lo), _pct(hi)], "%"
    else:
        change, ci, unit = est, [lo, hi], "pp" if m.unit == "%" else m.unit
    improved = None if lo <= 0 <= hi else (lo > 0) == (m.better == "higher")
    verdict = m.words[2] if improved is None else m.words[0] if improved else m.words[1]
    e = {"metric": m.label, "key": m.key, "unit": m.unit, "better": m.better, "scale": m.scale,
         "method": method, "mean_a": means[0], "mean_b": means[1], "change": change, "change_unit": unit,
         "ci": ci, "ci_level": 1 - alpha, "p_value": p, "verdict": verdict, "improved": improved, "basis": basis}
    return {**e, "line": effect_line(e)}


def _check(better: str, scale: str, alpha: float) -> None:
    if better not in ("higher", "lower"):
        raise CompareError(f"better must be 'higher' or 'lower', got {better!r}")
    if scale not in SCALES:
        raise CompareError(f"scale must be one of {', '.join(SCALES)}, got {scale!r}")
    if not (isinstance(alpha, (int, float)) and 0 < alpha < 1):
        raise CompareError(f"alpha must be in (0, 1), e.g. 0.05, got {alpha!r}")


def _values(xs: Sequence[Any], what: str, scale: str) -> list[float]:
    """`xs` as floats: finite, and positive on the log scale; a CompareError saying which one is not."""
    out = []
    for i, x in enumerate(xs, start=1):
        try:
            v = float(x)
        except (TypeError, ValueError):
            raise CompareError(f"{what}: value {i} is {x!r}, not a number") from None
        if not math.isfinite(v) or (scale == "log" and v <= 0):
            need = "positive and finite (a log-scale metric)" if scale == "log" else "finite"
            raise CompareError(f"{what}: value {i} is {x!r}; values must be {need}")
        out.append(v)
    return out


def _centre(xs: list[float], scale: str) -> float:
    """The mean that matches the scale: geometric on the log scale, arithmetic on the difference scale."""
    return math.exp(statistics.fmean(map(math.log, xs))) if scale == "log" else statistics.fmean(xs)


# ---- paired blocks ----------------------------------------------------------------------------------------------
def _paired(m: Metric, a: Sequence[Any], b: Sequence[Any], alpha: float) -> dict[str, Any]:
    _check(m.better, m.scale, alpha)
    xa, xb = _values(a, f"{m.label} (A)", m.scale), _values(b, f"{m.label} (B)", m.scale)
    if len(xa) != len(xb):
        raise CompareError(f"{m.label}: {len(xa)} A values but {len(xb)} B values; a pair needs one of each")
    n = len(xa)
    if n < 2:
        raise CompareError(f"{m.label}: {n} pair(s); a paired interval needs at least 2")
    d = [math.log(y / x) if m.scale == "log" else y - x for x, y in zip(xa, xb, strict=True)]
    if not all(map(math.isfinite, d)):  # finite values whose ratio or difference is not (1e-300 against 1e300)
        raise CompareError(f"{m.label}: the values of a pair differ beyond any measure (their ratio or difference "
                           "is not a finite number)")
    on = "log(B/A)" if m.scale == "log" else "B - A"
    means = "geometric" if m.scale == "log" else "arithmetic"
    method = f"paired t interval on {on} per pair, {n - 1} df; {means} means of each arm"
    eff = _effect(m, statistics.fmean(d), statistics.stdev(d) / math.sqrt(n), n - 1, alpha,
                  (_centre(xa, m.scale), _centre(xb, m.scale)), method, f"{n} block pairs")
    unit = _pct if m.scale == "log" else float
    hl = hodges_lehmann(d, alpha)
    return {**eff, "n_pairs": n, "family": m.family, "words": list(m.words), "sd": statistics.stdev(d),
            "pair_changes": [unit(x) for x in d], "median": unit(statistics.median(d)),
            "hodges_lehmann": {**hl, "estimate": unit(hl["estimate"]),
                               "ci": None if hl["ci"] is None else [unit(x) for x in hl["ci"]]}}


def paired_effect(a: Sequence[float], b: Sequence[float], *, metric: str, unit: str, better: str,
                  alpha: float = COMPARE_ALPHA, scale: str = "log",
                  words: tuple[str, str, str] = VERDICTS) -> dict[str, Any]:
    """The effect of B against A where a[i], b[i] are one pair of blocks (A: the configuration off or before, B: on
    or after). `better`: "higher" or "lower"; `scale`: "log" (the change in %, from the mean per-pair log ratio) or
    "difference" (the change in the metric's units, "pp" for a unit of "%"); `words`: the verdicts for better, worse
    and neither (VERDICTS, or LEVEL_VERDICTS for a hit ratio). A CompareError (also a ValueError) for fewer than 2
    pairs, unequal lengths, or values that are not finite (not positive on the log scale)."""
    return _paired(Metric(metric, metric, unit, better, scale, words), a, b, alpha)


#: what ab_effects compares, and where each block record holds it
AB_METRICS: tuple[tuple[Metric, tuple[str, ...]], ...] = (
    (Metric("read_iops", "read IOPS (fio)", "IOPS", "higher"), ("fio", "read_iops")),
    (Metric("fio_p50", "read p50 (fio)", "us", "lower"), ("fio", "p50_us")),
    (Metric("fio_p99", "read p99 (fio)", "us", "lower"), ("fio", "p99_us")),
    (Metric("device_p50", "device read p50, all zones", "us", "lower"), ("latency", "all", "p50_us")),
    (Metric("device_p50_listed", "device read p50, listed zones", "us", "lower"), ("latency", "listed", "p50_us")),
    (Metric("device_p50_unlisted", "device read p50, other zones", "us", "lower"),
     ("latency", "unlisted", "p50_us")),
    # a proportion that can be 0: its change in percentage points, not a ratio
    (Metric("device_hit_ratio", "hit ratio, device (STATUS)", "%", "higher", "difference", LEVEL_VERDICTS),
     ("device", "hit_ratio")),
    # the model's: what the zones would gain on a device that acted, not a measure of the device
    (Metric("hit_ratio", "model hit ratio", "%", "higher", "difference", LEVEL_VERDICTS, family=False),
     ("model", "hit_ratio")),
)


def _pairs(blocks: Sequence[Any]) -> tuple[list[tuple[Mapping[str, Any], Mapping[str, Any]]], list[str]]:
    """The (off, on) blocks of each complete pair, in pair order, and a note for each pair left out."""
    by: dict[int, dict[str, Mapping[str, Any]]] = {}
    for i, blk in enumerate(blocks, start=1):
        pair = blk.get("pair") if isinstance(blk, Mapping) else None
        if not isinstance(pair, int) or isinstance(pair, bool) or blk.get("arm") not in ARMS:
            raise CompareError(f"A/B block {i}: needs 'pair' (an integer) and 'arm' ('on' or 'off'), got {blk!r:.80}")
        arms = by.setdefault(pair, {})
        if blk["arm"] in arms:
            raise CompareError(f"A/B pair {pair} has two {blk['arm']!r} blocks (rounds {arms[blk['arm']].get('round')} "
                               f"and {blk.get('round')})")
        arms[blk["arm"]] = blk
    pairs, dropped = [], []
    for pair in sorted(by):
        arms = by[pair]
        if len(arms) == 2:
            pairs.append((arms["off"], arms["on"]))
        else:
            (arm, blk), = arms.items()
            dropped.append(f"pair {pair} has only its {arm!r} block (round {blk.get('round')}): left out")
    return pairs, dropped


def _block_value(blk: Mapping[str, Any], path: tuple[str, ...], m: Metric) -> Any:
    v: Any = blk
    for k in path:
        v = v.get(k) if isinstance(v, Mapping) else None
    if v is None:
        raise CompareError(f"{m.label}: the {blk.get('arm')!r} block of pair {blk.get('pair')} (round "
                           f"{blk.get('round')}) has no {'.'.join(path)}")
    return 100 * v if m.unit == "%" and isinstance(v, (int, float)) else v


def ab_effects(blocks: list[dict[str, Any]], *, alpha: float = COMPARE_ALPHA, plan: bool = True) -> dict[str, Any]:
    """The effects of the configuration (arm "on" = B against "off" = A) from a loop's A/B block records: read IOPS,
    fio's p50 and p99, the device's p50 of all reads, of the listed zones and of the others, the model's hit ratio
    (difference scale, in percentage points). A metric some complete pair lacks is in `absent` with the reason;
    pairs with one block only are left out (`dropped`)."""
    pairs, dropped = _pairs(blocks)
    effects: dict[str, Any] = {}
    absent: dict[str, Any] = {}
    for m, path in AB_METRICS:
        try:
            a = [_block_value(off, path, m) for off, _ in pairs]
            b = [_block_value(on, path, m) for _, on in pairs]
            effects[m.key] = _paired(m, a, b, alpha)
        except CompareError as e:
            absent[m.key] = {"metric": m.label, "reason": str(e)}
    held = not blocks or any(b.get("device_holds") is not False for b in blocks)
    family = family_verdicts(effects, alpha, held, plan)
    verdict = _headline(effects, absent, ("read_iops", "device_p50"))
    if not held:
        verdict = {**verdict, "verdict": None, "line": f"no verdict: {NOT_HELD}"}
    return {"design": "paired blocks", "a": "configuration off", "b": "configuration on", "pairs": len(pairs),
            "dropped": dropped, "alpha": alpha, "device_held": held, "family": family,
            "method": "per pair of blocks (ABBA order) the log ratio on/off (hit ratio: the difference); the mean "
                      "with a t interval on pairs - 1 df, the device's measures' verdicts controlled together "
                      "(Holm); beside it the median of the pairs and Hodges-Lehmann with its distribution-free "
                      "interval",
            "effects": effects, "absent": absent, "verdict": verdict}


def ab_repeats(blocks: list[dict[str, Any]], groups: int, *, alpha: float = COMPARE_ALPHA) -> dict[str, Any]:
    """The A/B blocks' complete pairs cut into `groups` consecutive groups of equal size (the last pairs left over
    are left out), each compared on its own with ab_effects: repeats of one experiment, e.g. a negative control
    whose verdicts should say "no difference" in all but about `alpha` of them. Per metric, how often each verdict
    came out."""
    pairs, _ = _pairs(blocks)
    if groups < 2 or len(pairs) // groups < 2:
        raise CompareError(f"{len(pairs)} complete pairs cannot make {groups} repeats of at least 2 pairs: give 2 "
                           f"to {max(2, len(pairs) // 2)} repeats")
    size = len(pairs) // groups
    results = [ab_effects([b for pair in pairs[g * size:(g + 1) * size] for b in pair], alpha=alpha, plan=False)
               for g in range(groups)]
    counts: dict[str, dict[str, int]] = {}
    for res in results:
        for key, e in res["effects"].items():
            tally = counts.setdefault(key, {"metric": e["metric"]})  # type: ignore[dict-item]
            tally[e["verdict"]] = tally.get(e["verdict"], 0) + 1
    return {"design": "repeats of paired blocks", "groups": groups, "pairs_per_group": size,
            "left_out_pairs": len(pairs) - groups * size, "alpha": alpha,
            "expected": f"with no effect, about {alpha:.0%} of the repeats find one by chance", "verdicts": counts,
            "results": results}


def _headline(effects: Mapping[str, Any], absent: Mapping[str, Any], order: Sequence[str]) -> dict[str, Any]:
    """The closing verdict: the first metric of `order` that could be compared."""
    for key in order:
        if key in effects:
            e = effects[key]
            return {"key": key, "metric": e["metric"], "verdict": e["verdict"], "line": e["line"]}
    why = "; ".join(a["reason"] for k, a in absent.items() if k in order) or "no metric"
    return {"key": None, "metric": None, "verdict": None, "line": f"nothing could be compared: {why}"}


# ---- two runs ---------------------------------------------------------------------------------------------------
#: fio's totals, one number per run: metric and the keys that hold it (a loop round's record, then meta.json's)
FIO_METRICS: tuple[tuple[Metric, tuple[str, ...]], ...] = (
    (Metric("read_iops", "read IOPS (fio)", "IOPS", "higher"), ("read_iops",)),
    (Metric("fio_p50", "read p50 (fio)", "us", "lower"), ("p50_us", "read_clat_p50_us")),
    (Metric("fio_p99", "read p99 (fio)", "us", "lower"), ("p99_us", "read_clat_p99_us")),
)
_CLASS_LABEL = {"all": "all zones", "listed": "listed zones", "unlisted": "other zones"}
#: per time block, from the trace: metric, zone class, figure
TRACE_METRICS: tuple[tuple[Metric, str, str], ...] = (
    (Metric("read_rate", "read rate (trace)", "reads/s", "higher"), "all", "rate"),
    *((Metric(f"device_{q}" + ("" if c == "all" else f"_{c}"), f"device read {q}, {_CLASS_LABEL[c]}", "us", "lower"),
       c, q) for q in ("p50", "p99") for c in CLASSES),
)


def _cv(noise_cv: float) -> str:
    return f"{100 * noise_cv:g} %"


def _noise_var(noise_cv: float) -> float:
    """Variance of the log-scale difference of two runs that each move by a CV of `noise_cv`."""
    return 2 * math.log1p(noise_cv * noise_cv)


def _two_runs(m: Metric, a: Sequence[Any], b: Sequence[Any], noise_cv: float, alpha: float,
              basis: str) -> dict[str, Any]:
    """Welch's interval on the difference of the mean logs, the assumed run-to-run noise added to its variance (as
    known: it adds no degrees of freedom); one value per side leaves that noise alone (a normal interval)."""
    la = [math.log(x) for x in _values(a, f"{m.label} (A)", "log")]
    lb = [math.log(x) for x in _values(b, f"{m.label} (B)", "log")]
    if not la or not lb:
        raise CompareError(f"{m.label}: no value for run {'A' if not la else 'B'}")
    noise = _noise_var(noise_cv)
    if (len(la) < 2 or len(lb) < 2) and noise == 0:
        raise CompareError(f"{m.label}: one value per run and no run-to-run noise assumed: no interval")
    parts = [(statistics.variance(x) / len(x), len(x)) for x in (la, lb) if len(x) > 1]
    se2 = sum(v for v, _ in parts) + noise
    within = sum(v * v / (n - 1) for v, n in parts)
    df = se2 * se2 / within if within > 0 else math.inf
    method = (f"Welch interval on the mean log values ({len(la)} and {len(lb)} per run) with a run-to-run CV of "
              f"{_cv(noise_cv)} per run assumed; geometric means")
    return {**_effect(m, statistics.fmean(lb) - statistics.fmean(la), math.sqrt(se2), df, alpha,
                      (math.exp(statistics.fmean(la)), math.exp(statistics.fmean(lb))), method, basis),
            "n_a": len(la), "n_b": len(lb), "noise_cv": noise_cv}


def _reads(events: Any, listed: Sequence[int]) -> dict[str, Any]:
    """The reads (ts_ns, lat_us) of each zone class."""
    import polars as pl

    reads = events.filter(pl.col("op") == "read").select(
        pl.col("ts_ns").cast(pl.Float64), "zone", (pl.col("lat_ns").cast(pl.Float64) / 1000).alias("lat_us"))
    inside = pl.col("zone").is_in(list(listed))
    return {"all": reads, "listed": reads.filter(inside), "unlisted": reads.filter(~inside)}


def block_figures(events: Any, listed: Sequence[int],
                  blocks: int = COMPARE_BLOCKS) -> dict[str, dict[str, list[float]]]:
    """A run's reads cut into `blocks` equal time blocks (by submission time, first read to last): per zone class
    the device latency p50 and p99 (us) of each block with at least MIN_BLOCK_READS of its reads, and for all reads
    the rate (reads/s; empty blocks left out)."""
    import polars as pl

    cls = _reads(events, listed)
    ts = cls["all"]["ts_ns"]
    if ts.len() < 2 or ts.max() <= ts.min():
        raise CompareError(f"{ts.len()} read(s) spanning no time: nothing to cut into blocks")
    t0, width = float(ts.min()), (float(ts.max()) - float(ts.min())) / blocks
    block = ((pl.col("ts_ns") - t0) / width).floor().cast(pl.Int64).clip(0, blocks - 1).alias("block")
    out: dict[str, dict[str, list[float]]] = {}
    for name, frame in cls.items():
        g = (frame.group_by(block).agg(pl.len().alias("n"), pl.col("lat_us").quantile(0.5, "nearest").alias("p50"),
                                       pl.col("lat_us").quantile(0.99, "nearest").alias("p99")).sort("block"))
        full = g.filter(pl.col("n") >= MIN_BLOCK_READS)
        out[name] = {"p50": full["p50"].to_list(), "p99": full["p99"].to_list()}
        if name == "all":
            out[name]["rate"] = (g["n"].cast(pl.Float64) / (width / 1e9)).to_list()
    return out


def latency_distributions(events: Any, listed: Sequence[int]) -> dict[str, dict[str, Any]]:
    """The per-request device latency of the reads of each zone class: reads, p50, p90, p99 and mean (us)."""
    out: dict[str, dict[str, Any]] = {}
    for name, frame in _reads(events, listed).items():
        lat = frame["lat_us"]
        q = {f"p{p}_us": None if lat.is_empty() else round(float(lat.quantile(p / 100, "nearest")), 1)
             for p in (50, 90, 99)}
        out[name] = {"reads": lat.len(), **q, "mean_us": None if lat.is_empty() else round(float(lat.mean()), 1)}
    return out


def _fio_value(fio: Mapping[str, Any] | None, keys: tuple[str, ...], side: str, m: Metric) -> Any:
    if not fio:
        raise CompareError(f"{m.label}: run {side} has no fio totals")
    v = next((fio[k] for k in keys if fio.get(k) is not None), None)
    if v is None:
        raise CompareError(f"{m.label}: run {side}'s fio totals have no {keys[-1]}")
    return v


def _fio_effects(a_fio: Mapping[str, Any] | None, b_fio: Mapping[str, Any] | None, noise_cv: float, alpha: float
                 ) -> tuple[dict[str, Any], dict[str, Any]]:
    """(effects, absent) of fio's totals of two runs: one number per run, so the interval is the assumed noise."""
    effects: dict[str, Any] = {}
    absent: dict[str, Any] = {}
    for m, keys in FIO_METRICS:
        try:
            a, b = _fio_value(a_fio, keys, "A", m), _fio_value(b_fio, keys, "B", m)
            effects[m.key] = _two_runs(m, [a], [b], noise_cv, alpha, f"one value per run, run-to-run CV "
                                                                      f"{_cv(noise_cv)} assumed")
        except CompareError as e:
            absent[m.key] = {"metric": m.label, "reason": str(e)}
    return effects, absent


def fio_effect(a_fio: Mapping[str, Any] | None, b_fio: Mapping[str, Any] | None, *, noise_cv: float = RUN_NOISE_CV,
               alpha: float = COMPARE_ALPHA) -> dict[str, Any]:
    """run_effect's fio part alone, for two runs whose traces are not at hand (e.g. two rounds of a loop.json):
    IOPS, p50 and p99, each with the interval of the assumed run-to-run noise."""
    _check_run_options([], COMPARE_BLOCKS, noise_cv)
    _check("higher", "log", alpha)
    effects, absent = _fio_effects(a_fio, b_fio, noise_cv, alpha)
    return {"design": "two runs, fio totals", "noise_cv": noise_cv, "alpha": alpha,
            "method": f"one number per run: the interval is the run-to-run noise assumed as a CV of {_cv(noise_cv)} "
                      "per run (one run each cannot measure it)",
            "effects": effects, "absent": absent, "verdict": _headline(effects, absent, ("read_iops",))}


def _check_run_options(listed: Sequence[int], blocks: int, noise_cv: float) -> None:
    if not isinstance(blocks, int) or isinstance(blocks, bool) or not 2 <= blocks <= COMPARE_MAX_BLOCKS:
        raise CompareError(f"blocks must be a whole number from 2 to {COMPARE_MAX_BLOCKS}, got {blocks!r}")
    if not (isinstance(noise_cv, (int, float)) and math.isfinite(noise_cv) and 0 <= noise_cv <= 1):
        raise CompareError(f"noise_cv must be a fraction from 0 to 1 (0.10 = 10 %), got {noise_cv!r}")
    if any(not isinstance(z, int) or z < 0 for z in listed):
        raise CompareError(f"listed zones must be non-negative zone ids, got {list(listed)!r:.80}")


def run_effect(a_events: Any, b_events: Any, a_fio: Mapping[str, Any] | None, b_fio: Mapping[str, Any] | None, *,
               listed: Sequence[int], blocks: int = COMPARE_BLOCKS, noise_cv: float = RUN_NOISE_CV,
               alpha: float = COMPARE_ALPHA) -> dict[str, Any]:
    """The effects of run B against run A (two separate runs, e.g. two loop rounds): fio's IOPS, p50 and p99 (one
    number per run: only the assumed run-to-run noise), and from the traces cut into `blocks` time blocks the read
    rate and the device p50 and p99 of all reads, of the `listed` zones and of the others. `noise_cv`: the
    run-to-run CV assumed (one run each cannot measure it). Also each side's per-request latency distributions."""
    _check_run_options(listed, blocks, noise_cv)
    _check("higher", "log", alpha)
    effects, absent = _fio_effects(a_fio, b_fio, noise_cv, alpha)
    figs = {}
    for side, events in (("A", a_events), ("B", b_events)):
        try:
            figs[side] = block_figures(events, listed, blocks)
        except CompareError as e:
            raise CompareError(f"run {side}: {e}") from None
    for m, cls, fig in TRACE_METRICS:
        a, b = figs["A"][cls][fig], figs["B"][cls][fig]
        if cls == "listed" and not listed:
            absent[m.key] = {"metric": m.label, "reason": f"{m.label}: no listed zones given"}
        elif len(a) < 2 or len(b) < 2:
            few = "A" if len(a) < 2 else "B"
            absent[m.key] = {"metric": m.label, "reason": f"{m.label}: run {few} has {min(len(a), len(b))} time "
                                                          f"block(s) with {MIN_BLOCK_READS}+ such reads; 2 needed"}
        else:
            effects[m.key] = _two_runs(m, a, b, noise_cv, alpha, f"{len(a)}+{len(b)} time blocks, run-to-run CV "
                                                                 f"{_cv(noise_cv)} assumed")
    return {"design": "two runs", "blocks": blocks, "noise_cv": noise_cv, "alpha": alpha, "listed": sorted(set(listed)),
            "method": f"each run's reads in {blocks} equal time blocks; Welch interval on the mean log block values "
                      f"with the run-to-run noise one run each cannot measure assumed as a CV of {_cv(noise_cv)} per "
                      "run; fio's totals (one number per run) have that assumed noise alone",
            "effects": effects, "absent": absent,
            "distributions": {"a": latency_distributions(a_events, listed),
                              "b": latency_distributions(b_events, listed)},
            "verdict": _headline(effects, absent, ("read_iops", "read_rate", "device_p50"))}

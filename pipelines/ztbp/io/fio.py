"""The one reader of fio's JSON output (raw/fio.json, and the prefill's): per-job rows and run totals.

Totals of latency percentiles are exact only when they can be: from the merged completion-latency histograms
when fio wrote them (`--output-format=json+`, as captures do: each job's `clat_ns.bins`), else from the single
job entry there is (`group_reporting`); with several job entries and no histogram the percentiles are left out
and `clat_percentiles_from` says why, rather than quoting one job as the total.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..errors import ZtbpError
from ..units import MIB

DIRECTIONS = ("read", "write", "trim")
PERCENTILES = {"p50": 50.0, "p99": 99.0}


def read_fio(path: Path) -> dict[str, Any]:
    """fio's JSON document; a ZtbpError saying what is wrong otherwise. Text before the JSON is skipped."""
    try:
        text = path.read_text(errors="replace")
    except OSError as e:
        raise ZtbpError(f"{path.name} cannot be read ({e.strerror})") from None
    start = text.find("{")
    try:
        data = json.loads(text[start:] if start > 0 else text)
    except (ValueError, RecursionError) as e:
        raise ZtbpError(f"{path.name} is not fio JSON output ({type(e).__name__}: {str(e)[:80]})") from None
    if not isinstance(data, dict) or not isinstance(data.get("jobs"), list):
        raise ZtbpError(f"{path.name} has no 'jobs' list: is it fio --output-format=json output?")
    return data


def _jobs(data: dict[str, Any]) -> list[dict[str, Any]]:
    return [j for j in data["jobs"] if isinstance(j, dict)]


def _dir(job: dict[str, Any], d: str) -> dict[str, Any]:
    s = job.get(d)
    return s if isinstance(s, dict) else {}


def _clat(s: dict[str, Any]) -> dict[str, Any]:
    c = s.get("clat_ns")
    return c if isinstance(c, dict) else {}


def fio_rows(path: Path) -> list[dict[str, Any]]:
    """One row per fio job and direction that did I/O: ios, IOPS, bandwidth, completion latency."""
    rows = []
    for job in _jobs(read_fio(path)):
        for d in DIRECTIONS:
            s = _dir(job, d)
            if not s.get("total_ios"):
                continue
            clat = _clat(s)
            pct = clat.get("percentile") if isinstance(clat.get("percentile"), dict) else {}
            rows.append({
                "job": str(job.get("jobname", "?")), "dir": d, "ios": int(s["total_ios"]),
                "iops": float(s.get("iops", 0.0)), "MiB_per_s": float(s.get("bw_bytes", 0)) / MIB,
                "clat_mean_us": float(clat.get("mean", 0.0)) / 1000,
                "clat_p50_us": float(pct.get("50.000000", 0.0)) / 1000,
                "clat_p99_us": float(pct.get("99.000000", 0.0)) / 1000,
            })
    return rows


def merged_percentiles(bins: dict[int, int], qs: dict[str, float]) -> dict[str, float]:
    """Nearest-rank percentiles (ns) of a latency histogram {latency ns: count}."""
    total = sum(bins.values())
    out: dict[str, float] = {}
    if not total:
        return out
    ordered = sorted(bins.items())
    for name, q in qs.items():
        rank = max(1, -(-int(q * total) // 100)) if q < 100 else total
        seen = 0
        for lat, n in ordered:
            seen += n
            if seen >= rank:
                out[name] = float(lat)
                break
    return out


def clat_percentiles(data: dict[str, Any], d: str) -> tuple[dict[str, float], str]:
    """Completion-latency percentiles (ns) of direction d over all jobs, and where they come from."""
    jobs = [j for j in _jobs(data) if _dir(j, d).get("total_ios")]
    if not jobs:
        return {}, "no job did I/O"
    hists = [_clat(_dir(j, d)).get("bins") for j in jobs]
    if all(isinstance(h, dict) and h for h in hists):
        merged: dict[int, int] = {}
        for h in hists:
            for lat, n in h.items():  # type: ignore[union-attr]
                merged[int(lat)] = merged.get(int(lat), 0) + int(n)
        return merged_percentiles(merged, PERCENTILES), "histogram of all jobs (json+)"
    if len(jobs) == 1:
        pct = _clat(_dir(jobs[0], d)).get("percentile") or {}
        return {name: float(pct.get(f"{q:.6f}", 0.0)) for name, q in PERCENTILES.items()}, "the one job entry"
    return {}, f"none: {len(jobs)} job entries without latency histograms (use --output-format=json+)"


def fio_totals(path: Path) -> dict[str, Any]:
    """Totals of a fio output for meta.json's `fio` object (probes/FORMAT.md); {} when there is no output."""
    if not path.is_file():
        return {}
    try:
        data = read_fio(path)
    except ZtbpError:
        return {}
    jobs = _jobs(data)
    summ: dict[str, Any] = {"version": data.get("fio version", "")}
    for d in ("read", "write"):
        summ[f"{d}_ios"] = sum(int(_dir(j, d).get("total_ios", 0)) for j in jobs)
        summ[f"{d}_iops"] = round(sum(float(_dir(j, d).get("iops", 0.0)) for j in jobs), 1)
    summ["runtime_ms"] = max((int(_dir(j, d).get("runtime", 0)) for j in jobs for d in ("read", "write")),
                             default=0)
    pct, source = clat_percentiles(data, "read")
    for name in PERCENTILES:
        if name in pct:
            summ[f"read_clat_{name}_us"] = round(pct[name] / 1000, 1)
    summ["clat_percentiles_from"] = source
    summ["errors"] = sum(int(j.get("error", 0)) for j in jobs)
    return summ

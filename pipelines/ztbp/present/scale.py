"""Text views of the scale commands: import, stream, shards, batch."""

from __future__ import annotations

from typing import Any


def import_text(out: dict[str, Any]) -> str:
    r = out["import"]
    lines = [f"import: {r['rows']:,} commands from {r['lines']:,} lines of {r['source']} ({r['format']}) -> "
             f"{out['run']}",
             f"  devices: {len(r['devices'])} ({', '.join(list(r['devices'])[:8])}"
             f"{' …' if len(r['devices']) > 8 else ''}); latency: {r['latency']}"]
    if r["skipped"]:
        lines.append(f"  skipped {r['skipped']:,} lines: " + ", ".join(f"{k} {v:,}" for k, v in
                                                                      r["skip_reasons"].items()))
        lines += [f"    line {e['line']}: {e['reason']}: {e['text']}" for e in r["skipped_examples"]]
    if r["ignored"]:
        lines.append("  ignored (not commands): " + ", ".join(f"{k} {v:,}" for k, v in r["ignored"].items()))
    for k, v in (("unaligned to the LBA size", r["unaligned"]), ("of other devices", r["other_device"]),
                 *r["extra"].items()):
        if v and not str(k).startswith("host:"):
            lines.append(f"  {k}: {v:,}")
    if "stream" in out:
        s = out["stream"]
        lines.append(f"  streamed to derived/events-parts/: {s['rows']:,} rows, {s['files']} files, "
                     f"{s['bytes'] / 2**20:.1f} MiB")
    elif "ingest" in out:
        lines.append(f"  ingested to derived/events.parquet: {out['ingest']['rows']:,} rows")
    return "\n".join(lines)


def stream_text(out: dict[str, Any]) -> str:
    lines = [f"stream: {out['rows']:,} events of {out['run']}"]
    if "ingest" in out:
        i = out["ingest"]
        lines.append(f"  ingest   {i['seconds']:7.2f} s  {i['files']} files, {i['bytes'] / 2**20:.1f} MiB, "
                     f"{i['skipped']} lines skipped")
    for k, s in out["seconds"].items():
        lines.append(f"  {k:<8} {s:7.2f} s")
    if "zones" in out:
        top = sorted(out["zones"], key=lambda z: -z["reads"])[:5]
        lines.append("  most-read zones: " + ", ".join(f"{z['zone']} ({z['reads']:,})" for z in top))
    if "cluster" in out:
        c = out["cluster"]
        hot = ", ".join(map(str, c["hot_zones"])) or "none"
        pair = f"eps {c['eps']}, min_samples {c['min_samples']}" if c.get("eps") is not None else c.get("note", "")
        lines.append(f"  hot zones: {hot} ({pair}; KFold scores from hashed folds)")
    if "chains" in out:
        c = out["chains"]
        lines.append(f"  chains ({c['op']}): {c['chains']:,}, {c['frac_bytes_ge_nts']:.1%} of bytes in chains ≥ NTS")
    if "cachesim" in out:
        c = out["cachesim"]
        lines.append(f"  cache {c['cache_mib']} MiB: lru {c['lru']:.4f}, zone_lru {c['zone_lru']:.4f}, static_best "
                     f"{c['static_best']:.4f} (belady: see `ztbp shards`)")
    return "\n".join(lines)


def shards_text(res: dict[str, Any]) -> str:
    lines = [f"shards: {res['requests']:,} page requests of {res['run']}, cache {res['cache_mib']} MiB "
             f"({res['cache_pages']:,} pages)",
             f"  {'rate':>7} {'policy':<12} {'exact':>8} {'sampled':>8} {'error':>8} {'adj':>8}  {'speed-up':>8}"
             + (f"  mean |error| / |adj| over {res['rates'][0]['seeds']} seeds"
                if res["rates"] and res["rates"][0].get("seeds", 1) > 1 else "")]
    num = (lambda v, f: format(v, f) if v is not None else "–")  # noqa: E731
    for r in res["rates"]:
        for p in res["exact"]:
            est = (r["hit_ratio"] or {}).get(p)
            line = (f"  {r['rate']:7.4f} {p:<12} {res['exact'][p]:8.4f} {num(est, '8.4f'):>8} "
                    f"{num((r['error'] or {}).get(p), '+8.4f'):>8} {num((r['error_adj'] or {}).get(p), '+8.4f'):>8}"
                    f"  {r['speedup']:7.1f}x")
            if r.get("seeds", 1) > 1:
                line += f"  {num(r['mean_abs_error'][p], '.4f')} / {num(r['mean_abs_error_adj'][p], '.4f')}"
            lines.append(line)
        if r.get("empty_samples"):
            lines.append(f"  {r['rate']:7.4f} {r['empty_samples']} of {r['seeds']} samples held no request (no "
                         "estimate; left out of the means)")
        if "libcachesim" in r:
            lc = r["libcachesim"]
            lines.append(f"  {r['rate']:7.4f} libCacheSim's spatial sampler, lru: {lc['hit_ratio']:.4f} "
                         f"(error {lc['error']:+.4f}"
                         + (f"; mean |error| {lc['mean_abs_error']:.4f})" if r.get("seeds", 1) > 1 else ")"))
    return "\n".join(lines)


def batch_text(res: dict[str, Any]) -> str:
    lines = [f"batch: {len(res['runs'])} runs on {res['scheduler']} ({res['workers']} workers) in "
             f"{res['seconds']:.1f} s"]
    bad = [r for r in res["runs"] if r.get("error")]
    lines += [f"  {r['run']}: {r['error']}" for r in bad]
    lines.append(f"  {len(res['runs']) - len(bad)} ok, {len(bad)} failed")
    return "\n".join(lines)


def aggregates_text(out: list[dict[str, Any]]) -> str:
    lines = []
    for r in out:
        top = sorted(r["zones"], key=lambda z: -z["reads"])[:5]
        lines.append(f"aggregates: {r['run']}: {len(r['zones'])} zones, {len(r['cells'])} cells read, from "
                     f"{r['files']} partition files; most-read zones: "
                     + ", ".join(f"{z['zone']} ({z['reads']:,})" for z in top))
    return "\n".join(lines)

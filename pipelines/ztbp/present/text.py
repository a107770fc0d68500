"""Text views of analysis results: what the CLI prints and what the notebooks' summary cells show.

Each function takes a result (a dict or a frame from the analysis room) and returns stable lines of text;
none computes a figure of its own beyond formatting. The cache simulator and frag (numba kernels: about a second
to import) are imported by the views that show their results, so `ztbp ingest` or `ztbp zones` never loads them.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from ..units import MIB
from ..writeback.config import DEVICE_MAX_ZONES

if TYPE_CHECKING:
    from ..io.nvme import IngestReport


def ingest_text(rep: IngestReport) -> str:
    out = [f"ingest: {rep.rows} rows read from {rep.source} ({rep.path} path)"]
    if rep.skipped:
        reasons = ", ".join(f"{k}: {v}" for k, v in sorted(rep.skip_reasons.items()))
        out.append(f"ingest: skipped {rep.skipped} lines ({reasons})")
        for ex in rep.skipped_examples:
            out.append(f"  line {ex['line']}: {ex['reason']}")
    else:
        out.append("ingest: skipped 0 lines")
    if rep.blank_lines:
        out.append(f"ingest: ignored {rep.blank_lines} blank lines")
    if rep.out_of_range_zones:
        out.append(f"ingest: warning: {rep.out_of_range_zones} rows address a zone ≥ nr_zones of meta.json")
    lost = ", ".join(f"{k}={v}" for k, v in rep.lost_events.items()) or "not recorded"
    out.append(f"ingest: lost events (from meta.json): {lost}")
    if rep.reingest:
        out.append(f"ingest: the derived events there before were not reused: {rep.reingest}")
    return "\n".join(out)


def zones_text(table: pl.DataFrame, top: int) -> str:
    total = max(1, int(table["reads"].sum()))
    shown = table.sort("reads", descending=True).head(top) if top else table
    lines = [f"{'zone':>5} {'reads':>10} {'share':>6} {'writes':>8} {'appends':>7} {'resets':>6} "
             f"{'p50 µs':>8} {'p99 µs':>8}"]
    for r in shown.iter_rows(named=True):
        p50 = "-" if r["read_lat_p50_us"] is None else f"{r['read_lat_p50_us']:.1f}"
        p99 = "-" if r["read_lat_p99_us"] is None else f"{r['read_lat_p99_us']:.1f}"
        lines.append(f"{r['zone']:>5} {r['reads']:>10} {r['reads'] / total:>6.1%} {r['writes']:>8} "
                     f"{r['appends']:>7} {r['resets']:>6} {p50:>8} {p99:>8}")
    if top and table.height > top:
        lines.append(f"(top {top} of {table.height} zones by reads; --top 0 shows all)")
    return "\n".join(lines)


def chains_text(r: dict[str, Any]) -> str:
    def fmt(b: int) -> str:
        return f"{b / MIB:.2f} MiB" if b >= MIB else f"{b / 1024:.0f} KiB"

    lines = [
        f"chains ({r['op']}): {r['chains']} chains from {r['requests']} requests, {fmt(r['bytes'])} in all",
        f"  NTS {fmt(r['nts_bytes'])}: {r['frac_chains_ge_nts']:.1%} of chains and "
        f"{r['frac_bytes_ge_nts']:.1%} of bytes are in chains ≥ NTS",
        f"  chain length p50 {fmt(r['chain_bytes_p50'])}, p90 {fmt(r['chain_bytes_p90'])}",
        "  chain-length CDF:  ≤ bytes        chains  cum%chains  cum%bytes",
    ]
    for row in r["chain_cdf"]:
        lines.append(f"  {fmt(row['bytes_le']):>18} {row['chains']:>12} {row['cum_frac_chains']:>10.1%} "
                     f"{row['cum_frac_bytes']:>10.1%}")
    lines.append("  I/O size CDF:        bytes      requests  cum%")
    for row in r["size_cdf"]:
        lines.append(f"  {fmt(row['bytes']):>18} {row['requests']:>13} {row['cum_frac']:>6.1%}")
    return "\n".join(lines)


def frag_text(table: pl.DataFrame, summary: dict[str, Any]) -> str:
    lines = []
    for d, s in summary.items():
        lines.append(f"frag ({d}): {s['zones_touched']} zones touched, {s['fragments']} fragments, "
                     f"{s['fragments_per_zone_mean']:.1f} per zone on average, {s['fragments_per_zone_max']} at most")
    lines.append(f"{'zone':>5} {'rd frags':>9} {'rd gap mean':>12} {'wr frags':>9} {'wr gap max':>11}")
    for r in table.filter((pl.col("read_fragments") > 0) | (pl.col("write_fragments") > 0)).iter_rows(named=True):
        rg = "-" if r["read_gap_bytes_mean"] is None else f"{r['read_gap_bytes_mean'] / 1024:.0f} KiB"
        wg = "-" if r["write_gap_bytes_max"] is None else f"{r['write_gap_bytes_max'] / 1024:.0f} KiB"
        lines.append(f"{r['zone']:>5} {r['read_fragments']:>9} {rg:>12} {r['write_fragments']:>9} {wg:>11}")
    return "\n".join(lines)


def _score(v: float | None) -> str:
    return "-" if v is None else f"{v:.4f}"


def cluster_text(r: dict[str, Any]) -> str:
    lines = [f"cluster: {r['reads']} reads in {r['cells_read']} cells of {r['cell_bytes'] // 1024} KiB"]
    if r.get("note"):
        lines.append(f"cluster: {r['note']}")
    if r["grid"]:
        picked = r.get("validation", "kfold")
        lines.append(f"  eps     min_samples  kfold silhouette  time silhouette   (* chosen by {picked} validation)")
        for g in sorted(r["grid"], key=lambda g: (g["eps"], g["min_samples"])):
            mark = " *" if (g["eps"], g["min_samples"]) == (r["eps"], r["min_samples"]) else ""
            lines.append(f"  {g['eps']:<7} {g['min_samples']:>11}  {_score(g['silhouette']):>16}  "
                         f"{_score(g.get('silhouette_time')):>15}{mark}")
        for v, s in (r.get("scores") or {}).items():
            if s is not None:
                lines.append(f"  best by {v}: eps {s['eps']}, min_samples {s['min_samples']}, silhouette "
                             f"{s['silhouette']:.4f}")
    for w in r.get("widened", []):
        lines.append(f"  widened: {w}")
    for cl in r["clusters"]:
        lines.append(f"  cluster {cl['label']}: {cl['cells']} cells, {cl['reads']} reads, density "
                     f"{cl['density_factor']:.2f}x mean{' HOT' if cl['hot'] else ''}, zones {cl['zones'][:8]}"
                     f"{'…' if len(cl['zones']) > 8 else ''}")
    if "zones_read" in r:
        rule = r["rule"]
        lines.append(f"zones: {r['zones_read']} read; {r['significant_zones']} significantly above the rest "
                     f"(one-sided binomial, Holm, alpha {rule['alpha']:g}); {r['dense_zones']} dense (half their "
                     f"reads and cells in hot clusters); hot = both")
    lines.append(f"hot zones: {r['hot_zones']}")
    return "\n".join(lines)


def cachesim_text(r: dict[str, Any]) -> str:
    from ..analysis.cachesim import GENERAL, POLICIES

    lines = [f"cachesim: {r['requests']} page requests from {r['read_commands']} reads; cache {r['cache_mib']} MiB "
             f"= {r['cache_pages']} pages of {r['page_kib']} KiB; hot zones {r['hot_zones']} "
             f"(from {r.get('hot_zones_source', '?')})"]
    general = [p for p in GENERAL if p in r]
    for p in POLICIES:
        lines.append(f"  {p:<12} {r[p]:.4f}")
    if general:
        lines.append(f"  general policies (libCacheSim {r.get('libcachesim', '?')}):")
        for p in general:
            lines.append(f"  {p:<12} {_score(r[p])}")
        best = r["best_general"]
        lines.append(f"  zone_lru vs the best general policy ({best['policy']} {best['hit_ratio']:.4f}): "
                     f"{r['zone_lru_vs_best_general']:+.4f}")
    if "sweep" in r:
        cols = ["lru", "zone_lru", "static_best", "belady", *[p for p in GENERAL if p in r["sweep"][0]]]
        lines.append("  cache MiB " + " ".join(f"{c:>11}" for c in cols))
        for s in r["sweep"]:
            lines.append(f"  {s['cache_mib']:>9} " + " ".join(f"{_score(s[c]):>11}" for c in cols))
    return "\n".join(lines)


def opcodes_text(table: pl.DataFrame) -> str:
    if table.height == 0:
        return "no NVMe I/O command in this trace"
    lines = [f"{'op':<16} {'action':<10} {'count':>9} {'errors':>6} {'mean µs':>9} {'p50 µs':>9} {'p99 µs':>9} "
             f"{'p99.9 µs':>9} {'max µs':>9}"]
    for r in table.iter_rows(named=True):
        lines.append(f"{r['op']:<16} {r['zone_action'] or '-':<10} {r['count']:>9} {r['errors']:>6} "
                     + " ".join(f"{r[k] / 1000:>9.1f}" for k in ("mean_ns", "p50_ns", "p99_ns", "p999_ns",
                                                                    "max_ns")))
    return "\n".join(lines)


def _us(ns: float) -> str:
    return f"{ns / 1000:.2f}"


def layers_text(res: dict[str, Any]) -> str:
    lines = [f"{res['requests']} requests ({', '.join(f'{k} {v}' for k, v in res['modes'].items()) or 'none'}; "
             f"stack {', '.join(res['stacks']) or '-'})",
             f"{'layer':<16} {'mean µs':>9} {'p50 µs':>9} {'p99 µs':>9} {'share':>7}"]
    for r in res["layers"]:
        lines.append(f"{r['layer']:<16} {_us(r['mean_ns']):>9} {_us(r['p50_ns']):>9} {_us(r['p99_ns']):>9} "
                     f"{r['share']:>7.1%}")
    e, s = res["end_to_end"], res["sum_check"]
    lines.append(f"{'end-to-end':<16} {_us(e['mean_ns']):>9} {_us(e['p50_ns']):>9} {_us(e['p99_ns']):>9}")
    lines.append(f"sum of layer means {_us(s['sum_of_layer_means_ns'])} µs vs measured end-to-end "
                 f"{_us(s['e2e_mean_ns'])} µs: residual {_us(s['residual_ns'])} µs ({s['residual_frac']:.2%}, "
                 f"{'within' if s['within_tolerance'] else 'OUTSIDE'} {s['tolerance']:.0%})")
    x = res.get("cross_check")
    if x and x.get("matched"):
        lines.append(f"device vs nvme.csv lat_ns ({x['matched']} of {x['rows']} requests matched): median "
                     f"{_us(x['layers_device_p50_ns'])} vs {_us(x['nvme_lat_p50_ns'])} µs "
                     f"({x['rel_diff']:+.1%})")
    fio = res.get("fio")
    if fio and fio.get("kernel_e2e_over_fio_clat"):
        lines.append(f"fio's own mean completion latency {_us(fio['clat_mean_ns'])} µs ({fio['iops']:.0f} IOPS): the "
                     f"probe's end-to-end covers {fio['kernel_e2e_over_fio_clat']:.1%} of it (the rest is user space "
                     "and the syscall entry/exit instructions)")
    b = res.get("bench")
    if b:
        lines.append(f"probe overhead ({b['fs']}, {b['engine']}, {b['rounds']} rounds): fio {b['iops_without']:.0f} "
                     f"IOPS without, {b['iops_with']:.0f} with the layer probe: ratio {b['ratio']:.3f}"
                     + (f" (per-round ratios ± {b['ratio_sd']:.3f}; runs without it vary by {b['without_cv']:.1%})"
                        if b.get("ratio_sd") is not None else "")
                     + f"; lost events {b['lost_events_with']}")
    ex = res["excluded"]
    if ex["negative_layer"] or ex["no_device_time"] or res["read"]["skipped"]:
        lines.append(f"left out: {ex['negative_layer']} rows with a negative layer, {ex['no_device_time']} without "
                     f"a device completion stamp, {res['read']['skipped']} lines that did not parse")
    for g in res.get("groups", []):
        label = ", ".join(f"{k}={g[k]}" for k in g if k not in ("layers", "stats"))
        parts = ", ".join(f"{r['layer']} {_us(r['mean_ns'])}" for r in g["layers"])
        lines.append(f"  {label} ({g['stats']['requests']} requests): {parts} µs")
    if res["zones"]:
        lines.append(f"per zone: {len(res['zones'])} zones (see --json)")
    return "\n".join(lines)


def _decision(cfg: dict[str, Any]) -> list[str]:
    """The recommendation lines of a configuration (none for one written before the key existed)."""
    if "recommend" not in cfg:
        return []
    h = cfg["held_out"]
    return [f"  held out (reads after the first {h['train_share']:.0%}, cache warmed by them): lru {h['lru']:.4f} -> "
            f"zone_lru {h['zone_lru']:.4f}, gain {h['gain']:+.4f}",
            f"  recommend: {str(cfg['recommend']).lower()} — {cfg['recommend_reason']}"]


def config_written_text(cfg: dict[str, Any], out: Path) -> str:
    p = cfg["predicted"]
    found = cfg.get("hot_zones_found", cfg["hot_zones"])
    lines = [f"config: wrote {out}",
             f"  hot zones sent {cfg['hot_zones']} (found {found} in the first part of run {cfg['source_run']})",
             f"  whole run at {cfg['cache_mib']} MiB: lru {p['lru']:.4f} -> zone_lru {p['zone_lru']:.4f} "
             f"(static best {p['static_best']:.4f}, belady {p['belady']:.4f})", *_decision(cfg)]
    if len(found) > DEVICE_MAX_ZONES:
        lines.append(f"  note: {len(found)} hot zones found; the device protocol takes {DEVICE_MAX_ZONES} per SET: "
                     "the five with the highest read shares are sent and were predicted with")
    if not cfg["hot_zones"]:
        lines.append("  note: no hot zone was found; applying this configuration clears nothing and sets nothing")
    if cfg.get("recommend") is False and cfg["hot_zones"]:
        lines.append("  note: ztbp-ctl set and ztbp apply refuse this configuration (exit code 16) unless --force")
    return "\n".join(lines)


def apply_text(res: dict[str, Any]) -> str:
    """apply()'s result in a few stable lines."""
    where = "dry run (no device)" if res["dry_run"] else f"device {res['device']}"
    lines = [f"write-back: {where}: $ {res['command']}"]
    r = res.get("result") or {}
    if res["ok"]:
        dwords = ", ".join(f"cdw{i}={r[f'cdw{i}']}" for i in range(10, 16) if f"cdw{i}" in r)
        lines.append(f"  ok: opcode {r.get('opcode')} (0x{int(r.get('opcode', 0)):02x}), nsid {r.get('nsid')}, "
                     f"{dwords}; zones {r.get('zones')}")
        if res["dry_run"]:
            lines.append("  nothing was sent; give a device (e.g. device = \"/dev/nvme0n1\") to send it")
    else:
        lines.append(f"  refused by ztbp-ctl (exit code {res['exit_code']}, {r.get('error', '?')}): "
                     f"{res['message']}")
    return "\n".join(lines)


def scalar(v: Any) -> str:
    """A meta.json value on one line: nested objects as k=v lists."""
    if isinstance(v, dict):
        return ", ".join(f"{k}={scalar(x)}" for k, x in v.items())
    if isinstance(v, list):
        return "[" + ", ".join(scalar(x) for x in v) + "]"
    return str(v)


def _wrap(label: str, text: str, width: int = 112) -> str:
    """`label` padded to 13 columns, then text wrapped at commas into lines of at most `width`."""
    return textwrap.fill(text, width, initial_indent=f"{label:<13}", subsequent_indent=" " * 13,
                         break_long_words=False, break_on_hyphens=False)


def overview_text(ov: dict[str, Any]) -> str:
    zone_mib = ov["zone_size_lba"] * ov["lba_bytes"] / MIB
    cap_mib = ov["zone_cap_lba"] * ov["lba_bytes"] / MIB
    kind = "synthetic" if ov["synthetic"] else "traced"
    ops = ", ".join(f"{k} {v:,}" for k, v in ov["by_op"].items()) or "none"
    lost = ", ".join(f"{k}={v}" for k, v in ov["lost_events"].items()) or "not recorded"
    lines = [
        f"run          {ov['run_id']} ({ov['backend']}, {kind}, {'complete' if ov['complete'] else 'INCOMPLETE'})",
        f"created      {ov['created'] or 'not recorded'}",
        f"device       {ov['device']}: {ov['nr_zones']} zones of {zone_mib:g} MiB (capacity {cap_mib:g} MiB), "
        f"{ov['lba_bytes']}-byte LBAs",
        _wrap("workload", scalar(ov["workload"]) or "not recorded"),
        f"commands     {ov['commands']:,} in {ov['duration_s']:.2f} s ({ov['commands_per_s']:,.0f}/s): {ops}",
        f"read         {ov['read_bytes'] / MIB:,.1f} MiB",
        f"lost events  {lost}",
    ]
    if ov["versions"]:
        lines.append(_wrap("versions", scalar(ov["versions"])))
    return "\n".join(lines)


def quality_text(warnings: list[str]) -> str:
    if not warnings:
        return "data quality: no warning"
    return "\n".join([f"data quality: {len(warnings)} warning{'s' if len(warnings) > 1 else ''}",
                      *[f"  - {w}" for w in warnings]])


def layers_view_text(view: dict[str, Any]) -> str:
    if view["status"] != "ok":
        return view["message"]
    total = sum(r.get("mean_ns", 0) for r in view["layers"])
    parts = ", ".join(f"{r['layer']} {r.get('share', 0):.1%}" for r in view["layers"])
    return f"layer breakdown: {len(view['layers'])} layers, mean end-to-end {total / 1000:.1f} µs: {parts}"


def chains_headline(cr: dict[str, Any]) -> str:
    """The headline lines of `ztbp chains` (chains, share ≥ NTS, chain length percentiles)."""
    return "\n".join(chains_text(cr).splitlines()[:3])


def frag_headline(ft: pl.DataFrame) -> str:
    """The headline lines of `ztbp frag` (per direction: zones touched, fragments per zone)."""
    from ..analysis.frag import frag_summary

    s = frag_summary(ft)
    return "\n".join(frag_text(ft, s).splitlines()[: len(s)])


def cache_text(sim: dict[str, Any], source: str = "ztbp cluster") -> str:
    """`ztbp cachesim` text of a simulate() result."""
    return cachesim_text({**sim, "hot_zones_source": source})


def zone_lru_verdict(sim: dict[str, Any]) -> str:
    """Whether zone-LRU with the detected hot zones beats the best of libCacheSim's general policies."""
    if "best_general" not in sim:
        return "zone-LRU against the general policies: not simulated (general=False)"
    best, gain = sim["best_general"], sim["zone_lru_vs_best_general"]
    verdict = "beats" if gain > 0 else "does not beat"
    zones = sim["hot_zones"] if sim["hot_zones"] else "none detected: zone-LRU is plain LRU"
    return (f"zone-LRU with the detected zones ({zones}) {verdict} the best general policy at "
            f"{sim['cache_mib']:g} MiB: {sim['zone_lru']:.4f} against {best['policy']} {best['hit_ratio']:.4f} "
            f"({gain:+.4f})")


def config_text(cfg: dict[str, Any]) -> str:
    """The cache configuration in a few stable lines (no creation time)."""
    p, c = cfg["predicted"], cfg["cluster"]
    lines = [f"configuration for run {cfg['source_run']}: hot zones sent {cfg['hot_zones']} (found "
             f"{cfg.get('hot_zones_found', cfg['hot_zones'])} in the first part)",
             f"  cluster eps {c['eps']}, min_samples {c['min_samples']}, silhouette {_score(c['silhouette'])}",
             f"  whole run at {cfg['cache_mib']:g} MiB: lru {p['lru']:.4f}, zone_lru {p['zone_lru']:.4f}, "
             f"static_best {p['static_best']:.4f}, belady {p['belady']:.4f}", *_decision(cfg)]
    return "\n".join(lines)


def perfetto_text(res: dict[str, Any]) -> str:
    """What `ztbp perfetto` wrote (and, with --check, what reading it back found)."""
    files = res.get("files") or [res["path"]]
    parts = (f" in {len(files)} files of at most {res['split_bytes'] / MIB:g} MiB, each opening alone: "
             + ", ".join(Path(f).name for f in files[1:]) + " beside it") if len(files) > 1 else ""
    lines = [f"perfetto: wrote {res['path']} ({res['bytes'] / MIB:.1f} MiB{parts}, {res['seconds']:.1f} s)",
             f"  {res['commands']} commands in {res['zones']} zones on {res['lanes']} lanes (at most "
             f"{res['max_lanes_per_zone']} in one zone); {res['wp_points']} write-pointer and {res['qd_points']} "
             "queue-depth counter values"]
    if res["requests"]:
        lines.append(f"  {res['requests']} layer-probe requests ({res['layer_slices']} slices), {res['flows']} "
                     "linked to their NVMe command by a flow")
    if res["skipped"]:
        lines.append("  left out: " + ", ".join(f"{k} {v}" for k, v in res["skipped"].items()))
    chk = res.get("check")
    if chk:
        verdict = {True: "ok", False: "MISMATCH"}
        lines.append(f"  check: commands per zone {verdict[chk['commands_per_zone_equal']]}, final write pointers "
                     f"{verdict[chk['wp_final_equal']]} ({chk['wp_zones']} zones), flows with both ends "
                     f"{verdict[chk['flows_with_both_ends']]} ({chk['flows']}), every track declared in its file "
                     f"{verdict[chk['undeclared_tracks'] == 0]}, files within the limit "
                     f"{verdict[chk['files_within_limit']]} (read back one by one)")
    lines.append("  open it at https://ui.perfetto.dev (Open trace file; the file stays in the browser) "
                 "or offline with Perfetto's trace_processor")
    return "\n".join(lines)

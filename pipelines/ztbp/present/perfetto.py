"""A run as a Perfetto trace: one track per zone, every NVMe command a slice, counters, layer slices linked by flows.

Written with the `perfetto` package's trace builder (`TraceProtoBuilder`) and its TrackEvent protos: Perfetto's
native format. Its own documentation calls the Chrome JSON format "legacy, best effort"; JSON cannot put
overlapping slices on one track, this can. Open the file at https://ui.perfetto.dev (the file stays in the browser)
or query it offline with Perfetto's trace processor.

This lives in present/ with the figures and text views: it is one more way to show a loaded run. It computes no
analysis of its own (lanes, write pointers, queue depth and the nested layer slices come from
analysis/timeline.py, the layer-to-command matching from analysis/layers.py) and it never parses arguments or
prints; the `ztbp perfetto` command (cli/export.py) adds the progress bar.

What the trace holds (track names in quotes):
- "<device> (nsid N)": one track per zone, "zone Z". Commands of a zone that overlap in time go to sibling lanes
  (child tracks with the same merge key, which the UI draws as one track). Every command is a slice named after
  its op (zone management after its action: "reset", "finish", ...), with op, slba, nlb, status and lat_ns as
  arguments. Under "write pointers", one counter per zone whose pointer the trace moves: "zone Z wp" in LBAs from
  the zone start (analysis/timeline.py `write_pointers` says how it is followed).
- "NVMe queues": one counter per hardware queue, "nvme<ctrl> q<qid> depth", the commands in flight.
- "requests (layer probe)", when the run has raw/layers.csv: one track per thread, "tid T" (lanes like the zones,
  for a thread with several requests in flight), each request a slice with its layers nested inside, and a flow
  from its "device" slice to the NVMe command it caused (matched as `ztbp layers` cross-checks them).
- Application operations (raw/appops.csv of an application run, `ztbp capture-app`) are not in the trace: they
  would be one more source like the layer requests — a track group of their own, one slice per operation, and a
  flow to each command it caused (stages.appops attributes them), next to `_layer_requests` with flow ids above
  the layer rows'.

Strings are interned (event names, argument names and the op strings are written once per trace): a command
costs about 113 bytes with its counters (slice begin 55, end 17, two queue-depth values of 21 each), against 140
without interning. The packets are written and read back by present/perfetto_proto.py; `verify` holds what
`read_trace` reads against the run (the trace processor needs a binary the package downloads on first use).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from ..analysis.layers import clean, match_commands
from ..analysis.timeline import (
    assign_lanes,
    command_lanes,
    layer_slices,
    queue_depth,
    select_commands,
    slice_name,
    write_pointers,
)
from ..files import atomic_writer, check_target, make_dir
from ..io.run import Run
from .perfetto_proto import BEGIN, END, Writer, read_trace

REQUEST_ARGS = ("mode", "bytes", "sector", "zone", "nrq", "e2e_ns", "stack", "tid")
ROOT_RANKS = {"zones": 0, "queues": 1, "requests": 2}

Progress = Callable[[int, int], None]


@dataclass
class ExportResult:
    """What `export` wrote and what it left out."""

    path: str
    bytes: int = 0
    seconds: float = 0.0
    commands: int = 0
    zones: int = 0
    lanes: int = 0
    max_lanes_per_zone: int = 0
    wp_points: int = 0
    qd_points: int = 0
    requests: int = 0
    layer_slices: int = 0
    flows: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    window_ns: tuple[int, int] | None = None
    interned: bool = True


def _rows(df: pl.DataFrame, cols: list[str], chunk: int = 100_000) -> Iterator[tuple[Any, ...]]:
    """Rows of some columns as plain Python values, a chunk at a time (fast to iterate, bounded memory)."""
    for off in range(0, df.height, chunk):
        part = df.slice(off, chunk)
        yield from zip(*(part[c].to_list() for c in cols), strict=True)


def _zone_tracks(w: Writer, root: int, cmds: pl.DataFrame) -> dict[tuple[int, int], int]:
    pairs = cmds.select("zone", "lane").unique().sort("zone", "lane")
    return {(z, ln): w.track(f"zone {z}", root, rank=z, merge_key=f"zone {z}") for z, ln in pairs.iter_rows()}


def _commands(w: Writer, cmds: pl.DataFrame, tracks: dict[tuple[int, int], int], flows: dict[int, list[int]],
              progress: Progress | None, total: int) -> None:
    cols = ["event", "ts_ns", "lat_ns", "zone", "lane", "name", "op", "slba", "nlb", "status"]
    for n, (ev, ts, lat, z, ln, name, op, slba, nlb, st) in enumerate(_rows(cmds, cols), 1):
        track = tracks[(z, ln)]
        te = w.event(ts, BEGIN, track, name)
        w.args(te, {"op": op, "slba": slba, "nlb": nlb, "status": st, "lat_ns": lat})
        fids = flows.get(ev)
        if fids:
            te.terminating_flow_ids.extend(fids)
        w.event(ts + lat, END, track)
        if progress and n % 20_000 == 0:
            progress(n, total)


def _counters(w: Writer, points: pl.DataFrame, key: list[str], tracks: dict[tuple[Any, ...], int],
              value: str, span: tuple[int, int] | None) -> int:
    """Counter values of each track; with a window, the value at its start and the changes inside."""
    points = points.select(*key, "t_ns", value)
    if span is not None:
        start = points.filter(pl.col("t_ns") < span[0]).group_by(key, maintain_order=True).agg(
            pl.col(value).last()).with_columns(pl.lit(span[0], pl.Int64).alias("t_ns"))
        inside = points.filter((pl.col("t_ns") >= span[0]) & (pl.col("t_ns") < span[1]))
        points = pl.concat([start.select(inside.columns), inside])
    n = 0
    for row in _rows(points, [*key, "t_ns", value]):
        track = tracks.get(tuple(row[: len(key)]))
        if track is not None:
            w.counter(row[-2], track, row[-1])
            n += 1
    return n


def _layer_requests(w: Writer, run: Run, events: pl.DataFrame, cmds: pl.DataFrame,
                    span: tuple[int, int] | None, zones: tuple[int, ...] | None, res: ExportResult
                    ) -> dict[int, list[int]]:
    """The layer probe's requests as nested slices on per-thread tracks; returns NVMe event -> flow ids."""
    raw, read = run.layers
    rows, excluded = clean(raw)
    res.skipped.update({f"layer_{k}": v for k, v in excluded.items() if k != "multi_command" and v})
    if read.skipped:
        res.skipped["layer_lines_unreadable"] = read.skipped
    if span is not None:
        rows = rows.filter((pl.col("ts_ns") >= span[0]) & (pl.col("ts_ns") < span[1]))
    if zones:
        rows = rows.filter(pl.col("zone").is_in(list(zones)))
    if rows.height == 0:
        return {}
    pairs = match_commands(rows, events, run.lba_bytes).filter(pl.col("event").is_in(cmds["event"].implode()))
    flow_of = {int(r): int(r) + 1 for r in pairs["row"].to_list()}
    slices = layer_slices(rows)
    req = slices.filter(pl.col("depth") == 0)
    lanes = assign_lanes(rows["tid"].to_numpy(), req["start_ns"].to_numpy(), req["end_ns"].to_numpy())
    root = w.track("requests (layer probe)", rank=ROOT_RANKS["requests"], ordered=True,
                   description="Requests of the layer probe (raw/layers.csv), each layer nested in the one above; "
                               "a flow leads from a request's device time to its NVMe command.")
    tids = rows["tid"].to_list()
    tracks = {key: w.track(f"tid {key[0]}", root, rank=key[0], merge_key=f"tid {key[0]}")
              for key in sorted(set(zip(tids, lanes.tolist(), strict=True)))}
    info = rows.select(REQUEST_ARGS[:-1]).to_dicts()
    ops = rows["op"].to_list()
    by_row = slices.partition_by("row", as_dict=True, maintain_order=True)
    for (r,), s in by_row.items():
        track = tracks[(tids[r], int(lanes[r]))]
        marks = []
        for name, depth, a, b in s.select("name", "depth", "start_ns", "end_ns").iter_rows():
            marks.append((a, 1, depth, name))
            marks.append((b, 0, -depth, None))
        for t, kind, _, name in sorted(marks, key=lambda m: (m[0], m[1], m[2])):
            if kind == 0:
                w.event(t, END, track)
                continue
            te = w.event(t, BEGIN, track, f"{ops[r]} request" if name == "request" else name)
            if name == "request":
                w.args(te, {**info[r], "tid": tids[r]})
            elif name == "device" and r in flow_of:
                te.flow_ids.append(flow_of[r])
            res.layer_slices += 1
    res.requests = rows.height
    res.flows = len(flow_of)
    unmatched = rows.height - len(flow_of)
    if unmatched:
        res.skipped["layer_requests_without_command"] = unmatched
    out: dict[int, list[int]] = {}
    for r, ev in pairs.iter_rows():
        out.setdefault(int(ev), []).append(flow_of[int(r)])
    return out


def export(run: Run, out: str | os.PathLike[str], *, window_ns: tuple[int | None, int | None] | None = None,
           zones: tuple[int, ...] | None = None, layers: bool = True, intern: bool = True,
           progress: Progress | None = None) -> ExportResult:
    """Write the run (or a window and some zones of it) to `out` as a Perfetto trace. `window_ns` is (start, end)
    in ns from the run's first command, either end None; `progress(done, total)` is called as commands are
    written."""
    t0 = time.monotonic()
    ev = run.events
    cmds, span = select_commands(ev, window_ns, zones, run.nr_zones)
    cmds = cmds.with_columns(pl.Series("lane", command_lanes(cmds)), slice_name(), pl.col("op").cast(pl.Utf8),
                             pl.col("ts_ns").cast(pl.Int64), pl.col("lat_ns").cast(pl.Int64))
    res = ExportResult(path=str(out), commands=cmds.height, window_ns=span, interned=intern)
    dest = Path(out)
    check_target(dest)
    make_dir(dest.parent)
    with atomic_writer(dest) as f:
        w = Writer(f, intern)
        nsids = ",".join(str(n) for n in sorted(cmds["nsid"].unique().to_list()))
        root = w.track(f"{run.meta.get('device', 'nvme')} (nsid {nsids})", rank=ROOT_RANKS["zones"], ordered=True,
                       description="One track per zone; every NVMe command a slice (overlapping commands on "
                                   "sibling lanes of the zone).")
        ztracks = _zone_tracks(w, root, cmds)
        res.zones = cmds["zone"].n_unique()
        res.lanes = len(ztracks)
        res.max_lanes_per_zone = int(cmds["lane"].max()) + 1  # type: ignore[operator]
        flows = _layer_requests(w, run, ev, cmds, span, zones, res) if layers and run.has_layers else {}
        _commands(w, cmds, ztracks, flows, progress, cmds.height)
        wp = write_pointers(ev, run.nr_zones, run.zone_size_lba, int(run.meta["zone_cap_lba"]))
        wp_zones = sorted(set(wp["zone"].unique().to_list()) & set(cmds["zone"].unique().to_list()))
        wgroup = w.track("write pointers", root, rank=run.nr_zones + 1, ordered=True,
                         description="Each zone's write pointer in LBAs from the zone start, as the trace moves it.")
        wtracks = {(z,): w.track(f"zone {z} wp", wgroup, rank=z, counter_unit="LBA") for z in wp_zones}
        res.wp_points = _counters(w, wp, ["zone"], wtracks, "wp_lba", span)
        qd = queue_depth(ev)
        qroot = w.track("NVMe queues", rank=ROOT_RANKS["queues"], ordered=True,
                        description="Commands in flight per hardware queue (submission +1, completion -1).")
        queues = qd.select("ctrl", "qid").unique().sort("ctrl", "qid").iter_rows()
        qtracks = {(c, q): w.track(f"nvme{c} q{q} depth", qroot, rank=q, counter_unit="commands")
                   for c, q in queues}
        res.qd_points = _counters(w, qd, ["ctrl", "qid"], qtracks, "depth", span)
        w.flush()
    if progress:
        progress(cmds.height, cmds.height)
    res.bytes = dest.stat().st_size
    res.seconds = round(time.monotonic() - t0, 3)
    return res


def verify(run: Run, path: str | os.PathLike[str], *, window_ns: tuple[int | None, int | None] | None = None,
           zones: tuple[int, ...] | None = None) -> dict[str, Any]:
    """Read a trace written by `export` back and hold it against the run: the command slices per zone, the last
    write-pointer value of each zone, that every flow has both ends and that no command slice overlaps another on
    its track."""
    t0 = time.monotonic()
    rb = read_trace(path)
    cmds, span = select_commands(run.events, window_ns, zones, run.nr_zones)
    want = {int(z): int(n) for z, n in cmds.group_by("zone").len().sort("zone").iter_rows()}
    got = rb.slices_per_zone()
    wp = write_pointers(run.events, run.nr_zones, run.zone_size_lba, int(run.meta["zone_cap_lba"]))
    wp = wp.filter(pl.col("zone").is_in(list(want)))
    if span is not None:
        wp = wp.filter(pl.col("t_ns") < span[1])
    want_wp = {int(z): int(w) for z, w in wp.group_by("zone").agg(pl.col("wp_lba").last()).iter_rows()}
    got_wp = {int(n.split()[1]): int(v) for n, v in rb.counter_finals(" wp").items()}
    root = rb.root(f"{run.meta.get('device', 'nvme')} (nsid")
    lanes = [u for u in rb.children(root) if not rb.tracks[u]["counter"] and rb.slices.get(u)]
    outs, ins = rb.flows_out, rb.flows_in
    return {"path": str(path), "packets": rb.packets, "commands": sum(got.values()), "zones": len(got),
            "commands_per_zone_equal": got == want,
            "commands_per_zone_diff": {z: (got.get(z, 0), want.get(z, 0)) for z in sorted(set(got) | set(want))
                                       if got.get(z, 0) != want.get(z, 0)},
            "wp_zones": len(got_wp), "wp_final_equal": got_wp == want_wp,
            "wp_final_diff": {z: (got_wp.get(z), want_wp.get(z)) for z in sorted(set(got_wp) | set(want_wp))
                              if got_wp.get(z) != want_wp.get(z)},
            "flows": len(outs), "flows_with_both_ends": len(set(outs)) == len(outs) == len(ins)
            and set(outs) == set(ins),
            "overlapping_command_slices": sum(1 for u in lanes if rb.max_depth.get(u, 0) > 0),
            "read_seconds": round(time.monotonic() - t0, 3)}

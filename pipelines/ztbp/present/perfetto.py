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

Strings are interned (event names, argument names and the op strings are written once per chunk): a command
costs about 113 bytes with its counters (slice begin 55, end 17, two queue-depth values of 21 each), against 140
without interning. The packets are written and read back by present/perfetto_proto.py; `verify` holds what
`read_trace` reads against the run (the trace processor needs a binary the package downloads on first use).

Any size: the trace is written a chunk at a time — CHUNK commands (fewer under a small file limit) with the layer
requests that began and the counter values that changed in their time — each chunk serialized on its own and
appended to the trace's files (present/perfetto_files.py: one file, or several that each open alone when one
would pass SPLIT_BYTES). The writer holds one chunk; the trace's size is never held. A chunk ends only where no
layer request's flow leads across to a later command. What is read to write it is the run's events, as every
in-memory command reads them.
"""

from __future__ import annotations

import io
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
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
from ..files import check_target, make_dir
from ..io.run import Run
from .perfetto_files import SPLIT_BYTES, TraceFiles
from .perfetto_proto import BEGIN, END, TrackSpec, Writer, read_trace

REQUEST_ARGS = ("mode", "bytes", "sector", "zone", "nrq", "e2e_ns", "stack", "tid")
ROOT_RANKS = {"zones": 0, "queues": 1, "requests": 2}
#: commands per chunk (the writer's memory: a chunk's packets); fewer when the file limit is small, so that a
#: file holds several chunks
CHUNK = 50_000

Progress = Callable[[int, int], None]


@dataclass
class ExportResult:
    """What `export` wrote and what it left out."""

    path: str
    files: list[str] = field(default_factory=list)
    split_bytes: int = SPLIT_BYTES
    file_bytes: list[int] = field(default_factory=list)
    chunks_over_limit: int = 0
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


class Tracks:
    """Every track of the trace (uuids given here; each file declares those it uses: present/perfetto_files.py)."""

    def __init__(self) -> None:
        self.specs: dict[int, TrackSpec] = {}

    def add(self, name: str, parent: int = 0, **kw: Any) -> int:
        uuid = len(self.specs) + 2
        self.specs[uuid] = TrackSpec(uuid, name, parent, **kw)
        return uuid


def _rows(df: pl.DataFrame, cols: list[str], chunk: int = 100_000) -> Iterator[tuple[Any, ...]]:
    """Rows of some columns as plain Python values, a chunk at a time (fast to iterate, bounded memory)."""
    for off in range(0, df.height, chunk):
        part = df.slice(off, chunk)
        yield from zip(*(part[c].to_list() for c in cols), strict=True)


class LayerRequests:
    """The layer probe's requests as nested slices on per-thread tracks, written a time range at a time, and the
    flow from each request's "device" slice to its NVMe command."""

    def __init__(self, run: Run, cmds: pl.DataFrame, span: tuple[int, int] | None, zones: tuple[int, ...] | None,
                 tracks: Tracks, res: ExportResult) -> None:
        raw, read = run.layers
        rows, excluded = clean(raw)
        res.skipped.update({f"layer_{k}": v for k, v in excluded.items() if k != "multi_command" and v})
        if read.skipped:
            res.skipped["layer_lines_unreadable"] = read.skipped
        if span is not None:
            rows = rows.filter((pl.col("ts_ns") >= span[0]) & (pl.col("ts_ns") < span[1]))
        if zones:
            rows = rows.filter(pl.col("zone").is_in(list(zones)))
        self.rows = rows
        self.flow_to: dict[int, list[int]] = {}  # NVMe event -> the flows that end on its slice
        self.flow_of = np.zeros(rows.height, dtype=np.int64)  # each row's flow id (0: none)
        self.cmd_ts = np.zeros(0, dtype=np.int64)  # the submission of each flow's command
        if rows.height == 0:
            return
        pairs = match_commands(rows, run.events, run.lba_bytes).filter(pl.col("event").is_in(cmds["event"].implode()))
        for r, ev in pairs.iter_rows():
            self.flow_of[r] = r + 1
            self.flow_to.setdefault(int(ev), []).append(r + 1)
        self.cmd_ts = run.events["ts_ns"].cast(pl.Int64).to_numpy()[pairs["event"].to_numpy()]
        self.req_ts = rows["ts_ns"].cast(pl.Int64).to_numpy()[pairs["row"].to_numpy()]
        slices = layer_slices(rows)  # sorted by row
        self.slices = slices
        self.first = np.searchsorted(slices["row"].to_numpy(), np.arange(rows.height + 1))
        req = slices.filter(pl.col("depth") == 0)
        self.lanes = assign_lanes(rows["tid"].to_numpy(), req["start_ns"].to_numpy(), req["end_ns"].to_numpy())
        root = tracks.add("requests (layer probe)", rank=ROOT_RANKS["requests"], ordered=True,
                          description="Requests of the layer probe (raw/layers.csv), each layer nested in the one "
                                      "above; a flow leads from a request's device time to its NVMe command.")
        self.tids = rows["tid"].to_numpy()
        self.tracks = {key: tracks.add(f"tid {key[0]}", root, rank=key[0], merge_key=f"tid {key[0]}")
                       for key in sorted(set(zip(self.tids.tolist(), self.lanes.tolist(), strict=True)))}
        self.ts = rows["ts_ns"].cast(pl.Int64).to_numpy()
        self.by_time = np.argsort(self.ts, kind="stable")
        res.requests, res.flows = rows.height, pairs.height
        if rows.height - pairs.height:
            res.skipped["layer_requests_without_command"] = rows.height - pairs.height

    def open_flows(self, t: np.ndarray) -> np.ndarray:
        """How many flows are open at each time t: their request began before it, their command is at or after."""
        return (np.searchsorted(np.sort(self.req_ts), t, side="left")
                - np.searchsorted(np.sort(self.cmd_ts), t, side="left")) if self.cmd_ts.size else np.zeros(t.size)

    def write(self, w: Writer, t0: int | None, t1: int | None, res: ExportResult) -> None:
        """The requests that began in [t0, t1) (an end None: open)."""
        if self.rows.height == 0:
            return
        ts = self.ts[self.by_time]
        lo = 0 if t0 is None else int(np.searchsorted(ts, t0, side="left"))
        hi = ts.size if t1 is None else int(np.searchsorted(ts, t1, side="left"))
        if hi <= lo:
            return
        which = np.sort(self.by_time[lo:hi])
        w.uses(self.tracks[(t, ln)] for t, ln in set(zip(self.tids[which].tolist(), self.lanes[which].tolist(),
                                                           strict=True)))
        info = self.rows[which].select(*REQUEST_ARGS[:-1], pl.col("op").cast(pl.Utf8)).to_dicts()
        for r, meta in zip(which.tolist(), info, strict=True):
            part = self.slices.slice(int(self.first[r]), int(self.first[r + 1] - self.first[r]))
            track = self.tracks[(int(self.tids[r]), int(self.lanes[r]))]
            marks = []
            for name, depth, a, b in part.select("name", "depth", "start_ns", "end_ns").iter_rows():
                marks.append((a, 1, depth, name))
                marks.append((b, 0, -depth, None))
            for t, kind, _, name in sorted(marks, key=lambda m: (m[0], m[1], m[2])):
                if kind == 0:
                    w.event(t, END, track)
                    continue
                op = meta.pop("op", None) if name == "request" else None
                te = w.event(t, BEGIN, track, f"{op} request" if name == "request" else name)
                if name == "request":
                    w.args(te, {**meta, "tid": int(self.tids[r])})
                elif name == "device" and self.flow_of[r]:
                    te.flow_ids.append(int(self.flow_of[r]))
                res.layer_slices += 1


def _commands(w: Writer, cmds: pl.DataFrame, tracks: dict[tuple[int, int], int], flows: dict[int, list[int]]) -> None:
    w.uses(tracks[(z, ln)] for z, ln in cmds.select("zone", "lane").unique().iter_rows())
    cols = ["event", "ts_ns", "lat_ns", "zone", "lane", "name", "op", "slba", "nlb", "status"]
    for ev, ts, lat, z, ln, name, op, slba, nlb, st in _rows(cmds, cols):
        track = tracks[(z, ln)]
        te = w.event(ts, BEGIN, track, name)
        w.args(te, {"op": op, "slba": slba, "nlb": nlb, "status": st, "lat_ns": lat})
        fids = flows.get(ev)
        if fids:
            te.terminating_flow_ids.extend(fids)
        w.event(ts + lat, END, track)


class Counters:
    """Every counter's values in time order (track, t_ns, value, kind), written a time range at a time, with each
    track's last value carried along (what a file starting at a time shows first) and the values written counted
    by kind ("wp", "qd")."""

    def __init__(self, points: pl.DataFrame, span: tuple[int, int] | None) -> None:
        points = points.sort("t_ns", maintain_order=True)
        if span is not None:
            points = points.filter(pl.col("t_ns") < span[1])
        self.track = points["track"].to_numpy()
        self.t = points["t_ns"].to_numpy()
        self.value = points["value"].to_numpy()
        self.kind = dict(points.select("track", "kind").unique().iter_rows())
        self.is_wp = (points["kind"] == "wp").to_numpy()
        self.written = {"wp": 0, "qd": 0}
        self.state: dict[int, int] = {}
        self.prev: dict[int, int | None] = {}  # each track's value before the chunk being written
        self.pos = 0
        if span is not None:  # before the window: only the values it starts with
            self._take(int(np.searchsorted(self.t, span[0], side="left")), None)

    def _take(self, end: int, w: Writer | None) -> None:
        """The values up to position `end` into the state (and written, with a writer)."""
        tracks = self.track[self.pos:end]
        if w is not None and tracks.size:
            ids, first = np.unique(tracks, return_index=True)
            self.prev = {int(k): self.state.get(int(k)) for k in ids}
            w.uses(ids)
            for track, t, v in zip(tracks.tolist(), self.t[self.pos:end].tolist(), self.value[self.pos:end].tolist(),
                                   strict=True):
                w.counter(t, track, v)
            wp = int(np.count_nonzero(self.is_wp[self.pos:end]))
            self.written["wp"] += wp
            self.written["qd"] += tracks.size - wp
        if tracks.size:  # each track's last value in the range
            ids, last = np.unique(tracks[::-1], return_index=True)
            self.state.update(zip(ids.tolist(), self.value[self.pos:end][::-1][last].tolist(), strict=True))
        self.pos = end

    def write(self, w: Writer, t1: int | None) -> None:
        """The values before t1 (None: all the rest)."""
        self.prev = {}
        self._take(self.t.size if t1 is None else int(np.searchsorted(self.t, t1, side="left")), w)

    def before(self) -> dict[int, int]:
        """Each track's value before the chunk last written (the tracks that had one); counted as written."""
        out = {**self.state, **{k: v for k, v in self.prev.items() if v is not None}}
        for k in [k for k, v in self.prev.items() if v is None]:
            out.pop(k)
        for track in out:
            self.written[self.kind[track]] += 1
        return out


def _cuts(times: np.ndarray, layers: LayerRequests | None, per_chunk: int) -> list[int]:
    """Where chunks begin after the first: about every per_chunk of the sorted item times (commands, counter
    values, layer requests), moved on to a time that no item before shares and no flow is open across."""
    if times.size == 0:
        return []
    ok = np.ones(times.size, dtype=bool)
    ok[1:] = times[1:] != times[:-1]
    ok[0] = False
    if layers is not None:
        ok &= layers.open_flows(times) == 0
    cuts, nxt = [], per_chunk
    while nxt < times.size:
        rest = ok[nxt:]
        if not rest.any():
            break
        at = nxt + int(np.argmax(rest))
        cuts.append(int(times[at]))
        nxt = at + per_chunk
    return cuts


def _counter_tracks(run: Run, cmds: pl.DataFrame, tracks: Tracks, root: int) -> pl.DataFrame:
    """The write-pointer and queue-depth counters' tracks, and all their values (track, t_ns, value)."""
    ev = run.events
    wp = write_pointers(ev, run.nr_zones, run.zone_size_lba, int(run.meta["zone_cap_lba"]))
    wp_zones = sorted(set(wp["zone"].unique().to_list()) & set(cmds["zone"].unique().to_list()))
    wgroup = tracks.add("write pointers", root, rank=run.nr_zones + 1, ordered=True,
                        description="Each zone's write pointer in LBAs from the zone start, as the trace moves it.")
    wtrack = {z: tracks.add(f"zone {z} wp", wgroup, rank=z, counter_unit="LBA") for z in wp_zones}
    qd = queue_depth(ev)
    qroot = tracks.add("NVMe queues", rank=ROOT_RANKS["queues"], ordered=True,
                       description="Commands in flight per hardware queue (submission +1, completion -1).")
    queues = qd.select("ctrl", "qid").unique().sort("ctrl", "qid").iter_rows()
    qtrack = {(c, q): tracks.add(f"nvme{c} q{q} depth", qroot, rank=q, counter_unit="commands") for c, q in queues}
    wmap = pl.DataFrame({"zone": list(wtrack), "track": list(wtrack.values())},
                        schema={"zone": wp["zone"].dtype, "track": pl.Int64})
    qmap = pl.DataFrame({"ctrl": [c for c, _ in qtrack], "qid": [q for _, q in qtrack], "track": list(qtrack.values())},
                        schema={"ctrl": qd["ctrl"].dtype, "qid": qd["qid"].dtype, "track": pl.Int64})
    return pl.concat([
        wp.join(wmap, on="zone").select("track", pl.col("t_ns").cast(pl.Int64), pl.col("wp_lba").cast(pl.Int64)
                                        .alias("value"), pl.lit("wp").alias("kind")),
        qd.join(qmap, on=["ctrl", "qid"]).select("track", pl.col("t_ns").cast(pl.Int64),
                                                 pl.col("depth").cast(pl.Int64).alias("value"),
                                                 pl.lit("qd").alias("kind"))])


def export(run: Run, out: str | os.PathLike[str], *, window_ns: tuple[int | None, int | None] | None = None,
           zones: tuple[int, ...] | None = None, layers: bool = True, intern: bool = True,
           progress: Progress | None = None, split_bytes: int = SPLIT_BYTES) -> ExportResult:
    """Write the run (or a window and some zones of it) to `out` as a Perfetto trace — several files when one
    would pass `split_bytes` (present/perfetto_files.py). `window_ns` is (start, end) in ns from the run's first
    command, either end None; `progress(done, total)` is called as commands are written."""
    t0 = time.monotonic()
    cmds, span = select_commands(run.events, window_ns, zones, run.nr_zones)
    cmds = cmds.with_columns(pl.Series("lane", command_lanes(cmds)), slice_name(), pl.col("op").cast(pl.Utf8),
                             pl.col("ts_ns").cast(pl.Int64), pl.col("lat_ns").cast(pl.Int64))
    if not cmds["ts_ns"].is_sorted():  # the chunks take commands by time (a run's events are in time order)
        cmds = cmds.sort("ts_ns", maintain_order=True)
    res = ExportResult(path=str(out), commands=cmds.height, window_ns=span, interned=intern, split_bytes=split_bytes)
    dest = Path(out)
    check_target(dest)
    make_dir(dest.parent)
    tracks = Tracks()
    nsids = ",".join(str(n) for n in sorted(cmds["nsid"].unique().to_list()))
    root = tracks.add(f"{run.meta.get('device', 'nvme')} (nsid {nsids})", rank=ROOT_RANKS["zones"], ordered=True,
                      description="One track per zone; every NVMe command a slice (overlapping commands on sibling "
                                  "lanes of the zone).")
    pairs = cmds.select("zone", "lane").unique().sort("zone", "lane")
    ztracks = {(z, ln): tracks.add(f"zone {z}", root, rank=z, merge_key=f"zone {z}") for z, ln in pairs.iter_rows()}
    res.zones, res.lanes = cmds["zone"].n_unique(), len(ztracks)
    res.max_lanes_per_zone = int(cmds["lane"].max()) + 1  # type: ignore[operator]
    reqs = LayerRequests(run, cmds, span, zones, tracks, res) if layers and run.has_layers else None
    counters = Counters(_counter_tracks(run, cmds, tracks, root), span)
    flows = reqs.flow_to if reqs is not None else {}
    ts = cmds["ts_ns"].to_numpy()
    items = [ts, counters.t[counters.pos:]] + ([reqs.ts] if reqs is not None else [])
    bounds: list[int | None] = [span[0] if span is not None else None]
    bounds += _cuts(np.sort(np.concatenate(items)), reqs, max(16, min(CHUNK, split_bytes // 2048)))
    with TraceFiles(dest, split_bytes, tracks.specs) as files:
        for i, lo in enumerate(bounds):
            hi = bounds[i + 1] if i + 1 < len(bounds) else None
            a = 0 if lo is None else int(np.searchsorted(ts, lo, side="left"))
            b = ts.size if hi is None else int(np.searchsorted(ts, hi, side="left"))
            buf = io.BytesIO()
            w = Writer(buf, intern)
            if reqs is not None:
                reqs.write(w, None if i == 0 else lo, hi, res)
            _commands(w, cmds.slice(a, b - a), ztracks, flows)
            counters.write(w, hi)
            w.flush()
            files.add(buf.getvalue(), w.used, lo, counters.before)
            if progress:
                progress(b, cmds.height)
        paths = files.finish()
    res.files, res.file_bytes, res.chunks_over_limit = [str(p) for p in paths], files.sizes, files.over
    res.wp_points, res.qd_points = counters.written["wp"], counters.written["qd"]
    res.bytes = sum(files.sizes)
    res.seconds = round(time.monotonic() - t0, 3)
    return res


def verify(run: Run, paths: str | os.PathLike[str] | list[str], *,
           window_ns: tuple[int | None, int | None] | None = None, zones: tuple[int, ...] | None = None,
           split_bytes: int | None = None) -> dict[str, Any]:
    """Read the files of a trace written by `export` back, each on its own, and hold them against the run: the
    command slices per zone, the last write-pointer value of each zone (the latest file's), that every flow has
    both ends in one file, that no command slice overlaps another on its track, that each file declares every
    track it uses, and (split_bytes) that each file is within the limit."""
    t0 = time.monotonic()
    files = [str(p) for p in (paths if isinstance(paths, list) else [paths])]
    cmds, span = select_commands(run.events, window_ns, zones, run.nr_zones)
    want = {int(z): int(n) for z, n in cmds.group_by("zone").len().sort("zone").iter_rows()}
    wp = write_pointers(run.events, run.nr_zones, run.zone_size_lba, int(run.meta["zone_cap_lba"]))
    wp = wp.filter(pl.col("zone").is_in(list(want)))
    if span is not None:
        wp = wp.filter(pl.col("t_ns") < span[1])
    want_wp = {int(z): int(w) for z, w in wp.group_by("zone").agg(pl.col("wp_lba").last()).iter_rows()}
    got: dict[int, int] = {}
    got_wp: dict[int, int] = {}
    packets = flows = overlapping = undeclared = 0
    both_ends = True
    for path in files:
        rb = read_trace(path, keep_counters=False)
        packets += rb.packets
        for z, n in rb.slices_per_zone().items():
            got[z] = got.get(z, 0) + n
        got_wp.update({int(n.split()[1]): int(v) for n, v in rb.counter_finals(" wp").items()})
        root = rb.root(f"{run.meta.get('device', 'nvme')} (nsid")
        lanes = [u for u in rb.children(root) if not rb.tracks[u]["counter"] and rb.slices.get(u)]
        overlapping += sum(1 for u in lanes if rb.max_depth.get(u, 0) > 0)
        outs, ins = rb.flows_out, rb.flows_in
        flows += len(outs)
        both_ends &= len(set(outs)) == len(outs) == len(ins) and set(outs) == set(ins)
        undeclared += len(rb.undeclared)
    sizes = [os.path.getsize(p) for p in files]
    return {"path": files[0], "files": len(files), "packets": packets, "commands": sum(got.values()),
            "zones": len(got), "commands_per_zone_equal": got == want,
            "commands_per_zone_diff": {z: (got.get(z, 0), want.get(z, 0)) for z in sorted(set(got) | set(want))
                                       if got.get(z, 0) != want.get(z, 0)},
            "wp_zones": len(got_wp), "wp_final_equal": got_wp == want_wp,
            "wp_final_diff": {z: (got_wp.get(z), want_wp.get(z)) for z in sorted(set(got_wp) | set(want_wp))
                              if got_wp.get(z) != want_wp.get(z)},
            "flows": flows, "flows_with_both_ends": both_ends, "overlapping_command_slices": overlapping,
            "undeclared_tracks": undeclared, "largest_file_bytes": max(sizes),
            "files_within_limit": split_bytes is None or max(sizes) <= split_bytes,
            "read_seconds": round(time.monotonic() - t0, 3)}

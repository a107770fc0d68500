"""Perfetto's TrackEvent protos in and out: `Writer` puts TracePackets on one sequence (track descriptors from
their `TrackSpec`, slices, counters, strings interned), `read_trace` reads a trace file back with the same protos
into a `TraceReadback`, a block of the file at a time.

present/perfetto.py decides what the trace holds (`export`) and checks a trace against its run (`verify`).
"""

from __future__ import annotations

import os
from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any

import numpy as np
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import TracePacket, TrackDescriptor, TrackEvent
from perfetto.trace_builder.proto_builder import TraceProtoBuilder

from ..errors import ZtbpError

#: Small on purpose: the id is in every packet (a one-byte varint).
SEQUENCE_ID = 7
#: Packets per serialized chunk of the trace (memory stays bounded; concatenated Trace messages are one trace).
CHUNK_PACKETS = 50_000
#: Bytes read from a trace file at a time when it is read back.
READ_BLOCK = 8 << 20
BEGIN, END, COUNTER = TrackEvent.TYPE_SLICE_BEGIN, TrackEvent.TYPE_SLICE_END, TrackEvent.TYPE_COUNTER
CLEARED = TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
NEEDS_STATE = TracePacket.SEQ_NEEDS_INCREMENTAL_STATE


@dataclass(frozen=True)
class TrackSpec:
    """A track as its TrackDescriptor says it (declared in each file that uses it: Writer.declare)."""

    uuid: int
    name: str
    parent: int = 0
    rank: int | None = None
    merge_key: str | None = None
    counter_unit: str | None = None
    ordered: bool = False
    description: str = ""


class Writer:
    """TracePackets on one sequence, serialized in chunks through TraceProtoBuilder; strings interned on demand.
    Its first packet clears the sequence's interning state, so what one Writer writes stands on its own (with the
    tracks it uses declared): `used` holds those tracks, as its callers say them (`uses`: per chunk, not per
    event)."""

    def __init__(self, f: IO[bytes], intern: bool = True) -> None:
        self.f, self.intern = f, intern
        self.builder = TraceProtoBuilder()
        self.packets = 0
        self.names: dict[str, int] = {}
        self.arg_names: dict[str, int] = {}
        self.strings: dict[str, int] = {}
        self.used: set[int] = set()
        self.last = TracePacket()
        first = self.packet()
        first.sequence_flags = CLEARED | NEEDS_STATE  # starts the sequence's interning state

    def packet(self) -> TracePacket:
        if len(self.builder.trace.packet) >= CHUNK_PACKETS:
            self.flush()
        p = self.builder.add_packet()
        p.trusted_packet_sequence_id = SEQUENCE_ID
        self.packets += 1
        return p

    def flush(self) -> None:
        self.f.write(self.builder.serialize())
        self.builder = TraceProtoBuilder()

    def uses(self, tracks: Any) -> None:
        """The tracks (an iterable of uuids) the events written use."""
        self.used.update(int(t) for t in tracks)

    def declare(self, spec: TrackSpec) -> None:
        d = self.packet().track_descriptor
        d.uuid, d.name = spec.uuid, spec.name
        if spec.parent:
            d.parent_uuid = spec.parent
        if spec.rank is not None:
            d.sibling_order_rank = spec.rank
        if spec.ordered:
            d.child_ordering = TrackDescriptor.EXPLICIT
        if spec.merge_key is not None:
            d.sibling_merge_behavior = TrackDescriptor.SIBLING_MERGE_BEHAVIOR_BY_SIBLING_MERGE_KEY
            d.sibling_merge_key = spec.merge_key
        if spec.counter_unit is not None:
            d.counter.unit_name = spec.counter_unit
        if spec.description:
            d.description = spec.description

    def _iid(self, p: TracePacket, table: dict[str, int], value: str, kind: str) -> int:
        iid = table.get(value)
        if iid is None:
            iid = table[value] = len(table) + 1
            entry = getattr(p.interned_data, kind).add()
            entry.iid = iid
            if kind == "debug_annotation_string_values":
                entry.str = value.encode()
            else:
                entry.name = value
        return iid

    def event(self, ts: int, kind: int, track: int, name: str | None = None) -> TrackEvent:
        p = self.last = self.packet()
        p.timestamp = ts
        te = p.track_event
        te.type, te.track_uuid = kind, track
        if name is not None:
            if self.intern:
                p.sequence_flags = NEEDS_STATE
                te.name_iid = self._iid(p, self.names, name, "event_names")
            else:
                te.name = name
        return te

    def args(self, te: TrackEvent, values: dict[str, Any]) -> None:
        p = self.last
        for key, v in values.items():
            a = te.debug_annotations.add()
            if self.intern:
                a.name_iid = self._iid(p, self.arg_names, key, "debug_annotation_names")
            else:
                a.name = key
            if isinstance(v, str):
                if self.intern:
                    a.string_value_iid = self._iid(p, self.strings, v, "debug_annotation_string_values")
                else:
                    a.string_value = v
            elif v < 0:
                a.int_value = v
            else:
                a.uint_value = v

    def counter(self, ts: int, track: int, value: int) -> None:
        self.event(ts, COUNTER, track).counter_value = value


def packets(path: str | os.PathLike[str], block: int = READ_BLOCK) -> Iterator[TracePacket]:
    """The TracePackets of a trace file one at a time (a Trace is a stream of field-1 packets), read a block at a
    time: a trace of any size is read in bounded memory."""
    with open(path, "rb") as f:
        buf, pos, done = b"", 0, False
        while True:
            head = _packet_at(buf, pos, path)
            if head is None:  # the next packet is not whole in the buffer: read on
                more = b"" if done else f.read(max(block, (len(buf) - pos) * 2))
                done = not more
                if done and pos == len(buf):
                    return
                if done:
                    raise ZtbpError(f"{path}: not a Perfetto protobuf trace (it ends inside a packet)")
                buf, pos = buf[pos:] + more, 0
                continue
            start, end = head
            yield TracePacket.FromString(buf[start:end])
            pos = end


def _packet_at(buf: bytes, pos: int, path: str | os.PathLike[str]) -> tuple[int, int] | None:
    """Where the packet at `pos` lies (its first and past-last byte), or None when it is not all in `buf`."""
    if pos >= len(buf):
        return None
    if buf[pos] != 0x0A:
        raise ZtbpError(f"{path}: not a Perfetto protobuf trace (unexpected byte {buf[pos]:#x} in a packet's place)")
    i, size, shift = pos + 1, 0, 0
    while True:
        if i >= len(buf):
            return None
        b = buf[i]
        i += 1
        size |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            break
    return (i, i + size) if i + size <= len(buf) else None


@dataclass
class TraceReadback:
    """A trace as read back: tracks, slices and their nesting, counter values, flows."""

    tracks: dict[int, dict[str, Any]] = field(default_factory=dict)
    slices: dict[int, int] = field(default_factory=dict)
    nesting: dict[tuple[str, int, str], int] = field(default_factory=dict)
    max_depth: dict[int, int] = field(default_factory=dict)
    counters: dict[int, list[tuple[int, int, float]]] = field(default_factory=dict)
    #: each counter track's last value (time, packet, value), kept whether or not `counters` keeps them all
    counter_last: dict[int, tuple[int, int, float]] = field(default_factory=dict)
    flows_out: list[int] = field(default_factory=list)
    flows_in: list[int] = field(default_factory=list)
    args: list[dict[str, Any]] = field(default_factory=list)
    packets: int = 0
    undeclared: set[int] = field(default_factory=set)

    def children(self, uuid: int) -> list[int]:
        return [u for u, t in self.tracks.items() if t["parent"] == uuid]

    def root(self, prefix: str) -> int:
        hits = [u for u, t in self.tracks.items() if not t["parent"] and t["name"].startswith(prefix)]
        if len(hits) != 1:
            raise ZtbpError(f"the trace has {len(hits)} root tracks named {prefix!r}…")
        return hits[0]

    def slices_per_zone(self) -> dict[int, int]:
        """Command slices per zone (the lanes of "zone Z" under the device's root track)."""
        out: dict[int, int] = {}
        for u, t in self.tracks.items():
            parent = self.tracks.get(t["parent"], {})
            if t["name"].startswith("zone ") and not t["counter"] and not parent.get("parent"):
                z = int(t["name"].split()[1])
                out[z] = out.get(z, 0) + self.slices.get(u, 0)
        return {z: n for z, n in sorted(out.items()) if n}

    def counter_finals(self, suffix: str) -> dict[str, float]:
        return {t["name"]: self.counter_last[u][2] for u, t in self.tracks.items()
                if t["name"].endswith(suffix) and u in self.counter_last}


class _Marks:
    """The begin and end marks of one track's slices, compactly (a trace's worth of them stays small)."""

    def __init__(self) -> None:
        self.ts, self.seq, self.kind, self.name = array("q"), array("q"), array("b"), array("l")

    def add(self, ts: int, seq: int, kind: int, name: int) -> None:
        self.ts.append(ts)
        self.seq.append(seq)
        self.kind.append(kind)
        self.name.append(name)

    def in_order(self) -> Iterator[tuple[int, int]]:
        """(kind, name id) in the order of (time, packet)."""
        order = np.lexsort((np.frombuffer(self.seq, dtype=np.int64), np.frombuffer(self.ts, dtype=np.int64)))
        kinds, names = np.frombuffer(self.kind, dtype=np.int8), np.frombuffer(self.name, dtype=np.int64)
        return zip(kinds[order].tolist(), names[order].tolist(), strict=True)


def read_trace(path: str | os.PathLike[str], keep_args: int = 0, keep_counters: bool = True) -> TraceReadback:
    """Parse a trace with the package's protos: every track, the slices per track and how they nest (name, depth,
    parent name), counter values (each track's last only, without keep_counters: a trace's worth of them is
    large), flow ends, the tracks events use without the file declaring them; with keep_args > 0 also the first
    slices' names and arguments."""
    rb = TraceReadback()
    names: dict[int, str] = {}
    arg_names: dict[int, str] = {}
    strings: dict[int, str] = {}
    marks: dict[int, _Marks] = {}
    slice_names: dict[str, int] = {}
    for i, p in enumerate(packets(path)):
        rb.packets += 1
        if p.sequence_flags & CLEARED:
            names.clear()
            arg_names.clear()
            strings.clear()
        if p.HasField("interned_data"):
            d = p.interned_data
            names.update({e.iid: e.name for e in d.event_names})
            arg_names.update({e.iid: e.name for e in d.debug_annotation_names})
            strings.update({e.iid: e.str.decode() for e in d.debug_annotation_string_values})
        if p.HasField("track_descriptor"):
            t = p.track_descriptor
            rb.tracks[t.uuid] = {"name": t.name, "parent": t.parent_uuid, "counter": t.HasField("counter"),
                                 "merge_key": t.sibling_merge_key}
        if not p.HasField("track_event"):
            continue
        te = p.track_event
        if te.track_uuid not in rb.tracks:
            rb.undeclared.add(te.track_uuid)
        if te.type == COUNTER:
            value = (p.timestamp, i, te.counter_value)
            if keep_counters:
                rb.counters.setdefault(te.track_uuid, []).append(value)
            last = rb.counter_last.get(te.track_uuid)
            if last is None or value > last:
                rb.counter_last[te.track_uuid] = value
            continue
        name = te.name or names.get(te.name_iid, "")
        marks.setdefault(te.track_uuid, _Marks()).add(p.timestamp, i, te.type,
                                                      slice_names.setdefault(name, len(slice_names)))
        if te.type == BEGIN:
            rb.slices[te.track_uuid] = rb.slices.get(te.track_uuid, 0) + 1
            rb.flows_out.extend(te.flow_ids)
            rb.flows_in.extend(te.terminating_flow_ids)
            if len(rb.args) < keep_args:
                args: dict[str, Any] = {}
                for a in te.debug_annotations:
                    key = a.name or arg_names.get(a.name_iid, "")
                    which = a.WhichOneof("value")
                    args[key] = strings.get(a.string_value_iid) if which == "string_value_iid" else getattr(a, which)
                rb.args.append({"track": te.track_uuid, "ts": p.timestamp, "name": name, "args": args,
                                "flow_ids": list(te.flow_ids), "terminating_flow_ids": list(te.terminating_flow_ids)})
    named = {v: k for k, v in slice_names.items()}
    for track, ms in marks.items():
        stack: list[str] = []
        deepest = 0
        for kind, nid in ms.in_order():
            if kind == BEGIN:
                name = named[nid]
                key = (name, len(stack), stack[-1] if stack else "")
                rb.nesting[key] = rb.nesting.get(key, 0) + 1
                stack.append(name)
                deepest = max(deepest, len(stack) - 1)
            elif kind == END:
                if not stack:
                    raise ZtbpError(f"{path}: a slice ends on track {track} where none is open")
                stack.pop()
        if stack:
            raise ZtbpError(f"{path}: {len(stack)} slice(s) never end on track {track}")
        rb.max_depth[track] = deepest
    return rb

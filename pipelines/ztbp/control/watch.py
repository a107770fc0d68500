"""`ztbp watch`'s session: rows in, bounded windows, a journal, decisions, and the device through ztbp-ctl.

Rows come from a source, an iterator of `Batch`es: the streaming probe's CSV lines (`ProbeLines`, parsed as the
capture's streaming path does: from the "# ztbp nvme v1" line on, bpftrace's "Lost N events" counted as lost, its
counters and blank lines dropped, the data lines typed by io/nvme.py), or a synthetic replay (`replay`).
A window keeps its reads per cell and its read rows only (analysis/watch.py), so memory stays flat however long
the session runs. The raw rows go to a rolling Parquet journal (`rows/rows-NNNNNN.parquet`, one file per window,
the oldest deleted past the size cap) and every event to `watch.jsonl` (one JSON object a line, flushed and
synced per record) of kinds:
  start     the session's parameters and geometry (a resumed session writes one too, with "resumed": true)
  window    a window's summary (analysis/watch.WindowSummary)
  decision  the decision after a window (apply / rollback / hold / defer) with its reason and the state it leaves
  apply     ztbp-ctl set's answer (a refusal, e.g. QEMU's device without the protocol, is journaled and the
            session goes on; the set is then not in force)
  verify    the first window after an apply: the measured gain of the set in force and, where the device
            answers STATUS, its read count's change against the reads traced
  rollback  ztbp-ctl stop's answer and the reason
  module    a device module (`--module`, NVMeVirt) loaded once the probe attached ("loaded": the seconds its
            device took to appear) or refused ("failed": the error, which ends the session)
  stop      the end of the session (why; what was done to the device and, with --module, to the module)
`--resume` rebuilds the state from the last decision record. A full disk stops the journal and the session with
one FileSystemError.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Protocol

import numpy as np
import polars as pl

from ..acquire.module import LOAD_TIMEOUT_S, DeviceModule
from ..analysis.loop import status_delta
from ..analysis.params import ORDER_MAX_ROWS, ORDER_MAX_S, ORDER_MIN_S, ORDER_SPAN_S
from ..analysis.watch import (
    LATE_NS,
    Decision,
    WatchParams,
    WatchState,
    cell_counts,
    decide,
    late_rows,
    read_rows,
    summarise,
    zone_counts,
)
from ..contract import NVME_VERSION_LINE
from ..errors import FileSystemError, ZtbpError
from ..files import fs_error, make_dir
from ..io.nvme import IngestReport, body_rows
from ..writeback.config import DEVICE_MAX_ZONES
from .probe_process import ProbeProcess, Started, start_stream

JOURNAL = "watch.jsonl"
ROWS = "rows"
#: data lines parsed at once from the probe's output, or fewer when the first of them came this many seconds ago
#: (checked as each line arrives: a device that goes idle leaves its last lines waiting for the next one)
BATCH_LINES = 8192
BATCH_S = 1.0


@dataclass
class Batch:
    """Rows of the probe (io/nvme.py's typed columns) and the events bpftrace reported lost since the last batch."""

    frame: pl.DataFrame
    lost: int = 0
    #: how long TimeOrder held rows back when it let these out (None: no ordering)
    hold_ns: int | None = None


# ---- sources ---------------------------------------------------------------------------------------------------
class ProbeLines:
    """Batches from the streaming probe's output lines (bytes or str), as the capture's streaming path reads them.
    An empty item (not a line: a line ends with its newline) is a tick of the clock: the rows held for longer than
    batch_s go out then, without waiting for the next line."""

    def __init__(self, lines: Iterable[bytes | str], zone_size_lba: int, batch_lines: int = BATCH_LINES,
                 batch_s: float = BATCH_S) -> None:
        self.lines, self.zone_size_lba, self.batch_lines, self.batch_s = lines, zone_size_lba, batch_lines, batch_s
        self.report = IngestReport("stream")
        self.header: list[str] | None = None
        self.line_no = 0

    def _batch(self, body: list[bytes], first: int, lost: int) -> Batch:
        """The rows held (from line `first` on) as one batch, with the events bpftrace reported lost meanwhile."""
        frame = (body_rows(b"".join(body), self.header or [], self.zone_size_lba, first, self.report) if body
                 else pl.DataFrame())
        return Batch(frame, lost)

    def __iter__(self) -> Iterator[Batch]:
        version = NVME_VERSION_LINE.encode()
        body: list[bytes] = []
        lost, first, since = 0, 0, 0.0
        for raw in self.lines:
            if not raw:  # a tick: an idle device's rows go out (an empty batch when there are none: rows held
                # further on, by TimeOrder, go out by the clock)
                if not body or time.monotonic() - since >= self.batch_s:
                    yield self._batch(body, first, lost)
                    body, lost = [], 0
                continue
            line = raw.encode() if isinstance(raw, str) else raw
            self.line_no += 1
            text = line.rstrip(b"\r\n")
            if self.header is None:
                if text == version:
                    self.header = []
                continue
            if not self.header:
                self.header = [c.strip() for c in text.decode("utf-8", "replace").split(",")]
                continue
            if text.startswith(b"Lost ") and text.endswith(b" events"):
                lost += int(text.split()[1])
                continue
            if not text or (text.startswith(b"@") and b": " in text):
                continue
            if not body:
                first, since = self.line_no, time.monotonic()
            body.append(text + b"\n")
            if len(body) >= self.batch_lines or time.monotonic() - since >= self.batch_s:
                yield self._batch(body, first, lost)
                body, lost = [], 0
        if body or lost:
            yield self._batch(body, first, lost)


def merged(held: pl.DataFrame, new: pl.DataFrame) -> pl.DataFrame:
    """Two frames sorted by ts_ns as one, `held`'s rows first among equal times: `new` appended when it starts no
    earlier than `held` ends (rows in order, the common case: no copy), merged otherwise (linear, no new sort)."""
    if not held.height:
        return new
    if held.schema != new.schema:  # a column's type differs between batches: the general way
        return pl.concat([held, new], how="diagonal_relaxed").sort("ts_ns", maintain_order=True)
    if new["ts_ns"][0] >= held["ts_ns"][-1]:
        return pl.concat([held, new], rechunk=False)
    return held.merge_sorted(new, "ts_ns")


class TimeOrder:
    """The batches of a source again, their rows in their own time order (ts_ns): each row is held until this
    machine's CLOCK_MONOTONIC (the probe's clock) has passed its issue time by the hold, then let out sorted with the
    others. bpftrace prints each CPU's perf buffer in turn, so when its user space lags, the rows of one CPU come out
    seconds before older rows of another; held for longer than the lag, they are merged back in order. The hold
    follows the lag: twice the longest lag (the clock at arrival minus the oldest issue time of a batch) seen over
    the last ORDER_SPAN_S, at least min_s, at most max_s; at most max_rows are held (the oldest go out first). Rows
    that come later than the hold are let out as they come (the session counts them: late_rows). When the source
    ends, everything held goes out."""

    def __init__(self, source: Iterable[Batch], clock: Callable[[], int] = time.monotonic_ns,
                 min_s: float = ORDER_MIN_S, max_s: float = ORDER_MAX_S, max_rows: int = ORDER_MAX_ROWS) -> None:
        self.source, self.clock, self.max_rows = source, clock, max_rows
        self.min_ns, self.max_ns = int(min_s * 1e9), int(max(min_s, max_s) * 1e9)
        self.hold_ns = self.min_ns
        self.lags: list[tuple[int, int]] = []  # (clock at arrival, lag) of the recent batches

    def _follow(self, now: int, lag: int) -> None:
        self.lags = [(t, g) for t, g in self.lags if now - t <= ORDER_SPAN_S * 1e9] + [(now, lag)]
        self.hold_ns = min(self.max_ns, max(self.min_ns, 2 * max(g for _, g in self.lags)))

    def __iter__(self) -> Iterator[Batch]:
        held = pl.DataFrame()
        for batch in self.source:
            now = self.clock()
            if batch.frame.height:
                self._follow(now, now - int(batch.frame["ts_ns"].min()))  # type: ignore[arg-type]
                held = merged(held, batch.frame.sort("ts_ns", maintain_order=True))
            if not held.height:
                yield Batch(held, batch.lost, self.hold_ns)
                continue
            cut = int(held["ts_ns"].search_sorted(max(0, now - self.hold_ns), side="right"))
            cut = max(cut, held.height - self.max_rows)
            yield Batch(held.head(cut), batch.lost, self.hold_ns)
            held = held.slice(cut)
        if held.height:
            yield Batch(held, 0, self.hold_ns)

    def close(self) -> None:
        close = getattr(self.source, "close", None)
        if close is not None:
            close()


def synthetic_slba(kind: str, n: int, meta: dict[str, Any], rng: np.random.Generator, hot: tuple[int, ...] = (),
                   hot_share: float = 0.8, zipf: float = 0.9) -> np.ndarray:
    """Start LBAs of n one-block reads: "hot" (hot_share of them on the zones `hot`, the rest uniform), "zipf"
    (pages ranked by a Zipf law scattered over the device: no hot zone) or "uniform"."""
    zl, nz = meta["zone_size_lba"], meta["nr_zones"]
    if kind == "hot":
        on = rng.random(n) < hot_share
        zone = np.where(on, np.asarray(hot, dtype=np.int64)[rng.integers(0, len(hot), n)], rng.integers(0, nz, n))
        return zone * zl + rng.integers(0, zl, n)
    if kind == "zipf":
        span = zl * nz
        ranks = np.minimum(rng.zipf(1 + zipf, n) - 1, span - 1) if zipf > 0 else rng.integers(0, span, n)
        return np.random.default_rng(12345).permutation(span)[ranks]
    if kind == "uniform":
        return rng.integers(0, zl * nz, n)
    raise ZtbpError(f"synthetic phase {kind!r}: hot, zipf or uniform")


def replay(phases: list[tuple[str, int, tuple[int, ...]]], meta: dict[str, Any], seed: int = 0,
           batch: int = BATCH_LINES, rate: float = 100_000.0) -> Iterator[Batch]:
    """A synthetic stream of one-block reads: phases of (kind, commands, hot zones), `rate` commands a second."""
    rng = np.random.default_rng(seed)
    t = 0
    step = int(1e9 / rate)
    for kind, n, hot in phases:
        for lo in range(0, n, batch):
            m = min(batch, n - lo)
            slba = synthetic_slba(kind, m, meta, rng, hot)
            ts = t + step * np.arange(m, dtype=np.uint64)
            t += step * m
            yield Batch(pl.DataFrame({"ts_ns": ts, "lat_ns": np.full(m, 100_000, dtype=np.uint64),
                                      "op": pl.Series(["read"] * m), "slba": slba.astype(np.uint64),
                                      "nlb": np.ones(m, dtype=np.uint32)}))


# ---- the device ------------------------------------------------------------------------------------------------
class Device(Protocol):
    """What the session asks of the device: SET the zones, STOP, and STATUS (the read count, None without one)."""

    def set(self, zones: tuple[int, ...]) -> dict[str, Any]: ...
    def stop(self) -> dict[str, Any]: ...
    def status(self) -> dict[str, Any]: ...


@dataclass
class CtlDevice:
    """The device through ztbp-ctl (writeback/ctl.py)."""

    dev: str

    def set(self, zones: tuple[int, ...]) -> dict[str, Any]:
        from ..writeback.ctl import command
        return command("set", self.dev, "--zones", ",".join(str(z) for z in zones))

    def stop(self) -> dict[str, Any]:
        from ..writeback.ctl import command
        return command("stop", self.dev)

    def status(self) -> dict[str, Any]:
        from ..writeback.ctl import command
        return command("status", self.dev)


def sent_zones(zones: tuple[int, ...], reads: np.ndarray) -> tuple[int, ...]:
    """The zones SET sends, by zone id: the device takes at most DEVICE_MAX_ZONES, so the most read of the window
    (ties by zone id), as ztbp-ctl's --top5 does."""
    return tuple(sorted(sorted(zones, key=lambda z: (-int(reads[z]), z))[:DEVICE_MAX_ZONES]))


def answered_ns(answer: dict[str, Any]) -> int | None:
    """When the device's answer came back (ztbp-ctl's answered_mono_ns: CLOCK_MONOTONIC just after its ioctl, the
    probe's clock), None when ztbp-ctl did not say."""
    res = answer.get("result") or {}
    t = res.get("answered_mono_ns") if isinstance(res, dict) else None
    return int(t) if isinstance(t, int) and t > 0 else None


def status_reads(answer: dict[str, Any]) -> int | None:
    """The read count of a STATUS answer, None when the device gave none."""
    res = answer.get("result") or {}
    reads = res.get("reads", res.get("read_count")) if answer.get("ok") else None
    return int(reads) if isinstance(reads, int | float) else None


# ---- the journal -----------------------------------------------------------------------------------------------
class Journal:
    """watch.jsonl (flushed and synced per record) and the rolling Parquet journal of raw rows under a size cap."""

    def __init__(self, folder: Path, cap_bytes: int) -> None:
        self.folder, self.cap = folder, cap_bytes
        self.path = folder / JOURNAL
        make_dir(folder / ROWS)
        self.parts = sorted((folder / ROWS).glob("rows-*.parquet"))
        self.next_part = int(self.parts[-1].stem.split("-")[1]) + 1 if self.parts else 0
        self.f: IO[str] | None = self.path.open("a", encoding="utf-8")

    def _full(self, e: OSError, path: Path) -> FileSystemError:
        self.close()
        err = fs_error(e, path) or FileSystemError(str(e))
        return FileSystemError(f"the journal stopped, and the session with it: {err}")

    def write(self, kind: str, **record: Any) -> dict[str, Any]:
        rec = {"kind": kind, "wall": time.time(), **record}
        if self.f is None:
            return rec
        try:
            self.f.write(json.dumps(rec, default=str) + "\n")
            self.f.flush()
            os.fsync(self.f.fileno())
        except OSError as e:
            raise self._full(e, self.path) from None
        return rec

    def rows(self, frame: pl.DataFrame) -> None:
        """One window's raw rows as the next Parquet part; the oldest parts go while the parts pass the cap."""
        if frame.height == 0 or self.f is None:
            return
        path = self.folder / ROWS / f"rows-{self.next_part:06d}.parquet"
        tmp = path.with_suffix(".tmp")
        try:
            frame.write_parquet(tmp)
            tmp.replace(path)
        except OSError as e:
            tmp.unlink(missing_ok=True)
            raise self._full(e, path) from None
        self.next_part += 1
        self.parts.append(path)
        sizes = [p.stat().st_size for p in self.parts]
        while len(self.parts) > 1 and sum(sizes) > self.cap:
            self.parts.pop(0).unlink(missing_ok=True)
            sizes.pop(0)

    def close(self) -> None:
        if self.f is not None:
            with contextlib.suppress(OSError):  # a full disk may refuse the last flush too
                self.f.close()
            self.f = None


def read_journal(folder: Path) -> list[dict[str, Any]]:
    """The records of a session's watch.jsonl (a last line cut by a crash is ignored)."""
    path = folder / JOURNAL
    if not path.is_file():
        raise ZtbpError(f"--resume: no journal {path}")
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def resumed_state(records: list[dict[str, Any]]) -> tuple[WatchState, int]:
    """The state the last decision left and the next window's index."""
    decisions = [r for r in records if r.get("kind") == "decision"]
    if not decisions:
        return WatchState(), 0
    last = decisions[-1]
    return WatchState.from_dict(last["state"]), int(last["window"]) + 1


# ---- the session -----------------------------------------------------------------------------------------------
@dataclass
class WatchRequest:
    meta: dict[str, Any]
    params: WatchParams = field(default_factory=WatchParams)
    journal_dir: Path = Path("watch")
    journal_cap_bytes: int = 1 << 30
    window_commands: int = 100_000
    window_s: float | None = None
    resume: bool = False
    on_exit: str = "keep"
    #: the seconds of warm_up (the window analysis run once before the probe attached), for the start record
    warm_up_s: float | None = None
    #: the longest TimeOrder holds the probe's rows to let them out in their own time order (0: as they come)
    order_max_s: float = ORDER_MAX_S


@dataclass
class Verification:
    """An apply being verified: STATUS's read count before it and the traced machine's clock (CLOCK_MONOTONIC, the
    probe's ts_ns clock) as STATUS answered, the issue times of the reads traced since; once the window after it has
    closed, the second STATUS (`after`, the clock as it answered: `t_after`), the set and its measured gain on that
    window. Both clocks are ztbp-ctl's answered_mono_ns (the moment its ioctl returned), else the session's clock
    just after ztbp-ctl exited."""

    before: int | None
    t_before: int
    span_ts: list[np.ndarray] = field(default_factory=list)
    window: int | None = None  # None: the window after the apply has not closed yet
    zones: list[int] = field(default_factory=list)
    measured_gain: float | None = None
    t_after: int = 0
    after: int | None = None

    def add(self, frame: pl.DataFrame) -> None:
        """The read times of rows issued since the apply."""
        ts = frame.filter(pl.col("op") == "read")["ts_ns"].to_numpy().astype(np.int64)
        self.span_ts.append(ts[ts >= self.t_before])

    def record(self) -> dict[str, Any]:
        """The verify record: STATUS's change against the reads issued between the two answers, by their own time;
        equal within 1 % (reads in flight at either answer are counted by one side only)."""
        ts = np.concatenate(self.span_ts) if self.span_ts else np.zeros(0, dtype=np.int64)
        traced = int((ts < self.t_after).sum())
        # the protocol's read counter starts at -1 and goes back to 0 at 1,000,000 (analysis/loop.status_delta)
        moved = status_delta(self.before, self.after)
        return {"window": self.window, "zones": self.zones, "measured_gain": self.measured_gain,
                "status_reads_delta": moved, "reads_traced": traced,
                "span_s": round((self.t_after - self.t_before) / 1e9, 3),
                "status_matches": None if moved is None else abs(moved - traced) <= max(1, traced // 100)}


class Session:
    """Feed batches; a window closes after `window_commands` commands (or `window_s` seconds of the rows' time)."""

    def __init__(self, req: WatchRequest, device: Device, clock: Callable[[], float] = time.time,
                 on_window: Callable[[Session], None] | None = None) -> None:
        self.req, self.device, self.clock, self.on_window = req, device, clock, on_window
        self.params = req.params
        meta = req.meta
        self.cell_lba = meta["zone_size_lba"] // self.params.cells_per_zone
        self.n_cells = meta["nr_zones"] * self.params.cells_per_zone
        self.state, self.window = WatchState(), 0
        if req.resume:
            self.state, self.window = resumed_state(read_journal(req.journal_dir))
        self.journal = Journal(req.journal_dir, req.journal_cap_bytes)
        self.journal.write("start", resumed=req.resume, window=self.window, meta=meta,
                           params=self.params.__dict__, window_commands=req.window_commands, window_s=req.window_s,
                           state=self.state.as_dict(), warm_up_s=req.warm_up_s,
                           order={"min_s": ORDER_MIN_S, "max_s": req.order_max_s, "max_rows": ORDER_MAX_ROWS}
                           if req.order_max_s else None)
        self.prev_reads = pl.DataFrame(schema={"slba": pl.UInt64, "nlb": pl.UInt32})
        self.prev_hot: tuple[int, ...] = ()
        self.commands_total = self.lost_total = 0
        self.last: Decision | None = None
        self.started = clock()
        self.latest_ns, self.late_total = 0, 0
        self.hold_ns: int | None = None  # TimeOrder's hold when it let the last batch out
        #: the traced machine's clock (CLOCK_MONOTONIC, as the probe's ts_ns): verification counts the reads issued
        #: between two STATUS answers by their own time, not by the window they arrived in
        self.mono: Callable[[], int] = time.monotonic_ns
        self.verifying: Verification | None = None  # the last apply, until its verify record is written
        #: called once when the session lets go of the device, after its STOP (watch_device: the module's unload)
        self.on_release: Callable[[], dict[str, Any]] | None = None
        self.released: dict[str, Any] | None = None
        self._reset()

    def _reset(self) -> None:
        self.counts = np.zeros(self.n_cells, dtype=np.int64)
        self.frames: list[pl.DataFrame] = []
        self.reads: list[pl.DataFrame] = []
        self.commands = self.lost = self.late = 0
        self.t0: int | None = None

    def feed(self, batch: Batch) -> None:
        if batch.hold_ns is not None:
            self.hold_ns = batch.hold_ns
        self.lost += batch.lost
        self.lost_total += batch.lost
        frame = batch.frame
        limit = None if self.req.window_s is None else int(self.req.window_s * 1e9)
        while frame.height:
            head = frame.head(self.req.window_commands - self.commands)
            if limit is not None:
                ts = head["ts_ns"].cast(pl.Int64)
                if self.t0 is None:
                    self.t0 = int(ts[0])
                past = ts - self.t0 >= limit
                if past.any():  # the window's time is up at the first row past it
                    cut = int(past.arg_max() or 0)
                    self._add(head.head(cut))
                    frame = frame.slice(cut)
                    self.close_window()
                    continue
            self._add(head)
            frame = frame.slice(head.height)
            if self.commands >= self.req.window_commands:
                self.close_window()

    def _add(self, frame: pl.DataFrame) -> None:
        if frame.height == 0:
            return
        late, self.latest_ns = late_rows(frame["ts_ns"].to_numpy(), self.latest_ns)
        self.late += late
        self.late_total += late
        if self.verifying is not None:  # an apply is being verified: the reads issued since, by their own time
            self.verifying.add(frame)
            self._verified()
        reads = read_rows(frame)
        self.counts += cell_counts(reads, self.cell_lba, self.n_cells)
        self.reads.append(reads)
        self.frames.append(frame)
        self.commands += frame.height
        self.commands_total += frame.height

    def close_window(self) -> None:
        """Summarise the window, journal it, decide and act."""
        if self.commands == 0:
            return
        frame = pl.concat(self.frames, how="diagonal_relaxed")
        reads = pl.concat(self.reads) if self.reads else self.prev_reads.clear()
        now = self.clock()
        s = summarise(self.window, now, self.commands, self.lost, self.counts, reads, self.prev_reads,
                      self.prev_hot, self.state.in_force, self.req.meta, self.params)
        self.journal.rows(frame)
        self.journal.write("window", **s.as_dict(), late_rows=self.late,
                           order_hold_s=None if self.hold_ns is None else round(self.hold_ns / 1e9, 3))
        if self.released is not None:  # the device is let go (its module unloaded): rows still draining from the
            # probe are summarised, never acted on
            self.prev_reads, self.prev_hot = reads, s.hot
            self.window += 1
            self._reset()
            if self.on_window is not None:
                self.on_window(self)
            return
        if self.verifying is not None and self.verifying.window is None:
            self._verify(s.in_force_gain)
        d, st = decide(self.state, s, self.params, now)
        self.journal.write("decision", window=self.window, **d.as_dict(), state=st.as_dict())
        if d.action == "apply":
            st = self._apply(d, st)
        elif d.action == "rollback":
            self._rollback(d)
        self.state, self.last = st, d
        self.prev_reads, self.prev_hot = reads, s.hot
        self.window += 1
        self._reset()
        if self.on_window is not None:
            self.on_window(self)

    def _apply(self, d: Decision, st: WatchState) -> WatchState:
        # the clock when STATUS answered (ztbp-ctl says when its ioctl returned), not after SET: the reads issued
        # while ztbp-ctl runs are counted by the device and must be by the trace too (measured on NVMeVirt: 7,948
        # against 7,742 with the clock after SET; 10,031 against 10,153 with the clock after ztbp-ctl status exited)
        answer = self.device.status()
        before, t_before = status_reads(answer), answered_ns(answer) or self.mono()
        sent = sent_zones(d.zones, zone_counts(self.counts, self.params.cells_per_zone))
        res = self.device.set(sent)
        self.journal.write("apply", window=self.window, zones=list(d.zones), sent=list(sent), ok=res.get("ok"),
                           exit_code=res.get("exit_code"), message=res.get("message"), answer=res.get("result"))
        if not res.get("ok"):
            # the device refused (QEMU's has no ZTBP protocol): the set is not in force; the session goes on
            return WatchState(self.state.in_force, (), 0, 0, st.applies, st.backoff)
        self._verified(force=True)  # an earlier apply's verification, with what has arrived
        self.verifying = Verification(before, t_before)
        return st

    def _verify(self, gain: float | None) -> None:
        """STATUS once the window after an apply has closed; the record waits until the rows issued up to now have
        arrived (the probe's rows can lag behind the device: see docs/watch.md, "Rows in time order")."""
        v = self.verifying
        assert v is not None
        answer = self.device.status()
        v.after, v.t_after = status_reads(answer), answered_ns(answer) or self.mono()
        v.window, v.zones, v.measured_gain = self.window, list(self.state.in_force), gain
        self._verified()

    def _verified(self, force: bool = False) -> None:
        """The verify record, once the window after the apply has closed and the rows' time has passed the second
        STATUS by LATE_NS (or now, `force`)."""
        v = self.verifying
        if v is None or v.window is None or not (force or self.latest_ns >= v.t_after + LATE_NS):
            return
        self.journal.write("verify", **v.record())
        self.verifying = None

    def _rollback(self, d: Decision) -> None:
        res = self.device.stop()
        self.journal.write("rollback", window=self.window, zones=list(d.zones), reason=d.reason,
                           ok=res.get("ok"), message=res.get("message"))
        if self.verifying is not None and self.verifying.window is None:
            self.verifying = None  # rolled back before the window after the apply closed: nothing to verify

    def run(self, source: Iterable[Batch], stopped: Callable[[], str | None] = lambda: None) -> dict[str, Any]:
        """Feed the source until it ends (stopped(): why it was made to end, e.g. a signal) or an interruption;
        the journal is closed and the device left as it is (on_exit "keep") or STOPped ("stop"). A full journal
        raises FileSystemError after the clean-up."""
        try:
            for batch in source:
                self.feed(batch)
            why = stopped() or "the source ended"
        except KeyboardInterrupt:
            why = "interrupted"
        except FileSystemError:
            raise  # the journal is closed already
        except ZtbpError as e:  # the source failed (the probe stopped): the journal says so and closes
            self.finish(f"error: {e}")
            raise
        finally:
            close = getattr(source, "close", None)
            if close is not None:
                close()
        return self.finish(why)

    def release(self) -> dict[str, Any]:
        """Let go of the device, once: STOP its set when on_exit says "stop" and one is in force, then on_release
        (the module's unload); what was done ({"device": ..., and on_release's keys}). Windows that close after this
        are journaled but not decided on."""
        if self.released is None:
            device = "left as it is"
            if self.req.on_exit == "stop" and self.state.in_force:
                res = self.device.stop()
                device = "stopped" if res.get("ok") else f"STOP failed: {res.get('message')}"
            self.released = {"device": device}
            if self.on_release is not None:
                self.released.update(self.on_release())
        return self.released

    def finish(self, why: str) -> dict[str, Any]:
        """The end: the open window's rows kept (not decided on), the device as on_exit says, the stop record."""
        self._verified(force=True)
        if self.frames:
            try:
                self.journal.rows(pl.concat(self.frames, how="diagonal_relaxed"))
            except FileSystemError as e:
                why += f"; {e}"
        summary = {"windows": self.window, "commands": self.commands_total, "open_window_commands": self.commands,
                   "lost": self.lost_total, "late_rows": self.late_total,
                   "in_force": list(self.state.in_force), "why": why, **self.release(),
                   "last_decision": self.last.as_dict() if self.last else None}
        try:
            self.journal.write("stop", **summary)
        finally:
            self.journal.close()
        return summary


# ---- on this machine -------------------------------------------------------------------------------------------
def warm_up(meta: dict[str, Any], params: WatchParams, n: int = 500) -> float:
    """One window's analysis (hot rule, held-out cache model) on a synthetic window of `n` reads, before the probe's
    first line is read; its seconds. The first analysis compiles numba's functions (two minutes under emulation): a
    session that compiled them in its first window read no row meanwhile, bpftrace's buffers filled, and their rows
    came out interleaved CPU by CPU (measured on NVMeVirt in the guest: 60,671 of 100,003 rows out of time order).
    What numba compiles does not depend on `n` (the same functions and signatures from 100 reads as from 4,000);
    the analysis' own seconds do (under emulation 6.9 s for 4,000 reads on 1,024 zones of 32 cells)."""
    t0 = time.monotonic()
    hot = tuple(range(min(5, meta["nr_zones"])))
    slba = synthetic_slba("hot", n, meta, np.random.default_rng(0), hot)
    reads = pl.DataFrame({"slba": slba.astype(np.uint64), "nlb": np.ones(n, dtype=np.uint32)})
    cell_lba = meta["zone_size_lba"] // params.cells_per_zone
    counts = cell_counts(reads, cell_lba, meta["nr_zones"] * params.cells_per_zone)
    summarise(0, 0.0, n, 0, counts, reads, reads, hot, hot, meta, params)
    return time.monotonic() - t0


def attached(lines: Iterable[bytes], journal: Journal) -> Iterator[bytes]:
    """The probe's lines, with an "attached" record in the journal at its header (bpftrace prints it from BEGIN,
    once every probe is attached): from then on every command is traced, so a workload started after it is whole."""
    said = False
    for line in lines:
        if not said and line.strip() == NVME_VERSION_LINE.encode():
            journal.write("attached", probe=line.decode("utf-8", "replace").strip())
            said = True
        yield line


class ModuleHold:
    """The device's module around the streaming probe (`ztbp watch --module`, NVMeVirt): loaded once the probe's
    header arrives (bpftrace prints it from BEGIN, when every probe is attached), unloaded when the session lets go
    of the device and before bpftrace is told to detach, which it cannot do while the module's threads stall
    RCU-tasks grace periods (acquire/module.py)."""

    def __init__(self, module: DeviceModule, dev: str, timeout_s: float = LOAD_TIMEOUT_S) -> None:
        self.module, self.dev, self.timeout_s = module, dev, timeout_s
        self.loaded = False
        self.done = False  # unloaded, or let go of before it was loaded: never loaded again

    def load(self, journal: Journal) -> None:
        if self.loaded or self.done:
            return
        what = {"ko": str(self.module.ko), "params": self.module.params, "device": self.dev}
        try:
            appeared = self.module.load(self.dev, self.timeout_s)
        except ZtbpError as e:
            self.done = True
            journal.write("module", action="failed", **what, error=str(e))
            raise
        self.loaded = True
        journal.write("module", action="loaded", **what, appear_s=round(appeared, 3))

    def unload(self) -> dict[str, Any]:
        """rmmod, once; what was done, for the stop record."""
        self.done = True
        if not self.loaded:
            return {"module": "not loaded"}
        try:
            self.module.unload()
        except ZtbpError as e:
            return {"module": f"{e} (bpftrace cannot detach while it stays loaded)"}
        self.loaded = False
        return {"module": f"{self.module.name} unloaded"}

    def around(self, lines: Iterable[bytes], session: Session, probe: ProbeProcess,
               stop_asked: Callable[[], bool]) -> Iterator[bytes]:
        """The probe's lines, the module loaded at its header; once a stop is asked (a signal), the session lets go
        of the device (its STOP, then the module's unload: session.on_release) and only then is bpftrace told to
        stop: its last lines are still read to the end."""
        header = NVME_VERSION_LINE.encode()
        for line in lines:
            if stop_asked() and session.released is None:
                session.release()
                probe.stop()
            if session.released is None and line.strip() == header:
                self.load(session.journal)
            yield line


def watch_device(req: WatchRequest, dev: str, on_window: Callable[[Session], None] | None = None,
                 module: DeviceModule | None = None, started: Started | None = None) -> dict[str, Any]:
    """`ztbp watch DEV`: the streaming probe on this machine's zoned namespace DEV, the session, ztbp-ctl on DEV.
    SIGTERM and SIGINT stop the session cleanly (bpftrace detached, the journal closed).

    `started`: the device checked and its probe started already (control/probe_process.start_stream, which `ztbp watch`
    calls before it loads this module, so bpftrace compiles while the analysis loads); else it is done here. The
    session's analysis then runs once on a synthetic window (warm_up) while bpftrace compiles, before the probe's
    first line is read.

    With `module` (a module that creates DEV when loaded, NVMeVirt): the geometry is read with the module loaded
    for that moment and unloaded again; the probe starts; the module is loaded when the probe's header arrives; at
    the end (the source ended, a signal, an error) the device's STOP (--on-exit stop, a set in force), then the
    module's unload, then bpftrace's stop. A module that fails to load ends the session with its error, the probe
    detached."""
    if started is None:
        started = start_stream(dev, module)
    elif module is not None and module is not started.module:
        raise ValueError("watch_device: the module is the started stream's (start_stream(dev, module))")
    module, probe = started.module, started.probe
    caught: list[str] = []
    hold = ModuleHold(module, dev) if module is not None else None
    try:
        req.meta = dict(started.meta)
        req.warm_up_s = round(warm_up(req.meta, req.params), 3)
    except BaseException:
        probe.close()
        raise

    def on_signal(signum: int, frame: Any) -> None:
        # never raise in the middle of a window: ask bpftrace to stop; the session reads its last rows to the end
        # (with a module, ModuleHold.around stops it once the module is unloaded)
        caught.append(signal.Signals(signum).name)
        if hold is None:
            probe.stop()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    session: Session | None = None
    try:
        session = Session(req, CtlDevice(dev), on_window=on_window)
        lines: Iterable[bytes] = attached(probe.lines(), session.journal)
        if hold is not None:
            session.on_release = hold.unload
            lines = hold.around(lines, session, probe, lambda: bool(caught))
        source: Iterable[Batch] = ProbeLines(lines, req.meta["zone_size_lba"])
        if req.order_max_s:
            source = TimeOrder(source, max_s=req.order_max_s)
        return session.run(source, lambda: f"interrupted ({caught[0]})" if caught else None)
    finally:
        try:
            if session is not None:
                session.release()  # done already unless the journal failed: STOP, the module's unload
            elif hold is not None:
                hold.unload()
        finally:
            probe.close()  # never leave bpftrace running, whatever happened
            for sig, handler in previous.items():
                signal.signal(sig, handler)

"""`ztbp watch`'s session: batches of rows in, bounded windows, and for each closed window a decision and what it
does to the device.

Rows come from a source, an iterator of io/probe_lines.Batch: the streaming probe's lines (control/watch_run.py
on this machine) or a synthetic replay (acquire/watch_synth.py). A window keeps its reads per cell and its read
rows only (analysis/watch.py), so memory stays flat however long the session runs. The core of a window's close is
`window_step`: the window's summary and the state in, the decision, the state it leaves and what to send the
device out (pure). The Session around it is the driver: it journals every record (io/journal.py: the window's raw
rows, its summary, the decision, the device's answers), talks to the device (control/watch_device.py) and
verifies an apply on the window after it. `--resume` rebuilds the state from the last decision record.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from ..acquire.watch_synth import synthetic_slba
from ..analysis.device_counters import Counters, counter_delta
from ..analysis.params import ORDER_MAX_ROWS, ORDER_MAX_S, ORDER_MIN_S
from ..analysis.watch import (
    LATE_NS,
    Decision,
    WatchParams,
    WatchState,
    WindowSummary,
    cell_counts,
    decide,
    late_rows,
    read_rows,
    summarise,
    zone_counts,
)
from ..errors import FileSystemError, ZtbpError
from ..io.journal import (
    APPLY,
    DECISION,
    ROLLBACK,
    START,
    STOP,
    VERIFY,
    WINDOW,
    Journal,
    resume_path,
    scan_numbered,
    state_spec,
)
from ..io.probe_lines import Batch
from ..schema import Invalid, refusal
from .watch_device import Device, answered_ns, sent_zones, status_counters

#: no STATUS answer (yet)
NO_ANSWER = Counters(None, None, "no STATUS answer")


def resumed_state(path: Path, meta: dict[str, Any]) -> tuple[WatchState, int, list[int]]:
    """From a session's watch.jsonl (io/journal.scan_numbered: records that do not check are skipped): the state the
    last decision left, the next window's index (after the last window a record names) and the lines skipped. A
    state whose zones lie outside this device's geometry (a journal of another device, or edited) is refused with
    one line naming the file, its line and the field."""
    numbered, skipped = scan_numbered(path)
    seen = [r["window"] for _, r in numbered if r["kind"] in (WINDOW, DECISION)]
    decisions = [(n, r) for n, r in numbered if r["kind"] == DECISION]
    if not decisions:
        return WatchState(), (max(seen) + 1 if seen else 0), skipped
    n, last = decisions[-1]
    try:
        state = state_spec(meta["nr_zones"]).check(last["state"], ("state",))
    except Invalid as e:
        raise ZtbpError(refusal(path, e, line=n, what="the journal of another device, or edited: start a new "
                                "one (--journal)")) from None
    return WatchState.from_dict(state), max(seen) + 1, skipped


# ---- the session -----------------------------------------------------------------------------------------------
@dataclass
class WatchRequest:
    meta: dict[str, Any]
    params: WatchParams = field(default_factory=WatchParams)
    journal_dir: Path = Path("watch")
    journal_cap_bytes: int = 1 << 30
    #: write the journal through symbolic links (its folder, a folder above it, watch.jsonl): off, a link is refused
    journal_follow_link: bool = False
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
    """An apply being verified: STATUS's counters before it and the traced machine's clock (CLOCK_MONOTONIC, the
    probe's ts_ns clock) as STATUS answered, the issue times of the reads traced since; once the window after it has
    closed, the second STATUS (`after`, the clock as it answered: `t_after`), the set and its measured gain on that
    window. Both clocks are ztbp-ctl's answered_mono_ns (the moment its ioctl returned), else the session's clock
    just after ztbp-ctl exited."""

    before: Counters
    t_before: int
    span_ts: list[np.ndarray] = field(default_factory=list)
    window: int | None = None  # None: the window after the apply has not closed yet
    zones: list[int] = field(default_factory=list)
    measured_gain: float | None = None
    t_after: int = 0
    after: Counters = NO_ANSWER

    def add(self, frame: pl.DataFrame) -> None:
        """The read times of rows issued since the apply."""
        ts = frame.filter(pl.col("op") == "read")["ts_ns"].to_numpy().astype(np.int64)
        self.span_ts.append(ts[ts >= self.t_before])

    def record(self) -> dict[str, Any]:
        """The verify record: STATUS's change against the reads issued between the two answers, by their own time;
        equal within 1 % (reads in flight at either answer are counted by one side only); the device's hits and
        hit ratio over the same reads, where it answers them."""
        ts = np.concatenate(self.span_ts) if self.span_ts else np.zeros(0, dtype=np.int64)
        traced = int((ts < self.t_after).sum())
        # no kernel log here: a counter wrap between the answers (each 1,000,000 reads) is taken as one
        moved = counter_delta(self.before, self.after)
        n = moved["reads"]
        return {"window": self.window, "zones": self.zones, "measured_gain": self.measured_gain,
                "status_reads_delta": moved["reads"], "status_hits_delta": moved["hits"],
                "device_hit_ratio": moved["hit_ratio"], "device_note": moved["note"], "reads_traced": traced,
                "span_s": round((self.t_after - self.t_before) / 1e9, 3),
                "status_matches": None if n is None else abs(n - traced) <= max(1, traced // 100)}


@dataclass(frozen=True)
class Step:
    """What a closed window leads to: the decision, the state it leaves, whether an apply waits for its
    verification (STATUS once the window after it has closed) and the zones SET sends (apply) or None."""

    decision: Decision
    state: WatchState
    verify: bool
    send: tuple[int, ...] | None


def window_step(state: WatchState, s: WindowSummary, params: WatchParams, now: float, zone_reads: np.ndarray,
                verifying: bool) -> Step:
    """The session's core step, pure: a closed window's summary (and its reads per zone) with the state before it
    in, the decision and what to do to the device out."""
    d, st = decide(state, s, params, now)
    return Step(d, st, verifying, sent_zones(d.zones, zone_reads) if d.action == "apply" else None)


def refused(before: WatchState, after: WatchState) -> WatchState:
    """The state when the device refused a SET (QEMU's has no ZTBP protocol): the set before stays in force, the
    candidate and the streaks start over, the attempt counts against the budget."""
    return WatchState(before.in_force, (), 0, 0, after.applies, after.backoff)


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
        #: the lines of the journal resumed that were skipped (not records, or records that do not check)
        self.resume_skipped: list[int] = []
        if req.resume:
            path = resume_path(req.journal_dir)
            self.state, self.window, self.resume_skipped = resumed_state(path, meta)
            if self.resume_skipped:
                lines = ", ".join(map(str, self.resume_skipped[:5])) + (", …" if len(self.resume_skipped) > 5 else "")
                logging.getLogger("ztbp").warning(
                    f"--resume: {len(self.resume_skipped)} line(s) of {path} skipped (not records, or records "
                    f"that do not check: line {lines}); resumed from the last decision that does")
        self.journal = Journal(req.journal_dir, req.journal_cap_bytes, req.journal_follow_link)
        self.journal.write(START, resumed=req.resume, window=self.window, meta=meta,
                           resume_skipped_lines=len(self.resume_skipped),
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
        #: the last apply, until the window after it closes (then it moves to `pending`)
        self.verifying: Verification | None = None
        #: applies whose second STATUS is taken, each until the rows' time passes it (the probe can lag the device by
        #: more than the time between two applies: measured 65 s on NVMeVirt under emulation)
        self.pending: list[Verification] = []
        #: STATUS's counters at the last window's close: the next window's device figures start there
        self.status: Counters | None = None
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
        for v in self._verifications():  # applies being verified: the reads issued since each, by their own time
            v.add(frame)
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
        if self.released is not None:  # the device is let go (its module unloaded): rows still draining from the
            # probe are summarised, never acted on (nor is the device asked for STATUS)
            self.journal.write(WINDOW, **s.as_dict(), late_rows=self.late,
                               order_hold_s=None if self.hold_ns is None else round(self.hold_ns / 1e9, 3))
            self._next_window(reads, s.hot)
            return
        step = window_step(self.state, s, self.params, now, zone_counts(self.counts, self.params.cells_per_zone),
                           self.verifying is not None)
        # STATUS once a window, just before acting on it: the device's reads and hits since the last window's
        # close, all under the set in force while this window ran (SET and STOP follow a close's STATUS); the
        # same answer starts (or ends) an apply's verification
        answer = self.device.status()
        counters, t_answer = status_counters(answer), answered_ns(answer) or self.mono()
        device = (counter_delta(self.status, counters) if self.status is not None else
                  {"reads": None, "hits": None, "hit_ratio": None, "note": "no STATUS before this window"})
        self.status = counters
        self.journal.write(WINDOW, **s.as_dict(), late_rows=self.late,
                           order_hold_s=None if self.hold_ns is None else round(self.hold_ns / 1e9, 3),
                           device={**device, "status_reads": counters.reads, "status_hits": counters.hits})
        if step.verify:
            self._verify(s.in_force_gain, counters, t_answer)
        d, st = step.decision, step.state
        self.journal.write(DECISION, window=self.window, **d.as_dict(), state=st.as_dict())
        if step.send is not None:
            st = self._apply(d, st, step.send, counters, t_answer)
        elif d.action == "rollback":
            self._rollback(d)
        self.state, self.last = st, d
        self._next_window(reads, s.hot)

    def _next_window(self, reads: pl.DataFrame, hot: tuple[int, ...]) -> None:
        """The closed window's reads and hot set kept for the next one's held-out gain; the next window opens."""
        self.prev_reads, self.prev_hot = reads, hot
        self.window += 1
        self._reset()
        if self.on_window is not None:
            self.on_window(self)

    def _apply(self, d: Decision, st: WatchState, sent: tuple[int, ...], before: Counters, t_before: int
               ) -> WatchState:
        """SET the zones; `before`: STATUS's counters as the window closed and the clock when it answered (ztbp-ctl
        says when its ioctl returned), not after SET: the reads issued while ztbp-ctl runs are counted by the
        device and must be by the trace too (on NVMeVirt the clock after SET counted 7,948 reads against the
        device's 7,742)."""
        res = self.device.set(sent)
        self.journal.write(APPLY, window=self.window, zones=list(d.zones), sent=list(sent), ok=res.get("ok"),
                           exit_code=res.get("exit_code"), message=res.get("message"), answer=res.get("result"))
        if not res.get("ok"):
            # the device refused: the set is not in force; the session goes on
            return refused(self.state, st)
        self.verifying = Verification(before, t_before)
        return st

    def _verify(self, gain: float | None, after: Counters, t_after: int) -> None:
        """The second STATUS (the window after an apply has closed); the record waits until the rows issued up to
        now have arrived (the probe's rows can lag behind the device: see docs/watch.md, "Rows in time order")."""
        v = self.verifying
        assert v is not None
        v.after, v.t_after = after, t_after
        v.window, v.zones, v.measured_gain = self.window, list(self.state.in_force), gain
        self.pending.append(v)
        self.verifying = None
        self._verified()

    def _verifications(self) -> list[Verification]:
        """Every apply being verified: those waiting for the rows to pass their second STATUS, and the last one."""
        return self.pending + ([self.verifying] if self.verifying is not None else [])

    def _verified(self, force: bool = False) -> None:
        """The verify record of each apply whose second STATUS the rows' time has passed by LATE_NS (of each, now,
        with what has arrived: `force`, at the end), in the order of the applies."""
        while self.pending and (force or self.latest_ns >= self.pending[0].t_after + LATE_NS):
            self.journal.write(VERIFY, **self.pending.pop(0).record())

    def _rollback(self, d: Decision) -> None:
        res = self.device.stop()
        self.journal.write(ROLLBACK, window=self.window, zones=list(d.zones), reason=d.reason,
                           ok=res.get("ok"), message=res.get("message"))
        self.verifying = None  # rolled back before the window after an apply closed: nothing of it to verify

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
            self.journal.write(STOP, **summary)
        finally:
            self.journal.close()
        return summary


def warm_up(meta: dict[str, Any], params: WatchParams, n: int = 500) -> float:
    """One window's analysis (hot rule, held-out cache model) on a synthetic window of `n` reads, before the probe's
    first line is read; its seconds. The first analysis compiles numba's functions (two minutes under emulation);
    done in the first window, no row would be read meanwhile, bpftrace's buffers would fill and its rows come out
    interleaved CPU by CPU (on NVMeVirt in the guest: 60,671 of 100,003 rows out of time order).
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

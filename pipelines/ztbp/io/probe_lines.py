"""The streaming probe's output as typed rows, and those rows in their own time order: pure row handling.

`ProbeLines` parses the probe's lines as the capture's streaming path does: from the "# ztbp nvme v1" line on,
bpftrace's "Lost N events" counted as lost, its counters and blank lines dropped, the data lines typed by
io/nvme.py, in `Batch`es. `TimeOrder` holds those rows back until the ones printed late by another CPU have arrived
(`merged_pieces`: time-sorted frames as one). Its bounds are the session's (analysis/params.py: ORDER_*).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from itertools import pairwise

import numpy as np
import polars as pl

from ..contract import NVME_VERSION_LINE
from .nvme import IngestReport, body_rows

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


def in_order(ts: list[np.ndarray]) -> bool:
    """True when each sorted array starts no earlier than the one before ends (their concatenation is sorted)."""
    return all(int(b[0]) >= int(a[-1]) for a, b in pairwise(ts))


def merged_pieces(frames: list[pl.DataFrame], ts: list[np.ndarray]) -> tuple[pl.DataFrame, np.ndarray]:
    """Frames sorted by ts_ns (their times `ts`, in arrival order) as one, earlier frames' rows first among equal
    times, and its times: appended when each starts no earlier than the one before ends (no copy), else merged —
    numpy's stable sort of the concatenated times is timsort, which merges the sorted runs it finds — and the rows
    gathered once."""
    if len(frames) == 1:
        return frames[0], ts[0]
    times = np.concatenate(ts)
    if any(f.schema != frames[0].schema for f in frames):  # a column's type differs between batches: the general way
        return (pl.concat(frames, how="diagonal_relaxed").sort("ts_ns", maintain_order=True),
                np.sort(times, kind="stable"))
    if in_order(ts):
        return pl.concat(frames, rechunk=False), times
    order = np.argsort(times, kind="stable")
    return pl.concat(frames)[order], times[order]


class TimeOrder:
    """The batches of a source again, their rows in their own time order (ts_ns): each row is held until this
    machine's CLOCK_MONOTONIC (the probe's clock) has passed its issue time by the hold, then let out sorted with the
    others. bpftrace prints each CPU's perf buffer in turn, so when its user space lags, the rows of one CPU come out
    seconds before older rows of another; held for longer than the lag, they are merged back in order. The hold
    follows the lag: twice the longest lag (the clock at arrival minus the oldest issue time of a batch) seen over
    the last span_s, at least min_s, at most max_s; at most max_rows are held (the oldest go out first). Rows
    that come later than the hold are let out as they come (the session counts them: late_rows). When the source
    ends, everything held goes out.

    What is held is the batches as they came, each sorted, with their times as numpy arrays: nothing is copied to
    hold a row. Each batch, every held batch gives the rows past the watermark (all of it, none, or a binary search),
    and only those are merged (merged_pieces: no copy when they are in order, else one merge of their sorted runs).
    Merging each batch into the whole held frame instead copied everything held for every batch that came out of
    order — 2 s of rows, 200,000 at 100,000 reads a second, for each batch of 8,192. More than MAX_PIECES batches
    held (a long hold), or more than max_rows rows while they are out of order, and the held batches are merged into
    one. The rows come out exactly as a stable sort of everything held would give them, ties in arrival order."""

    MAX_PIECES = 64

    def __init__(self, source: Iterable[Batch], *, min_s: float, max_s: float, max_rows: int, span_s: float,
                 clock: Callable[[], int] = time.monotonic_ns) -> None:
        self.source, self.clock, self.max_rows, self.span_ns = source, clock, max_rows, span_s * 1e9
        self.min_ns, self.max_ns = int(min_s * 1e9), int(max(min_s, max_s) * 1e9)
        self.hold_ns = self.min_ns
        self.lags: list[tuple[int, int]] = []  # (clock at arrival, lag) of the recent batches
        self.frames: list[pl.DataFrame] = []  # the held batches, each sorted by ts_ns, in arrival order
        self.ts: list[np.ndarray] = []  # their ts_ns (int64)
        self.held = 0

    def _follow(self, now: int, lag: int) -> None:
        self.lags = [(t, g) for t, g in self.lags if now - t <= self.span_ns] + [(now, lag)]
        self.hold_ns = min(self.max_ns, max(self.min_ns, 2 * max(g for _, g in self.lags)))

    def _hold(self, frame: pl.DataFrame) -> None:
        ts = frame["ts_ns"].to_numpy().astype(np.int64, copy=False)
        if (ts[1:] < ts[:-1]).any():
            order = np.argsort(ts, kind="stable")
            frame, ts = frame[order], ts[order]
        self.frames.append(frame)
        self.ts.append(ts)
        self.held += frame.height
        if len(self.frames) > self.MAX_PIECES:
            self._merge()

    def _merge(self) -> None:
        """Every held batch as one."""
        frame, ts = merged_pieces(self.frames, self.ts)
        self.frames, self.ts = [frame], [ts]

    def _let_out(self, now: int) -> pl.DataFrame:
        """The rows past the watermark (or the oldest beyond max_rows), merged; the rest stay held."""
        mark = max(0, now - self.hold_ns)
        cuts = [t.size if t[-1] <= mark else 0 if t[0] > mark else int(np.searchsorted(t, mark, side="right"))
                for t in self.ts]
        over = self.held - sum(cuts) - self.max_rows
        if over > 0:  # the oldest go out: the first rows of the merge, which are the first rows in arrival order
            # once the held batches are in order (merged into one if they are not)
            if not in_order(self.ts):
                self._merge()
            want, cuts = self.held - self.max_rows, []
            for t in self.ts:
                cuts.append(min(t.size, want))
                want -= cuts[-1]
        if not any(cuts):
            return self.frames[0].head(0)
        out, _ = merged_pieces([f.head(c) for f, c in zip(self.frames, cuts, strict=True) if c],
                               [t[:c] for t, c in zip(self.ts, cuts, strict=True) if c])
        keep = [i for i, c in enumerate(cuts) if c < self.ts[i].size]
        self.frames = [self.frames[i].slice(cuts[i]) for i in keep]
        self.ts = [self.ts[i][cuts[i]:] for i in keep]
        self.held -= out.height
        return out

    def __iter__(self) -> Iterator[Batch]:
        for batch in self.source:
            now = self.clock()
            if batch.frame.height:
                self._follow(now, now - int(batch.frame["ts_ns"].min()))  # type: ignore[arg-type]
                self._hold(batch.frame)
            if not self.held:
                yield Batch(pl.DataFrame(), batch.lost, self.hold_ns)
                continue
            yield Batch(self._let_out(now), batch.lost, self.hold_ns)
        if self.held:
            yield Batch(merged_pieces(self.frames, self.ts)[0], 0, self.hold_ns)
            self.frames, self.ts, self.held = [], [], 0

    def close(self) -> None:
        close = getattr(self.source, "close", None)
        if close is not None:
            close()

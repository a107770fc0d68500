"""The streaming probe's output as typed rows, and those rows in their own time order: pure row handling.

`ProbeLines` parses the probe's lines as the capture's streaming path does: from the "# ztbp nvme v1" line on,
bpftrace's "Lost N events" counted as lost, its counters and blank lines dropped, the data lines typed by
io/nvme.py, in `Batch`es. `TimeOrder` holds those rows back until the ones printed late by another CPU have arrived
(`merged`: two time-sorted frames as one). Its bounds are the session's (analysis/params.py: ORDER_*).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

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
    the last span_s, at least min_s, at most max_s; at most max_rows are held (the oldest go out first). Rows
    that come later than the hold are let out as they come (the session counts them: late_rows). When the source
    ends, everything held goes out."""

    def __init__(self, source: Iterable[Batch], *, min_s: float, max_s: float, max_rows: int, span_s: float,
                 clock: Callable[[], int] = time.monotonic_ns) -> None:
        self.source, self.clock, self.max_rows, self.span_ns = source, clock, max_rows, span_s * 1e9
        self.min_ns, self.max_ns = int(min_s * 1e9), int(max(min_s, max_s) * 1e9)
        self.hold_ns = self.min_ns
        self.lags: list[tuple[int, int]] = []  # (clock at arrival, lag) of the recent batches

    def _follow(self, now: int, lag: int) -> None:
        self.lags = [(t, g) for t, g in self.lags if now - t <= self.span_ns] + [(now, lag)]
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

"""A Perfetto trace as one file or as several that each open alone: what present/perfetto.py writes, chunk by
chunk, goes into the current file until the next chunk would take it past the limit; then a new file starts.

Why a limit. A trace is read whole before it is shown: Perfetto's trace processor refuses a file past 4 GiB (a
32-bit size check, google/perfetto#3537), and the UI, whose trace processor runs in the browser with the memory
WebAssembly gives it, fails well before (a 1.8 GB trace would not open, google/perfetto#1392; Go's runtime
tracer, which writes for the same UI, cuts its traces at 100 MB and saw 1 GB fail). SPLIT_BYTES, 512 MiB, is an
eighth of the trace processor's hard limit and under every failure reported; about 4.5 million commands of a run
(113 bytes each with their counters).

Each file stands on its own, as Perfetto cannot cut a trace itself (its maintainers: what comes first in a trace
shapes how the rest is read, google/perfetto#634): every chunk begins by clearing the sequence's interning state
and interns its strings again (present/perfetto_proto.py Writer); each file declares the tracks its chunks use
(with their parents) before them, and starts each counter at the value it had when the file begins. A chunk is
never cut: a command's slice, a layer request's nested slices and the flow between them stay in one file
(present/perfetto.py puts no flow across chunks).

Files: OUT, then OUT's stem with .part2, .part3, ... before its suffix. They appear together when the export ends
(written under temporary names, renamed at the end; removed when it fails); parts an earlier, longer export left
beyond the new last one are removed.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable
from contextlib import ExitStack
from pathlib import Path
from typing import BinaryIO

from ..files import atomic_path, check_target
from ..units import MIB
from .perfetto_proto import TrackSpec, Writer

SPLIT_BYTES = 512 * MIB


def part_path(out: Path, n: int) -> Path:
    """The n-th file (from 1) of a trace written to `out`."""
    return out if n == 1 else out.with_name(f"{out.stem}.part{n}{out.suffix}")


class TraceFiles:
    """The files of one trace: chunks appended (`add`), a new file started when the next would pass `limit`;
    `close` renames them all into place. Used as a context manager: on an error nothing is left behind."""

    def __init__(self, out: Path, limit: int, specs: dict[int, TrackSpec]) -> None:
        self.out, self.limit, self.specs = out, limit, specs
        self.stack = ExitStack()
        self.paths: list[Path] = []
        self.sizes: list[int] = []
        self.f: BinaryIO | None = None
        self.declared: set[int] = set()
        self.over = 0  # chunks larger than the limit on their own (each is then a file of its own)

    def __enter__(self) -> TraceFiles:
        self.stack.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.f is not None:
            self.f.close()
        self.stack.__exit__(*exc)  # renames the files into place, or removes them on an error

    def _closure(self, used: Iterable[int]) -> list[TrackSpec]:
        """The tracks in `used` and their parents this file has not declared, parents first."""
        out: list[TrackSpec] = []
        seen: set[int] = set()

        def add(uuid: int) -> None:
            if uuid in seen or uuid in self.declared or uuid not in self.specs:
                return
            seen.add(uuid)
            spec = self.specs[uuid]
            if spec.parent:
                add(spec.parent)
            out.append(spec)

        for u in sorted(used):
            add(u)
        return out

    def _packets(self, specs: list[TrackSpec], t0: int | None, values: dict[int, int]) -> bytes:
        """Track descriptors, then each counter's value at t0 (the file's start)."""
        buf = io.BytesIO()
        w = Writer(buf, intern=False)
        for spec in specs:
            w.declare(spec)
        if t0 is not None:
            for track, v in sorted(values.items()):
                w.counter(t0, track, v)
        w.flush()
        return buf.getvalue()

    def _start(self) -> None:
        if self.f is not None:
            self.f.close()
        n = len(self.paths) + 1
        path = check_target(part_path(self.out, n))
        tmp = self.stack.enter_context(atomic_path(path))
        self.f = tmp.open("xb")
        self.paths.append(path)
        self.sizes.append(0)
        self.declared = set()

    def _write(self, data: bytes) -> None:
        assert self.f is not None
        self.f.write(data)
        self.sizes[-1] += len(data)

    def add(self, chunk: bytes, used: set[int], t0: int | None, values_before: Callable[[], dict[int, int]]) -> None:
        """Append a chunk (its own interning, the tracks it uses in `used`); a file started here first gets each
        counter's value before the chunk (values_before(), at t0)."""
        fresh = self.f is None
        if not fresh:
            specs = self._closure(used)
            head = self._packets(specs, None, {})
            fresh = self.sizes[-1] + len(head) + len(chunk) > self.limit
            if not fresh:
                self._write(head)
                self.declared.update(s.uuid for s in specs)
        if fresh:
            self._start()
            before = values_before() if t0 is not None else {}
            specs = self._closure(set(used) | set(before))
            head = self._packets(specs, t0, before)
            self._write(head)
            self.declared.update(s.uuid for s in specs)
            if len(head) + len(chunk) > self.limit:
                self.over += 1
        self._write(chunk)

    def finish(self) -> list[Path]:
        """The files, once written; stale parts of an earlier export beyond the last are removed."""
        n = len(self.paths) + 1
        while part_path(self.out, n).is_file() and not part_path(self.out, n).is_symlink():
            part_path(self.out, n).unlink()
            n += 1
        return self.paths

"""The journal of a `ztbp watch` session: its file names, its record kinds, the writer and the readers.

A journal folder holds `watch.jsonl` (one JSON object a line, flushed and synced per record) and the raw rows in a
rolling Parquet journal (`rows/rows-NNNNNN.parquet`, one file per window, the oldest deleted past the size cap).
Every record has a `kind` and a `wall` (the session's clock, Unix seconds). The kinds:
  start     the session's parameters and geometry (a resumed session writes one too, with "resumed": true)
  attached  the probe's header arrived: every probe is attached, every command from then on is traced
  window    a window's summary (analysis/watch.WindowSummary) and the device's own reads, hits and hit ratio
            since the window before (STATUS, read as each window closes)
  decision  the decision after a window (apply / rollback / hold / defer) with its reason and the state it leaves
  apply     ztbp-ctl set's answer (a refusal, e.g. QEMU's device without the protocol, is journaled and the
            session goes on; the set is then not in force)
  verify    the first window after an apply: the measured gain of the set in force and, where the device
            answers STATUS, its read count's change against the reads traced and its hits and hit ratio
  rollback  ztbp-ctl stop's answer and the reason
  module    a device module (`--module`, NVMeVirt) loaded once the probe attached ("loaded": the seconds its
            device took to appear) or refused ("failed": the error, which ends the session)
  stop      the end of the session (why; what was done to the device and, with --module, to the module)
The session (control/watch.py) writes it; `ztbp watch --resume` and `ztbp report JOURNAL` (report/watch.py) read
it. A full disk stops the journal with one FileSystemError.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from ..errors import FileSystemError, ZtbpError
from ..files import fs_error, make_dir

if TYPE_CHECKING:
    import polars as pl

#: the records' file and the folder of the raw rows' Parquet parts
JOURNAL = "watch.jsonl"
ROWS = "rows"
ROWS_GLOB = "rows-*.parquet"

START, ATTACHED, WINDOW, DECISION, APPLY = "start", "attached", "window", "decision", "apply"
VERIFY, ROLLBACK, MODULE, STOP = "verify", "rollback", "module", "stop"
#: every kind of record the session writes, in the order of a session
KINDS = (START, ATTACHED, WINDOW, DECISION, APPLY, VERIFY, ROLLBACK, MODULE, STOP)


def part_name(n: int) -> str:
    """The file name of the raw rows' Parquet part number n."""
    return f"rows-{n:06d}.parquet"


def part_number(path: Path) -> int:
    """The number of a Parquet part from its file name (ValueError when it is not one)."""
    return int(path.stem.split("-", 1)[1])


class Journal:
    """watch.jsonl (flushed and synced per record) and the rolling Parquet journal of raw rows under a size cap."""

    def __init__(self, folder: Path, cap_bytes: int) -> None:
        self.folder, self.cap = folder, cap_bytes
        self.path = folder / JOURNAL
        make_dir(folder / ROWS)
        self.parts = sorted((folder / ROWS).glob(ROWS_GLOB))
        self.next_part = part_number(self.parts[-1]) + 1 if self.parts else 0
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
        path = self.folder / ROWS / part_name(self.next_part)
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


def scan(path: Path) -> tuple[list[dict[str, Any]], list[int]]:
    """The JSON records of a watch.jsonl in order, and the numbers of the lines skipped (not a JSON object with a
    kind: a last line cut by a crash, a damaged line). Blank lines are not counted. The file is read line by line,
    never held whole beside its records."""
    records: list[dict[str, Any]] = []
    skipped: list[int] = []
    try:
        with path.open("rb") as f:
            for n, raw in enumerate(f, start=1):
                if not raw.strip():
                    continue
                try:
                    rec = json.loads(raw.decode("utf-8"))
                except (UnicodeDecodeError, ValueError, RecursionError):
                    skipped.append(n)
                    continue
                if not isinstance(rec, dict) or not isinstance(rec.get("kind"), str):
                    skipped.append(n)
                    continue
                records.append(rec)
    except OSError as e:
        raise ZtbpError(f"cannot read {path}: {e.strerror or e}") from None
    return records, skipped


def read_journal(folder: Path) -> list[dict[str, Any]]:
    """The records of a session's watch.jsonl, to resume it (lines that are not records are left out)."""
    path = folder / JOURNAL
    if not path.is_file():
        raise ZtbpError(f"--resume: no journal {path}")
    return scan(path)[0]


def read_records(folder: Path) -> tuple[list[dict[str, Any]], list[int]]:
    """The records of folder/watch.jsonl and the numbers of the lines skipped (scan), to report on them. One
    ZtbpError when there is no journal or no session in it."""
    path = folder / JOURNAL
    if not folder.is_dir():
        raise ZtbpError(f"{folder}: no such folder")
    if not path.is_file():
        raise ZtbpError(f"{folder}: no {JOURNAL} in it: not the journal of a `ztbp watch` session (give the "
                        "folder of watch --journal)")
    records, skipped = scan(path)
    if not records:
        raise ZtbpError(f"{path}: no record of a watch session in it "
                        f"({len(skipped)} line{'' if len(skipped) == 1 else 's'} that are not JSON records)")
    if not any(r["kind"] == START for r in records):
        raise ZtbpError(f"{path}: no start record among its {len(records)} records: not the journal of a "
                        "`ztbp watch` session")
    return records, skipped


def part_stats(folder: Path) -> tuple[dict[int, tuple[int, int | None, int | None]], list[str]]:
    """Per Parquet part of folder/rows/ (by its number): rows, first and last ts_ns; and the parts that could not be
    read."""
    import polars as pl  # here: reading the records (is_watch_dir, --resume) loads no polars

    out: dict[int, tuple[int, int | None, int | None]] = {}
    bad: list[str] = []
    for f in sorted((folder / ROWS).glob(ROWS_GLOB)):
        try:
            n = part_number(f)
            got = pl.scan_parquet(f).select(pl.len().alias("n"), pl.col("ts_ns").cast(pl.Int64).min().alias("lo"),
                                            pl.col("ts_ns").cast(pl.Int64).max().alias("hi")).collect().row(0)
        except (ValueError, OSError, pl.exceptions.PolarsError):
            bad.append(f.name)
            continue
        out[n] = (int(got[0]), got[1], got[2])
    return out, bad

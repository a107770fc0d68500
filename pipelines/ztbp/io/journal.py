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
it. A full disk stops the journal with one FileSystemError. Read back, each record is checked against its kind's
shape (RECORDS, schema.py): a line that is not a JSON object with a kind, one longer than MAX_LINE_BYTES, not UTF-8,
or a record with a field of the wrong type, NaN, ±inf or out of its bounds (a window of 1e300 or -5, a state that is
missing) is skipped and counted with its line number; the journal goes on.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import time
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from ..contract import META_LIMITS
from ..errors import FileSystemError, ZtbpError
from ..files import atomic_writer, bounded_lines, fs_error, make_dir
from ..schema import (
    COUNT,
    LATENCY_US,
    Flag,
    Integer,
    Invalid,
    ListOf,
    MapOf,
    Maybe,
    Number,
    Record,
    Spec,
    Text,
    Tuple,
    at_most,
    zone_ids,
)
from ..units import LIMITS, MAX_ZONES, Bound

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


#: the longest line of watch.jsonl read (a window's record names its hot zones: 16 MiB holds two million)
MAX_LINE_BYTES = 16 << 20
#: a session's window indices and streaks stay below 2^53 (a float holds them exactly)
WINDOW_INDEX = Integer(0, 2**53)
#: the session's clock, Unix seconds (a test's clock may start at 0)
WALL = Number(Bound(0, 2**40))
_GAIN = Maybe(Number(Bound(-1, 1)))
_LAT = Maybe(Number(LATENCY_US, or_zero=True))
#: the device's hit ratio between two STATUS answers, and an answer's counter (0xFFFFFFFF before the first read)
_HIT_RATIO = Maybe(Number(Bound(0, 1)))
_STATUS = Maybe(Integer(-1, 2**32))
#: the most applies and back-offs a state keeps (the budget is at most 1,000 applies a day)
MAX_STATE_ITEMS = 10_000


def state_spec(nr_zones: int = MAX_ZONES, whole: bool = True) -> Record:
    """A decision's state (analysis/watch.WatchState.as_dict) on a device of `nr_zones` zones; `whole`: every field
    present (to resume from it), else the fields present checked (to report on it)."""
    zones = zone_ids(nr_zones)
    fields = {"in_force": zones, "candidate": zones, "candidate_streak": WINDOW_INDEX,
              "low_gain_streak": WINDOW_INDEX, "applies": ListOf(WALL, MAX_STATE_ITEMS),
              "backoff": ListOf(Tuple((zones, WALL)), MAX_STATE_ITEMS)}
    return Record(fields) if whole else Record(optional=fields)


_RECORD = Record({"kind": Text(), "wall": WALL})
_OK = {"ok": Maybe(Flag()), "message": Maybe(Text()), "zones": zone_ids()}
#: each kind's record as the session writes it (fields not named here are kept unchecked: a newer session's)
RECORDS: dict[str, Record] = {
    START: _RECORD.extended({"window": WINDOW_INDEX}, {
        "resumed": Flag(), "state": state_spec(whole=False), "meta": Record(optional={k: Number(b) for k, b in
                                                                            META_LIMITS.items()}),
        "window_commands": Number(LIMITS["window-commands"]), "window_s": Maybe(Number(LIMITS["watch-window-s"])),
        "warm_up_s": Maybe(Number(Bound(0, 1e6)))}),
    ATTACHED: _RECORD,
    WINDOW: _RECORD.extended({"window": WINDOW_INDEX}, {
        "t_end": WALL, "commands": COUNT, "reads": COUNT, "lost": COUNT, "late_rows": COUNT, "hot": zone_ids(),
        "previous_hot": zone_ids(), "held_out_gain": _GAIN, "in_force_gain": _GAIN,
        "order_hold_s": Maybe(Number(Bound(0, 1e6))),
        "device": Maybe(Record(optional={"reads": Maybe(COUNT), "hits": Maybe(COUNT), "hit_ratio": _HIT_RATIO,
                                         "note": Maybe(Text()), "status_reads": _STATUS, "status_hits": _STATUS},
                               rules=(at_most("hits", "reads"),))),
        "read_lat": Maybe(MapOf(Maybe(Record(optional={"reads": COUNT, "p50_us": _LAT, "p99_us": _LAT,
                                                       "mean_us": _LAT})), 4))}),
    DECISION: _RECORD.extended({"window": WINDOW_INDEX, "action": Text(), "state": state_spec(whole=False)},
                               {"reason": Text(), "zones": zone_ids()}),
    APPLY: _RECORD.extended({"window": WINDOW_INDEX}, {**_OK, "sent": zone_ids(),
                                                       "exit_code": Maybe(Integer(-255, 255))}),
    VERIFY: _RECORD.extended(optional={
        "window": Maybe(WINDOW_INDEX), "zones": zone_ids(), "measured_gain": _GAIN,
        "status_reads_delta": Maybe(Integer(-(2**63), 2**63)), "status_hits_delta": Maybe(COUNT),
        "device_hit_ratio": _HIT_RATIO, "device_note": Maybe(Text()), "reads_traced": COUNT,
        "span_s": Number(Bound(-1e9, 1e9)), "status_matches": Maybe(Flag())}),
    ROLLBACK: _RECORD.extended({"window": WINDOW_INDEX}, {**_OK, "reason": Text()}),
    MODULE: _RECORD,
    STOP: _RECORD.extended(optional={"windows": COUNT, "commands": COUNT, "lost": COUNT, "late_rows": COUNT,
                                     "in_force": zone_ids(), "why": Text()}),
}


def record_spec(kind: str) -> Spec:
    """The shape of a record of `kind` (a kind this version does not know: kind and wall only)."""
    return RECORDS.get(kind, _RECORD)


def part_name(n: int) -> str:
    """The file name of the raw rows' Parquet part number n."""
    return f"rows-{n:06d}.parquet"


def part_number(path: Path) -> int:
    """The number of a Parquet part from its file name (ValueError when it is not one)."""
    return int(path.stem.split("-", 1)[1])


def journal_dir(folder: Path, follow_links: bool = False, make: bool = True) -> Path:
    """The journal's folder with its rows/ folder, made where missing (`make`; else only checked). Unless
    `follow_links`, the folder, any folder given above it and rows/ must not be symbolic links (checked before and
    after they are made): a link planted where the journal goes would send its writes to another place."""
    def linked() -> Path | None:
        return next((p for p in (folder / ROWS, folder, *folder.parents) if p.is_symlink()), None)

    if not follow_links and (link := linked()) is not None:
        raise ZtbpError(f"--journal {folder}: {link} is a symbolic link; give a folder reached through none, or pass "
                        "--journal-follow-link to write where it leads")
    if not make:
        return folder
    make_dir(folder / ROWS)
    if not follow_links and (link := linked()) is not None:
        raise ZtbpError(f"--journal {folder}: {link} became a symbolic link while the journal's folder was made; "
                        "nothing was written")
    return folder


class Journal:
    """watch.jsonl (flushed and synced per record) and the rolling Parquet journal of raw rows under a size cap."""

    def __init__(self, folder: Path, cap_bytes: int, follow_links: bool = False) -> None:
        self.folder, self.cap = journal_dir(folder, follow_links), cap_bytes
        self.path = folder / JOURNAL
        self.parts = sorted((folder / ROWS).glob(ROWS_GLOB))
        self.next_part = part_number(self.parts[-1]) + 1 if self.parts else 0
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | (0 if follow_links else os.O_NOFOLLOW)
        try:
            fd = os.open(self.path, flags, 0o666)
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise ZtbpError(f"{self.path} is a symbolic link: the journal never writes through one "
                                "(--journal-follow-link to allow it)") from None
            raise fs_error(e, self.path) or ZtbpError(str(e)) from None
        self.f: IO[str] | None = os.fdopen(fd, "a", encoding="utf-8")

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
        try:  # under a name no one can guess, created new, renamed into place whole
            with atomic_writer(path) as f:
                frame.write_parquet(f)
        except OSError as e:
            raise self._full(e, path) from None
        except FileSystemError as e:
            self.close()
            raise FileSystemError(f"the journal stopped, and the session with it: {e}") from None
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


def scan_numbered(path: Path) -> tuple[list[tuple[int, dict[str, Any]]], list[int]]:
    """The records of a watch.jsonl in order, each with its line number, and the numbers of the lines skipped: not
    a JSON object with a kind (a last line cut by a crash, a damaged line), longer than MAX_LINE_BYTES, or a record
    its kind's spec refuses (RECORDS). Blank lines are not counted. The file is read line by line, never held whole
    beside its records."""
    records: list[tuple[int, dict[str, Any]]] = []
    skipped: list[int] = []
    try:
        with path.open("rb") as f:
            for n, raw in bounded_lines(f, MAX_LINE_BYTES):
                if raw is not None and not raw.strip():
                    continue
                try:
                    rec = json.loads(raw.decode("utf-8")) if raw is not None else None
                    if not isinstance(rec, dict) or not isinstance(rec.get("kind"), str):
                        raise ValueError("not a record")
                    records.append((n, record_spec(rec["kind"]).check(rec)))
                except (UnicodeDecodeError, ValueError, RecursionError, Invalid):
                    skipped.append(n)
    except OSError as e:
        raise ZtbpError(f"cannot read {path}: {e.strerror or e}") from None
    return records, skipped


def scan(path: Path) -> tuple[list[dict[str, Any]], list[int]]:
    """The records of a watch.jsonl in order and the numbers of the lines skipped (scan_numbered)."""
    numbered, skipped = scan_numbered(path)
    return [r for _, r in numbered], skipped


def read_journal(folder: Path) -> list[dict[str, Any]]:
    """The records of a session's watch.jsonl (lines that are not records that check are left out)."""
    return scan(resume_path(folder))[0]


def resume_path(folder: Path) -> Path:
    """folder/watch.jsonl, to resume a session; one ZtbpError when there is none."""
    path = folder / JOURNAL
    if not path.is_file():
        raise ZtbpError(f"--resume: no journal {path}")
    return path


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
                        f"({len(skipped)} line{'' if len(skipped) == 1 else 's'} that are not JSON records that check)")
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

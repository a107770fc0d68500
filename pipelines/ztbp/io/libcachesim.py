"""libCacheSim (PyPI `libcachesim`) run on a page stream through its own trace file: the page ids go to a temporary
oracleGeneral file (its fast C reader), every page an object of size 1, so a capacity is a number of pages.

The analyses take this module as their runner of the general policies (`analysis.cachesim.GeneralPolicies`:
`hits`, `version`) and of the spatial sampler (`sampled`, `analysis.shards.compare`'s peer), so the analysis room
opens no file and writes no temporary trace itself.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

#: Smallest cache, in pages, the general policies are run with: below 100 pages a sub-queue of some holds no page in
#: libCacheSim 0.3.5 (W-TinyLFU's 1 % window: 0 hits; 2Q's queues: 0 hits below 5 pages; S3-FIFO's 10 % queue and
#: W-TinyLFU's segments below 10 / 5 pages: the library aborts the process). Smaller caches report None for them.
MIN_PAGES: dict[str, int] = dict.fromkeys(("ARC", "LIRS", "S3FIFO", "TwoQ", "WTinyLFU", "Sieve"), 100)
#: libCacheSim's oracleGeneral binary trace: clock time, object id, object size, next access (virtual time).
ORACLE_GENERAL = np.dtype([("time", "<u4"), ("obj_id", "<u8"), ("obj_size", "<u4"), ("next_access", "<i8")])


#: the temporary folders of the traces: ztbp-lcs-<pid of the process that made it>-<random>
TRACE_DIR_PREFIX = "ztbp-lcs-"


def sweep_leftovers(root: Path | None = None) -> list[Path]:
    """Remove the trace folders (TRACE_DIR_PREFIX) in the temporary folder `root` (default: tempfile's) that this
    user's processes left when they were killed (SIGKILL, a crash: no clean-up ran): those whose process is gone.
    What was removed."""
    import shutil

    root = Path(tempfile.gettempdir()) if root is None else root
    gone = []
    for d in root.glob(f"{TRACE_DIR_PREFIX}*-*"):
        pid = d.name.removeprefix(TRACE_DIR_PREFIX).split("-", 1)[0]
        try:
            if not pid.isdigit() or d.is_symlink() or d.stat().st_uid != os.getuid() or _alive(int(pid)):
                continue
        except OSError:
            continue
        shutil.rmtree(d, ignore_errors=True)
        gone.append(d)
    return gone


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextmanager
def oracle_trace(ids: np.ndarray) -> Iterator[Path]:
    """The page ids as a libCacheSim oracleGeneral trace in a temporary file, every page an object of size 1;
    removed afterwards — on an exception, Ctrl-C and SIGTERM alike (the CLI turns both into KeyboardInterrupt) —,
    and by the next trace made when its process was killed outright (sweep_leftovers)."""
    sweep_leftovers()
    rows = np.zeros(ids.size, dtype=ORACLE_GENERAL)
    rows["time"] = np.arange(ids.size) // 1000
    rows["obj_id"] = ids.astype(np.uint64) + 1
    rows["obj_size"] = 1
    rows["next_access"] = -1
    with tempfile.TemporaryDirectory(prefix=f"{TRACE_DIR_PREFIX}{os.getpid()}-") as tmp:
        path = Path(tmp) / "pages.oracleGeneral.bin"
        rows.tofile(path)
        yield path


def hits(ids: np.ndarray, capacities: list[int], policies: tuple[str, ...]) -> list[dict[str, int | None]]:
    """Hits of libCacheSim policies (class names, e.g. "LRU", "ARC") over page ids, one dict per capacity (None for a
    capacity below the policy's MIN_PAGES)."""
    import libcachesim as lcs

    n = ids.size
    out: list[dict[str, int | None]] = [{} for _ in capacities]
    if n == 0:
        return [dict.fromkeys(policies, 0) for _ in capacities]
    with oracle_trace(ids) as path:
        reader = lcs.TraceReader(str(path), lcs.TraceType.ORACLE_GENERAL_TRACE)
        for cap, row in zip(capacities, out, strict=True):
            for name in policies:
                if cap <= 0:
                    row[name] = 0
                    continue
                if cap < MIN_PAGES.get(name, 1):
                    row[name] = None
                    continue
                miss_ratio = getattr(lcs, name)(cap, hashpower=20).process_trace(reader)[0]
                row[name] = n - round(miss_ratio * n)
    return out


@contextmanager
def c_stdout_silenced() -> Iterator[None]:
    """File descriptor 1 to /dev/null for the duration (what C code prints there; Python's own stdout is flushed)."""
    import ctypes

    libc = ctypes.CDLL(None)
    sys.stdout.flush()
    libc.fflush(None)
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 1)
            try:
                yield
            finally:
                libc.fflush(None)  # C's stdio buffers what it printed (a pipe is fully buffered): drop it here
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def sampled(ids: np.ndarray, capacity: int, rate: float, policies: tuple[str, ...] = ("LRU",),
            salt: int = 0) -> dict[str, float]:
    """Hit ratio of libCacheSim policies on libCacheSim's own spatial sample of the page stream (its reader's
    SPATIAL_SAMPLER at `rate`, its own hash of the object id salted by `salt`) with a cache of `capacity` pages
    (scale it by the rate beforehand): a peer of analysis/shards.py's sampler. The Sampler object must outlive the
    reader (the binding keeps a bare pointer to it: dropping it crashes libcachesim 0.3.5)."""
    import libcachesim as lcs
    from libcachesim import libcachesim_python as native

    if ids.size == 0:
        return dict.fromkeys(policies, 0.0)
    out: dict[str, float] = {}
    with oracle_trace(ids) as path:
        for name in policies:
            with c_stdout_silenced():  # the C sampler prints its ratio on stdout (and would spoil --json)
                sampler = native.Sampler(rate, native.SamplerType.SPATIAL_SAMPLER)
                sampler.sampling_salt = salt
                params = native.ReaderInitParam(sampler=sampler)
                reader = lcs.TraceReader(str(path), lcs.TraceType.ORACLE_GENERAL_TRACE, reader_init_params=params)
                out[name] = 1.0 - getattr(lcs, name)(max(1, capacity), hashpower=20).process_trace(reader)[0]
            del reader, params, sampler
    return out


def version() -> str:
    """The installed libcachesim's version, as simulate() results name it."""
    from importlib.metadata import version as installed

    return installed("libcachesim")

"""Application captures (`ztbp capture-app rocksdb`): db_bench on a file system on the emulated NVMe device.

The guest half is vm/guest/app-capture.sh: it builds the file system (btrfs zoned or f2fs zoned on the ZNS
namespace, ext4 on the conventional one), runs db_bench's phases (fillrandom, then readrandom with direct reads,
optionally readwhilewriting) under three probes — the streaming NVMe probe with the submitting thread, the
application-operation probe (probes/appops.bt, instantiated for RocksDB's DBImpl::GetImpl and WriteImpl) and the
cache probe (probes/cachestat.bt) — and records every file's extents (raw/files.csv). This module builds its
request, runs it through the shared VM capture path and adds meta.json `app`: the phases, db_bench's own figures
(ops, micros/op, percentiles, found keys) and the functions that were traced.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..contract import read_meta, write_meta
from ..devices import QEMU
from ..paths import RunPaths
from ..units import MIB
from .capture import CaptureError, CaptureOutcome, GuestCommand, run_vm_capture, start_run
from .meta import device_meta
from .progress import Progress
from .vm import Geometry, VmError, vm_device

APP_FS = ("btrfs", "f2fs", "ext4")
APPS = ("rocksdb",)
APP_SCRIPTS = {"nvme": "probes/nvme_zone_stream.bt", "appops": "probes/appops.bt",
               "cachestat": "probes/cachestat.bt"}
#: db_bench's result line: "readrandom   :     123.456 micros/op 8100 ops/sec 1.234 seconds 10000 operations;"
_RESULT = re.compile(r"^(?P<bench>[a-z]+)\s+:\s+(?P<us>[\d.]+) micros/op (?P<ops_s>\d+) ops/sec"
                     r"(?:\s+(?P<secs>[\d.]+) seconds\s+(?P<ops>\d+) operations)?;(?P<rest>.*)$", re.M)
_FOUND = re.compile(r"\((?P<found>\d+) of (?P<total>\d+) found\)")
_PCTL = re.compile(r"^Percentiles: P50: (?P<p50>[\d.]+) P75: [\d.]+ P99: (?P<p99>[\d.]+)", re.M)
_OP_NAME = re.compile(r"[a-z][a-z0-9_]{0,31}")
_COUNT = re.compile(r"^Count: (?P<count>\d+) Average: (?P<avg>[\d.]+)", re.M)


@dataclass(frozen=True)
class AppCapture:
    """What `ztbp capture-app` was asked for."""

    app: str = "rocksdb"
    fs: str = "btrfs"
    keys: int = 20_000
    value_bytes: int = 400
    reads: int = 2_000
    cache_bytes: int = 64 * 1024
    duration_s: int = 0
    buffered: bool = False
    #: traced operations "OP=FUNCTION" (FUNCTION: a symbol or a demangled name prefix); () = RocksDB's Get and Write
    functions: tuple[str, ...] = ()
    #: the guest path of the binary or library whose symbol table FUNCTION is resolved in; None = db_bench's librocksdb
    library: str | None = None
    geometry: Geometry = Geometry(zones=64, conv_ns_bytes=1 << 30)
    out: str | None = None
    timeout: int = 3600
    verbose: bool = False

    @property
    def name(self) -> str:
        return f"app-{self.app}-{self.fs}{'-buffered' if self.buffered else ''}"

    def validate(self) -> None:
        if self.app not in APPS:
            raise CaptureError(f"application {self.app!r}: choose one of {', '.join(APPS)}")
        if self.fs not in APP_FS:
            raise CaptureError(f"--fs {self.fs}: choose one of {', '.join(APP_FS)}")
        if min(self.keys, self.value_bytes, self.reads) < 1 or self.cache_bytes < 1 or self.duration_s < 0:
            raise CaptureError("--keys, --value-size, --reads and --cache-size must be positive, --duration 0 or more")
        for f in self.functions:
            op, _, name = f.partition("=")
            if not _OP_NAME.fullmatch(op) or not name or any(c.isspace() for c in name):
                raise CaptureError(f"--function {f!r}: give OP=FUNCTION, OP a lowercase word (e.g. get, compact), "
                                   "FUNCTION a symbol or a demangled name without spaces "
                                   "(e.g. rocksdb::DBImpl::GetImpl)")
        if len(self.functions) > 15:
            raise CaptureError("--function: at most 15 functions (the operation id keeps 4 bits for the function)")
        if len({f.partition("=")[0] for f in self.functions}) != len(self.functions):
            raise CaptureError("--function: each OP name once")
        if self.library is not None and not self.library.startswith("/"):
            raise CaptureError(f"--library {self.library!r}: an absolute path in the guest (e.g. "
                               "/usr/lib/x86_64-linux-gnu/librocksdb.so.7.8)")
        if self.fs in ("f2fs", "ext4") and not self.geometry.conv_ns_bytes:
            raise CaptureError(f"--fs {self.fs} needs the conventional namespace: give its size with --conv-ns")
        data = self.keys * (self.value_bytes + 16)
        room = self.geometry.zone_bytes * self.geometry.zones
        if self.fs == "btrfs" and data * 3 > room:
            raise CaptureError(f"{self.keys} keys of {self.value_bytes} bytes (~{data // MIB} MiB, compaction needs "
                               f"about 3x) do not fit {self.geometry.zones} zones of "
                               f"{self.geometry.zone_bytes // MIB} MiB; add --zones or lower --keys")
        try:
            self.geometry.validate()
        except VmError as e:
            raise CaptureError(str(e)) from None

    def workload_meta(self) -> dict[str, Any]:
        return {"name": self.name, "kind": "app", "app": self.app, "fs": self.fs, "keys": self.keys,
                "value_bytes": self.value_bytes, "reads": self.reads, "cache_bytes": self.cache_bytes,
                "duration_s": self.duration_s, "direct_reads": not self.buffered}

    def guest_env(self) -> dict[str, str]:
        return {"ZTBP_APP": self.app, "ZTBP_FS": self.fs, "ZTBP_KEYS": str(self.keys),
                "ZTBP_VALUE": str(self.value_bytes), "ZTBP_READS": str(self.reads),
                "ZTBP_CACHE": str(self.cache_bytes), "ZTBP_DURATION": str(self.duration_s),
                "ZTBP_BUFFERED": str(int(self.buffered)),
                **({"ZTBP_FUNCTIONS": " ".join(self.functions)} if self.functions else {}),
                **({"ZTBP_LIBRARY": self.library} if self.library else {})}


def parse_db_bench(text: str) -> dict[str, Any]:
    """db_bench's own figures from its output: per benchmark ops, micros/op, ops/s, found; latency percentiles."""
    out: dict[str, Any] = {}
    for m in _RESULT.finditer(text):
        res: dict[str, Any] = {"micros_per_op": float(m["us"]), "ops_per_sec": int(m["ops_s"])}
        if m["ops"]:
            res["operations"] = int(m["ops"])
            res["seconds"] = float(m["secs"])
        found = _FOUND.search(m["rest"])
        if found:
            res["found"] = int(found["found"])
            res["operations"] = int(found["total"])
        out[m["bench"]] = res
    hist: dict[str, Any] = {}
    count = _COUNT.search(text)
    if count:
        hist["count"] = int(count["count"])
        hist["avg_us"] = float(count["avg"])
    pct = _PCTL.search(text)
    if pct:
        hist["p50_us"] = float(pct["p50"])
        hist["p99_us"] = float(pct["p99"])
    if hist and out:
        next(iter(out.values()))["latency"] = hist
    return out


def _fields(path: Path, sep: str, n: int, header: bool) -> list[list[str]]:
    """The lines of a small delimited file the guest wrote, split, that have exactly `n` fields ([] when the file is
    missing); `header`: the first line is column names."""
    if not path.is_file():
        return []
    lines = path.read_text().splitlines()[1 if header else 0:]
    return [parts for parts in (line.split(sep) for line in lines) if len(parts) == n]


def read_phases(run: RunPaths) -> list[dict[str, Any]]:
    """raw/phases.csv -> [{"phase", "start_ns", "end_ns", "status"}]."""
    return [{"phase": p[0], "start_ns": int(p[1]), "end_ns": int(p[2]), "status": int(p[3])}
            for p in _fields(run.root / "raw" / "phases.csv", ",", 4, header=True)
            if p[1].isdigit() and p[2].isdigit() and p[3].lstrip("-").isdigit()]


def read_functions(run: RunPaths) -> list[dict[str, str]]:
    """raw/functions.txt -> [{"op", "symbol", "function"}]: the functions traced per application operation."""
    return [{"op": p[0], "symbol": p[1], "function": p[2]}
            for p in _fields(run.root / "raw" / "functions.txt", "\t", 3, header=False)]


def app_meta(run: RunPaths) -> dict[str, Any]:
    """meta.json `app`: phases with db_bench's figures, and the traced functions."""
    phases = read_phases(run)
    for ph in phases:
        f = run.root / "raw" / f"db_bench-{ph['phase']}.txt"
        if f.is_file():
            ph["db_bench"] = parse_db_bench(f.read_text(errors="replace"))
    return {"phases": phases, "functions": read_functions(run)}


def run_app_capture(req: AppCapture) -> CaptureOutcome:
    """Run the application in the VM under the NVMe, application-operation and cache probes."""
    req.validate()
    g = req.geometry
    progress = Progress(0, req.verbose)
    progress.say(f"capture {req.name}: {req.keys:,} keys x {req.value_bytes} B, {req.reads:,} reads, "
                 f"block cache {req.cache_bytes:,} B, {'buffered' if req.buffered else 'direct'} reads")
    meta = device_meta(vm_device(QEMU, g), req.workload_meta(), APP_SCRIPTS)
    run = start_run(req.name, req.out, meta, vm=True, echo=progress.say)
    outcome = run_vm_capture(run, meta, GuestCommand("app-capture.sh", req.guest_env(), geometry=g,
                                                     timeout=req.timeout), progress)
    meta = read_meta(run)
    meta["app"] = app_meta(run)
    write_meta(run, meta)
    rr = next((p for p in meta["app"]["phases"] if p["phase"] == "readrandom"), None)
    if rr and "readrandom" in rr.get("db_bench", {}):
        outcome.summary["db_bench_readrandom"] = rr["db_bench"]["readrandom"]
    return outcome


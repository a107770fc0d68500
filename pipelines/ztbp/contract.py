"""The run-directory contract of probes/FORMAT.md as code: constants, meta.json reading and writing."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .errors import FormatError, MissingRunError, ZtbpError
from .files import hand_over_tree, make_dir, publish_new, sibling_tmp, write_atomic
from .paths import RunPaths
from .schema import (
    COUNT,
    IOPS,
    LATENCY_US,
    Anything,
    Flag,
    Integer,
    ListOf,
    MapOf,
    Number,
    Record,
    Text,
    checked,
    parse_json,
    zone_ids,
    zones_within,
)
from .units import MAX_NS, MAX_ZONES, Bound

RUN_FORMAT = "ztbp-run/1"
CONFIG_FORMAT = "ztbp-cache-config/1"
LOOP_FORMAT = "ztbp-loop/1"
NVME_VERSION_LINE = "# ztbp nvme v1"
NVME_COLUMNS: tuple[str, ...] = (
    "ts_ns", "lat_ns", "ctrl", "qid", "cid", "nsid", "opcode", "op", "slba", "nlb", "zone_action", "status",
)
OPS: tuple[str, ...] = (
    "read", "write", "zone_append", "zone_mgmt_send", "zone_mgmt_recv", "flush", "dsm", "write_zeroes", "other",
)
ZONE_ACTIONS: tuple[str, ...] = ("", "close", "finish", "open", "reset", "offline")
#: NVMe I/O opcode -> op name (FORMAT.md).
OPCODE_OP: dict[int, str] = {
    0x00: "flush", 0x01: "write", 0x02: "read", 0x08: "write_zeroes", 0x09: "dsm",
    0x79: "zone_mgmt_send", 0x7A: "zone_mgmt_recv", 0x7D: "zone_append",
}
#: The geometry a run may have (probes/FORMAT.md): beyond these no device exists, and the analyses would size their
#: tables by absurd numbers. A zone also stays below MAX_ZONE_BYTES, its capacity within its size.
META_LIMITS: dict[str, Bound] = {
    "lba_bytes": Bound(512, 65_536, integer=True),
    "zone_size_lba": Bound(1, 1 << 39, integer=True),
    "zone_cap_lba": Bound(1, 1 << 39, integer=True),
    "nr_zones": Bound(1, MAX_ZONES, integer=True),
}
MAX_ZONE_BYTES = 1 << 48


def _zone_fits(meta: dict[str, Any]) -> tuple[str, str] | None:
    """A zone's capacity is at most its size, and its size below 2^48 bytes."""
    if meta["zone_cap_lba"] > meta["zone_size_lba"]:
        return "zone_cap_lba", (f"is {meta['zone_cap_lba']}, larger than 'zone_size_lba' {meta['zone_size_lba']}: "
                                "a zone's capacity is at most its size")
    zone_bytes = meta["zone_size_lba"] * meta["lba_bytes"]
    if zone_bytes >= MAX_ZONE_BYTES:
        return "zone_size_lba", (f"is {meta['zone_size_lba']} LBAs of {meta['lba_bytes']} bytes, a zone of "
                                 f"{zone_bytes} bytes, beyond 2^48 (256 TiB)")
    return None


#: One phase of meta.json's app.phases (ztbp capture-app).
PHASE = Record({"phase": Text(), "start_ns": Integer(0, MAX_NS - 1), "end_ns": Integer(0, MAX_NS - 1)},
               {"db_bench": MapOf(Anything())})
#: fio's totals in meta.json (io/fio.fio_totals): counts, IOPS and latencies, 0 where fio measured none.
FIO_TOTALS = Record(optional={
    **{f"{d}_ios": COUNT for d in ("read", "write")}, **{f"{d}_iops": Number(IOPS, or_zero=True) for d in
                                                        ("read", "write")},
    "runtime_ms": COUNT, **{f"read_clat_{q}_us": Number(LATENCY_US, or_zero=True) for q in ("p50", "p90", "p99")}})
#: meta.json (probes/FORMAT.md): the geometry, and the optional keys the package reads with their types.
META = Record(
    {"format": Text(), **{k: Number(b) for k, b in META_LIMITS.items()}},
    {"device": Text(), "synthetic": Flag(), "lost_events": MapOf(COUNT), "probes": MapOf(Anything()),
     "backend": Text(), "complete": Flag(), "created": Text(), "versions": MapOf(Anything()),
     "workload": Record(optional={"hot_zones": zone_ids()}), "app": Record(optional={"phases": ListOf(PHASE)}),
     "loop": Record(optional={"zones_in_force": zone_ids()}), "fio": FIO_TOTALS},
    (_zone_fits, zones_within("nr_zones", "workload.hot_zones", "loop.zones_in_force")))
_VERSION_RE = re.compile(r"^# ztbp (?P<probe>[a-z0-9_]+) v(?P<major>\d+)(?:\.(?P<minor>\d+))?\s*$")


def utc_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_version_line(line: str, probe: str, supported_major: int, path: Path) -> int:
    """Check a probe file's first line; return its major version or raise FormatError."""
    m = _VERSION_RE.match(line.rstrip("\r\n"))
    if m is None:
        shown = line.strip()[:60] or "(empty)"
        raise FormatError(
            f"{path}: first line is {shown!r}, expected '# ztbp {probe} v{supported_major}'. "
            "Is this a ztbp probe file? See probes/FORMAT.md."
        )
    if m["probe"] != probe:
        raise FormatError(f"{path}: this is a '{m['probe']}' probe file, expected '{probe}'.")
    major = int(m["major"])
    if major != supported_major:
        raise FormatError(
            f"{path}: format '{probe} v{major}' is not supported; this version of ztbp reads "
            f"'{probe} v{supported_major}'. Upgrade ztbp or re-capture the run."
        )
    return major


def read_meta(run: RunPaths) -> dict[str, Any]:
    """Load and validate meta.json of a run."""
    if run.root.exists() and not run.root.is_dir():
        raise MissingRunError(f"{run.root} is a file, not a run directory: give the folder that holds meta.json.")
    if not run.root.is_dir():
        raise MissingRunError(f"run directory {run.root} does not exist. Capture one with `just capture` "
                              "or make a synthetic one with `ztbp synth RUN --pattern paper80`.")
    if not run.meta.is_file():
        raise MissingRunError(f"{run.meta} is missing: every run needs meta.json (see probes/FORMAT.md). "
                              "Was the capture interrupted before it started?")
    meta, text = parse_json(run.meta, FormatError, "fix or re-capture the run")
    if not isinstance(meta, dict):
        raise FormatError(f"{run.meta} must hold a JSON object.")
    fmt = meta.get("format")
    if not isinstance(fmt, str) or not fmt.startswith("ztbp-run/"):
        raise FormatError(f"{run.meta}: 'format' is {fmt!r}, expected '{RUN_FORMAT}'.")
    if fmt.split("/", 1)[1].split(".")[0] != RUN_FORMAT.split("/")[1]:
        raise FormatError(f"{run.meta}: run format {fmt!r} is not supported; this ztbp reads '{RUN_FORMAT}'.")
    meta = checked(meta, META, run.meta, text, FormatError, "fix meta.json or re-capture the run")
    meta.setdefault("lost_events", {})
    meta.setdefault("synthetic", False)
    meta.setdefault("workload", {})
    meta.setdefault("complete", True)
    return meta


def check_new_run(run: RunPaths, replace: bool) -> None:
    """Before a run is written (`ztbp synth`, `ztbp import`): its directory and raw/ are directories or missing, and
    no run is there already unless `replace` (--force: meta.json and raw/nvme.csv are replaced)."""
    for p in (run.root, run.raw):
        if p.exists() and not p.is_dir():
            raise ZtbpError(f"{p} exists and is not a directory: give a new directory for the run.")
    if not replace and (run.meta.exists() or run.nvme_csv.exists()):
        raise ZtbpError(f"{run.root} already holds a run; choose a new directory or pass --force to replace it.")


@contextmanager
def new_run(run: RunPaths, replace: bool) -> Iterator[RunPaths]:
    """Where a whole run is written (`ztbp synth`, `ztbp import`). With `replace` (--force), the run's own folder,
    its files replaced. Else a folder beside it that becomes the run when the block ends (files.publish_new: its
    raw/nvme.csv, then its meta.json, each created new), so a reader never sees half a run and, of two commands
    that write one new run at the same time, one does and the other gets a ClaimError having written nothing; when
    the block raises, nothing of it is left."""
    import shutil

    if replace:
        yield run
        return
    make_dir(run.root.parent)
    tmp = sibling_tmp(run.root, "new")
    try:
        yield RunPaths(tmp)
        hand_over_tree(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    publish_new(tmp, run.root, ("raw/nvme.csv", "meta.json"))


def meta_text(meta: dict[str, Any]) -> str:
    """meta.json's text, as every writer of it writes it."""
    return json.dumps(meta, indent=2, sort_keys=False) + "\n"


def write_meta(run: RunPaths, meta: dict[str, Any]) -> None:
    make_dir(run.root)
    write_atomic(run.meta, meta_text(meta))


def new_meta(*, device: str, lba_bytes: int, zone_size_lba: int, zone_cap_lba: int, nr_zones: int,
             synthetic: bool, workload: dict[str, Any], backend: str, **extra: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "format": RUN_FORMAT,
        "device": device,
        "lba_bytes": lba_bytes,
        "zone_size_lba": zone_size_lba,
        "zone_cap_lba": zone_cap_lba,
        "nr_zones": nr_zones,
        "synthetic": synthetic,
        "workload": workload,
        "lost_events": {},
        "backend": backend,
        "complete": True,
        "created": utc_now(),
    }
    meta.update(extra)
    return meta


# --- raw/layers.csv (probes/layers.bt) ---------------------------------------------------------------------------
LAYERS_VERSION_LINE = "# ztbp layers v1"
LAYERS_COLUMNS: tuple[str, ...] = (
    "ts_ns", "tid", "mode", "op", "bytes", "dev", "sector", "zone", "nrq", "e2e_ns", "crossing_ns", "syscall_ns",
    "vfs_ns", "fs_ns", "block_ns", "driver_ns", "device_ns", "completion_ns", "stack",
)
LAYER_MODES: tuple[str, ...] = ("sync", "io_uring", "aio")
LAYER_STACKS: tuple[str, ...] = ("ext4", "btrfs", "bdev")
LAYER_OPS: tuple[str, ...] = ("read", "write")

#: Extra columns a v1 NVMe file may carry after `status` (readers accept them): the submitting thread, printed by
#: probes/nvme_zone_stream.bt so `ztbp appops` can attribute commands to application operations.
NVME_EXTRA_COLUMNS: tuple[str, ...] = ("tid",)

# --- raw/appops.csv (probes/appops.bt), raw/cachestat.csv (probes/cachestat.bt), raw/files.csv (FIEMAP) ---------
APPOPS_VERSION_LINE = "# ztbp appops v1"
APPOPS_COLUMNS: tuple[str, ...] = ("op_id", "tid", "start_ns", "end_ns", "op", "status")
CACHESTAT_VERSION_LINE = "# ztbp cachestat v1"
CACHESTAT_COLUMNS: tuple[str, ...] = (
    "ts_ns", "pc_access", "pc_add", "pc_dirty", "buf_dirty", "dc_ref", "dc_slow", "dc_miss",
)
FILES_VERSION_LINE = "# ztbp files v1"
FILES_COLUMNS: tuple[str, ...] = (
    "path", "file_bytes", "extent", "logical_bytes", "fs_bytes", "length_bytes", "nsid", "dev_bytes", "flags",
)

#: Every versioned probe file of a run: probe name -> (version line, columns). probes/FORMAT.md documents each;
#: tests/test_contract.py checks the document, this table and the header each probe prints against each other.
PROBE_FILES: dict[str, tuple[str, tuple[str, ...]]] = {
    "nvme": (NVME_VERSION_LINE, NVME_COLUMNS),
    "layers": (LAYERS_VERSION_LINE, LAYERS_COLUMNS),
    "appops": (APPOPS_VERSION_LINE, APPOPS_COLUMNS),
    "cachestat": (CACHESTAT_VERSION_LINE, CACHESTAT_COLUMNS),
    "files": (FILES_VERSION_LINE, FILES_COLUMNS),
}


def probe_header(probe: str) -> str:
    """The two header lines a probe file of `probe` starts with (version line, column names)."""
    version, cols = PROBE_FILES[probe]
    return f"{version}\n{','.join(cols)}\n"

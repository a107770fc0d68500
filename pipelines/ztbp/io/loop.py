"""Read a loop directory's loop.json (`ztbp loop`; probes/FORMAT.md, "loop directory and loop.json").

The one reader of loop.json for the notebook, the report and the CLI: a folder that is not a loop, a loop.json of
another format or one without rounds is a clear error that says what to do."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..contract import LOOP_FORMAT
from ..errors import ZtbpError
from ..files import env_int, hand_over_tree, write_json
from ..paths import resolve_run
from ..schema import (
    COUNT,
    IOPS,
    LATENCY_US,
    RATIO,
    Anything,
    Flag,
    Integer,
    ListOf,
    MapOf,
    Maybe,
    Number,
    Record,
    Text,
    at_most,
    checked,
    parse_json,
    zone_ids,
)
from ..units import LIMITS, Bound
from .mailbox import Mailbox

LOOP_FILE = "loop.json"
#: The most rounds a loop runs: round 1 and two blocks per A/B pair (--ab), or --rounds.
MAX_ROUNDS = int(max(1 + 2 * LIMITS["ab"].hi, LIMITS["rounds"].hi))

# ---- loop.json's shape (schema.py): every figure a reader computes with, checked before it is used -------------
_LAT = Maybe(Number(LATENCY_US, or_zero=True))
_RATIO = Maybe(Number(RATIO))
#: fio's figures of a round or a block (None where fio measured nothing)
FIO = Record(optional={"read_iops": Maybe(Number(IOPS, or_zero=True)), "p50_us": _LAT, "p99_us": _LAT,
                       "runtime_ms": Maybe(COUNT)})
#: the device latency of a round's or a block's reads, all and by zone class (analysis/loop.latency_split)
LATENCY = MapOf(Maybe(Record(optional={"reads": COUNT, "p50_us": _LAT, "p99_us": _LAT, "mean_us": _LAT})), 8)
MODEL = Record(optional={"lru": _RATIO, "zone_lru": _RATIO, "sent_zones": zone_ids(), "sent_hit_ratio": _RATIO,
                         "warm_hit_ratio": _RATIO, "hit_ratio": _RATIO})
_STATUS = Maybe(Integer(-1, 2**32))
#: the device's side of a round or a block (analysis/loop.device_figures, with_replay): STATUS's counters, the
#: reads and hits between two answers and their ratio, the replay of its cache beside them
DEVICE = Record(optional={"status_before": _STATUS, "status_after": _STATUS, "hits_before": _STATUS,
                          "hits_after": _STATUS, "status_reads": Maybe(COUNT), "status_hits": Maybe(COUNT),
                          "hit_ratio": _RATIO, "hit_ratio_note": Maybe(Text()), "replay_reads": Maybe(COUNT),
                          "replay_hits": Maybe(COUNT), "replay_hit_ratio": _RATIO,
                          "device_minus_replay": Maybe(Number(Bound(-1, 1))),
                          "kernel_log_counters": Maybe(Record(optional={
                              "hits": COUNT, "misses": COUNT, "reads": COUNT, "prints": COUNT,
                              "hit_ratio": Number(RATIO)}, rules=(at_most("hits", "reads"),)))},
                rules=(at_most("status_hits", "status_reads"), at_most("replay_hits", "replay_reads")))
ROUND = Record({"round": Integer(1, MAX_ROUNDS), "run": Text()}, {
    "complete": Flag(), "zones_in_force": zone_ids(), "rows": COUNT, "read_rows": COUNT, "fio_reads": COUNT,
    "lost": Maybe(COUNT), "fio": FIO, "latency": LATENCY, "device": DEVICE, "model": MODEL,
    "measured_gain": Maybe(Number(Bound(-1, 1))),
    "config": Record(optional={"hot_zones": zone_ids(), "hot_zones_found": zone_ids(), "recommend": Flag(),
                               "recommend_reason": Text(), "file": Text()}),
    "decision": Record(optional={"action": Text(), "detail": Text()})})
#: one A/B block (control/round.py): its pair and arm, and its figures
BLOCK = Record({"pair": Integer(1, LIMITS["ab"].hi), "arm": Text(("off", "on"))}, {
    "round": Integer(1, MAX_ROUNDS), "run": Text(), "block": Integer(1, MAX_ROUNDS), "device_holds": Flag(),
    "trace_complete": Flag(), "fio": FIO, "latency": LATENCY, "device": DEVICE, "model": MODEL})
_SERVICE_CLASS = Record(optional={"reads": COUNT, "hit_ratio": _RATIO, "mean_us": _LAT, "measured_mean_us": _LAT})
SERVICE_MODEL = Record(optional={"profile": Text(), "slow": Integer(1, 10**6), "cache_entries": COUNT,
                                 "read_model": Maybe(Text()),
                                 "off": MapOf(_SERVICE_CLASS, 8), "on": MapOf(_SERVICE_CLASS, 8),
                                 "decomposition": Record(optional={"statement": Text()})})
#: loop.json's "ab" section; its stored effects are never read: every reader recomputes them from the blocks
AB = Record(optional={
    "pairs": Number(LIMITS["ab"]), "reads_per_block": Number(LIMITS["ab-reads"]), "listed": zone_ids(),
    "config": Maybe(Text()), "order": ListOf(Text(("off", "on")), MAX_ROUNDS), "device_acted": Flag(),
    "blocks": ListOf(BLOCK, MAX_ROUNDS), "effects": Anything(), "service_model": Maybe(SERVICE_MODEL)})
_OPT_INT = Maybe(Integer(0, LIMITS["iodepth"].hi))
LOOP = Record({"format": Text((LOOP_FORMAT,)), "rounds": ListOf(ROUND, MAX_ROUNDS)}, {
    "backend": Text(), "rounds_asked": Integer(1, MAX_ROUNDS), "min_gain": Number(LIMITS["min-gain"]),
    "cache_mib": Number(LIMITS["cache-mib"]), "page_kib": Number(LIMITS["page-kib"]), "stopped": Maybe(Text()),
    "complete": Flag(), "interrupted": Flag(), "guest_status": Maybe(Integer(-255, 255)),
    "workload": Record(optional={"name": Text(), "reads": Maybe(Number(LIMITS["reads"])), "jobs": _OPT_INT,
                                 "iodepth": _OPT_INT}),
    "emulator": Maybe(Record(optional={"read_service_model": Maybe(Record(optional={
        "profile": Maybe(Text()), "slow": Maybe(Integer(1, 10**6)), "read_model": Maybe(Text())}))})),
    "session": Maybe(MapOf(Maybe(Number(Bound(0, 2**63))), 16)), "ab": AB})


class LoopFileError(ZtbpError):
    """A loop directory that cannot be read."""


def is_loop_dir(path: str | os.PathLike[str]) -> bool:
    """True when `path` (a path or a run id under runs/) holds a loop.json of the loop's format at its top."""
    f = resolve_run(path).root / LOOP_FILE
    if not f.is_file():
        return False
    try:
        doc, _ = parse_json(f)
    except ZtbpError:
        return False
    return isinstance(doc, dict) and doc.get("format") == LOOP_FORMAT


def is_plain_name(name: object) -> bool:
    """Whether `name` (read from a file) names an entry of one folder: a string without a path separator or NUL,
    not empty, "." or ".."."""
    return (isinstance(name, str) and name not in ("", ".", "..") and not any(c in name for c in "/\\\0"))


def round_dir(root: Path, name: str) -> Path:
    """The folder of a round's run inside the loop directory `root`; a name that is not a plain name, or that
    does not lead to a real folder directly inside `root` (a link out of it, a file), is refused."""
    d = root / name
    if not is_plain_name(name) or d.is_symlink() or not d.is_dir() or d.resolve().parent != root.resolve():
        raise LoopFileError(f"{root / LOOP_FILE}: round run {name!r} is not a folder inside {root}; a round's run "
                            "must be the plain name of one of its folders")
    return d


def read_loop(path: str | os.PathLike[str]) -> dict[str, Any]:
    """loop.json of a loop directory (a path or an id under runs/), checked; `dir` is added."""
    root = resolve_run(path).root
    f = root / LOOP_FILE
    if not f.is_file():
        hint = (" (it is one round of a loop: give its parent folder)" if (root.parent / LOOP_FILE).is_file()
                else " (make one with `ztbp loop` / `just loop`)")
        raise LoopFileError(f"{root} is not a loop directory: no {LOOP_FILE}{hint}")
    doc, text = parse_json(f, LoopFileError, "a loop writes it whole after each round: rerun the loop")
    if not isinstance(doc, dict) or doc.get("format") != LOOP_FORMAT:
        got = doc.get("format") if isinstance(doc, dict) else type(doc).__name__
        raise LoopFileError(f"{f} has format {got!r}, not {LOOP_FORMAT!r}: it was not written by this "
                            "version's `ztbp loop`")
    rounds = doc.get("rounds")
    if not isinstance(rounds, list) or not rounds:
        raise LoopFileError(f"{f}: 'rounds' holds no finished round (stopped: {doc.get('stopped')!r}); see "
                            "console.log in that folder for what the guest did")
    for i, e in enumerate(rounds, start=1):
        if not isinstance(e, dict) or e.get("round") != i:
            raise LoopFileError(f"{f}: entry {i} of `rounds` is not round {i}; the file was edited by hand?")
        if not is_plain_name(e.get("run")):
            raise LoopFileError(f"{f}: round {i} names its run {e.get('run')!r}, not the plain name of a folder in "
                                f"{root} (e.g. round-{i:02d}); fix or remove loop.json")
    doc = checked(doc, LOOP, f, text, LoopFileError, "a loop writes it whole after each round: rerun the loop")
    doc["dir"] = str(Path(root))
    return doc


# ---- the loop's mailbox LOOPDIR/.loop/ (io/mailbox.py; vm/guest/loop.sh answers the *.env and dmesg files) ----
HANDSHAKE = ".loop"


def loop_mailbox(root: Path) -> Mailbox:
    """The loop's mailbox: one folder, the host's posts and the guest's answers side by side."""
    return Mailbox(root / HANDSHAKE)


def job_name(r: int) -> str:
    """The mailbox name of round r's fio job, for the guest to run."""
    return f"job-{r:02d}.fio"


def start_loop(root: Path, doc: dict[str, Any], first_job: str) -> None:
    """A new loop's loop.json (no round yet) and the first round's fio job."""
    box = loop_mailbox(root)
    write_json(root / LOOP_FILE, doc)
    box.post(job_name(1), first_job)


def write_round(root: Path, r: int, entry: dict[str, Any], doc: dict[str, Any], decision: str,
                next_job: str | None) -> None:
    """Round r's record (round-NN/loop.json, then the loop's loop.json), then the hand-over to the guest: the next
    round's fio job (when there is one) before the decision ("apply CONFIG" or "stop REASON") the guest waits for."""
    box = loop_mailbox(root)
    write_json(root / f"round-{r:02d}" / LOOP_FILE, entry)
    write_json(root / LOOP_FILE, doc)
    if next_job is not None:
        box.post(job_name(r + 1), next_job)
    box.post(f"decision-{r:02d}", decision + "\n")


def finish_loop(root: Path, doc: dict[str, Any]) -> None:
    """The loop's end: loop.json written whole, and the loop directory handed over to the user (the guest script
    wrote it as root under sudo)."""
    write_json(root / LOOP_FILE, doc)
    hand_over_tree(root)


@dataclass(frozen=True)
class RoundFiles:
    """What the guest left for the host after round r: the device's STATUS answers around the round, the round's
    kernel log, and its report of applying the decision before the round (None when nothing was applied)."""

    device: dict[str, str]
    kernel_log: str
    applied_before: dict[str, Any] | None


def read_round(root: Path, r: int, applied_round: int | None) -> RoundFiles:
    """The guest's files of round r; `applied_round`: the round whose decision was applied before it."""
    applied = None if applied_round is None else read_applied(root, applied_round)
    box = loop_mailbox(root)
    return RoundFiles(kernel_log=box.read_text(f"dmesg-{r:02d}.txt"), device=box.read_env(f"device-{r:02d}.env"),
                      applied_before=applied)


def read_applied(root: Path, r: int) -> dict[str, Any] | None:
    """What the guest reported after applying the decision of round r (None: nothing was applied)."""
    env = loop_mailbox(root).read_env(f"applied-{r:02d}.env")
    stop_rc = env_int(env.get("stop_rc"))
    if stop_rc is not None:  # a "clear" decision (the A/B mode's off arm)
        return {"action": "clear", "stop_exit_code": stop_rc, "stop_ok": stop_rc == 0,
                "status_after_stop": env_int(env.get("status"))}
    set_rc = env_int(env.get("set_rc"))
    if set_rc is None:
        return None
    try:
        set_json = json.loads(env.get("set_json") or "{}")
    except json.JSONDecodeError:
        set_json = {}
    dmesg_zones = [int(z) for z in env.get("dmesg_zones", "").split(",") if z.strip().isdigit()]
    return {"action": "apply", "set_exit_code": set_rc, "set_ok": set_rc == 0,
            "set_message": set_json.get("message") if isinstance(set_json, dict) else None,
            "info_exit_code": env_int(env.get("info_rc")), "status_after_set": env_int(env.get("status")),
            "zones_reported": sorted(set(dmesg_zones)) if dmesg_zones else [],
            "zones_reported_from": "kernel log (ZONE CLUSTER lines at SET; INFO returns no data)"}


def read_session(root: Path) -> dict[str, int | None] | None:
    """The probe session's counters over the whole loop (session.env), None when the guest wrote none."""
    env = loop_mailbox(root).read_env("session.env")
    if not env:
        return None
    out = {k: env_int(env.get(f"probe_nvme_{k}")) for k in ("setups", "completed", "rows", "perf_lost", "attach_s")}
    out["lost"] = env_int(env.get("lost_events_nvme"))
    return out

"""The host's half of one loop round (`ztbp loop`), one pipeline run once per round (`host_turn`): the guest's files
of the round are read (io/loop.py), the rows the guest handed over become the round's run directory (raw/nvme.csv,
meta.json finished), the round is measured (the trace check, fio, the device latency of the listed zones against
the others, the device's counters, the cache model from a cold cache), then analysed (its configuration, the
previous round's prediction replayed out of sample, the measured gain) or, for an A/B block, scored with a cache
warmed by the reads before it; the host decides, records the round and hands the decision to the guest. The loop's
state (`LoopState`: the request, what acquire/loop.py set up once, what the rounds found so far) is opened
(`open_loop`), taken a turn further after each round (`host_turn`) and closed (`close_loop`)."""

from __future__ import annotations

import copy
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import stages
from ..acquire.loop import LoopSetup
from ..acquire.mapcsv import map_rows_csv
from ..acquire.meta import finish_meta
from ..acquire.progress import Progress
from ..acquire.vm import qemu_version
from ..analysis.device_counters import from_env
from ..analysis.device_replay import DeviceCache, device_cache, replay_hits
from ..analysis.loop import device_figures, latency_split, measured_gain, with_replay
from ..contract import LOOP_FORMAT, utc_now
from ..io.loop import RoundFiles, finish_loop, read_applied, read_round, read_session, start_loop, write_round
from ..io.run import Run, load
from ..paths import RunPaths
from ..present.loop import round_line
from ..writeback.config import write_config
from .ab import AbPlan, ab_doc, ab_service, score_block, start_ab

if TYPE_CHECKING:
    from .request import LoopRequest

STOP_NOTHING = "nothing recommended"
STOP_INVALID = "incomplete trace"
READY = re.compile(r"^ZTBP: loop round (\d+) ready")


@dataclass(frozen=True)
class CacheModel:
    """The cache model every round is scored with, and the gain a configuration must promise (--min-gain)."""

    cache_mib: int
    page_kib: int
    min_gain: float


@dataclass(frozen=True)
class Measured:
    """A measured round: its loop.json entry so far, the loaded run, the model's simulation, the run's paths and
    the measured gain over the round before."""

    entry: dict[str, Any]
    run: Run
    sim: dict[str, Any]
    paths: RunPaths
    gain: float | None


def measure(run_dir: Path, meta: dict[str, Any], started: float, versions: dict[str, str], guest: RoundFiles,
            zones_model: list[int], listed: list[int], model: CacheModel, say: Callable[[str], None],
            before: dict[str, Any] | None) -> Measured:
    """Finish the round's run directory `run_dir` (its meta.json from `meta`, whose "loop" names the round and the
    zones in force) and measure it: the `listed` zones' device latency against the others, the cache model with
    `zones_model` (plain LRU when empty) and its gain over the round `before` (loop.json's entry; None: round 1)."""
    r = meta["loop"]["round"]
    run = RunPaths(run_dir)
    conv, error = map_rows_csv(run)
    say(f"round {r}: {conv['probe_nvme_rows']:,} rows into nvme.csv in {conv['probe_nvme_convert_s']} s on this "
        "machine" + (f"; {error}" if error else "") + "; analysing the round")
    summ = finish_meta(run, meta, 0, False, started, versions)
    loaded = load(run.root)
    sim = stages.simulate(loaded, model.cache_mib, model.page_kib, zones_model, general=False)
    fio = loaded.meta.get("fio", {})
    entry: dict[str, Any] = {
        "round": r, "run": run.root.name, "complete": summ["complete"],
        "zones_in_force": meta["loop"]["zones_in_force"],
        "rows": summ["commands"], "read_rows": summ["reads"], "fio_reads": summ["fio_reads"],
        "lost": summ["lost"],
        "fio": {"read_iops": fio.get("read_iops"), "p50_us": fio.get("read_clat_p50_us"),
                "p99_us": fio.get("read_clat_p99_us"), "runtime_ms": fio.get("runtime_ms")},
        "latency": latency_split(loaded.events, listed),
        "device": device_figures(from_env(guest.device, "before"), from_env(guest.device, "after"), guest.kernel_log),
        "model": {"lru": sim["lru"], "zone_lru": sim["zone_lru"] if zones_model else None,
                  "sent_zones": zones_model,
                  "sent_hit_ratio": sim["zone_lru"] if zones_model else sim["lru"]},
    }
    return Measured(entry, loaded, sim, run, measured_gain(entry, before))


def analyse(m: Measured, root: Path, model: CacheModel,
            pending: dict[str, Any] | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """The measured round's loop.json entry with its configuration (the simulation is reused when it sends the same
    zones again), the prediction `pending` (the configuration sent after the previous round) replayed out of sample,
    and the measured gain; and the configuration, for the run's cache-config.json."""
    entry = m.entry
    cfg = stages.config(m.run, model.cache_mib, model.page_kib, min_gain=model.min_gain, predicted=m.sim)
    entry["config"] = {"file": str(m.paths.cache_config.relative_to(root)), "hot_zones": cfg["hot_zones"],
                       "hot_zones_found": cfg["hot_zones_found"], "recommend": cfg["recommend"],
                       "recommend_reason": cfg["recommend_reason"], "held_out": cfg["held_out"]}
    if pending is not None:
        replay = m.sim  # the previous round's prediction, replayed: its zones are the zones of the model above
        entry["out_of_sample"] = {"from_round": pending["round"], "hot_zones": pending["hot_zones"],
                                  "predicted_zone_lru": pending["held_out"]["zone_lru"],
                                  "predicted_lru": pending["held_out"]["lru"],
                                  "replayed_zone_lru": replay["zone_lru"], "replayed_lru": replay["lru"],
                                  "error": round(replay["zone_lru"] - pending["held_out"]["zone_lru"], 4)}
        entry["applied_before"] = pending.get("applied")
    entry["measured_gain"] = m.gain
    return entry, cfg


# ---- the loop's state and the host's turn after each round ---------------------------------------------------
@dataclass
class LoopState:
    """The request, what it resolved to once (acquire/loop.LoopSetup: the loop directory, the workload, the runs'
    first meta.json content, how the guest names the loop directory) and what the rounds found so far."""

    req: LoopRequest
    setup: LoopSetup
    progress: Progress
    started: float = 0.0
    rounds: list[dict[str, Any]] = field(default_factory=list)
    in_force: list[int] = field(default_factory=list)  # zones the device holds (set and accepted), [] when none
    pending: dict[str, Any] | None = None  # the config sent after the last round, its prediction
    stopped: str | None = None

    ab: AbPlan | None = None  # the A/B blocks, once round 1 recommended a configuration
    device_cache: DeviceCache | None = None  # the project's replay of the device's cache, round after round

    @property
    def model(self) -> CacheModel:
        return CacheModel(self.req.cache_mib, self.req.page_kib, self.req.min_gain)

    @property
    def versions(self) -> dict[str, str]:
        """The versions every round records beside the guest's: QEMU's, on a device the VM harness boots."""
        return {"qemu": qemu_version()} if self.req.device.needs_qemu_version else {}

    def rnd_dir(self, r: int) -> Path:
        return self.setup.root / f"round-{r:02d}"


def loop_doc(st: LoopState, complete: bool) -> dict[str, Any]:
    return {"format": LOOP_FORMAT, "backend": st.req.backend, "workload": st.setup.meta["workload"],
            "rounds_asked": st.req.total_rounds, "min_gain": st.req.min_gain, "cache_mib": st.req.cache_mib,
            "page_kib": st.req.page_kib, "emulator": st.setup.meta.get("emulator"),
            "rounds": st.rounds, "stopped": st.stopped, "complete": complete, "updated": utc_now(),
            **({"ab": ab_doc(st.ab, st.req.ab_pairs)} if st.ab is not None else {})}


def decide(st: LoopState, entry: dict[str, Any]) -> tuple[str, str]:
    """("apply", config path as the guest sees it) or ("stop", why)."""
    r = entry["round"]
    cfg = entry["config"]
    if entry["lost"] or entry["read_rows"] != entry["fio_reads"]:
        return "stop", (f"{STOP_INVALID}: round {r} traced {entry['read_rows']:,} reads of fio's "
                        f"{entry['fio_reads']:,} ({entry['lost']:,} lost); no decision is taken on an incomplete "
                        "trace (see console.log and the round's kernel log in .loop/); nothing sent")
    if not cfg["recommend"]:
        return "stop", f"{STOP_NOTHING}: {cfg['recommend_reason']}; nothing sent"
    if r > 1 and entry["measured_gain"] is not None and entry["measured_gain"] < st.req.min_gain:
        return "stop", (f"measured gain {entry['measured_gain']:+.4f} (model hit ratio with the zones sent, "
                        f"round {r - 1} -> {r}) below --min-gain {st.req.min_gain:+.2f}")
    if r >= st.req.rounds and not st.req.ab_pairs:
        return "stop", f"{st.req.rounds} rounds done"
    return "apply", f"{st.setup.guest_prefix}/{cfg['file']}"


def after_apply(st: LoopState, res: dict[str, Any] | None) -> None:
    """Fold the last apply's result (what the guest reported, None: nothing applied) into the rounds: the zones the
    device holds for the next round."""
    if st.pending is None:
        return
    st.pending["applied"] = res
    if res is None:
        return
    if res["set_ok"]:
        st.in_force = st.pending["hot_zones"]
        st.progress.say(f"device holds zones {res['zones_reported']} (sent {sorted(st.pending['hot_zones'])})")
    else:
        what = "the device refused SET" if res["set_exit_code"] == 30 else "ztbp-ctl set failed"
        st.progress.say(f"{what} (ztbp-ctl exit code {res['set_exit_code']}: {res['set_message']}); the loop goes on "
                        "with the model only (out of sample on the next round)")


@dataclass(frozen=True)
class Turn:
    """What the host hands over after a round: the decision line for the guest, whether a next job goes with it,
    the progress line's label and the line that follows it."""

    decision: str
    go_on: bool
    label: str
    then: str


def round_turn(st: LoopState, m: Measured) -> Turn:
    """A round: analysed, decided, its configuration written to the run's cache-config.json (the A/B blocks start
    after round 1 when it recommends one)."""
    entry, cfg = analyse(m, st.setup.root, st.model, st.pending)
    r = entry["round"]
    action, arg = decide(st, entry)
    if st.req.ab_pairs and action == "apply":  # the A/B blocks start: block 1 runs with the configuration on
        st.ab = start_ab(arg, entry["config"]["hot_zones"], st.req.ab_pairs, st.req.ab_reads, m.run.events)
        st.progress.expected = st.ab.reads if st.setup.fixed_job is None else 0
    elif st.req.ab_pairs:
        arg += "; no A/B blocks (nothing to switch on)"
    entry["decision"] = {"action": action, "detail": arg}
    st.rounds.append(entry)
    if action == "apply":
        st.pending = {"round": r, "hot_zones": entry["config"]["hot_zones"], "held_out": entry["config"]["held_out"]}
    else:  # nothing is sent after this round: the last apply's answer is already folded in (no second "refused")
        st.stopped = arg
        st.pending = None
    write_config(cfg, m.paths.cache_config)
    return Turn(f"{action} {arg}", action == "apply", "",
                f"round {r}: sending zones {entry['config']['hot_zones']} to the device" if action == "apply"
                else f"loop stops: {arg}")


def block_turn(st: LoopState, ab: AbPlan, m: Measured, zones: list[int], res: dict[str, Any] | None) -> Turn:
    """An A/B block (round r > 1), measured with the configuration's zones as the listed class in both arms and
    `zones` in the model: scored, recorded and switched for the next block (control/ab.score_block)."""
    block = m.entry["round"] - 1
    arm, pair = ab.arms[block - 1]
    action, arg = score_block(ab, m.entry, m.run, st.req.cache_mib, st.req.page_kib, zones, bool(st.in_force), res)
    st.rounds.append(m.entry)
    if action == "stop":
        st.stopped = arg
        ab.service = ab_service(ab, st.setup.root, st.setup.meta)
    nxt = {"apply": "configuration on (SET)", "clear": "configuration off (STOP)"}.get(action, arg)
    return Turn(f"{action} {arg}".rstrip(), action != "stop", f"A/B block {block} ({arm}, pair {pair}): ",
                f"loop stops: {arg}" if action == "stop" else f"block {block + 1}: {nxt}")


def host_turn(st: LoopState, r: int) -> None:
    """The host's half of round r, once the guest said it is ready: its files read (an A/B block: the decision
    before it is the previous round's), the last apply folded in, the round measured with the zones in force
    during it, analysed and decided (or, an A/B block, scored and switched), its record and the hand-over written
    once (io/loop.write_round: the next job when the loop goes on), and its progress lines."""
    ab = st.ab
    guest = read_round(st.setup.root, r, r - 1 if ab is not None else st.pending["round"] if st.pending else None)
    res = guest.applied_before  # what the guest did before this round: SET, STOP or nothing
    if ab is None:
        after_apply(st, res)
        # the model runs with the zones sent after the previous round, whether the device took them or not (QEMU)
        zones, listed, loop_meta = (st.pending["hot_zones"] if st.pending else []), st.in_force, {}
    else:
        arm, pair = ab.arms[r - 2]
        if res is not None:
            st.in_force = ab.listed if res.get("set_ok") else [] if res.get("action") == "clear" else st.in_force
        zones, listed, loop_meta = (ab.listed if arm == "on" else []), ab.listed, {"ab": {"arm": arm, "pair": pair}}
    meta = copy.deepcopy(st.setup.meta)
    meta["loop"] = {"round": r, "loop_dir": "..", "zones_in_force": st.in_force, **loop_meta}
    m = measure(st.rnd_dir(r), meta, st.started, st.versions, guest, zones, listed, st.model, st.progress.say,
                st.rounds[-1] if st.rounds else None)
    if st.req.device.has_read_model:  # the device's cache replayed over the round, beside its own counters
        st.device_cache = st.device_cache or device_cache(st.setup.meta)
        m.entry["device"] = with_replay(m.entry["device"], replay_hits(
            m.run.events, st.in_force, bool(st.in_force), st.device_cache, st.setup.meta["zone_size_lba"]))
    turn = round_turn(st, m) if ab is None else block_turn(st, ab, m, zones, res)
    doc = loop_doc(st, complete=False)
    reads = st.ab.reads if st.ab is not None else None  # the blocks' reads, once the A/B blocks started
    job = st.setup.job(r + 1, reads) if turn.go_on else None
    write_round(st.setup.root, r, m.entry, doc, turn.decision, job)
    st.progress.say(turn.label + round_line(m.entry))
    st.progress.say(turn.then)


def open_loop(req: LoopRequest, setup: LoopSetup, progress: Progress) -> LoopState:
    """The loop's state as its first round begins: its plan said, loop.json (no round yet) and round 1's fio job
    written."""
    wl = setup.workload
    progress.expected = wl.total_reads if setup.fixed_job is None else 0  # each round's countdown (A/B: round_turn)
    st = LoopState(req=req, setup=setup, progress=progress, started=time.monotonic())
    plan = (f"round 1 of {wl.describe_line()}, then {req.ab_pairs} pairs of A/B blocks of {req.ab_reads:,} reads "
            "(the configuration on and off)" if req.ab_pairs else f"up to {req.rounds} rounds of {wl.describe_line()}")
    progress.say(f"loop {wl.name}: {plan}, backend {req.backend} -> {setup.root}")
    start_loop(setup.root, loop_doc(st, complete=False), setup.job(1))
    return st


def line_handler(st: LoopState) -> Callable[[str], None]:
    """What the host does with each line of the guest's console: a round ready is the host's turn, the rest is
    progress."""
    def on_line(line: str) -> None:
        ready = READY.match(line)
        if ready:
            host_turn(st, int(ready.group(1)))
        else:
            st.progress(line)
    return on_line


def close_loop(st: LoopState, status: int, interrupted: bool) -> dict[str, Any]:
    """The loop's end: the last apply folded in, the probe session's counters, loop.json written whole and the loop
    directory handed over to the user (the guest script wrote it as root under sudo); loop.json's content."""
    applied = read_applied(st.setup.root, st.pending["round"]) if st.ab is None and st.pending else None
    session = read_session(st.setup.root)
    if st.ab is None:
        after_apply(st, applied)
    doc = loop_doc(st, complete=bool(status == 0 and not interrupted and st.stopped))
    doc["guest_status"] = status
    doc["interrupted"] = interrupted
    if session:
        doc["session"] = session
    finish_loop(st.setup.root, doc)
    if interrupted:
        st.progress.say(f"interrupted: {len(st.rounds)} finished round(s) kept in {st.setup.root}")
    return doc

"""`ztbp watch` benchmark (`just bench-watch`): the session's memory stays flat and its analysis keeps up.

A synthetic stream of N one-block reads (hot set A, hot set B, then Zipf, over and over, each phase ten windows) is
replayed through the session's own pipeline — the reorder buffer (TimeOrder, its clock half a second behind the
rows: it holds 2 s of them, 200,000 commands), windows, hot rule, held-out gain, decisions, the rolling Parquet
journal (capped at 64 MiB, in a temporary folder) and watch.jsonl — with a device that accepts every SET. The rows
come as a lagging probe prints them (--cpus 2): each batch dealt to the CPUs row by row and each CPU's rows printed
in turn, so every second batch starts before the one before it ends (what the buffer is for; --cpus 1: in order).
The session's analysis is warmed up first, as `ztbp watch` does before the probe's first line.

The resident set size (VmRSS) is printed every INTERVAL commands, then its first and last figure, its peak, the
commands per second — of the whole (wall), and of the pipeline alone (`pipeline_per_s`: the seconds spent making
the synthetic rows, the probe's part, left out) — and the session's decisions. Flat means: the last figure within a
few MiB of the one after the first windows, whatever N. --buffer-only times the reorder buffer alone on the same
stream; --no-order runs the session without it.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

META = {"zone_size_lba": 1024, "lba_bytes": 4096, "nr_zones": 512}
WINDOW = 100_000
A = (3, 70, 160, 301, 477)
B = (11, 95, 222, 350, 500)


def rss_mib() -> float:
    """This process's resident set size, MiB (Linux /proc)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class Accepting:
    def set(self, zones: tuple[int, ...]) -> dict[str, Any]:
        return {"ok": True, "exit_code": 0}

    def stop(self) -> dict[str, Any]:
        return {"ok": True, "exit_code": 0}

    def status(self) -> dict[str, Any]:
        return {"ok": False}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--commands", type=int, default=10_000_000)
    ap.add_argument("--interval", type=int, default=1_000_000, help="print RSS every this many commands")
    ap.add_argument("--cpus", type=int, default=2, help="CPUs whose rows the probe prints in turn (1: in order)")
    ap.add_argument("--no-order", action="store_true", help="the session without the reorder buffer")
    ap.add_argument("--buffer-only", action="store_true", help="the reorder buffer alone, no session")
    args = ap.parse_args()
    if not 3 * WINDOW <= args.commands <= 10**9 or not WINDOW <= args.interval <= args.commands \
            or not 1 <= args.cpus <= 64:
        print(f"--commands in [{3 * WINDOW}, 10^9], --interval in [{WINDOW}, --commands], --cpus in [1, 64]",
              file=sys.stderr)
        return 2
    from ztbp.acquire.watch_synth import replay
    from ztbp.analysis.params import ORDER_MAX_ROWS, ORDER_MAX_S, ORDER_MIN_S, ORDER_SPAN_S
    from ztbp.analysis.watch import WatchParams
    from ztbp.control.watch import Session, WatchRequest, warm_up
    from ztbp.io.journal import DECISION, ROWS, read_journal
    from ztbp.io.probe_lines import Batch, TimeOrder

    phase = 10 * WINDOW
    phases: list[tuple[str, int, tuple[int, ...]]] = []
    left = args.commands
    while left > 0:
        for kind, hot in (("hot", A), ("hot", B), ("zipf", ())):
            n = min(phase, left)
            if n:
                phases.append((kind, n, hot))
            left -= n
    tick = {"t": 1.7e9}

    def clock() -> float:
        tick["t"] += 600.0
        return tick["t"]

    rows: list[tuple[int, float]] = []
    with tempfile.TemporaryDirectory(prefix="ztbp-bench-watch.") as tmp:
        req = WatchRequest(META, WatchParams(cache_mib=8), Path(tmp), journal_cap_bytes=64 << 20,
                           window_commands=WINDOW)
        next_at = {"n": 0}

        def on_window(s: Session) -> None:
            if s.commands_total >= next_at["n"]:
                rows.append((s.commands_total, rss_mib()))
                print(f"{s.commands_total:>13,} commands  RSS {rows[-1][1]:8.1f} MiB", flush=True)
                next_at["n"] = s.commands_total + args.interval

        warm_up(META, req.params)  # as `ztbp watch` does before the probe's first line: numba's kernels loaded
        latest, making = {"ts": 0}, {"s": 0.0}

        def arriving() -> Any:  # the replay's batches as the CPUs print them, the clock at arrival half a second
            # after the latest row; the seconds spent making them counted apart
            t0 = time.perf_counter()
            for b in replay(phases, META, seed=1):
                latest["ts"] = max(latest["ts"], int(b.frame["ts_ns"].max()))
                cpu = np.arange(b.frame.height) % args.cpus
                parts = [Batch(b.frame.filter(cpu == c)) for c in range(args.cpus)] if args.cpus > 1 else [b]
                making["s"] += time.perf_counter() - t0
                yield from parts
                t0 = time.perf_counter()
            making["s"] += time.perf_counter() - t0

        def mono() -> int:
            return latest["ts"] + 500_000_000

        start, cpu0 = time.perf_counter(), time.process_time()
        source: Any = arriving() if args.no_order else TimeOrder(
            arriving(), min_s=ORDER_MIN_S, max_s=ORDER_MAX_S, max_rows=ORDER_MAX_ROWS, span_s=ORDER_SPAN_S, clock=mono)
        if args.buffer_only:
            summary = {"commands": sum(b.frame.height for b in source), "windows": 0}
            rows.append((summary["commands"], rss_mib()))
        else:
            summary = Session(req, Accepting(), clock, on_window).run(source)
        wall, cpu_s = time.perf_counter() - start, time.process_time() - cpu0
        records = [] if args.buffer_only else read_journal(Path(tmp))
        parts = sum(p.stat().st_size for p in (Path(tmp) / ROWS).glob("*.parquet"))
    actions: dict[str, int] = {}
    for r in records:
        if r["kind"] == DECISION:
            actions[r["action"]] = actions.get(r["action"], 0) + 1
    out = {"commands": summary["commands"], "windows": summary["windows"], "cpus": args.cpus,
           "order": not args.no_order, "buffer_only": args.buffer_only, "wall_s": round(wall, 1),
           "cpu_s": round(cpu_s, 1), "making_rows_s": round(making["s"], 1),
           "commands_per_s": round(summary["commands"] / wall),
           "pipeline_per_s": round(summary["commands"] / max(1e-9, wall - making["s"])),
           "rss_first_mib": round(rows[0][1], 1),
           "rss_last_mib": round(rss_mib(), 1), "rss_peak_mib": round(max(r for _, r in rows), 1),
           "decisions": actions, "parquet_journal_mib": round(parts / (1 << 20), 1)}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())

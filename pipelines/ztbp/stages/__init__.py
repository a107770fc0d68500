"""The stages: every analysis of a run as one call on a loaded `Run` (io/run.py), and the registry of the analyses
that batch, the streamed path and the benchmarks iterate.

- `trace`: the NVMe trace in memory (zones, opcodes, chains, frag, cluster, simulate, config) and the layer trace;
- `streamed`: the same analyses over the run's partitioned dataset (`run.parts`), for runs larger than memory;
- `device`: zone resets and conflict-group what-ifs;
- `app`: I/Os per application operation and per file.

`STAGES` holds each analysis at its default parameters: `memory(run, earlier, **params)` and, where one exists,
`streamed(run, earlier)` — `earlier` maps the names already run to their results (the cache model takes the hot
zones the clustering found), `params` overrides a default (the benchmark's cache policies) — and `keep(result)`, the
plain data a batch keeps. Nothing here parses arguments or
prints.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import polars as pl

from ..analysis.params import CACHE_MIB, PAGE_KIB
from . import streamed
from .app import appops, files
from .device import conflicts, resets, zone_report
from .trace import chains, check_zones, cluster, config, frag, layers, opcodes, simulate, zones

__all__ = ["STAGES", "Stage", "analyse", "appops", "chains", "check_zones", "cluster", "config", "conflicts",
           "files", "frag", "layers", "opcodes", "resets", "simulate", "zone_report", "zones"]

Runner = Callable[..., Any]


def _plain(result: Any) -> Any:
    return result.to_dicts() if isinstance(result, pl.DataFrame) else result


def _frag_summary(table: pl.DataFrame) -> dict[str, Any]:
    from ..analysis.frag import frag_summary

    return frag_summary(table)


def _hot(earlier: dict[str, Any]) -> list[int]:
    """The hot zones the clustering found, when it ran before (else none)."""
    return list(earlier.get("cluster", {}).get("hot_zones", []))


@dataclass(frozen=True)
class Stage:
    """One analysis at its default parameters, in memory and (where it has one) streamed."""

    name: str
    memory: Runner | None
    streamed: Runner | None
    keep: Callable[[Any], Any] = _plain


STAGES: dict[str, Stage] = {s.name: s for s in (
    Stage("zones", lambda run, _: zones(run), lambda run, _: streamed.zones(run)),
    Stage("opcodes", lambda run, _: opcodes(run), lambda run, _: streamed.opcodes(run)),
    Stage("cells", None, lambda run, _: streamed.cells(run)),
    Stage("chains", lambda run, _: chains(run), lambda run, _: streamed.chains(run)),
    Stage("frag", lambda run, _: frag(run), lambda run, _: streamed.frag(run), keep=_frag_summary),
    Stage("cluster", lambda run, _: cluster(run), lambda run, _: streamed.cluster(run),
          keep=lambda cl: {k: cl[k] for k in ("hot_zones", "eps", "min_samples", "silhouette")}),
    Stage("cachesim", lambda run, earlier, **kw: simulate(run, CACHE_MIB, PAGE_KIB, _hot(earlier), **kw),
          lambda run, _: streamed.cachesim(run)),
)}
#: the analyses of each path, in the order they run (the cache model after the clustering)
MEMORY = tuple(n for n, s in STAGES.items() if s.memory is not None)
STREAMED = tuple(n for n, s in STAGES.items() if s.streamed is not None)


def analyse_timed(run: Any, which: Iterable[str], path: str = "memory") -> dict[str, Any]:
    """`analyse`, each result as plain data, with each analysis' wall time in seconds under "seconds"."""
    import time

    seconds: dict[str, float] = {}
    clock = [time.perf_counter()]

    def tick(name: str, _result: Any) -> None:
        now = time.perf_counter()
        seconds[name] = now - clock[0]
        clock[0] = now

    res = analyse(run, which, path, tick)
    return {"seconds": seconds, **{k: _plain(v) for k, v in res.items()}}


def analyse(run: Any, which: Iterable[str], path: str = "memory",
            on_stage: Callable[[str, Any], None] | None = None) -> dict[str, Any]:
    """Run the chosen analyses of `run` in registry order on `path` ("memory" or "streamed"); returns name ->
    result. `on_stage(name, result)` is called after each (a timer, a progress line)."""
    want = set(which)
    unknown = want - set(MEMORY if path == "memory" else STREAMED)
    if unknown:
        raise KeyError(f"no {path} stage named {sorted(unknown)[0]!r}")
    out: dict[str, Any] = {}
    for name, stage in STAGES.items():
        fn = stage.memory if path == "memory" else stage.streamed
        if name in want and fn is not None:
            out[name] = fn(run, out)
            if on_stage is not None:
                on_stage(name, out[name])
    return out

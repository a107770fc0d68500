"""One run, loaded once: its paths, meta.json, typed events, and (when captured) layer rows and fio output.

`load(run_dir)` checks meta.json and the trace at once; the events, the layer rows and fio's output are read the
first time they are asked for and kept, so a notebook or a CLI command that runs several analyses reads each file
once (`Run.event_loads` counts the reads of events.parquet).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from ..contract import read_meta
from ..paths import RunPaths, resolve_run
from . import fio as fio_io
from .layers import LayersReadReport, load_layers, read_bench
from .nvme import ingest_record, load_events


@dataclass
class Run:
    """One run as the analyses see it. Attributes load on first use and are kept."""

    paths: RunPaths
    meta: dict[str, Any]
    event_loads: int = 0
    _events: pl.DataFrame | None = field(default=None, repr=False)
    _layers: tuple[pl.DataFrame, LayersReadReport] | None = field(default=None, repr=False)
    _fio: list[dict[str, Any]] | None = field(default=None, repr=False)
    _parts: Any = field(default=None, repr=False)

    @property
    def run_id(self) -> str:
        return self.paths.run_id

    @property
    def lba_bytes(self) -> int:
        return int(self.meta["lba_bytes"])

    @property
    def nr_zones(self) -> int:
        return int(self.meta["nr_zones"])

    @property
    def zone_size_lba(self) -> int:
        return int(self.meta["zone_size_lba"])

    @property
    def events(self) -> pl.DataFrame:
        """derived/events.parquet (ingesting raw/nvme.csv first when it is missing or stale), read once."""
        if self._events is None:
            self._events = load_events(self.paths)
            self.event_loads += 1
        return self._events

    @property
    def has_layers(self) -> bool:
        return self.paths.probe_csv("layers").is_file()

    @property
    def layers(self) -> tuple[pl.DataFrame, LayersReadReport]:
        """raw/layers.csv rows and what reading them skipped (MissingRunError when the run has none)."""
        if self._layers is None:
            self._layers = load_layers(self.paths)
        return self._layers

    @property
    def parts(self) -> Any:
        """The run's partitioned events dataset (derived/events-parts/, io/parts.py), for the streamed stages; made
        (again) first when it is missing or does not match raw/nvme.csv and meta.json (stream.is_fresh)."""
        if self._parts is None:
            from .parts import load_parts

            self._parts = load_parts(self.paths)
        return self._parts

    def fio_rows(self) -> list[dict[str, Any]] | None:
        """Per-job rows of raw/fio.json, None when the run has no fio output (ZtbpError when it is unreadable)."""
        if self._fio is None and self.paths.fio_json.is_file():
            self._fio = fio_io.fio_rows(self.paths.fio_json)
        return self._fio

    def bench(self) -> dict[str, Any] | None:
        return read_bench(self.paths)

    def ingest_record(self) -> dict[str, Any]:
        """derived/ingest.json: what the ingest read, skipped and counted ({} when there is none to read)."""
        return ingest_record(self.paths) or {}

    def zone_report_text(self) -> str | None:
        """raw/zones.txt, the zone report taken as the workload started (None when the run has none)."""
        f = self.paths.zones_txt
        return f.read_text(errors="replace") if f.is_file() else None


def load(run_dir: str | os.PathLike[str] | RunPaths, events: bool = True) -> Run:
    """Open a run: check meta.json; with events=True also ingest raw/nvme.csv (so a bad trace fails here)."""
    rp = run_dir if isinstance(run_dir, RunPaths) else resolve_run(run_dir)
    run = Run(rp, read_meta(rp))
    if events:
        run.events  # noqa: B018 - load now: errors surface where the run is opened
    return run

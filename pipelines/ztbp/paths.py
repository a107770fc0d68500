"""Every path the project uses, in one place.

Stage modules never build paths themselves: they ask this module. A run directory is laid out as in
probes/FORMAT.md.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

#: The repository root (the folder holding pyproject.toml).
ROOT: Path = Path(__file__).resolve().parents[2]
PROBES: Path = ROOT / "probes"
NOTEBOOKS: Path = ROOT / "notebooks"
REPORTS: Path = ROOT / "reports"
VM: Path = ROOT / "vm"
TOOLS: Path = ROOT / "tools"
#: Captured runs (git-ignored). Override with ZTBP_RUNS.
RUNS: Path = Path(os.environ.get("ZTBP_RUNS", ROOT / "runs"))
#: Committed test data, including the small real sample run.
TEST_DATA: Path = ROOT / "tests" / "data"
#: Cache for built artefacts (guest image, kernels). Override with ZTBP_CACHE.
CACHE: Path = Path(os.environ.get("ZTBP_CACHE", Path.home() / ".cache" / "ztbp"))


def _inside(*parts: str) -> property:
    """A path inside the run directory, as a read-only property of RunPaths."""
    return property(lambda self: self.root.joinpath(*parts), doc="/".join(parts))


@dataclass(frozen=True)
class RunPaths:
    """Paths inside one run directory (see probes/FORMAT.md): raw/ holds what the capture wrote and is never
    edited; derived/ holds what the analyses made from it."""

    root: Path

    meta = _inside("meta.json")
    console_log = _inside("console.log")
    raw = _inside("raw")
    nvme_csv = _inside("raw", "nvme.csv")
    fio_json = _inside("raw", "fio.json")
    zones_txt = _inside("raw", "zones.txt")
    bench_json = _inside("raw", "bench.json")
    derived = _inside("derived")
    events = _inside("derived", "events.parquet")
    ingest_report = _inside("derived", "ingest.json")
    cluster_json = _inside("derived", "cluster.json")
    cache_config = _inside("derived", "cache-config.json")
    #: the streaming ingest's partitioned Parquet dataset (io/stream.py): tw=<window>/zr=<zone range>/*.parquet
    events_parts = _inside("derived", "events-parts")
    events_parts_manifest = _inside("derived", "events-parts", "dataset.json")

    @property
    def run_id(self) -> str:
        """The run directory's name (resolved, so a run given as `.` is named too)."""
        return self.root.resolve().name

    def probe_csv(self, probe: str) -> Path:
        return self.raw / f"{probe}.csv"


def resolve_run(run: str | os.PathLike[str]) -> RunPaths:
    """The one way to find a run: a path (absolute, or from the current folder), else a run id under RUNS, else a
    path from the repository root (the notebooks' defaults, e.g. tests/data/runs/sample-paper80)."""
    p = Path(run)
    if not p.is_absolute() and not p.exists():
        for base in (RUNS, ROOT):
            if (base / p).exists():
                p = base / p
                break
    return RunPaths(p)


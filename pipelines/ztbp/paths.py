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


@dataclass(frozen=True)
class RunPaths:
    """Paths inside one run directory (see probes/FORMAT.md)."""

    root: Path

    @property
    def run_id(self) -> str:
        return self.root.name

    @property
    def meta(self) -> Path:
        return self.root / "meta.json"

    @property
    def raw(self) -> Path:
        return self.root / "raw"

    @property
    def derived(self) -> Path:
        return self.root / "derived"

    @property
    def nvme_csv(self) -> Path:
        return self.raw / "nvme.csv"

    @property
    def fio_json(self) -> Path:
        return self.raw / "fio.json"

    @property
    def zones_txt(self) -> Path:
        return self.raw / "zones.txt"

    @property
    def console_log(self) -> Path:
        return self.root / "console.log"

    @property
    def events(self) -> Path:
        return self.derived / "events.parquet"

    @property
    def ingest_report(self) -> Path:
        return self.derived / "ingest.json"

    def probe_csv(self, probe: str) -> Path:
        return self.raw / f"{probe}.csv"

    @property
    def cluster_json(self) -> Path:
        return self.derived / "cluster.json"

    @property
    def cache_config(self) -> Path:
        return self.derived / "cache-config.json"

    @property
    def bench_json(self) -> Path:
        return self.raw / "bench.json"


def resolve_run(run: str | os.PathLike[str]) -> RunPaths:
    """The one way to find a run: a path (absolute, or from the current folder), else a path from the repository
    root (the notebooks' defaults, e.g. tests/data/runs/sample-paper80), else a run id under RUNS."""
    p = Path(run)
    if not p.is_absolute() and not p.exists():
        for base in (ROOT, RUNS):
            if (base / p).exists():
                p = base / p
                break
    return RunPaths(p)


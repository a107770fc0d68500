"""Every path the project uses, in one place.

Stage modules never build paths themselves: they ask this module. A run directory is laid out as in
probes/FORMAT.md.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

#: The folder of the installed package's share: probes/, notebooks/, vm/guest/ and tools/ztbp-ctl/ copied there by
#: setup.py's build step (a wheel); absent in a checkout, which holds them at its root.
SHARE: Path = Path(__file__).resolve().parent / "_share"


def find_root(package: Path, share: Path) -> tuple[Path, bool]:
    """(the folder holding probes/, notebooks/, vm/ and tools/, whether it is a checkout of the project): the
    repository root when the package runs from one (editable or from the source tree), else the installed
    package's share."""
    checkout = package.parents[1]
    if (checkout / "pyproject.toml").is_file() and (checkout / "probes").is_dir():
        return checkout, True
    return share, False


ROOT, CHECKOUT = find_root(Path(__file__).resolve().parent, SHARE)
PROBES: Path = ROOT / "probes"
NOTEBOOKS: Path = ROOT / "notebooks"
VM: Path = ROOT / "vm"
TOOLS: Path = ROOT / "tools"
def current_folder() -> Path:
    """The current folder, or the home folder when the current one was removed."""
    try:
        return Path.cwd()
    except OSError:
        return Path.home()


#: Where runs/ and reports/ go by default: the checkout, or the current folder of an installed package (whose
#: share is read-only).
WORK: Path = ROOT if CHECKOUT else current_folder()
REPORTS: Path = WORK / "reports"
#: Captured runs (git-ignored). Override with ZTBP_RUNS.
RUNS: Path = Path(os.environ.get("ZTBP_RUNS", WORK / "runs"))
#: Committed test data, including the small real sample run.
TEST_DATA: Path = ROOT / "tests" / "data"
#: Cache for built artefacts (guest image, kernels, ztbp-ctl of an installed package). Override with ZTBP_CACHE.
CACHE: Path = Path(os.environ.get("ZTBP_CACHE", Path.home() / ".cache" / "ztbp"))
#: ztbp-ctl's source, and the binary `make` builds from it: in the checkout's tools/ztbp-ctl/build/, or, installed,
#: in the user's cache (the package's folder is not theirs to write).
CTL_SRC: Path = TOOLS / "ztbp-ctl"
CTL_BUILD: Path = CTL_SRC / "build" if CHECKOUT else CACHE / "bin"


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
    cache_config = _inside("derived", "cache-config.json")
    #: the streaming ingest's partitioned Parquet dataset (io/parts.py): tw=<window>/zr=<zone range>/*.parquet
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
        for base in (RUNS, WORK):
            if (base / p).exists():
                p = base / p
                break
    return RunPaths(p)


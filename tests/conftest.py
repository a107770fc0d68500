"""Shared test helpers: build small runs in the contract of probes/FORMAT.md."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pytest

from ztbp.contract import NVME_COLUMNS, NVME_VERSION_LINE, RUN_FORMAT

OPCODES = {"read": 2, "write": 1, "zone_append": 125, "zone_mgmt_send": 121, "zone_mgmt_recv": 122, "flush": 0}


def write_meta(run: Path, **overrides: Any) -> None:
    meta: dict[str, Any] = {"format": RUN_FORMAT, "device": "nvme0n1", "lba_bytes": 4096, "zone_size_lba": 8192,
                            "zone_cap_lba": 8192, "nr_zones": 64, "synthetic": True, "workload": {"name": "test"},
                            "lost_events": {"nvme": 0}}
    meta.update(overrides)
    run.mkdir(parents=True, exist_ok=True)
    (run / "meta.json").write_text(json.dumps(meta))


def row(op: str, slba: int, nlb: int, ts: int, lat: int = 1000, nsid: int = 1, action: str = "") -> str:
    """One nvme.csv line."""
    return f"{ts},{lat},0,1,{ts % 65536},{nsid},{OPCODES[op]},{op},{slba},{nlb},{action},0"


def make_run(root: Path, requests: Iterable[Sequence[Any]] = (), lines: Iterable[str] | None = None,
             **meta: Any) -> Path:
    """A run from (op, slba, nlb[, lat, nsid, action]) tuples in submission order, or from raw CSV lines."""
    write_meta(root, **meta)
    (root / "raw").mkdir(exist_ok=True)
    body = list(lines) if lines is not None else [
        row(op, slba, nlb, 1000 + 10 * i, *rest) for i, (op, slba, nlb, *rest) in enumerate(requests)]
    text = "\n".join([NVME_VERSION_LINE, ",".join(NVME_COLUMNS), *body]) + "\n"
    (root / "raw" / "nvme.csv").write_text(text)
    return root


@pytest.fixture
def run_factory(tmp_path: Path):
    counter = iter(range(10_000))

    def factory(requests: Iterable[Sequence[Any]] = (), lines: Iterable[str] | None = None, **meta: Any) -> Path:
        return make_run(tmp_path / f"run{next(counter)}", requests, lines, **meta)

    return factory


# --- the guest images: built in the background while the other tests run -------------------------------------
#: the background build of every suite's guest image (None: nothing to build, or not started)
_IMAGES: subprocess.Popen[bytes] | None = None


@pytest.hookimpl(trylast=True)  # after `-m` has deselected what it deselects
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """The VM tests run last (in their own order), and when any is selected the guest images of both suites are
    built (or found cached) in the background meanwhile: on a fresh machine that is ~5 minutes of mmdebstrap taken
    off the critical path. vm/image.sh builds a suite once at a time, so a VM test that needs an image still being
    built waits for it. ZTBP_NO_IMAGE_PREBUILD=1 turns the background build off."""
    global _IMAGES
    vm = [i for i in items if i.get_closest_marker("vm") is not None]
    if not vm:
        return
    items[:] = [i for i in items if i.get_closest_marker("vm") is None] + vm
    from ztbp import paths
    from ztbp.acquire.vm import SUITES

    if os.environ.get("ZTBP_NO_IMAGE_PREBUILD") == "1" or config.option.collectonly:
        return
    script = paths.ROOT / "vm" / "image.sh"
    builds = " && ".join(f"bash {script} --suite {s}" for s in SUITES)
    log = Path(config.cache.mkdir("ztbp")) / "image-prebuild.log" if config.cache else Path(os.devnull)
    with open(log, "wb") as out:
        _IMAGES = subprocess.Popen(["bash", "-c", builds], stdout=out, stderr=subprocess.STDOUT,
                                   start_new_session=True)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Never leave the background image build behind (a run stopped early kills it; image.sh cleans its folder)."""
    if _IMAGES is not None and _IMAGES.poll() is None:
        os.killpg(_IMAGES.pid, signal.SIGTERM)
        _IMAGES.wait(timeout=60)

"""Shared test helpers: build small runs in the contract of probes/FORMAT.md."""

from __future__ import annotations

import json
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

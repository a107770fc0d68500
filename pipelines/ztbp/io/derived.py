"""Analysis results kept in a run's derived/ folder, keyed by their parameters and the trace they came from.

A result is recomputed when the parameters or derived/events.parquet change; raw/ is never written. It is made
under the run's derived_lock, so two commands asking for the same result at once compute it once.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..files import write_atomic
from .nvme import derived_lock
from .run import Run


def cached(run: Run, name: str, params_key: str, compute: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """compute(), or its earlier result from derived/<name>.json when the parameters and the trace match."""
    run.events  # noqa: B018 - make sure events.parquet is current before its stat keys the cache
    st = run.paths.events.stat()
    geometry = "-".join(str(run.meta[k]) for k in ("lba_bytes", "zone_size_lba", "zone_cap_lba", "nr_zones"))
    key = f"{params_key}-{st.st_size}-{st.st_mtime_ns}-{geometry}"
    path = run.paths.derived / f"{name}.json"
    kept = _kept(path, key)
    if kept is not None:
        return kept
    with derived_lock(run.paths):
        kept = _kept(path, key)  # another command may have made it while this one waited
        if kept is not None:
            return kept
        res = compute()
        write_atomic(path, json.dumps({"cache_key": key, "result": res}, default=float) + "\n")
    return res


def _kept(path: Path, key: str) -> dict[str, Any] | None:
    """The result kept in `path` under `key`, None when there is none (an unreadable or foreign file is
    recomputed and replaced)."""
    try:
        old = json.loads(path.read_text())
    except (ValueError, RecursionError, OSError):  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        return None
    if isinstance(old, dict) and old.get("cache_key") == key and isinstance(old.get("result"), dict):
        return old["result"]
    return None

"""The hot-zone cache configuration of a run (cache-config.json, probes/FORMAT.md) — the input of `ztbp-ctl`.

`make_config` is pure: the run's geometry, the clustering result and the predicted hit ratios in, the
configuration out. `read_config` / `write_config` are the only places that read or write the file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..analysis.params import ClusterParams
from ..contract import CONFIG_FORMAT, utc_now
from ..errors import FormatError, ZtbpError

#: The device protocol takes at most this many zones per SET (cdw11..cdw15).
DEVICE_MAX_ZONES = 5


def make_config(meta: dict[str, Any], run_id: str, cluster: dict[str, Any], predicted: dict[str, Any],
                cache_mib: float, params: ClusterParams = ClusterParams()) -> dict[str, Any]:
    """The configuration: hot zones and their scores from `cluster`, the hit ratios `predicted` for them."""
    predicted = {k: v for k, v in predicted.items() if k not in ("hot_zones", "sweep")}
    return {
        "format": CONFIG_FORMAT,
        "hot_zones": cluster["hot_zones"],
        "zone_scores": cluster.get("zone_scores", []),
        "zone_size_lba": meta["zone_size_lba"],
        "lba_bytes": meta["lba_bytes"],
        "nr_zones": meta["nr_zones"],
        "cache_mib": cache_mib,
        "source_run": run_id,
        "predicted": predicted,
        "cluster": {"eps": cluster["eps"], "min_samples": cluster["min_samples"],
                    "silhouette": cluster["silhouette"], "hot_factor": params.hot_factor, "seed": params.seed},
        "created": utc_now(),
    }


def write_config(cfg: dict[str, Any], out: Path) -> Path:
    if out.is_dir():
        raise ZtbpError(f"-o {out} is a directory; give a file name, e.g. {out / 'cache-config.json'}")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(cfg, indent=2) + "\n")
    tmp.replace(out)
    return out


def read_config(path: Path) -> dict[str, Any]:
    """Read a cache-config.json (probes/FORMAT.md)."""
    try:
        cfg = json.loads(path.read_text())
    except FileNotFoundError:
        raise ZtbpError(f"config {path} does not exist; make one with `ztbp config RUN -o {path}`") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise FormatError(f"config {path} is not valid JSON ({e})") from None
    if not isinstance(cfg, dict) or cfg.get("format") != CONFIG_FORMAT:
        raise FormatError(f"config {path}: 'format' must be '{CONFIG_FORMAT}'")
    zones = cfg.get("hot_zones")
    if not isinstance(zones, list) or not all(isinstance(z, int) and not isinstance(z, bool) and z >= 0
                                              for z in zones):
        raise FormatError(f"config {path}: 'hot_zones' must be a list of zone ids (non-negative integers)")
    return cfg

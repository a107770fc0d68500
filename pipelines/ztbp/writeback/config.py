"""The hot-zone cache configuration of a run (cache-config.json, probes/FORMAT.md) — the input of `ztbp-ctl`.

`make_config` is pure: the run's geometry, the clustering of the run's first part, the zones it sends and the hit
ratios predicted for them in, the configuration out. `sent_zones` picks the zones exactly as `ztbp-ctl set --top5`
does, so the prediction is made with the zones that reach the device. `recommend` decides whether the
configuration is worth sending. `read_config` / `write_config` are the only places that read or write the file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..analysis.params import ClusterParams
from ..contract import CONFIG_FORMAT, META_LIMITS, utc_now
from ..errors import FormatError, ZtbpError
from ..files import check_target, make_dir, write_atomic
from ..schema import (
    COUNT,
    RATIO,
    Anything,
    Flag,
    Integer,
    ListOf,
    MapOf,
    Maybe,
    Number,
    Record,
    Text,
    checked,
    parse_json,
    zone_ids,
    zones_within,
)
from ..units import LIMITS, MAX_ZONES, Bound

#: The device protocol takes at most this many zones per SET (cdw11..cdw15).
DEVICE_MAX_ZONES = 5


def sent_zones(scores: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The zone scores of the zones `ztbp-ctl set --top5` sends: the five highest shares, ties by reads, then order."""
    ranked = sorted(range(len(scores)), key=lambda i: (-scores[i]["share"], -scores[i]["reads"], i))
    return [scores[i] for i in ranked[:DEVICE_MAX_ZONES]]


def recommend(zones: list[int], held_out: dict[str, Any], min_gain: float) -> tuple[bool, str]:
    """Whether to send `zones`: zone-LRU must beat LRU by at least min_gain on the held-out reads; and why."""
    share = f"{1 - held_out['train_share']:.0%}"
    if not zones:
        return False, (f"no hot zone in the first {held_out['train_share']:.0%} of the reads "
                       f"({held_out['train_reads']} reads): nothing to send")
    if not held_out["test_reads"]:
        return False, f"no reads after the first {held_out['train_share']:.0%}: nothing to evaluate on"
    gain = held_out["gain"]
    verdict = "at least" if gain >= min_gain else "below"
    return gain >= min_gain, (f"zone-LRU with zones {zones} gains {gain:+.4f} hit ratio over LRU on the held-out "
                              f"{share} of the reads ({held_out['test_reads']} reads), {verdict} the threshold "
                              f"{min_gain:+.2f}")


def make_config(meta: dict[str, Any], run_id: str, cluster: dict[str, Any], predicted: dict[str, Any],
                held_out: dict[str, Any], cache_mib: float, params: ClusterParams = ClusterParams(),
                min_gain: float = 0.01) -> dict[str, Any]:
    """The configuration: the zones sent (the top five of `cluster`, the clustering of the run's first part), the
    hit ratios `predicted` for them over the whole run and `held_out` over the later part, and the decision."""
    sent = sent_zones(cluster.get("zone_scores", []))
    zones = [s["zone"] for s in sent]
    ok, why = recommend(zones, held_out, min_gain)
    predicted = {k: v for k, v in predicted.items() if k not in ("hot_zones", "sweep")}
    return {
        "format": CONFIG_FORMAT,
        "hot_zones": zones,
        "zone_scores": sent,
        "hot_zones_found": cluster["hot_zones"],
        "zone_size_lba": meta["zone_size_lba"],
        "lba_bytes": meta["lba_bytes"],
        "nr_zones": meta["nr_zones"],
        "cache_mib": cache_mib,
        "source_run": run_id,
        "recommend": ok,
        "recommend_reason": why,
        "min_gain": min_gain,
        "held_out": held_out,
        "predicted": predicted,
        "cluster": {"eps": cluster["eps"], "min_samples": cluster["min_samples"],
                    "silhouette": cluster["silhouette"], "validation": cluster.get("validation"),
                    "hot_factor": params.hot_factor, "alpha": params.alpha, "seed": params.seed},
        "created": utc_now(),
    }


def check_output(out: Path) -> Path:
    """A path a configuration can be written to (checked before anything is computed): not a folder, a link or
    a device."""
    if out.is_dir() and not out.is_symlink():
        raise ZtbpError(f"{out} is a directory; give a file name, e.g. {out / 'cache-config.json'}")
    parent = next((p for p in out.parents if p.exists()), None)
    if parent is not None and not parent.is_dir():
        raise ZtbpError(f"cannot write {out}: {parent} is a file, not a folder")
    return check_target(out)


def write_config(cfg: dict[str, Any], out: Path) -> Path:
    check_output(out)
    make_dir(out.parent)
    write_atomic(out, json.dumps(cfg, indent=2) + "\n")
    return out


#: cache-config.json (probes/FORMAT.md) as make_config writes it; a hand-made one may hold the format and the zones
#: alone. Its `recommend` is shown, never trusted: the loop decides from the run's own model.
CONFIG = Record({"format": Text((CONFIG_FORMAT,)), "hot_zones": ListOf(Integer(0, 2**32 - 1), MAX_ZONES, True)}, {
    **{k: Number(b) for k, b in META_LIMITS.items() if k != "zone_cap_lba"},
    "zone_scores": ListOf(Record({"zone": Integer(0, MAX_ZONES - 1)}, {"share": Number(RATIO), "reads": COUNT}),
                          DEVICE_MAX_ZONES),
    "hot_zones_found": zone_ids(), "cache_mib": Number(LIMITS["cache-mib"]), "recommend": Flag(),
    "recommend_reason": Text(), "min_gain": Number(LIMITS["min-gain"]), "source_run": Text(),
    "held_out": Record(optional={"gain": Maybe(Number(Bound(-1, 1))), "train_share": Number(LIMITS["train-share"]),
                                 "train_reads": COUNT, "test_reads": COUNT}),
    "predicted": MapOf(Anything()), "cluster": MapOf(Anything())},
    (zones_within("nr_zones", "hot_zones", "hot_zones_found"),))


def read_config(path: Path) -> dict[str, Any]:
    """Read a cache-config.json (probes/FORMAT.md), checked against CONFIG."""
    if not path.exists():
        raise ZtbpError(f"config {path} does not exist; make one with `ztbp config RUN -o {path}`")
    cfg, text = parse_json(path, FormatError, "give a cache-config.json that `ztbp config` wrote")
    if not isinstance(cfg, dict) or cfg.get("format") != CONFIG_FORMAT:
        raise FormatError(f"config {path}: 'format' must be '{CONFIG_FORMAT}'")
    return checked(cfg, CONFIG, path, text, FormatError, "give a cache-config.json that `ztbp config` wrote")

"""The files of an interference profile (`ztbp profile`): profile.json, the zone-to-group table z2c.json / z2c.csv
and the pair matrix matrix.csv, written whole and read back with a clear error for anything else."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ..errors import ProfileError
from ..files import write_atomic
from ..paths import resolve_run
from ..units import MAX_ZONES

PROFILE_FORMAT = "ztbp-profile/1"
Z2C_FORMAT = "ztbp-z2c/1"


def write_profile(out: Path, doc: dict[str, Any]) -> None:
    """profile.json (everything), z2c.json and z2c.csv (the zone-to-group table), matrix.csv (pair ratios)."""
    write_atomic(out / "profile.json", json.dumps(doc, indent=1, default=str) + "\n")
    z2c = {"format": Z2C_FORMAT, "device": doc["device"]["name"], "backend": doc["device"]["backend"],
           "threshold": doc["threshold"], "threshold_mib": doc["threshold_mib"], "reference": doc["reference"],
           "structure": doc["verdict"].get("structure"), "verdict": doc["verdict"].get("reason"),
           "groups": doc["groups"]}
    write_atomic(out / "z2c.json", json.dumps(z2c, indent=1) + "\n")
    lines = ["zone,group"] + [f"{z},{g}" for z, g in sorted(doc["groups"].items(), key=lambda kv: int(kv[0]))]
    write_atomic(out / "z2c.csv", "\n".join(lines) + "\n")
    zones = doc["zones"]
    rows = ["zone," + ",".join(map(str, zones))]
    for z, row in zip(zones, doc["matrix"], strict=True):
        rows.append(f"{z}," + ",".join("" if v is None else f"{v:.4f}" for v in row))
    write_atomic(out / "matrix.csv", "\n".join(rows) + "\n")


def read_profile(folder: str | os.PathLike[str]) -> dict[str, Any]:
    """profile.json of a `ztbp profile` output folder (or the file itself)."""
    path = resolve_run(folder).root
    path = path / "profile.json" if path.is_dir() else path
    try:
        doc = json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError) as e:
        raise ProfileError(f"{path}: cannot read a profile ({type(e).__name__}); give the folder `ztbp profile` "
                           "wrote") from None
    if not isinstance(doc, dict) or doc.get("format") != PROFILE_FORMAT:
        raise ProfileError(f"{path} is not a {PROFILE_FORMAT} document")
    return doc


def read_z2c(path: str | os.PathLike[str]) -> dict[int, int]:
    """A zone-to-group table: z2c.json of a profile (or its folder), a profile.json, or a zone,group CSV."""
    path = resolve_run(path).root
    if path.is_dir():
        path = path / "z2c.json"
    if not path.is_file():
        raise ProfileError(f"{path}: no such file; give the z2c.json (or z2c.csv) a `ztbp profile` wrote")
    text = path.read_text(errors="replace")
    if path.suffix == ".csv":
        out: dict[int, int] = {}
        for n, line in enumerate(text.splitlines()[1:], start=2):
            parts = line.split(",")
            try:
                out[int(parts[0])] = int(parts[1])
            except (ValueError, IndexError):
                raise ProfileError(f"{path}:{n}: expected 'zone,group' integers, found {line!r}") from None
        return _checked_groups(path, out)
    try:
        data = json.loads(text)
        return _checked_groups(path, {int(k): int(v) for k, v in data["groups"].items()})
    except (KeyError, TypeError, ValueError, AttributeError, RecursionError):
        raise ProfileError(f"{path} is not a zone-to-group table (z2c.json with a 'groups' object)") from None


def _checked_groups(path: Path, groups: dict[int, int]) -> dict[int, int]:
    """A zone-to-group table whose zone ids are below MAX_ZONES and groups non-negative 32-bit numbers."""
    bad = next(((z, g) for z, g in groups.items() if not (0 <= z < MAX_ZONES and 0 <= g < 2**31)), None)
    if bad is not None:
        raise ProfileError(f"{path}: zone {bad[0]} -> group {bad[1]}: zones are in [0, {MAX_ZONES - 1}], groups in "
                           f"[0, {2**31 - 1}]")
    return groups

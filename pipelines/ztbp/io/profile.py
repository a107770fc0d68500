"""The files of an interference profile (`ztbp profile`): profile.json, the zone-to-group table z2c.json / z2c.csv
and the pair matrix matrix.csv, written whole and read back with a clear error for anything else."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ..contract import META_LIMITS
from ..errors import ProfileError
from ..files import bounded_lines, write_atomic
from ..paths import resolve_run
from ..schema import (
    COUNT,
    Flag,
    Integer,
    Invalid,
    ListOf,
    MapOf,
    Maybe,
    Number,
    Record,
    Text,
    Tuple,
    checked,
    parse_json,
    shown,
    zone_ids,
)
from ..units import LIMITS, MAX_ZONES, Bound

PROFILE_FORMAT = "ztbp-profile/1"
Z2C_FORMAT = "ztbp-z2c/1"
#: the most zones a profile measures (--max-zones), its matrix one row and one column per zone
MAX_PROFILE_ZONES = int(LIMITS["max-zones"].hi)


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


def _square(doc: dict[str, Any]) -> tuple[str, str] | None:
    """The pair matrix has one row and one column per zone profiled."""
    n = len(doc["zones"])
    if len(doc["matrix"]) != n or any(len(row) != n for row in doc["matrix"]):
        return "matrix", f"is not {n} x {n}: one row and one column per zone of 'zones'"
    return None


_GROUP = Integer(-1, 2**31 - 1)  # -1: unclassified
_SECONDS = Number(Bound(0, 1e9))
_BW = Maybe(Number(Bound(0, 1e7)))  # MiB/s
#: profile.json as control/profile.py writes it: the fields its readers (present/device_study.profile_text) show and
#: compute with
PROFILE = Record(
    {"format": Text((PROFILE_FORMAT,)), "zones": zone_ids(), "groups": MapOf(_GROUP, MAX_ZONES, zone_keys=True),
     "matrix": ListOf(ListOf(Maybe(Number(Bound(0, 1000))), MAX_PROFILE_ZONES), MAX_PROFILE_ZONES),
     "device": Record({"name": Text(), "backend": Text(), "nr_zones": Number(META_LIMITS["nr_zones"]),
                       "zone_bytes": Integer(1, 2**48)}),
     "spec": Record({"rw": Text(), "block_bytes": Integer(512, 1 << 30), "iodepth": Number(LIMITS["profile-iodepth"]),
                     "seconds": Number(LIMITS["seconds"])}, {"fresh": Flag()}),
     "timing": Record({**{k: _SECONDS for k in ("boot_s", "fill_s", "measure_s", "total_s")}, "measurements": COUNT},
                      {"fresh_wraps": COUNT, "budget_exhausted": Flag()}),
     "verdict": Record(optional={"structure": Flag(), "reason": Text()}),
     "threshold": Maybe(Number(LIMITS["threshold"])), "solo": MapOf(Number(Bound(0, 1e7)), MAX_ZONES, zone_keys=True)},
    {"threshold_mib": Maybe(Number(LIMITS["threshold-mib"])), "reference": Text(),
     # what the verdict is computed from again (analysis/conflict_groups.verdict_of_profile)
     "pairs": ListOf(Record({"a": Integer(0, MAX_ZONES - 1), "b": Integer(0, MAX_ZONES - 1), "interferes": Flag()},
                            {"ratio": Maybe(Number(Bound(0, 1000))), "bw_a": _BW, "bw_b": _BW,
                             "measured": Integer(1, 10**6)}), MAX_PROFILE_ZONES**2),
     "noise": Record(optional={"sd": Maybe(Number(Bound(0, 100))), "drift": Maybe(Number(Bound(-1, 1e6))),
                               "repeats": COUNT}),
     "request": Record(optional={"full_matrix": Flag(), "min_separation": Number(LIMITS["min-separation"])}),
     "full_matrix": Flag(),
     "key": Record({"name": Text(), "ari_channel": Maybe(Number(Bound(-1, 1))),
                    "ari_die": Maybe(Number(Bound(-1, 1)))})},
    (_square,))
#: a zone-to-group table (z2c.json, or the groups of a z2c.csv line by line): zones and non-negative groups
Z2C = Record({"groups": MapOf(Integer(0, 2**31 - 1), MAX_ZONES, zone_keys=True)})
Z2C_ROW = Tuple((Integer(0, MAX_ZONES - 1), Integer(0, 2**31 - 1)))


def read_profile(folder: str | os.PathLike[str]) -> dict[str, Any]:
    """profile.json of a `ztbp profile` output folder (or the file itself), checked against PROFILE."""
    path = resolve_run(folder).root
    path = path / "profile.json" if path.is_dir() else path
    what = "give the folder `ztbp profile` wrote"
    doc, text = parse_json(path, ProfileError, what)
    if not isinstance(doc, dict) or doc.get("format") != PROFILE_FORMAT:
        raise ProfileError(f"{path} is not a {PROFILE_FORMAT} document")
    return checked(doc, PROFILE, path, text, ProfileError, what)


def read_z2c(path: str | os.PathLike[str]) -> dict[int, int]:
    """A zone-to-group table: z2c.json of a profile (or its folder), a profile.json, or a zone,group CSV."""
    path = resolve_run(path).root
    if path.is_dir():
        path = path / "z2c.json"
    if not path.is_file():
        raise ProfileError(f"{path}: no such file; give the z2c.json (or z2c.csv) a `ztbp profile` wrote")
    if path.suffix == ".csv":
        return _z2c_csv(path)
    doc, text = parse_json(path, ProfileError, "give the z2c.json a `ztbp profile` wrote")
    if not isinstance(doc, dict) or not isinstance(doc.get("groups"), dict):
        raise ProfileError(f"{path} is not a zone-to-group table (z2c.json with a 'groups' object)")
    doc = checked(doc, Z2C, path, text, ProfileError, "give the z2c.json a `ztbp profile` wrote")
    return {int(k): v for k, v in doc["groups"].items()}


def _z2c_csv(path: Path) -> dict[int, int]:
    """A zone,group CSV with a header line, each row checked (Z2C_ROW): one line naming the file and the line."""
    out: dict[int, int] = {}
    with path.open("rb") as f:
        for n, raw in bounded_lines(f, 4096):
            if n == 1 or (raw is not None and not raw.strip()):
                continue
            parts = (raw or b"").decode("utf-8", "replace").strip().split(",")
            try:
                zone, group = Z2C_ROW.check([_int(p) for p in parts])
            except Invalid:
                raise ProfileError(f"{path}:{n}: expected 'zone,group' integers (zones in [0, {MAX_ZONES - 1}], groups "
                                   f"in [0, {2**31 - 1}]), found {shown((raw or b'(a line too long)')[:80])}") from None
            out[zone] = group
    return out


def _int(text: str) -> int | str:
    """A CSV field as an integer where it is one (else the text, which the row's spec refuses)."""
    t = text.strip()
    return int(t) if t.lstrip("-").isdigit() and len(t) < 30 else t

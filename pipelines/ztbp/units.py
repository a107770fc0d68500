"""Units and size parsing shared by every stage (one definition of KiB / MiB)."""

from __future__ import annotations

from .errors import ZtbpError

KIB = 1 << 10
MIB = 1 << 20
GIB = 1 << 30
_SUFFIX = {"": 1, "B": 1, "K": KIB, "KB": KIB, "KIB": KIB, "M": MIB, "MB": MIB, "MIB": MIB, "G": GIB, "GB": GIB,
           "GIB": GIB, "T": GIB * KIB, "TB": GIB * KIB, "TIB": GIB * KIB}


def parse_size(text: str) -> int:
    """A size such as 4096, 4k, 32M, 1G (binary units) in bytes; a ZtbpError saying how to write one otherwise."""
    t = str(text).strip().upper()
    num = t.rstrip("KMGTIB")
    suffix = t[len(num):]
    if not num or suffix not in _SUFFIX:
        raise ZtbpError(f"cannot read size {text!r}: use bytes or K/M/G, e.g. 32M")
    try:
        value = float(num)
    except ValueError:
        raise ZtbpError(f"cannot read size {text!r}: use bytes or K/M/G, e.g. 32M") from None
    out = value * _SUFFIX[suffix]
    if out <= 0 or not float(out).is_integer():
        raise ZtbpError(f"size must be positive and whole, got {text!r}")
    return int(out)


def parse_zone_list(text: str, what: str = "zone list") -> tuple[int, ...]:
    """'1,7,11' -> (1, 7, 11): non-negative zone ids; a ZtbpError saying how to write them otherwise."""
    try:
        zones = tuple(int(x) for x in str(text).split(",") if x.strip())
    except ValueError:
        raise ZtbpError(f"cannot read {what} {text!r}: use comma-separated zone ids, e.g. 1,7,11") from None
    if any(z < 0 for z in zones):
        raise ZtbpError(f"{what} {text!r}: zone ids are non-negative")
    return zones


_TIME_UNITS = {"ns": 1, "us": 1_000, "µs": 1_000, "ms": 1_000_000, "s": 1_000_000_000, "": 1_000_000_000}


def parse_duration(text: str, what: str = "time") -> int:
    """'1.5s', '250ms', '40us', '100ns' or a bare number of seconds -> ns; a ZtbpError saying how otherwise."""
    t = str(text).strip().lower()
    num = t.rstrip("nsuµm")
    unit = t[len(num):]
    try:
        value = float(num)
    except ValueError:
        value = float("nan")
    if unit not in _TIME_UNITS or value != value or value < 0:
        raise ZtbpError(f"cannot read {what} {text!r}: use a number with s, ms, us or ns, e.g. 1.5s or 250ms")
    return round(value * _TIME_UNITS[unit])


def parse_window(text: str) -> tuple[int | None, int | None]:
    """'START:END' (either side may be empty) -> (start_ns, end_ns); e.g. '1s:1.5s', ':200ms', '2s:'."""
    start, sep, end = str(text).partition(":")
    if not sep:
        raise ZtbpError(f"cannot read window {text!r}: use START:END from the first command, e.g. 1s:1.5s")
    lo = parse_duration(start, "window start") if start.strip() else None
    hi = parse_duration(end, "window end") if end.strip() else None
    if lo is not None and hi is not None and hi <= lo:
        raise ZtbpError(f"window {text!r}: the end must come after the start")
    return lo, hi

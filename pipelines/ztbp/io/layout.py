"""How a streamed run's events are partitioned (io/parts.py), importable without polars (the CLI's defaults)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..units import check_limit

DEFAULT_WINDOW_S = 60.0
DEFAULT_ZONE_PARTS = 16
DEFAULT_CHUNK_BYTES = 128 << 20
DATASET_FORMAT = "ztbp-events-parts/1"


@dataclass(frozen=True)
class Layout:
    """Time window (ns) and zones per zone range of a partitioned events dataset, with the run's geometry."""

    window_ns: int
    zones_per_part: int
    nr_zones: int
    zone_size_lba: int
    lba_bytes: int

    @classmethod
    def for_meta(cls, meta: dict[str, Any], window_s: float = DEFAULT_WINDOW_S,
                 zone_parts: int = DEFAULT_ZONE_PARTS) -> Layout:
        check_limit("window-s", window_s)
        check_limit("zone-parts", zone_parts)
        per = max(1, -(-int(meta["nr_zones"]) // zone_parts))
        return cls(int(window_s * 1e9), per, int(meta["nr_zones"]), int(meta["zone_size_lba"]),
                   int(meta["lba_bytes"]))

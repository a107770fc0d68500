"""Sequential chains and the Natural Transfer Size (NTS) test.

A chain is a run of requests of one op in one namespace, in submission order, where each request starts exactly
at the LBA where the previous request of the chain ended (slba == previous slba + nlb). Streams may interleave:
a request continues the most recent earlier chain of its op and namespace that ends at its start LBA and has not
been continued yet; otherwise it starts a new chain. A chain can only be continued while its last request is
among the --window (default 256) most recent requests of its op, so that random traffic does not join chains by
chance across the whole trace. A chain's length is the bytes it moved. NTS is the chain length at which a device
reaches full bandwidth (4 MiB for HDDs and SSDs in the object-storage study); the share of chains, and of bytes,
in chains of at least NTS tells whether the I/O reaching the device is sequential enough. Requests that move no
data (nlb = 0) and zone appends (whose LBA the device chooses) are not chained. See docs/metrics.md.
"""

from __future__ import annotations

import math
from typing import Any

import numba
import numpy as np
import polars as pl

from ..errors import ZtbpError
from .params import CHAIN_OPS, CHAIN_WINDOW

#: enough for 36 jobs x queue depth 4 of interleaved streams; random traffic rarely hits by chance
DEFAULT_WINDOW = CHAIN_WINDOW


@numba.njit(cache=True)
def chain_slot(keys: np.ndarray, k: int) -> int:
    """Slot of key k in the open-addressing table (its own slot, or the empty one where it would go)."""
    mask = keys.size - 1
    h = (k * 0x9E3779B97F4A7C15) & mask
    while keys[h] != -1 and keys[h] != k:
        h = (h + 1) & mask
    return h


@numba.njit(cache=True)
def _grow(keys: np.ndarray, heads: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The table at twice the size, every key in its new slot."""
    new_keys = np.full(keys.size * 2, -1, dtype=np.int64)
    new_heads = np.full(keys.size * 2, -1, dtype=np.int64)
    for i in range(keys.size):
        if keys[i] != -1:
            h = chain_slot(new_keys, keys[i])
            new_keys[h] = keys[i]
            new_heads[h] = heads[i]
    return new_keys, new_heads


@numba.njit(cache=True)
def add_chain_key(keys: np.ndarray, heads: np.ndarray, n_keys: int, k: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Put key k, not yet in the table, into it (the table holds n_keys keys; the caller counts k); the table
    doubles first when one more key would fill it past half. Returns the table and k's slot. Called only for a
    new key, so the loop that pushes a request on its end key passes no arrays back and forth in the common
    case."""
    if 2 * (n_keys + 1) > keys.size:
        keys, heads = _grow(keys, heads)
    h = chain_slot(keys, k)
    keys[h] = k
    return keys, heads, h


@numba.njit(cache=True)
def _chain_ids(group: np.ndarray, slba: np.ndarray, nlb: np.ndarray, n_groups: int, window: int) -> np.ndarray:
    """Chain id of every request (requests in submission order), numbered in order of first request.

    An open-addressing table maps an end LBA to the most recent request whose chain ends there and has not been
    continued; `below` stacks older such requests. A chain can be continued only while its last request is among
    the `window` most recent requests (0 = no limit). The table grows with the distinct end LBAs, not the trace.
    """
    n = slba.size
    keys = np.full(1024, -1, dtype=np.int64)
    heads = np.full(1024, -1, dtype=np.int64)
    n_keys = 0
    below = np.full(n, -1, dtype=np.int64)
    chain = np.empty(n, dtype=np.int64)
    next_chain = 0
    for i in range(n):
        h = chain_slot(keys, slba[i] * n_groups + group[i])
        j = heads[h] if keys[h] != -1 else -1
        if j >= 0 and window > 0 and i - j > window:
            heads[h] = -1  # everything stacked below j is older still
            j = -1
        if j >= 0:
            chain[i] = chain[j]
            heads[h] = below[j]
        else:
            chain[i] = next_chain
            next_chain += 1
        k = (slba[i] + nlb[i]) * n_groups + group[i]  # request i's chain ends at k: push i on k's stack
        h = chain_slot(keys, k)
        if keys[h] == -1:
            keys, heads, h = add_chain_key(keys, heads, n_keys, k)
            n_keys += 1
        below[i] = heads[h]
        heads[h] = i
    return chain


@numba.njit(cache=True)
def _first_index(ids: np.ndarray, n_chains: int) -> np.ndarray:
    first = np.full(n_chains, -1, dtype=np.int64)
    for i in range(ids.size):
        if first[ids[i]] < 0:
            first[ids[i]] = i
    return first


def chainable(events: pl.DataFrame, op: str) -> pl.DataFrame:
    if op not in CHAIN_OPS:
        raise ZtbpError(f"--op {op!r}: chains are defined for {', '.join(CHAIN_OPS)}")
    return events.filter((pl.col("op") == op) & (pl.col("nlb") > 0))


def chain_table(events: pl.DataFrame, op: str, lba_bytes: int, window: int = DEFAULT_WINDOW) -> pl.DataFrame:
    """One row per chain: chain id, requests, bytes, start LBA, first submission time."""
    ev = chainable(events, op)
    if ev.height == 0:
        return pl.DataFrame(schema={"chain": pl.Int64, "requests": pl.UInt32, "bytes": pl.UInt64,
                                    "slba": pl.UInt64, "ts_ns": pl.UInt64})
    nsid = ev["nsid"].to_numpy()
    if nsid.min() == nsid.max():
        group, n_groups = np.zeros(nsid.size, dtype=np.int64), 1
    else:
        uniq, inv = np.unique(nsid, return_inverse=True)
        group, n_groups = inv.astype(np.int64), int(uniq.size)
    slba = ev["slba"].to_numpy().astype(np.int64)
    nlb = ev["nlb"].to_numpy().astype(np.int64)
    ids = _chain_ids(group, slba, nlb, n_groups, window)
    k = int(ids.max()) + 1
    first = _first_index(ids, k)
    return pl.DataFrame({
        "chain": np.arange(k, dtype=np.int64),
        "requests": np.bincount(ids, minlength=k).astype(np.uint32),
        "bytes": (np.bincount(ids, weights=nlb, minlength=k) * lba_bytes).astype(np.uint64),
        "slba": slba[first].astype(np.uint64),
        "ts_ns": ev["ts_ns"].to_numpy()[first],
    })


def nearest_rank(n: int, q: float) -> int:
    """0-based index of polars' quantile(q, "nearest") among n sorted values: (n - 1) * q, rounded half away."""
    x = (n - 1) * q
    f = math.floor(x)
    return int(f + (1 if x - f >= 0.5 else 0))


def _weighted_pct(values: pl.DataFrame, weight: str, q: float) -> int:
    """Nearest-rank quantile of the column `bytes` where each row stands for `weight` equal values."""
    n = int(values[weight].sum()) if values.height else 0
    if n == 0:
        return 0
    t = values.sort("bytes").with_columns(pl.col(weight).cum_sum().alias("_cum"))
    return int(t.filter(pl.col("_cum") > nearest_rank(n, q))["bytes"][0])


def chain_lengths(chains: pl.DataFrame) -> pl.DataFrame:
    """Chains per chain length: bytes (UInt64), chains (Int64)."""
    return chains.group_by("bytes").agg(pl.len().cast(pl.Int64).alias("chains"))


def chain_summary_weighted(lens: pl.DataFrame, op: str, nts_bytes: int, requests: int, requests_max: int
                           ) -> dict[str, Any]:
    """The summary from chains per length (chain_lengths), the requests in chains and the longest chain's."""
    n = int(lens["chains"].sum()) if lens.height else 0
    nbytes = pl.col("bytes").cast(pl.UInt64) * pl.col("chains").cast(pl.UInt64)
    total = int(lens.select(nbytes.sum()).item()) if n else 0
    big = lens.filter(pl.col("bytes") >= nts_bytes)
    return {
        "op": op,
        "nts_bytes": nts_bytes,
        "chains": n,
        "requests": requests,
        "bytes": total,
        "frac_chains_ge_nts": int(big["chains"].sum()) / n if n else 0.0,
        "frac_bytes_ge_nts": int(big.select(nbytes.sum()).item()) / total if total else 0.0,
        "chain_bytes_p50": _weighted_pct(lens, "chains", 0.5),
        "chain_bytes_p90": _weighted_pct(lens, "chains", 0.9),
        "chain_requests_max": requests_max,
    }


def chain_summary(chains: pl.DataFrame, op: str, nts_bytes: int) -> dict[str, Any]:
    n = chains.height
    return chain_summary_weighted(chain_lengths(chains), op, nts_bytes, int(chains["requests"].sum()) if n else 0,
                                  int(chains["requests"].max()) if n else 0)


def size_cdf_weighted(sizes: pl.DataFrame) -> pl.DataFrame:
    """I/O size CDF from requests per size: bytes, requests, cumulative fraction of requests."""
    t = sizes.sort("bytes")
    total = max(1, int(t["requests"].sum())) if t.height else 1
    return t.with_columns((pl.col("requests").cum_sum() / total).alias("cum_frac"))


def size_cdf(events: pl.DataFrame, op: str, lba_bytes: int) -> pl.DataFrame:
    """I/O size CDF of one op: bytes, requests of that size, cumulative fraction of requests."""
    ev = chainable(events, op)
    return size_cdf_weighted(ev.group_by((pl.col("nlb").cast(pl.UInt64) * lba_bytes).alias("bytes"))
                             .agg(pl.len().alias("requests")))


def chain_cdf_weighted(lens: pl.DataFrame) -> pl.DataFrame:
    """Chain-length CDF in power-of-two buckets from chains per length (chain_lengths)."""
    if lens.height == 0:
        return pl.DataFrame(schema={"bytes_le": pl.UInt64, "chains": pl.UInt32, "cum_frac_chains": pl.Float64,
                                    "cum_frac_bytes": pl.Float64})
    bucket = (2 ** pl.col("bytes").cast(pl.Float64).log(2).ceil()).cast(pl.UInt64)
    n = int(lens["chains"].sum())
    nbytes = pl.col("bytes").cast(pl.UInt64) * pl.col("chains").cast(pl.UInt64)
    total = int(lens.select(nbytes.sum()).item())
    t = (lens.group_by(bucket.alias("bytes_le"))
         .agg(pl.col("chains").sum().cast(pl.UInt32), nbytes.sum().alias("_b")).sort("bytes_le"))
    return t.with_columns(
        (pl.col("chains").cum_sum() / n).alias("cum_frac_chains"),
        (pl.col("_b").cum_sum() / total).alias("cum_frac_bytes"),
    ).drop("_b")


def chain_cdf(chains: pl.DataFrame) -> pl.DataFrame:
    """Chain-length CDF in power-of-two buckets: chains ≤ bytes, cumulative fraction of chains and of bytes."""
    return chain_cdf_weighted(chain_lengths(chains))


def chains_report(events: pl.DataFrame, op: str, nts_bytes: int, lba_bytes: int,
                  window: int = DEFAULT_WINDOW) -> dict[str, Any]:
    chains = chain_table(events, op, lba_bytes, window)
    out = chain_summary(chains, op, nts_bytes)
    out["window"] = window
    out["size_cdf"] = size_cdf(events, op, lba_bytes).to_dicts()
    out["chain_cdf"] = chain_cdf(chains).to_dicts()
    return out

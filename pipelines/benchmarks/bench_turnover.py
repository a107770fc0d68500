"""How long an A/B block must be for the device's cache to turn over (analysis/turnover.py): paper80- and
paper60-like reads (the share on five hot zones of 32 MiB, uniform within each zone, the rest over the other zones
of a 1 GiB region) through each policy a device runs, three independent passes (off, on, off), at the device's
cache size. Prints each policy's steady hit ratios, its settle points and the block length it asks for."""

from __future__ import annotations

import argparse

import numpy as np

from ztbp.analysis.turnover import POLICIES, turnover

ZONE_PAGES = 8192  # 32 MiB zones of 4 KiB pages
HOT = [1, 7, 11, 15, 19]


def draw(rng: np.random.Generator, n: int, share: float, zones: int) -> tuple[np.ndarray, np.ndarray]:
    on_hot = rng.random(n) < share
    cold = [z for z in range(zones) if z not in HOT]
    zone = np.where(on_hot, rng.choice(HOT, n), rng.choice(cold, n))
    ids = (zone * ZONE_PAGES + rng.integers(0, ZONE_PAGES, n)).astype(np.int64)
    return ids, np.isin(zone, HOT)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--reads", type=int, default=200_000, help="reads per pass (default 200,000)")
    ap.add_argument("--entries", type=int, default=16_384, help="cache entries (default 16,384: NVMeVirt's)")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    print(f"{'workload':9s} {'policy':9s} {'off':>7s} {'on':>7s} {'gain':>7s} {'settle on':>10s} {'settle off':>11s} "
          f"{'block':>8s}")
    for name, share in (("paper80", 0.8), ("paper60", 0.6), ("uniform", 0.0)):
        passes = tuple(draw(rng, args.reads, share, 32) for _ in range(3))
        for policy in POLICIES:
            r = turnover(passes, args.entries, policy)
            cells = [f"{r[k]:,}" if r[k] is not None else "never" for k in
                     ("settle_on_reads", "settle_off_reads", "block_reads")]
            print(f"{name:9s} {policy:9s} {r['steady_off']:7.4f} {r['steady_on']:7.4f} {r['gain']:+7.4f} "
                  f"{cells[0]:>10s} {cells[1]:>11s} {cells[2]:>8s}")


if __name__ == "__main__":
    main()

"""What `ztbp loop` is asked for (`LoopRequest`): what it traces and where (acquire/loop.LoopCapture), the rounds, the
cache model and the A/B blocks, all checked before anything boots or is touched. The loop (control/loop.py) and its
rounds (control/round.py) both take it from here."""

from __future__ import annotations

from dataclasses import dataclass

from ..acquire.loop import LoopCapture, LoopError, check_capture
from ..analysis.params import AB_READS, CACHE_MIB, PAGE_KIB, RECOMMEND_GAIN
from ..units import check_limit


@dataclass(frozen=True)
class LoopRequest(LoopCapture):
    """What `ztbp loop` was asked for: the capture (workload, device, place, --fio-file, --out, --module) and the
    loop's own settings."""

    rounds: int = 3
    min_gain: float = RECOMMEND_GAIN
    cache_mib: int = CACHE_MIB
    page_kib: int = PAGE_KIB
    timeout: int = 7200
    verbose: bool = False
    ab_pairs: int = 0  # > 0: the A/B mode (round 1, then this many pairs of on/off blocks)
    ab_reads: int = AB_READS

    @property
    def total_rounds(self) -> int:
        return 1 + 2 * self.ab_pairs if self.ab_pairs else self.rounds

    def validate(self) -> None:
        """The whole request, before anything boots or is touched (the CLI and the regime sweep refuse a bad one
        before they start)."""
        self.check_settings()
        check_capture(self)

    def check_settings(self) -> None:
        """The loop's own settings (run_loop: the set-up checks the capture, acquire/loop.set_up_loop)."""
        check_limit("rounds", self.rounds)
        check_limit("min-gain", self.min_gain)
        check_limit("loop-cache-mib", self.cache_mib, "--cache-mib")
        check_limit("page-kib", self.page_kib)
        check_limit("timeout", self.timeout)
        check_limit("ab", self.ab_pairs)
        if self.ab_pairs == 1:
            raise LoopError("--ab 1: give at least 2 pairs of blocks (an interval needs 2), or 0 for no A/B blocks")
        check_limit("ab-reads", self.ab_reads)

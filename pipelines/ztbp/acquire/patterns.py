"""Names of the synthetic access patterns of `ztbp synth` (kept apart so the CLI needs no numpy to list them)."""

PATTERNS: tuple[str, ...] = ("paper80", "paper60", "uniform", "seqread", "seqwrite", "zipf")
#: The ZTBP paper's hot zones.
HOT_ZONES: tuple[int, ...] = (1, 7, 11, 15, 19)

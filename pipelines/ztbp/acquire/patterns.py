"""Names and defaults of the synthetic access patterns of `ztbp synth` (kept apart so the CLI needs no numpy)."""

PATTERNS: tuple[str, ...] = ("paper80", "paper60", "hotzones", "uniform", "zipf", "hotpage", "hotcells", "seqread",
                             "seqwrite")
#: The ZTBP paper's hot zones.
HOT_ZONES: tuple[int, ...] = (1, 7, 11, 15, 19)
#: Share of the reads that go to the hot zones, page or cells when --hot-share is not given.
DEFAULT_HOT_SHARE: dict[str, float] = {"paper80": 0.8, "paper60": 0.6, "hotzones": 0.8, "hotpage": 0.3,
                                       "hotcells": 0.5}
#: Zipf exponent of the zipf pattern when --zipf is not given.
DEFAULT_ZIPF = 1.1
#: The paper's read region: cold reads are uniform 4 KiB pages in [10 MiB, 1 GiB) of the device.
REGION: tuple[int, int] = (10 << 20, 1 << 30)
#: Size of one hot cell of the hotcells pattern.
HOT_CELL_BYTES = 1 << 20

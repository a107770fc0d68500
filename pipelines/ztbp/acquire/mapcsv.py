"""The host's half of a capture whose rows the guest handed over raw (the loop's rounds): the map probe's rows
become raw/nvme.csv here, at native speed, with the round's loss counters."""

from __future__ import annotations

import subprocess
import time

from .. import paths
from ..contract import probe_header
from ..files import make_dir, read_env
from ..paths import RunPaths
from .meta import STAGING, count_commands, guest_env_file

#: The one conversion of the map probe's rows into nvme.csv rows (the guest's probe_extract uses it too).
MAP_ROWS_CSV = paths.ROOT / "probes" / "nvme_zone_csv.sh"
MAP_ROWS = "nvme.rows"


def map_rows_csv(run: RunPaths) -> tuple[dict[str, int | float], str | None]:
    """The host's half of a capture whose rows the guest handed over raw (the loop's rounds): .capture/nvme.rows
    (vm/guest/mapdump.py --raw batches) becomes raw/nvme.csv, converted here at native speed by
    probes/nvme_zone_csv.sh --raw, in completion order; then the round's LOSS RULE (vm/guest/loop.sh): read rows
    missing against the block layer's count, plus rows taken but not converted. The counters join the staged
    guest.env for finish_meta; returned too, with the conversion's seconds, and what went wrong (None: nothing; a
    round whose rows could not all be converted is marked failed)."""
    t0 = time.monotonic()
    staged = run.root / STAGING / MAP_ROWS
    genv = read_env(guest_env_file(run))
    tmp = run.nvme_csv.with_name(run.nvme_csv.name + ".tmp")
    make_dir(run.nvme_csv.parent)
    with tmp.open("w") as out:
        out.write(probe_header("nvme"))
        out.flush()
        proc = subprocess.run(["bash", str(MAP_ROWS_CSV), "--raw", str(staged)], stdout=out, stderr=subprocess.PIPE,
                              text=True, check=False) if staged.is_file() else None
    tmp.replace(run.nvme_csv)
    counts = count_commands(run.nvme_csv)
    rows, reads = sum(counts.values()), counts.get("read", 0)
    taken = int(genv.get("probe_nvme_taken") or 0)
    block_reads = int(genv.get("block_reads") or 0)
    lost = max(0, block_reads - reads) + max(0, taken - rows)
    convert_s = time.monotonic() - t0
    stats: dict[str, int | float] = {
        "probe_nvme_rows": rows, "probe_nvme_read_rows": reads, "probe_nvme_completed": rows + lost,
        "probe_nvme_setups": rows + lost, "probe_nvme_perf_lost": 0, "lost_events_nvme": lost,
        "probe_nvme_stop_s": round(int(genv.get("probe_nvme_dump_s") or 0) + convert_s),
        "probe_nvme_convert_s": round(convert_s, 1)}
    error = None
    if proc is None:
        error = f"the guest handed over no rows ({STAGING}/{MAP_ROWS} missing)"
    elif proc.returncode != 0:
        error = f"{MAP_ROWS_CSV.name} exit {proc.returncode}: {' '.join(proc.stderr.split())[:300]}"
    with guest_env_file(run).open("a") as f:
        f.write("".join(f"{k}={v}\n" for k, v in stats.items()))
        if error:
            f.write("status=failed\n")  # rows that could not be converted: the round is incomplete
    staged.unlink(missing_ok=True)
    return stats, error


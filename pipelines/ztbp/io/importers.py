"""Importers: block traces other tools wrote -> a run in the contract of probes/FORMAT.md.

An import writes `meta.json` (contract.new_meta, backend "import") and `raw/nvme.csv` with the `# ztbp nvme v1`
header, exactly what a capture writes, so every path that reads a run — `ztbp ingest` (in memory), `ztbp import
--stream` / `ingest_stream` (partitioned Parquet), the analyses, the cache model, the reports — takes an imported
trace unchanged. raw/nvme.csv is chosen over writing derived/events.parquet directly because it keeps one ingest
(with its skipped-line accounting and freshness check) for captured and imported runs alike; the price is one CSV
write, about 60 bytes per command.

The source is read in chunks of whole lines (`chunk_bytes`, default 64 MiB, and at most files.MAX_CHUNK_LINES lines)
and each chunk's commands are appended to raw/nvme.csv, so a trace far larger than memory imports in bounded memory.
A line longer than files.MAX_LINE_BYTES (1 MiB; a record of any format holds under 200 bytes) is skipped and counted,
never held whole: no input, not even a file of one line of 10 GB, takes the import past IMPORT_RSS_BOUND. Nothing is
dropped silently: lines that look like a record of the format but do not parse are skipped and counted with their
line numbers (`skip_reasons`, `skipped_examples`); lines the format defines but that are not commands (blkparse's
other actions and summary, fio's file management lines, a CSV header) are counted under `ignored`.

Formats, one module per family (fields as their publishers document them; zone operations do not exist in any of
them, so the zone size is a parameter and the run has no zone_mgmt commands): blkparse (io/import_blkparse.py),
fio-iolog (io/import_fio.py), alibaba, tencent and msr (io/import_csv.py); io/import_rows.py holds what they share
and how their rows map to the contract.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import polars as pl

from ..contract import NVME_COLUMNS, NVME_VERSION_LINE, check_new_run, new_meta, new_run, write_meta
from ..errors import FormatError, MissingRunError, ZtbpError
from ..files import LONG_LINE, atomic_path, byte_chunks, make_dir
from ..paths import RunPaths
from .import_blkparse import Blkparse
from .import_csv import Alibaba, Msr, Tencent
from .import_fio import FioIolog
from .import_rows import SECTOR, ImportReport, split_lines

FORMATS: dict[str, type] = {"blkparse": Blkparse, "fio-iolog": FioIolog, "alibaba": Alibaba,
                            "tencent": Tencent, "msr": Msr}
#: The peak resident memory of `ztbp import` on any input, the interpreter and its libraries included: one chunk's
#: bytes and lines and the parse of them (measured: 187 MB on one line of 1 GB or 10 GB of zero bytes in every
#: format, 361 MB on 1 GB of newlines; tests/test_importers.py holds it).
IMPORT_RSS_BOUND = 512 << 20
#: Default LBA size per format (bytes): the sector size the format counts in, else 512.
DEFAULT_LBA_BYTES = 512


def commands(src: Path, fmt: str, report: ImportReport, lba_bytes: int = DEFAULT_LBA_BYTES,
             device: str | None = None, chunk_bytes: int = 64 << 20) -> Iterator[pl.DataFrame]:
    """The commands of a source trace in the contract's columns, one frame per chunk of the source."""
    if fmt not in FORMATS:
        raise ZtbpError(f"unknown trace format {fmt!r}; choose one of {', '.join(FORMATS)}")
    parser = FORMATS[fmt](report, lba_bytes, device)
    for chunk, first_line in byte_chunks(src, chunk_bytes, on_long=lambda n: report.skip_line(n, LONG_LINE)):
        out = parser.chunk(split_lines(chunk, first_line, report))
        if out.height:
            yield out
    last = parser.finish()
    if last is not None and last.height:
        yield last


def import_trace(src: str | Path, run: RunPaths, fmt: str, *, zone_size_bytes: int,
                 lba_bytes: int = DEFAULT_LBA_BYTES, nr_zones: int | None = None, device: str | None = None,
                 chunk_bytes: int = 64 << 20, overwrite: bool = False) -> ImportReport:
    """Import `src` into the run directory `run`: raw/nvme.csv and meta.json. Returns what was read and skipped."""
    src = Path(src)
    if not src.is_file():
        raise MissingRunError(f"{src} does not exist: give the path of a {fmt} trace file.")
    if lba_bytes <= 0 or lba_bytes % SECTOR:
        raise ZtbpError(f"--lba-bytes {lba_bytes}: use a multiple of 512, e.g. 512 or 4096")
    if zone_size_bytes <= 0 or zone_size_bytes % lba_bytes:
        raise ZtbpError(f"--zone-size {zone_size_bytes}: must be a positive multiple of the LBA size ({lba_bytes})")
    check_new_run(run, overwrite)
    report = ImportReport(format=fmt, source=str(src))
    with new_run(run, overwrite) as out:  # without --force: the run appears whole, for this command alone
        _write(src, out, fmt, report, zone_size_bytes, lba_bytes, nr_zones, device, chunk_bytes)
    return report


def _write(src: Path, run: RunPaths, fmt: str, report: ImportReport, zone_size_bytes: int, lba_bytes: int,
           nr_zones: int | None, device: str | None, chunk_bytes: int) -> None:
    """raw/nvme.csv and meta.json of the import into the folder `run`."""
    make_dir(run.raw)
    with atomic_path(run.nvme_csv) as tmp:
        with tmp.open("w") as f:
            f.write(NVME_VERSION_LINE + "\n" + ",".join(NVME_COLUMNS) + "\n")
            f.flush()
            for df in commands(src, fmt, report, lba_bytes, device, chunk_bytes):
                df.write_csv(f, include_header=False, quote_style="never")
                f.flush()
        if report.rows == 0:
            raise FormatError(f"{src}: no {fmt} command found in {report.lines} lines "
                              f"(skipped {report.skipped}: {report.skip_reasons or 'none'}; ignored "
                              f"{report.ignored}). Is this the right --format?")
    zone_lba = zone_size_bytes // lba_bytes
    needed = max(1, -(-report.max_end_lba // zone_lba))
    zones = nr_zones if nr_zones is not None else needed
    meta = new_meta(device=f"import:{src.name}", lba_bytes=lba_bytes, zone_size_lba=zone_lba,
                    zone_cap_lba=zone_lba, nr_zones=zones, synthetic=False, backend="import",
                    workload={"name": f"import-{fmt}", "source": src.name},
                    probes={"nvme": {"file": "raw/nvme.csv", "version": 1, "attach": f"import:{fmt}"}},
                    latency=report.latency, zone_size_source="parameter",
                    **{"import": {k: v for k, v in report.as_dict().items() if k != "skipped_examples"}})
    meta["lost_events"] = {"nvme": 0}
    if nr_zones is not None and nr_zones < needed:
        meta["import"]["beyond_nr_zones"] = True
    write_meta(run, meta)

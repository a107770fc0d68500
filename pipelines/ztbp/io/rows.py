"""The rows of a probe file, one rule for every CSV of a run (probes/FORMAT.md): raw/nvme.csv, layers.csv,
appops.csv, cachestat.csv, files.csv.

The first two lines are checked: a wrong version line or header is refused with one line (FormatError). Every data
line that does not parse is skipped and counted with its line number and reason — a wrong field count, a field that
does not fit its column's type (a u64 beyond 2^64, text in a number), an unknown value of an enum column, a line that
is not UTF-8, a row the reader's own checks refuse, and the file's last line when it has no newline (cut while it
was written: its last field may be cut too, so it is never taken), a line longer than files.MAX_LINE_BYTES (read past,
never held whole: a file is read in chunks of whole lines). Blank lines are counted apart.

Two paths, one result: polars parses the whole body with the column types (fast); anything it cannot take as it is
sends the body line by line through the same checks (careful), which keeps every row that parses.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from ..contract import parse_version_line
from ..errors import FormatError, MissingRunError
from ..files import LONG_LINE, MAX_LINE_BYTES, byte_chunks

#: Skipped lines shown with their number and reason (all of them are counted).
SHOW_SKIPPED = 5


@dataclass(frozen=True)
class RowSpec:
    """What a probe file's rows hold: its columns, the type of each typed column (the others are strings), the
    values each enum column may take, and checks of whole rows: (condition of a bad row, its reason), on the typed
    columns. `quick`: aggregates that, all true, show that no row fails a check (the fast path's test; by default
    it evaluates the checks row by row). `enum_types`: the fast path may return enum columns as pl.Enum (the
    careful path gives strings; the reader casts them alike), else they are strings."""

    columns: tuple[str, ...]
    types: Mapping[str, pl.DataType]
    enums: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    checks: tuple[tuple[pl.Expr, pl.Expr], ...] = ()
    quick: tuple[pl.Expr, ...] | None = None
    enum_types: bool = False

    def all_pass(self, df: pl.DataFrame) -> bool:
        """No row of `df` fails a check (a bound of the quick aggregates may send good rows the careful way)."""
        if df.height == 0 or not self.checks:
            return True
        tests = self.quick if self.quick is not None else tuple(~cond.any() for cond, _ in self.checks)
        return all(v is True for v in df.select(t.alias(f"_{i}") for i, t in enumerate(tests)).row(0))


@dataclass
class Rows:
    """The rows of a body that parse (spec.columns, typed), the skipped lines (line_no, why) and the blank lines."""

    frame: pl.DataFrame
    bad: pl.DataFrame
    blank: int = 0
    careful: bool = False


@dataclass
class RowsReport:
    """What reading one probe file kept and skipped (never silently)."""

    file: str = ""
    rows: int = 0
    skipped: int = 0
    blank_lines: int = 0
    reasons: dict[str, int] = field(default_factory=dict)
    first_skipped_lines: list[dict[str, Any]] = field(default_factory=list)

    def add(self, rows: Rows) -> None:
        self.rows += rows.frame.height
        self.blank_lines += rows.blank
        self.skipped += rows.bad.height
        for why, n in reason_counts(rows.bad).items():
            self.reasons[why] = self.reasons.get(why, 0) + n
        room = SHOW_SKIPPED - len(self.first_skipped_lines)
        self.first_skipped_lines += examples(rows.bad, room)

    def long_line(self, line_no: int) -> None:
        """Count a line dropped for its length (files.byte_chunks' on_long)."""
        self.add(Rows(pl.DataFrame(), long_lines([line_no])))

    def as_dict(self) -> dict[str, Any]:
        return {"file": self.file, "rows": self.rows, "skipped": self.skipped, "blank_lines": self.blank_lines,
                "reasons": self.reasons, "first_skipped_lines": self.first_skipped_lines}


#: the bytes of a probe file parsed at a time (its rows are kept; the text of one chunk at a time)
CHUNK_BYTES = 128 << 20


def long_lines(line_nos: list[int]) -> pl.DataFrame:
    """Skipped lines (line_no, why) for lines dropped for their length."""
    return pl.DataFrame({"line_no": line_nos, "why": [LONG_LINE] * len(line_nos)},
                        schema={"line_no": pl.UInt32, "why": pl.String})


def file_rows(path: Path, header: list[str], spec: RowSpec, report: RowsReport) -> pl.DataFrame:
    """The rows of a probe file's data lines (after its two header lines) under `spec`, read chunk by chunk (a line
    longer than MAX_LINE_BYTES skipped and counted, never held whole); what is skipped goes to `report`."""
    frames = []
    try:
        for chunk, first in byte_chunks(path, CHUNK_BYTES, skip_lines=2, on_long=report.long_line):
            rows = read_rows(chunk, header, spec, first)
            report.add(rows)
            frames.append(rows.frame)
    except OSError as e:
        raise MissingRunError(f"cannot read {path}: {e.strerror}") from None
    if not frames:
        rows = read_rows(b"", header, spec, 3)
        report.add(rows)
        return rows.frame
    return pl.concat(frames, how="vertical_relaxed")


def reason_counts(bad: pl.DataFrame) -> dict[str, int]:
    """Skipped lines per reason, the reason cut at its first ':' (its kind: "bad value", "unknown op", ...)."""
    kinds = bad.select(pl.col("why").str.split(":").list.first().alias("kind")).group_by("kind", maintain_order=True)
    return {str(k): int(n) for k, n in kinds.len().iter_rows()}


def examples(bad: pl.DataFrame, n: int = SHOW_SKIPPED) -> list[dict[str, Any]]:
    """The first n skipped lines as {"line", "reason"}."""
    return [{"line": int(ln), "reason": str(why)} for ln, why in bad.head(max(0, n)).iter_rows()]


def read_header(path: Path, probe: str, version: int, columns: tuple[str, ...], empty_hint: str = "") -> tuple[
        list[str], int]:
    """Check the version line and the header of a probe file; its column names and the byte offset of its body."""
    try:
        with path.open("rb") as f:
            first, second = f.readline(MAX_LINE_BYTES), f.readline(MAX_LINE_BYTES)
    except OSError as e:
        raise MissingRunError(f"cannot read {path}: {e.strerror}") from None
    if not first:
        raise FormatError(f"{path} is empty: expected '# ztbp {probe} v{version}' and a header. {empty_hint}".strip())
    parse_version_line(first.decode("utf-8", "replace"), probe, version, path)
    text = second.decode("utf-8", "replace").strip()
    cols = [c.strip() for c in text.split(",")]
    if tuple(cols[: len(columns)]) != columns:
        raise FormatError(f"{path}: line 2 must be the header '{','.join(columns)}' (extra columns may follow), "
                          f"found {text[:120]!r}. See probes/FORMAT.md.")
    return cols, len(first) + len(second)


def read_rows(body: bytes, header: list[str], spec: RowSpec, first_line_no: int) -> Rows:
    """The rows of `body` (data lines; the first is line `first_line_no` of the file) under `spec`: the fast path,
    else the careful one."""
    fast = _fast(body, header, spec)
    return Rows(fast, _NO_BAD.clone()) if fast is not None else careful_rows(body, first_line_no, spec, header)


_NO_BAD = pl.DataFrame(schema={"line_no": pl.UInt32, "why": pl.String})


def _fast(body: bytes, header: list[str], spec: RowSpec) -> pl.DataFrame | None:
    """The whole body parsed by polars with the column types; None when anything needs the careful path."""
    if not body:
        return pl.DataFrame(schema={c: spec.types.get(c, pl.String()) for c in spec.columns})
    if not body.endswith(b"\n"):
        return None  # a cut last line: the careful path skips it
    enums = {c: pl.Enum(list(v)) for c, v in spec.enums.items()}  # an unknown value fails the parse
    schema = {c: enums.get(c) or spec.types.get(c, pl.String()) for c in header}
    try:
        df = pl.read_csv(body, has_header=False, schema=schema).select(spec.columns)
        nulls = df.select(c for c in spec.columns if c in spec.types or "" not in spec.enums.get(c, ("",)))
        if sum(nulls.null_count().row(0)) or not spec.all_pass(df):
            return None
    except Exception:  # noqa: BLE001 - any parse failure means: take the careful path
        return None
    strings = [pl.col(c).fill_null("") for c in spec.columns if c not in spec.types]
    return df.with_columns(s if spec.enum_types else s.cast(pl.String) for s in strings)


def _lines(body: bytes) -> tuple[list[str], list[bool], bool]:
    """The body's lines as text, whether each was UTF-8, and whether the last one lacks its newline."""
    truncated_last = bool(body) and not body.endswith(b"\n")
    raw = body.split(b"\n")
    if raw and raw[-1] == b"":
        raw.pop()
    try:
        text = body.decode("utf-8").split("\n")
        return [t.rstrip("\r") for t in text[: len(raw)]], [True] * len(raw), truncated_last
    except UnicodeDecodeError:
        pass
    texts, ok = [], []
    for ln in raw:
        try:
            texts.append(ln.decode("utf-8").rstrip("\r"))
            ok.append(True)
        except UnicodeDecodeError:
            texts.append("")
            ok.append(False)
    return texts, ok, truncated_last


def careful_rows(body: bytes, first_line_no: int, spec: RowSpec, header: list[str]) -> Rows:
    """Line by line: keep what parses, say why each other line is skipped (each column is taken at its place in
    `header`; a line needs the fields up to the last of spec.columns, more are ignored)."""
    texts, utf8, truncated_last = _lines(body)
    s = pl.DataFrame({"line": texts, "_utf8": utf8}, schema={"line": pl.String, "_utf8": pl.Boolean})
    s = s.with_row_index("line_no", offset=first_line_no)
    last_no = first_line_no + len(texts) - 1
    blank = s.filter(pl.col("_utf8") & (pl.col("line").str.strip_chars() == ""))
    s = s.filter(~pl.col("_utf8") | (pl.col("line").str.strip_chars() != ""))
    parts = pl.col("line").str.split(",")
    s = s.with_columns(parts.list.len().alias("_n"), parts.alias("_p"))
    at = {c: header.index(c) for c in spec.columns}
    s = s.with_columns(_field(at[c], c, spec) for c in spec.columns)
    s = s.with_columns(_reason(spec, max(at.values()) + 1, truncated_last, last_no).alias("why"))
    bad = s.filter(pl.col("why").is_not_null()).select("line_no", "why")
    return Rows(s.filter(pl.col("why").is_null()).select(spec.columns), bad, blank.height, careful=True)


def _field(i: int, column: str, spec: RowSpec) -> pl.Expr:
    e = pl.col("_p").list.get(i, null_on_oob=True).str.strip_chars(" \"")
    return (e.cast(spec.types[column], strict=False) if column in spec.types else e).alias(column)


def _reason(spec: RowSpec, n: int, truncated_last: bool, last_no: int) -> pl.Expr:
    """Why a line is skipped (null: it is kept), the first reason that applies; a line needs n fields."""
    cut = pl.lit(truncated_last) & (pl.col("line_no") == last_no)
    why = (pl.when(pl.col("line").str.len_bytes() > MAX_LINE_BYTES).then(pl.lit(LONG_LINE))  # as byte_chunks says
           .when(~pl.col("_utf8")).then(pl.lit("not UTF-8: the line holds bytes that are no text"))
           .when(pl.col("_n") < n)
           .then(pl.when(cut).then(pl.format("truncated last line: {} of {} fields", pl.col("_n"), pl.lit(n)))
                 .otherwise(pl.format("wrong field count: {} of {}", pl.col("_n"), pl.lit(n))))
           .when(cut).then(pl.lit("truncated last line: no newline at the end, its last field may be cut")))
    for c, t in spec.types.items():
        why = why.when(pl.col(c).is_null()).then(pl.lit(f"bad value: {c} is not a valid {t}"))
    for c, values in spec.enums.items():
        why = why.when(~pl.col(c).is_in(list(values))).then(pl.format(f"unknown {c}: {{}}", pl.col(c)))
    for cond, reason in spec.checks:
        why = why.when(cond).then(reason)
    return why.otherwise(None)

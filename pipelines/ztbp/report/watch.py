"""The report of a `ztbp watch` session: `ztbp report JOURNAL` writes one offline HTML page from its journal.

The journal (docs/watch.md) is `watch.jsonl` and the raw rows in `rows/rows-NNNNNN.parquet`. The records become
frames and figures in present/watch.py (pure); this module reads the files, and writes `index.html` and the
folder's one copy of plotly.js (report/pages.py), each whole (files.write_atomic), so the page opens offline. The
page is templates/watch.html.j2, which escapes every text read from the journal.

Bad input: a folder without watch.jsonl, a watch.jsonl that holds no JSON record or no start record, is one
ZtbpError (one line, non-zero exit). Lines that are not JSON objects (a last line cut by a crash, a damaged line)
are counted and skipped when the rest is a session: the page says how many and which, and the log says it once.
A Parquet part that cannot be read is left out of the commands/s figure (its windows then use the journal's clock).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import ZtbpError
from ..files import write_atomic
from ..io.journal import JOURNAL, ROWS, part_stats, read_records
from ..paths import REPORTS
from ..units import MIB
from .pages import render_page, write_plotlyjs, writing

#: skipped line numbers named on the page, at most
SHOW_SKIPPED = 20


def is_watch_dir(path: str | os.PathLike[str]) -> bool:
    """True when `path` is a folder that holds a watch journal (watch.jsonl), or only its rows/ and neither a run's
    meta.json nor a loop's loop.json (a journal that lost its watch.jsonl: render_watch says so)."""
    p = Path(path)
    return p.is_dir() and ((p / JOURNAL).exists() or (
        (p / ROWS).is_dir() and not (p / "meta.json").exists() and not (p / "loop.json").exists()))


def check_something_to_report(path: str | os.PathLike[str]) -> None:
    """A folder that holds nothing `ztbp report` reads (no meta.json, raw/, loop.json or watch.jsonl) is one
    error naming the three kinds of input, rather than a run's missing meta.json."""
    p = Path(path)
    if p.is_dir() and not any((p / name).exists() for name in ("meta.json", "raw", "loop.json", JOURNAL, ROWS)):
        raise ZtbpError(f"{p}: nothing to report in it: no meta.json (a run), loop.json (a loop of `ztbp loop`) or "
                        f"{JOURNAL} (the journal of `ztbp watch`)")


def figure_item(fig: Any) -> dict[str, Any]:
    """A figure for watch.html.j2: {"note": text} for a Note, else {"plot": its HTML without plotly.js}."""
    from markupsafe import Markup

    from ..present.figures import Note

    if isinstance(fig, Note):
        return {"note": fig.text}
    import plotly.io as pio

    return {"plot": Markup(pio.to_html(fig, include_plotlyjs=False, full_html=False,
                                       config={"displaylogo": False, "responsive": True}))}


def meta_line(folder: Path, summary: dict[str, Any], records: list[dict[str, Any]]) -> str:
    """The page's line under its title, as text: the journal, the device, the windows, the rules and the clock."""
    from ..present.watch import clock_text

    m = summary["meta"]
    parts = [f"journal {folder}"]
    if m:
        try:
            zone = f"{m['nr_zones']} zones of {m['zone_size_lba'] * m['lba_bytes'] / MIB:g} MiB"
        except (KeyError, TypeError):
            zone = "geometry not recorded"
        parts.append(f"device {m.get('device') or 'unknown'} · {zone}")
    start = next(r for r in records if r["kind"] == "start")
    wc, ws = start.get("window_commands"), start.get("window_s")
    parts.append(f"windows of {wc} commands" + (f" or {ws} s" if ws is not None else ""))
    rules = [f"{k} {v}" for k, v in (("K", summary["k"]), ("threshold", summary["threshold"])) if v is not None]
    if rules:
        parts.append(", ".join(rules))
    walls = [r["wall"] for r in records if isinstance(r.get("wall"), int | float) and not isinstance(r["wall"], bool)]
    if walls:
        parts.append(f"{clock_text(min(walls))} → {clock_text(max(walls))}")
    if summary["attached"] is not None:
        parts.append(f"probe attached at {clock_text(summary['attached'])}")
    return " ·\n".join(parts)


def watch_page(name: str, meta: str, headline: list[dict[str, str]], figures: list[dict[str, Any]],
               events: list[dict[str, Any]], notes: list[str], phases: list[dict[str, str]] | None = None) -> str:
    """The page (templates/watch.html.j2): the headline, the notes (lines skipped, parts unread), the figures
    (figure_item), the device's hit ratio per phase (present/watch.phase_rows) and the table of `events`
    (present/watch_records.events_frame's rows); every text escaped there."""
    return render_page("watch.html.j2", name=name, meta_line=meta, headline=headline, notes=notes, figures=figures,
                       events=events, phases=phases or [])


def render_watch(folder: str | os.PathLike[str], out_dir: str | os.PathLike[str] | None = None,
                 log: Callable[[str], None] = print) -> dict[str, Any]:
    """The report of a watch session's journal folder: `out_dir` (default reports/watch-<folder name>)/index.html
    and plotly.min.js. Returns what was written and the session's summary."""
    from ..present import watch as pw
    from ..present import watch_records as wr

    src = Path(folder)
    records, skipped = read_records(src)
    recs = wr.session_records(records)
    parts, bad_parts = part_stats(src)
    summary = wr.session_summary(recs)
    windows, events, rates = wr.windows_frame(recs), wr.events_frame(recs), wr.rates_frame(recs, parts)
    phases = wr.device_phases(windows)
    notes = []
    if skipped:
        shown = ", ".join(map(str, skipped[:SHOW_SKIPPED])) + (", …" if len(skipped) > SHOW_SKIPPED else "")
        notes.append(f"{len(skipped)} line{'' if len(skipped) == 1 else 's'} of {JOURNAL} skipped: not a JSON record "
                     f"that checks (line {shown}); the page reads the {len(records)} others")
        log(f"report: watch {src.name}: {len(skipped)} line(s) of {JOURNAL} are not JSON records that check and were "
            "skipped")
    if bad_parts:
        notes.append(f"{len(bad_parts)} Parquet part{'' if len(bad_parts) == 1 else 's'} of {ROWS}/ could not be "
                     f"read ({', '.join(bad_parts[:SHOW_SKIPPED])}): those windows' commands/s come from the "
                     "journal's clock")
    ignored = len(records) - len(recs)
    if ignored:
        notes.append(f"{ignored} record{'' if ignored == 1 else 's'} of a kind this report does not know "
                     "ignored")
    nr_zones = summary["meta"].get("nr_zones")
    figures = [pw.hot_set_figure(windows, events, nr_zones if isinstance(nr_zones, int) else None),
               pw.gain_figure(windows, events, summary["threshold"]), pw.device_hit_figure(windows, events, phases),
               pw.latency_figure(windows, events), pw.rate_figure(rates), pw.lost_figure(windows)]
    name = src.resolve().name
    out = Path(out_dir) if out_dir else REPORTS / f"watch-{name}"
    index = out / "index.html"
    page = watch_page(name, meta_line(src, summary, recs), pw.watch_headline(summary, rates, len(skipped), phases),
                      [figure_item(f) for f in figures], list(events.iter_rows(named=True)), notes,
                      pw.phase_rows(phases))
    with writing(out):
        write_plotlyjs(out)
        write_atomic(index, page)
    return {"run": f"watch-{name}", "out": str(out), "index": str(index), "ok": True, "trace": None, "pages": [],
            "skipped_lines": skipped, "unread_parts": bad_parts,
            "summary": {k: v for k, v in summary.items() if k not in ("meta", "rollback_records")}}

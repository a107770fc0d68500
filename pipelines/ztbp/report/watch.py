"""The report of a `ztbp watch` session: `ztbp report JOURNAL` writes one offline HTML page from its journal.

The journal (docs/watch.md) is `watch.jsonl` and the raw rows in `rows/rows-NNNNNN.parquet`. The records become
frames and figures in present/watch.py (pure); this module reads the files, and writes `index.html` and the
folder's one copy of plotly.js (report/render.write_plotlyjs), each whole (files.write_atomic), so the page opens
offline. Every text read from the journal is escaped on the page.

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
from ..files import make_dir, write_atomic
from ..io.journal import JOURNAL, ROWS, part_stats, read_records
from ..paths import REPORTS
from ..units import MIB
from .render import PLOTLY_JS, _esc, headline_html, write_plotlyjs

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


def _figure_html(fig: Any) -> str:
    from ..present.figures import Note

    if isinstance(fig, Note):
        return f'<p class="note">{_esc(fig.text)}</p>'
    import plotly.io as pio

    return str(pio.to_html(fig, include_plotlyjs=False, full_html=False,
                           config={"displaylogo": False, "responsive": True}))


def _table_html(events: Any) -> str:
    if events.height == 0:
        return '<p class="note">no decision in this session</p>'
    head = "".join(f"<th>{h}</th>" for h in ("window", "time", "record", "what", "zones", "reason, answer"))
    rows = []
    for r in events.iter_rows(named=True):
        cls = _esc(r["kind"]) + (f" {_esc(r['what'])}" if r["kind"] == "decision" else "")
        rows.append(f'<tr class="{cls}"><td>{"" if r["window"] is None else _esc(r["window"])}</td>'
                    f'<td>{_esc(r["time"])}</td><td>{_esc(r["kind"])}</td><td>{_esc(r["what"])}</td>'
                    f'<td>{_esc(r["zones"])}</td><td>{_esc(r["detail"])}</td></tr>')
    return f'<table class="events"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'


def _meta_line(folder: Path, summary: dict[str, Any], records: list[dict[str, Any]]) -> str:
    from ..present.watch import clock_text

    m = summary["meta"]
    parts = [f"journal {_esc(folder)}"]
    if m:
        try:
            zone = f"{m['nr_zones']} zones of {m['zone_size_lba'] * m['lba_bytes'] / MIB:g} MiB"
        except (KeyError, TypeError):
            zone = "geometry not recorded"
        parts.append(f"device {_esc(m.get('device') or 'unknown')} · {_esc(zone)}")
    start = next(r for r in records if r["kind"] == "start")
    wc, ws = start.get("window_commands"), start.get("window_s")
    parts.append(f"windows of {_esc(wc)} commands" + (f" or {_esc(ws)} s" if ws is not None else ""))
    rules = [f"{k} {_esc(v)}" for k, v in (("K", summary["k"]), ("threshold", summary["threshold"])) if v is not None]
    if rules:
        parts.append(", ".join(rules))
    walls = [r["wall"] for r in records if isinstance(r.get("wall"), int | float) and not isinstance(r["wall"], bool)]
    if walls:
        parts.append(f"{_esc(clock_text(min(walls)))} → {_esc(clock_text(max(walls)))}")
    if summary["attached"] is not None:
        parts.append(f"probe attached at {_esc(clock_text(summary['attached']))}")
    return " ·\n".join(parts)


def watch_page(name: str, meta_line: str, headline: list[dict[str, str]], figures: list[str], table: str,
               notes: list[str]) -> str:
    """The page: the headline, the notes (lines skipped, parts unread), the figures and the table. `name` and
    `notes` are escaped here; `meta_line`, `figures` and `table` are HTML already escaped."""
    note_html = "".join(f'<p class="note">{_esc(n)}</p>' for n in notes)
    figs = "\n".join(f'<div class="plot">{f}</div>' for f in figures)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>ZTBP report — watch session {_esc(name)}</title>
<script src="{PLOTLY_JS}"></script>
<style>
body {{ font-family: sans-serif; margin: 24px auto; max-width: 1200px; color: #222; }}
h1 {{ margin-bottom: 4px; }} .meta {{ color: #555; margin-top: 0; }}
.headline {{ display: grid; grid-template-columns: repeat(auto-fit, minmax(320px, 1fr)); gap: 12px; margin: 16px 0; }}
.figure {{ border: 1px solid #cfd8dc; border-radius: 6px; padding: 10px 14px; background: #fafcfd; }}
.figure .label {{ font-size: 13px; color: #555; text-transform: uppercase; letter-spacing: .03em; }}
.figure .value {{ font-size: 22px; font-weight: 600; margin: 4px 0; overflow-wrap: anywhere; }}
.figure .detail {{ font-size: 13px; color: #444; overflow-wrap: anywhere; }}
.note {{ background: #fff8e1; border-left: 4px solid #ffb300; padding: 6px 10px; }}
.plot {{ border: 1px solid #eee; border-radius: 6px; margin: 12px 0; }}
table.events {{ border-collapse: collapse; font-size: 13px; width: 100%; }}
table.events th, table.events td {{ border-bottom: 1px solid #e0e0e0; padding: 3px 6px; text-align: left;
                                     vertical-align: top; overflow-wrap: anywhere; }}
tr.apply td, tr.decision.apply td {{ background: #e8f5e9; }} tr.rollback td, tr.decision.rollback td {{
  background: #ffebee; }} tr.decision.defer td {{ background: #fff8e1; }} tr.verify td {{ background: #e3f2fd; }}
tr.start td, tr.stop td {{ background: #f5f5f5; font-weight: 600; }}
table.events td:nth-child(-n+4), table.events th {{ white-space: nowrap; overflow-wrap: normal; }}
</style></head>
<body>
<h1>ZTBP report — watch session {_esc(name)}</h1>
<p class="meta">{meta_line}</p>
{headline_html(headline)}
{note_html}
<h2>Figures</h2>
{figs}
<h2>Decisions, applies, verifications and rollbacks</h2>
{table}
<p class="meta">Made by <code>ztbp report</code> from the session's journal (docs/watch.md); plotly.js is loaded
from <code>{PLOTLY_JS}</code> in this folder, so the report opens offline.</p>
</body></html>
"""


def render_watch(folder: str | os.PathLike[str], out_dir: str | os.PathLike[str] | None = None,
                 log: Callable[[str], None] = print) -> dict[str, Any]:
    """The report of a watch session's journal folder: `out_dir` (default reports/watch-<folder name>)/index.html
    and plotly.min.js. Returns what was written and the session's summary."""
    from ..present import watch as pw

    src = Path(folder)
    records, skipped = read_records(src)
    recs = pw.session_records(records)
    parts, bad_parts = part_stats(src)
    summary = pw.session_summary(recs)
    windows, events, rates = pw.windows_frame(recs), pw.events_frame(recs), pw.rates_frame(recs, parts)
    notes = []
    if skipped:
        shown = ", ".join(map(str, skipped[:SHOW_SKIPPED])) + (", …" if len(skipped) > SHOW_SKIPPED else "")
        notes.append(f"{len(skipped)} line{'' if len(skipped) == 1 else 's'} of {JOURNAL} skipped: not a JSON record "
                     f"(line {shown}); the page reads the {len(records)} others")
        log(f"report: watch {src.name}: {len(skipped)} line(s) of {JOURNAL} are not JSON records and were skipped")
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
               pw.gain_figure(windows, events, summary["threshold"]), pw.latency_figure(windows, events),
               pw.rate_figure(rates), pw.lost_figure(windows)]
    name = src.resolve().name
    out = Path(out_dir) if out_dir else REPORTS / f"watch-{name}"
    make_dir(out)
    write_plotlyjs(out)
    index = out / "index.html"
    page = watch_page(name, _meta_line(src, summary, recs), pw.watch_headline(summary, rates, len(skipped)),
                      [_figure_html(f) for f in figures], _table_html(events), notes)
    write_atomic(index, page)
    return {"run": f"watch-{name}", "out": str(out), "index": str(index), "ok": True, "trace": None, "pages": [],
            "skipped_lines": skipped, "unread_parts": bad_parts,
            "summary": {k: v for k, v in summary.items() if k not in ("meta", "rollback_records")}}

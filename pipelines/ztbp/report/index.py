"""A report's front page (`index.html`): a run's or a loop's, from templates/run-index.html.j2 and
templates/loop-index.html.j2 — its line of facts, its headline, one card per notebook page (`Page`) and the card of
the run's Perfetto trace or of the loop's rounds. The facts are computed here as text; the templates escape them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..paths import RunPaths
from ..present.loop import headline as loop_headline
from ..units import MIB
from .pages import render_page


@dataclass
class Page:
    """One notebook's page of a report: what its card on the front page shows."""

    stem: str
    title: str
    description: str
    ok: bool = False
    error: str = ""
    seconds: float = 0.0
    summary: list[str] = field(default_factory=list)
    reused: bool = False


def run_meta_line(meta: dict[str, Any]) -> str:
    """A run's facts under the title: how it was made, its workload and its device's geometry."""
    wl = meta.get("workload", {})
    kind = "synthetic" if meta.get("synthetic") else f"traced ({meta.get('backend', '?')})"
    zone_mib = meta["zone_size_lba"] * meta["lba_bytes"] / MIB
    return (f"{kind} run · workload {wl.get('name', '?')} ·\n"
            f"{meta['nr_zones']} zones of {zone_mib:g} MiB · {meta['lba_bytes']}-byte LBAs ·\n"
            f"device {meta.get('device', '?')}")


def index_html(rp: RunPaths, meta: dict[str, Any], pages: list[Page], trace: dict[str, Any] | None = None,
               headline: list[dict[str, str]] | None = None) -> str:
    """A run's front page; `trace` is render.timeline_trace's answer (None: no trace asked for)."""
    return render_page("run-index.html.j2", name=rp.run_id, meta_line=run_meta_line(meta),
                       headline=headline or [], pages=pages, trace=trace)


def loop_meta_line(doc: dict[str, Any]) -> str:
    """A loop's facts under the title: its device, workload, rounds and why it stopped."""
    wl = doc.get("workload") or {}
    return (f"closed loop on {doc.get('backend') or 'an unknown device'} · workload {wl.get('name') or 'unnamed'} · "
            f"{len(doc['rounds'])} of {doc.get('rounds_asked') or len(doc['rounds'])} rounds · stopped: "
            f"{doc.get('stopped') or 'not by its rule'}")


def round_text(entry: dict[str, Any]) -> str:
    """One round of loop.json as a line: its rows, reads, losses and the configuration it made."""
    cfg = entry.get("config") or {}
    hot = cfg.get("hot_zones")
    zones = ", ".join(map(str, hot)) if isinstance(hot, list) and hot else "none"
    return (f"round {entry['round']}: {count_text(entry['read_rows'])} read rows for "
            f"{count_text(entry['fio_reads'])} fio reads, lost {count_text(entry['lost'])}; config [{zones}] "
            f"{'recommended' if cfg.get('recommend') else 'not recommended'}")


def loop_index_html(name: str, doc: dict[str, Any], pages: list[Page], round_pages: set[str] | None = None) -> str:
    """A loop's front page; a round whose run is in `round_pages` links to its own report in this folder."""
    rounds = [{"run": e["run"], "what": round_text(e), "linked": bool(round_pages) and e["run"] in round_pages}
              for e in doc["rounds"]]
    return render_page("loop-index.html.j2", name=name, meta_line=loop_meta_line(doc), headline=loop_headline(doc),
                       pages=pages, rounds=rounds)


def count_text(value: Any) -> str:
    """A count with thousands separators; a value that is not a number (a hand-edited file) as it is."""
    return f"{value:,}" if isinstance(value, int) else "not measured" if value is None else str(value)

"""Everything a report page prints from a run or a loop is HTML-escaped: a run folder, a workload name or a
loop.json field holding markup (`<img onerror=...>`) shows as text, never runs as script."""

from __future__ import annotations

from pathlib import Path

from ztbp.paths import RunPaths
from ztbp.report.index import Page, index_html, loop_index_html
from ztbp.report.render import exporter

EVIL = '<img src=x onerror="alert(1)">'


def _assert_escaped(page: str) -> None:
    assert "<img" not in page and "onerror=\"" not in page
    assert "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in page


def test_run_index_escapes_every_field_of_the_run() -> None:
    meta = {"workload": {"name": EVIL}, "backend": EVIL, "zone_size_lba": 8192, "lba_bytes": 4096,
            "nr_zones": EVIL, "device": EVIL}
    pages = [Page(stem="1-overview", title=EVIL, description=EVIL, ok=False, error=EVIL, summary=[EVIL])]
    trace = {"file": None, "error": EVIL}
    _assert_escaped(index_html(RunPaths(Path("/tmp") / EVIL.replace("/", "_")), meta, pages, trace))


def test_run_index_escapes_the_trace_card() -> None:
    meta = {"workload": {}, "zone_size_lba": 1, "lba_bytes": 4096, "nr_zones": 1}
    trace = {"file": EVIL.replace("/", "_"), "mib": 1.0, "commands": EVIL, "requests": EVIL}
    page = index_html(RunPaths(Path("/tmp/r")), meta, [], trace)
    assert "<img" not in page and "&lt;img" in page


def test_loop_index_escapes_every_field_of_loop_json() -> None:
    doc = {"backend": EVIL, "workload": {"name": EVIL}, "rounds_asked": EVIL, "stopped": EVIL,
           "rounds": [{"round": 1, "run": EVIL.replace("/", "_"), "read_rows": EVIL, "fio_reads": 10, "lost": 0,
                       "config": {"hot_zones": [EVIL], "recommend": True}}]}
    page = loop_index_html(EVIL, doc, [], {EVIL.replace("/", "_")})
    assert "<img" not in page
    assert "of &lt;img src=x onerror=&quot;alert(1)&quot;&gt; rounds" in page  # rounds_asked


def test_notebook_page_escapes_its_title() -> None:
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells.append(nbformat.v4.new_markdown_cell("# Overview"))
    title = f"Overview — run {EVIL}"
    body, _ = exporter().from_notebook_node(nb, resources={"metadata": {"name": title}, "ztbp_title": title})
    assert "<img" not in body
    assert "&lt;img src=x onerror=" in body


def test_every_template_escapes_by_itself() -> None:
    """The report's templates autoescape: a value is escaped as `html.escape` does (quotes too, so it may stand in an
    attribute) without any call in the template, and markup already made (a macro's, a figure's) is kept."""
    from markupsafe import Markup

    from ztbp.report.pages import TEMPLATES, environment

    env = environment()
    names = sorted(p.name for p in TEMPLATES.glob("*.html.j2") if p.name != "page.html.j2")  # page: nbconvert's
    assert names and all(env.select_autoescape(n) if callable(env.autoescape) else env.autoescape for n in names)
    tpl = env.from_string('<a title="{{ v }}">{{ v }}</a>{{ m }}')
    assert tpl.render(v=EVIL, m=Markup("<b>kept</b>")) == (
        '<a title="&lt;img src=x onerror=&quot;alert(1)&quot;&gt;">&lt;img src=x onerror=&quot;alert(1)&quot;&gt;</a>'
        "<b>kept</b>")


def test_loop_index_escapes_a_round_without_its_report() -> None:
    doc = {"rounds": [{"round": EVIL, "run": EVIL.replace("/", "_"), "read_rows": EVIL, "fio_reads": None,
                       "lost": EVIL, "config": {"hot_zones": EVIL, "recommend": False}}]}
    page = loop_index_html("loop", doc, [], None)
    assert "<img" not in page
    assert "<code>&lt;img src=x onerror=&quot;alert(1)&quot;&gt;/</code>" in page  # the run, unlinked


def test_watch_page_escapes_its_title_notes_figures_table_and_meta_line() -> None:
    from ztbp.report.watch import watch_page

    page = watch_page(EVIL, EVIL, [{"key": EVIL, "label": EVIL, "value": EVIL, "detail": EVIL}], [{"note": EVIL}],
                      [{"window": EVIL, "time": EVIL, "kind": "decision", "what": EVIL, "zones": EVIL,
                        "detail": EVIL}], [EVIL])
    _assert_escaped(page)
    assert page.count("&lt;img src=x onerror=&quot;alert(1)&quot;&gt;") == 15

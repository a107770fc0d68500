"""`ztbp report JOURNAL`: a `ztbp watch` session's journal rendered to one offline page (headline, figures, the
table of decisions), on synthetic sessions made by the session's own pipeline with a fake device (no probe, no VM).
"""

from __future__ import annotations

import html
import json
import math
import re
import shutil
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from test_report_browser import NETWORK_SCHEMES, _open, browser  # noqa: F401 - browser: headless Chromium fixture

from ztbp.acquire.watch_synth import replay
from ztbp.analysis.watch import WatchParams
from ztbp.control.watch import Session, WatchRequest
from ztbp.errors import ZtbpError
from ztbp.io.journal import part_stats, read_journal, read_records
from ztbp.present import watch as pw
from ztbp.present import watch_records as wr
from ztbp.report.watch import render_watch

META = {"device": "nvme0n1", "zone_size_lba": 1024, "lba_bytes": 4096, "nr_zones": 128}
A = (3, 17, 40, 77, 101)
B = (9, 22, 58, 90, 120)
W = 10_000  # commands per window
K = 3
T0 = 1.7e9
RATE = 100_000.0  # the replay's commands a second (its rows' ts_ns)
EVIL = "<script>alert(1)</script>"


class FakeDevice:
    """Accepts SET and STOP (or refuses SET); STATUS answers the read counts given, one per call (the session asks
    as each window closes), with the hit counts beside them when given."""

    def __init__(self, reads: list[int] | None = None, refuse: bool = False,
                 hits: list[int] | None = None) -> None:
        self.reads, self.refuse, self.hits = list(reads or []), refuse, list(hits or [])

    def set(self, zones: tuple[int, ...]) -> dict[str, Any]:
        if self.refuse:
            return {"ok": False, "exit_code": 30, "message": "device does not implement the ZTBP cache protocol"}
        return {"ok": True, "exit_code": 0}

    def stop(self) -> dict[str, Any]:
        return {"ok": True, "exit_code": 0}

    def status(self) -> dict[str, Any]:
        if not self.reads:
            return {"ok": False}
        return {"ok": True, "result": {"reads": self.reads.pop(0), **({"hits": self.hits.pop(0)} if self.hits else {})}}


def device_counts(ratios: list[float]) -> tuple[list[int], list[int]]:
    """A device's read and hit counters as each of len(ratios) windows closes: W reads a window, ratios[w] of
    window w's hits (the first window's are not counted: no answer before it)."""
    reads, hits = [W * (w + 1) for w in range(len(ratios))], []
    total = 0
    for r in ratios:
        total += round(r * W)
        hits.append(total)
    return reads, hits


#: the three-phase session's device hit ratio per window: 20 % with no set in force, 50 % with A, 60 % with B
#: (A in force from window K, B from 8 + K, none again from 16 + K)
PHASE_RATIOS = [0.5 if K <= w < 8 + K else 0.6 if 8 + K <= w < 16 + K else 0.2 for w in range(24)]


def run_session(folder: Path, phases: list[tuple[str, int, tuple[int, ...]]], device: FakeDevice, seed: int,
                resume: bool = False, start: float = T0, **params: Any) -> dict[str, Any]:
    """A session whose clock moves 10 minutes a window, on `phases` of (kind, commands, hot zones)."""
    tick = {"n": 0}

    def clock() -> float:
        tick["n"] += 1
        return start + 600.0 * tick["n"]

    p = WatchParams(**{"k": K, "cache_mib": 8, **params})
    s = Session(WatchRequest(META, p, folder, window_commands=W, resume=resume), device, clock)
    s.mono = lambda: s.latest_ns + 1  # the machine's clock just past the last row: a probe that keeps up
    return s.run(replay(phases, META, seed=seed, rate=RATE))


@pytest.fixture(scope="module")
def three_phases(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Hot set A for 8 windows, hot set B for 8, Zipf for 8: A applied, B applied, rolled back in the Zipf phase;
    STATUS counts every read of each window and its hits by the set in force (PHASE_RATIOS)."""
    folder = tmp_path_factory.mktemp("watch") / "three-phases"
    reads, hits = device_counts(PHASE_RATIOS)
    run_session(folder, [("hot", 8 * W, A), ("hot", 8 * W, B), ("zipf", 8 * W, ())],
                FakeDevice(reads=reads, hits=hits), seed=1)
    return folder


@pytest.fixture(scope="module")
def resumed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A session on A stopped with an open window of 3,000 commands, resumed an hour later on B: one journal with
    two start records, the Parquet parts numbered on across both."""
    folder = tmp_path_factory.mktemp("watch") / "resumed"
    run_session(folder, [("hot", 4 * W + 3_000, A)], FakeDevice(), seed=4)
    run_session(folder, [("hot", 4 * W, B)], FakeDevice(), seed=5, resume=True, start=T0 + 3600)
    return folder


def headline_of(page: str) -> dict[str, str]:
    """key -> value of the page's headline boxes (unescaped)."""
    boxes = re.findall(r'id="headline-([\w-]+)"><div class="label">.*?</div><div class="value">(.*?)</div>', page)
    return {k: html.unescape(v) for k, v in boxes}


def copy_journal(src: Path, dst: Path, edit: Any = None) -> Path:
    """A copy of a journal folder, its watch.jsonl's records passed through `edit` (records -> lines)."""
    shutil.copytree(src, dst)
    if edit is not None:
        lines = edit(read_journal(src))
        (dst / "watch.jsonl").write_text("".join(line + "\n" for line in lines))
    return dst


# ---- the headline says what the journal says ---------------------------------------------------------------------
def test_the_headline_numbers_equal_the_journals(three_phases: Path, tmp_path: Path) -> None:
    res = render_watch(three_phases, tmp_path / "out", log=lambda s: None)
    recs = read_journal(three_phases)
    kinds = [r["kind"] for r in recs]
    stop = recs[-1]
    assert stop["kind"] == "stop"
    sm = res["summary"]
    assert sm["windows"] == kinds.count("window") == stop["windows"] == 24
    assert sm["commands"] == stop["commands"] == sum(r["commands"] for r in recs if r["kind"] == "window") == 24 * W
    assert sm["lost"] == stop["lost"] == 0
    assert sm["applies_made"] == kinds.count("apply") == 2 and sm["applies_refused"] == 0
    assert sm["applied_in"] == [K - 1, 8 + K - 1]
    assert sm["deferred"] == 0 and sm["rollbacks"] == kinds.count("rollback") == 1
    assert sm["in_force"] == stop["in_force"] == [] and sm["why"] == stop["why"] == "the source ended"
    page = Path(res["index"]).read_text()
    head = headline_of(page)
    assert head["windows"] == "24 windows, 240,000 commands"
    assert head["lost"] == "0"
    assert head["applies"] == "2 made, 0 refused, 0 deferred"
    assert head["rollbacks"] == "1"
    assert head["in_force"] == "none"
    assert head["stopped"] == "the source ended"
    assert head["iops"] == "median 100,000 (min 100,000, max 100,000)"
    assert "rolled back after window 18; device left as it is at the stop" in html.unescape(page)


def test_the_table_holds_every_decision_apply_verify_and_rollback(three_phases: Path, tmp_path: Path) -> None:
    recs = read_journal(three_phases)
    events = wr.events_frame(recs)
    wanted = [r for r in recs if r["kind"] in ("start", "decision", "apply", "verify", "rollback", "stop")]
    assert events.height == len(wanted) == 1 + 24 + 2 + 2 + 1 + 1
    decisions = events.filter(pl.col("kind") == "decision")
    assert decisions["detail"].to_list() == [r["reason"] for r in recs if r["kind"] == "decision"]
    verify = events.filter(pl.col("kind") == "verify")["detail"].to_list()
    assert len(verify) == 2 and all(f"STATUS read count moved {W:,} against {W:,} reads traced: equal" in v
                                    for v in verify)
    page = Path(render_watch(three_phases, tmp_path / "out", log=lambda s: None)["index"]).read_text()
    assert page.count("<tr class=") == events.height
    rollback = next(r for r in recs if r["kind"] == "rollback")
    assert html.escape(rollback["reason"]) in page


def test_the_set_in_force_follows_applies_and_the_rollback(three_phases: Path) -> None:
    w = wr.windows_frame(read_journal(three_phases))
    assert w["window"].to_list() == list(range(24))
    force = [tuple(z) for z in w["in_force"].to_list()]
    applied_a, applied_b, rolled = K - 1, 8 + K - 1, 16 + K - 1
    assert force[: applied_a + 1] == [()] * (applied_a + 1)
    assert force[applied_a + 1: applied_b + 1] == [A] * (applied_b - applied_a)
    assert force[applied_b + 1: rolled + 1] == [B] * (rolled - applied_b)
    assert force[rolled + 1:] == [()] * (23 - rolled)
    assert tuple(w["hot"][0]) == A and tuple(w["hot"][9]) == B and w["hot"][20].to_list() == []


def test_the_figures_exist_with_titles_and_axes_and_open_offline(three_phases: Path, tmp_path: Path) -> None:
    res = render_watch(three_phases, tmp_path / "out", log=lambda s: None)
    page = Path(res["index"]).read_text()
    assert (tmp_path / "out" / "plotly.min.js").stat().st_size > 1_000_000
    assert '<script src="plotly.min.js"></script>' in page
    assert not re.search(r"""<script[^>]+src=["']?(https?:)?//""", page)  # nothing from the network
    assert page.count('class="plotly-graph-div"') == 6
    for title in ("Hot set over time", "The device's own hit ratio per window and per phase",
                  "Gain of the cache model per window", "Commands per second (IOPS) per window",
                  "Lost events per window (0 in the windows closed)", "Device read latency per window (p50)"):
        assert title in page
    recs = read_journal(three_phases)
    w, events = wr.windows_frame(recs), wr.events_frame(recs)
    fig = pw.hot_set_figure(w, events, 128)
    assert fig.layout.xaxis.title.text == "window" and fig.layout.yaxis.title.text == "zone"
    hot, force, *legend = fig.data
    assert [t.name for t in legend] == ["apply made", "rollback"]  # the marks' kinds, named once
    assert {(x, y) for x, y in zip(hot.x, hot.y, strict=True) if x == 0} == {(0, z) for z in A}
    assert {(x, y) for x, y in zip(force.x, force.y, strict=True) if x == 9} == {(9, z) for z in A}
    marks = sorted((s.x0, s.line.color) for s in fig.layout.shapes)
    assert [x for x, _ in marks] == [K - 0.5, 8 + K - 0.5, 16 + K - 0.5]  # two applies and the rollback
    gain = pw.gain_figure(w, events, 0.01)
    assert gain.layout.yaxis.title.text == "hit-ratio gain"
    assert any(s.y0 == 0.01 and s.y1 == 0.01 for s in gain.layout.shapes)  # the threshold line
    assert list(gain.data[1].y)[K + 1] == w["in_force_gain"][K + 1] > 0.01
    assert pw.lost_figure(w).layout.yaxis.title.text == "events lost"
    lat = pw.latency_figure(w, events)  # the replay's reads all take 100 µs; none in force before the first apply
    assert lat.layout.yaxis.title.text == "µs" and lat.layout.yaxis.type == "log"
    assert list(lat.data[0].y)[0] is None and list(lat.data[0].y)[K + 1] == 100.0
    assert set(lat.data[1].y) == {100.0}


def test_the_devices_hit_ratio_per_window_and_per_phase(three_phases: Path, tmp_path: Path) -> None:
    recs = read_journal(three_phases)
    w = wr.windows_frame(recs)
    assert w["device_hit_ratio"][0] is None  # no STATUS before the first window
    assert w["device_hit_ratio"].to_list()[1:] == pytest.approx(PHASE_RATIOS[1:])
    phases = wr.device_phases(w)
    assert [(p["first"], p["last"], tuple(p["in_force"]), p["counted"]) for p in phases] == [
        (0, K - 1, (), K - 1), (K, 8 + K - 1, A, 8), (8 + K, 16 + K - 1, B, 8), (16 + K, 23, (), 8 - K)]
    assert [p["hit_ratio"] for p in phases] == pytest.approx([0.2, 0.5, 0.6, 0.2])
    assert [p["reads"] for p in phases] == [(K - 1) * W, 8 * W, 8 * W, (8 - K) * W]
    page = Path(render_watch(three_phases, tmp_path / "out", log=lambda s: None)["index"]).read_text()
    head = headline_of(page)
    assert head["hit_device"] == "none: 20.0 % → 3, 17, 40, 77, 101: 50.0 % → 9, 22, 58, 90, 120: 60.0 % → none: 20.0 %"
    assert ("<td>3–10</td><td>3, 17, 40, 77, 101</td><td>8 of 8</td><td>80,000</td><td>40,000</td><td>50.0 %</td>"
            in page)
    verify = wr.events_frame(recs).filter(pl.col("kind") == "verify")["detail"].to_list()
    assert "the device's hits 5,000, hit ratio 0.5000" in verify[0] and "hit ratio 0.6000" in verify[1]
    fig = pw.device_hit_figure(w, wr.events_frame(recs), phases)
    assert fig.layout.yaxis.title.text == "hit ratio" and list(fig.data[1].y) == pytest.approx([0.2, 0.2])


def test_a_device_without_hit_counts_says_so(tmp_path: Path) -> None:
    folder = tmp_path / "no-hits"
    run_session(folder, [("hot", 4 * W, A)], FakeDevice(reads=[0, W, 2 * W, 3 * W]), seed=2)
    w = wr.windows_frame(read_journal(folder))
    assert w["device_reads"].to_list() == [None, W, W, W] and w["device_hit_ratio"].null_count() == 4
    page = Path(render_watch(folder, tmp_path / "out", log=lambda s: None)["index"]).read_text()
    assert headline_of(page)["hit_device"] == "not counted by this device"
    assert "no window has the device" in page and "own hit ratio (STATUS" in page


def test_commands_per_second_come_from_the_rows_time(three_phases: Path, tmp_path: Path) -> None:

    recs = read_journal(three_phases)
    parts, bad = part_stats(three_phases)
    assert bad == [] and len(parts) == 24
    rates = wr.rates_frame(recs, parts)
    assert rates["source"].unique().to_list() == ["rows' time"]
    assert rates["commands_per_s"].to_list() == pytest.approx([RATE] * 24)
    no_rows = copy_journal(three_phases, tmp_path / "no-rows")
    shutil.rmtree(no_rows / "rows")
    rates = wr.rates_frame(recs, part_stats(no_rows)[0])
    assert rates["source"].unique().to_list() == ["journal clock"]  # the wall time between window records
    assert rates["commands_per_s"].null_count() == 0


# ---- one session across --resume ---------------------------------------------------------------------------------
def test_a_resumed_journal_is_one_session(resumed: Path, tmp_path: Path) -> None:

    recs = read_journal(resumed)
    stops = [r for r in recs if r["kind"] == "stop"]
    assert [r["resumed"] for r in recs if r["kind"] == "start"] == [False, True] and len(stops) == 2
    res = render_watch(resumed, tmp_path / "out", log=lambda s: None)
    sm = res["summary"]
    assert sm["runs"] == 2 and sm["windows"] == 8
    assert sm["commands"] == stops[0]["commands"] + stops[1]["commands"] == 8 * W + 3_000
    assert sm["applies_made"] == 2 and sm["in_force"] == list(B) == stops[1]["in_force"]
    w = wr.windows_frame(recs)
    assert w["window"].to_list() == list(range(8)) and w["segment"].to_list() == [1] * 4 + [2] * 4
    # A in force from window 3, into the resumed run (its start record's state); B applied after its K-th window
    assert [tuple(z) for z in w["in_force"].to_list()[3:]] == [A] * (1 + K) + [B]
    # the open window's part sits between the two runs' parts: every window still gets its own rows' time
    rates = wr.rates_frame(recs, part_stats(resumed)[0])
    assert rates["source"].to_list() == ["rows' time"] * 8
    page = Path(res["index"]).read_text()
    assert "windows closed and decided on; commands traced, the open window at the stop included; resumed 1 time " \
           "(one session)" in page
    assert page.count('<tr class="start">') == 2


# ---- hardening ---------------------------------------------------------------------------------------------------
def test_every_string_of_the_journal_is_escaped(three_phases: Path, tmp_path: Path) -> None:
    def edit(recs: list[dict[str, Any]]) -> list[str]:
        for r in recs:
            if r["kind"] == "decision":
                r["reason"] = f"{r['reason']} {EVIL}"
            elif r["kind"] == "rollback":
                r["reason"], r["message"] = EVIL, EVIL
            elif r["kind"] == "apply":
                r["message"] = EVIL
            elif r["kind"] == "stop":
                r["why"], r["device"] = EVIL, EVIL
            elif r["kind"] == "start":
                r["meta"] = {**r["meta"], "device": EVIL}
        recs.append({"kind": EVIL, "wall": T0, "note": EVIL})
        return [json.dumps(r) for r in recs]

    folder = copy_journal(three_phases, tmp_path / "evil-<i>x</i>", edit)
    res = render_watch(folder, tmp_path / "out", log=lambda s: None)
    page = Path(res["index"]).read_text()
    assert "<script>alert" not in page and "<i>x" not in page
    assert page.count(html.escape(EVIL)) >= 24  # every decision's reason, the rollback, the stop
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert headline_of(page)["stopped"] == EVIL  # shown as text
    assert "1 record of a kind this report does not know ignored" in page


def test_records_whose_fields_do_not_check_are_skipped_and_counted(three_phases: Path, tmp_path: Path) -> None:
    """A string where a number or a zone is, NaN, a window of -5: the record is skipped, never half read."""
    edits = {"apply": ("exit_code", EVIL), "stop": ("in_force", [EVIL, 3]), "start": ("window_commands", EVIL),
             "verify": ("measured_gain", math.nan), "rollback": ("window", -5)}

    def edit(recs: list[dict[str, Any]]) -> list[str]:
        for r in recs:
            if r["kind"] in edits:
                key, value = edits[r["kind"]]
                r[key] = value
            elif r["kind"] == "window" and r["window"] == 3:
                r["hot"] = [*r["hot"], EVIL]
        return [json.dumps(r) for r in recs]

    base = json.loads((three_phases / "watch.jsonl").read_text().splitlines()[0])
    folder = copy_journal(three_phases, tmp_path / "typed", edit)
    (folder / "watch.jsonl").write_text(json.dumps(base) + "\n" + (folder / "watch.jsonl").read_text())
    res = render_watch(folder, tmp_path / "out", log=lambda s: None)
    recs = [json.loads(ln) for ln in (folder / "watch.jsonl").read_text().splitlines()]
    expected = [n for n, r in enumerate(recs, start=1)
                if (r["kind"] in edits and n > 1) or (r["kind"] == "window" and r["window"] == 3)]
    assert res["skipped_lines"] == expected and len(expected) >= 6
    assert res["summary"]["in_force"] == []  # the stop record is skipped: the set follows the decisions
    assert "not a JSON record that checks" in Path(res["index"]).read_text()


def test_unknown_record_kinds_are_ignored(three_phases: Path, tmp_path: Path) -> None:
    def edit(recs: list[dict[str, Any]]) -> list[str]:
        out = []
        for r in recs:
            out.append(json.dumps(r))
            if r["kind"] == "window":
                out.append(json.dumps({"kind": "telemetry", "wall": r["wall"], "window": 99, "commands": 10**9}))
        return out

    base = render_watch(three_phases, tmp_path / "a", log=lambda s: None)["summary"]
    folder = copy_journal(three_phases, tmp_path / "extra-kinds", edit)
    res = render_watch(folder, tmp_path / "b", log=lambda s: None)
    assert res["summary"] == base
    assert "24 records of a kind this report does not know ignored" in Path(res["index"]).read_text()


def test_corrupt_lines_are_counted_skipped_and_noted(three_phases: Path, tmp_path: Path) -> None:
    def edit(recs: list[dict[str, Any]]) -> list[str]:
        lines = [json.dumps(r) for r in recs]
        hold = next(i for i, r in enumerate(recs) if r["kind"] == "decision" and r["action"] == "hold")
        lines[hold] = lines[hold][: len(lines[hold]) // 2]  # damaged
        lines.insert(5, "[1, 2, 3]")  # JSON, but not a record
        lines.append('{"kind": "window", "wall": 1')  # a last line cut by a crash
        return lines

    folder = copy_journal(three_phases, tmp_path / "damaged", edit)
    said: list[str] = []
    res = render_watch(folder, tmp_path / "out", log=said.append)
    assert len(res["skipped_lines"]) == 3
    assert said == ["report: watch damaged: 3 line(s) of watch.jsonl are not JSON records that check and were "
                    "skipped"]
    page = Path(res["index"]).read_text()
    lines = ", ".join(map(str, res["skipped_lines"]))
    assert f"3 lines of watch.jsonl skipped: not a JSON record that checks (line {lines})" in page
    assert headline_of(page)["skipped"] == "3"
    sm = res["summary"]
    assert sm["windows"] == 24 and sm["applies_made"] == 2 and sm["rollbacks"] == 1  # the rest read as it is


@pytest.mark.parametrize(("content", "message"), [
    (None, "no watch.jsonl in it: not the journal of a `ztbp watch` session"),
    (b"not json\n\x00\xff\xfe\n", "no record of a watch session in it (2 lines that are not JSON records that check)"),
    (b"", "no record of a watch session in it (0 lines that are not JSON records that check)"),
    (b'{"kind": "window", "wall": 1, "window": 0}\n', "no start record among its 1 records"),
])
def test_a_folder_that_is_not_a_session_is_one_error_line(tmp_path: Path, content: bytes | None,
                                                         message: str, capsys: pytest.CaptureFixture[str]) -> None:
    from ztbp.cli import main

    folder = tmp_path / "journal"
    (folder / "rows").mkdir(parents=True)
    if content is not None:
        (folder / "watch.jsonl").write_bytes(content)
    with pytest.raises(ZtbpError, match=re.escape(message)):
        read_records(folder)
    rc = main(["report", str(folder), "-o", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc != 0 and len(err) == 1 and err[0].startswith("ztbp report: error: ") and message in err[0]
    assert not (tmp_path / "out").exists()  # nothing written


def test_an_empty_folder_names_the_three_inputs_a_report_reads(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    from ztbp.cli import main

    (tmp_path / "empty").mkdir()
    assert main(["report", str(tmp_path / "empty"), "-o", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"ztbp report: error: {tmp_path / 'empty'}: nothing to report in it: no meta.json (a run), loop.json (a loop "
        "of `ztbp loop`) or watch.jsonl (the journal of `ztbp watch`)"]


def test_the_page_is_written_whole_and_never_through_a_link(three_phases: Path, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    from ztbp.cli import main

    out = tmp_path / "out"
    out.mkdir()
    victim = tmp_path / "victim.html"
    victim.write_text("keep me")
    (out / "index.html").symlink_to(victim)
    rc = main(["report", str(three_phases), "-o", str(out)])
    assert rc != 0 and victim.read_text() == "keep me"
    assert "exists and is not a regular file" in capsys.readouterr().err
    (out / "index.html").unlink()
    assert main(["report", str(three_phases), "-o", str(out)]) == 0
    # no temporary file left (.lock: the folder's lock while a report writes there, as derived/.lock of a run)
    assert sorted(p.name for p in out.iterdir()) == [".lock", "index.html", "plotly.min.js"]


def test_notebook_options_do_not_apply_to_a_watch_journal(three_phases: Path, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    from ztbp.cli import main

    rc = main(["report", str(three_phases), "-o", str(tmp_path / "out"), "--only", "1", "-p", "x", "1"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1
    assert err[0].endswith("is a watch session's journal: its report runs no notebook, so --only, -p do not apply")


# ---- refused applies, a session still running ---------------------------------------------------------------------
def test_a_refused_apply_leaves_nothing_in_force_and_is_counted(tmp_path: Path) -> None:
    folder = tmp_path / "qemu"
    run_session(folder, [("hot", 6 * W, A)], FakeDevice(refuse=True), seed=8, min_interval_s=0)
    recs = read_journal(folder)
    res = render_watch(folder, tmp_path / "out", log=lambda s: None)
    assert res["summary"]["applies_made"] == 0 and res["summary"]["applies_refused"] == 2
    assert res["summary"]["in_force"] == []
    assert all(z == [] for z in wr.windows_frame(recs)["in_force"].to_list())
    page = html.unescape(Path(res["index"]).read_text())
    assert headline_of(Path(res["index"]).read_text())["applies"] == "0 made, 2 refused, 0 deferred"
    assert "refused (exit 30)" in page and "device does not implement the ZTBP cache protocol" in page


def test_a_journal_without_a_stop_record_says_so(three_phases: Path, tmp_path: Path) -> None:
    folder = copy_journal(three_phases, tmp_path / "running",
                          lambda recs: [json.dumps(r) for r in recs if r["kind"] != "stop"])
    res = render_watch(folder, tmp_path / "out", log=lambda s: None)
    head = headline_of(Path(res["index"]).read_text())
    assert head["stopped"] == "no stop record"
    assert res["summary"]["commands"] == 24 * W and res["summary"]["windows"] == 24


def test_a_long_session_renders_in_seconds_and_its_headline_stays_short(tmp_path: Path) -> None:
    """3,000 windows a minute apart, an apply and a rollback every 20 (records written by hand, no rows): the marks are
    set in one layout update (plotly's add_vline took 46 s for 1,000 windows), the headline names a few windows."""
    import time

    recs: list[dict[str, Any]] = [{"kind": "start", "wall": T0, "resumed": False, "window": 0, "meta": META,
                                   "params": {"k": K, "threshold": 0.01}, "window_commands": W,
                                   "state": {"in_force": []}}]
    for i in range(3_000):
        wall = T0 + 60.0 * (i + 1)
        recs.append({"kind": "window", "wall": wall, "window": i, "commands": W, "reads": W, "lost": i % 7,
                     "hot": list(A if i % 20 < 10 else B), "held_out_gain": 0.05, "in_force_gain": 0.02})
        action = {9: "apply", 19: "rollback"}.get(i % 20, "hold")
        zones = list(A if i % 20 < 10 else B)
        recs.append({"kind": "decision", "wall": wall, "window": i, "action": action, "reason": f"{action}: x",
                     "zones": zones, "state": {"in_force": zones if action == "apply" else []}})
        if action == "apply":
            recs.append({"kind": "apply", "wall": wall, "window": i, "zones": zones, "sent": zones, "ok": True})
        elif action == "rollback":
            recs.append({"kind": "rollback", "wall": wall, "window": i, "reason": "rollback: x", "ok": True})
    folder = tmp_path / "long"
    folder.mkdir()
    (folder / "watch.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))  # no stop record: killed
    t0 = time.monotonic()
    res = render_watch(folder, tmp_path / "out", log=lambda s: None)
    seconds = time.monotonic() - t0
    assert seconds < 30, seconds
    sm = res["summary"]
    assert sm["windows"] == 3_000 and sm["commands"] == 3_000 * W and sm["applies_made"] == 150
    assert sm["rollbacks"] == 150 and sm["lost"] == sum(i % 7 for i in range(3_000))
    head = headline_of(Path(res["index"]).read_text())
    assert head["stopped"] == "no stop record"
    page = html.unescape(Path(res["index"]).read_text())
    assert "made in windows 9, 29, 49, …, 2969, 2989" in page
    assert "commands/s per window" in page and head["iops"] == "median 167 (min 167, max 167)"  # W a minute


def test_the_probes_attached_record_is_named_and_kept_out_of_the_table(three_phases: Path, tmp_path: Path) -> None:
    def edit(recs: list[dict[str, Any]]) -> list[str]:
        attached = {"kind": "attached", "wall": 1_764_000_000.0, "probe": "# ztbp nvme v1"}
        return [json.dumps(r) for r in recs[:1] + [attached] + recs[1:]]

    folder = copy_journal(three_phases, tmp_path / "attached", edit)
    res = render_watch(folder, tmp_path / "out", log=lambda s: None)
    page = Path(res["index"]).read_text()
    assert "probe attached at 2025-11-24 16:00:00 UTC" in page
    assert res["summary"]["windows"] == 24 and "record of a kind" not in page
    assert page.count("<tr class=") == wr.events_frame(read_journal(three_phases)).height


# ---- through the command line ------------------------------------------------------------------------------------
def test_ztbp_report_renders_a_watch_journal(three_phases: Path, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    from ztbp.cli import main

    out = tmp_path / "report"
    assert main(["report", str(three_phases), "-o", str(out)]) == 0
    assert capsys.readouterr().out.strip() == (f"report: watch-three-phases: {out / 'index.html'} (24 windows, "
                                               "applies made 2, rollbacks 1)")
    page = (out / "index.html").read_text()
    assert "ZTBP report — watch session three-phases" in page and headline_of(page)["applies"].startswith("2 made")
    assert main(["report", str(three_phases), "-o", str(out), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["index"] == str(out / "index.html") and doc["summary"]["windows"] == 24


# ---- in a browser ------------------------------------------------------------------------------------------------
def test_the_page_renders_offline_in_chromium(three_phases: Path, tmp_path: Path, browser: Any) -> None:  # noqa: F811
    """Headless Chromium (test_report_browser's fixture): no JavaScript error, no request to the network, every
    figure drawn with data and sane axes."""
    res = render_watch(three_phases, tmp_path / "out", log=lambda s: None)
    seen = _open(browser, Path(res["index"]))
    assert [e["message"] for e in seen["logs"] if e["level"] == "SEVERE"] == []
    assert [u for u in seen["requests"] if u.split(":", 1)[0].lower() in NETWORK_SCHEMES] == []
    plots = seen["plots"]
    assert len(plots) == 6 and all(p["rendered"] and p["points"] > 0 and p["axes_sane"] for p in plots)

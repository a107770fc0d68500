"""The report's front page answers the question (a headline block from loop.json or the run), tables are HTML
tables (every column, units from the column name, escaped cells, no "None"), the device page shows a profile only
of the run's device, and a page is made again only when what it is made from changed."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from loop_fixture import make_loop

from ztbp.errors import ZtbpError
from ztbp.io.loop import read_loop
from ztbp.present import loop as present_loop
from ztbp.present.device_study import profile_for_run
from ztbp.present.figures import Note
from ztbp.present.tables import MISSING, column_unit, html_table, show
from ztbp.report.index import loop_index_html
from ztbp.report.notebooks import INPUT_APP_RUN, INPUT_LOOP, INPUT_RUN, only_for
from ztbp.report.pages import headline_html
from ztbp.report.render import input_stamp

ROOT = Path(__file__).resolve().parents[1]
SAMPLE_LOOP = ROOT / "tests" / "data" / "loops" / "sample-nvmevirt"
SAMPLE_PROFILE = ROOT / "tests" / "data" / "profiles" / "sample-nvmevirt"
EVIL = '<img src=x onerror="alert(1)">'


def test_html_table_shows_every_column_with_units_and_escapes_cells() -> None:
    cols = {f"c{i}": [i, i + 1] for i in range(30)}
    frame = pl.DataFrame({**cols, "lat_p50_us": [12.5, None], "hot_read_share": [0.25, 0.5], "name": [EVIL, "x"],
                          "ok": [True, False], "bytes": [10**9, 3]})
    page = html_table(frame)
    assert "shape:" not in page and "…" not in page
    assert page.count("<th ") == frame.width and page.count("<tr>") == frame.height + 1
    assert "lat p50 (µs)" in page and "hot read share (%)" in page and "25.00" in page
    assert "1,000,000,000" in page and f">{MISSING}<" in page and "None" not in page
    assert "<img" not in page and "&lt;img src=x" in page
    assert "2 rows × 35 columns" in page


def test_html_table_counts_the_rows_it_leaves_out() -> None:
    page = html_table(pl.DataFrame({"zone": list(range(12))}), max_rows=5)
    assert page.count("<tr>") == 6 and "12 rows × 1 columns; the first 5 shown" in page


@pytest.mark.parametrize("name, unit", [("p99_us", "µs"), ("duration_s", "s"), ("share", "%"), ("zone", ""),
                                        ("device_hit_ratio", "%"), ("read_bytes", "bytes")])
def test_column_unit_from_the_name(name: str, unit: str) -> None:
    assert column_unit(name)[1] == unit


def test_show_renders_frames_and_passes_notes() -> None:
    assert "<table>" in show(pl.DataFrame({"a": [1]})).data
    note = Note("not captured")
    assert show(note) is note


def _values(doc: dict) -> dict[str, str]:
    return {i["key"]: i["value"] for i in present_loop.headline(doc)}


def test_loop_headline_of_the_sample_nvmevirt_loop_equals_loop_json() -> None:
    doc = read_loop(SAMPLE_LOOP)
    first, last = doc["rounds"][0], doc["rounds"][-1]
    got = _values(doc)
    assert got["hit_model"] == (f"{100 * first['model']['sent_hit_ratio']:.1f} % → "
                                f"{100 * last['model']['sent_hit_ratio']:.1f} %")
    # a loop from before STATUS's hits were carried: the device's hit ratio is not said from the kernel log's
    # prints, which stay the cross-check beside it
    items = {i["key"]: i for i in present_loop.headline(doc)}
    dev = [e["device"]["kernel_log_counters"]["hit_ratio"] for e in (first, last)]
    assert got["hit_device"] == "not counted by STATUS"
    assert f"cross-check, each 1,000,000 reads): {100 * dev[0]:.1f} % → {100 * dev[1]:.1f} %" in \
        items["hit_device"]["detail"]
    assert got["speed"] in ("faster", "slower", "no difference within noise")
    assert got["zones"] == "sent 1, 7, 11, 15, 19 → device holds 1, 7, 11, 15, 19"
    reads = sum(e["fio_reads"] for e in doc["rounds"])
    assert got["rows"] == f"{reads:,} read rows for {reads:,} fio reads, 0 lost events"
    assert "None" not in json.dumps(present_loop.headline(doc))


def test_loop_headline_says_the_devices_own_hit_ratio_beside_the_replay(tmp_path: Path) -> None:
    doc = read_loop(make_loop(tmp_path / "nv", "nvmevirt", reads=2000))
    item = next(i for i in present_loop.headline(doc) if i["key"] == "hit_device")
    assert item["value"] == "27.0 % → 33.0 %"  # STATUS's hits over its reads, round 1 and round 2
    assert "replay of its cache over the same traced reads: 26.0 %, 32.0 % (device − replay +1.0 points, " \
           "+1.0 points)" in item["detail"]
    line = present_loop.round_line(doc["rounds"][1])
    assert "STATUS +2,000 reads, 660 hits: device hit ratio 0.3300, replay 0.3200 (device − replay +0.0100)" in line
    frame = present_loop.rounds_frame(doc)
    assert frame["device_hit_ratio"].to_list() == [0.27, 0.33] and frame["device_minus_replay"].to_list() == [0.01] * 2


def test_loop_headline_of_a_qemu_loop_gives_no_verdict_and_says_refused(tmp_path: Path) -> None:
    doc = read_loop(make_loop(tmp_path / "q", "qemu", reads=2000))
    items = {i["key"]: i for i in present_loop.headline(doc)}
    assert items["speed"]["value"] == "no verdict"  # every SET refused: both rounds ran the same device
    assert "[" in items["speed"]["detail"] and "never held a configuration" in items["speed"]["detail"]
    assert items["hit_device"]["value"] == "not counted by this device"
    assert items["zones"]["value"] == "sent 1, 7, 11, 15, 19 → refused (ztbp-ctl set exit 30)"
    assert "refuses the ZTBP SET command" in items["not_modelled"]["detail"]
    assert "None" not in json.dumps(list(items.values()))


def test_loop_headline_of_one_round_says_not_measured() -> None:
    doc = read_loop(SAMPLE_LOOP)
    doc["rounds"] = doc["rounds"][:1]
    got = _values(doc)
    assert got["speed"] == "not measured" and got["zones"] == "nothing sent"


def test_headline_and_loop_index_escape_what_loop_json_holds() -> None:
    page = headline_html([{"key": EVIL, "label": EVIL, "value": EVIL, "detail": EVIL}])
    assert "<img" not in page and "&lt;img" in page
    doc = read_loop(SAMPLE_LOOP)
    doc["workload"]["name"] = EVIL
    doc["backend"] = EVIL
    page = loop_index_html("loop", doc, [])
    assert "<img" not in page and 'id="headline-speed"' in page and "None" not in page


def _meta(**kw: object) -> dict:
    return {"device": "nvme0n1", "backend": "qemu", "nr_zones": 64, "zone_size_lba": 8192, "lba_bytes": 4096, **kw}


def test_a_profile_of_another_device_is_not_shown() -> None:
    profile, why = profile_for_run(str(SAMPLE_PROFILE), _meta())
    assert profile is None
    assert "no interference profile exists for this device" in why and "ztbp profile --backend qemu" in why
    assert "backend nvmevirt against the run's qemu" in why and "zones 144 against the run's 64" in why
    profile, why = profile_for_run("", _meta())
    assert profile is None and "ztbp profile" in why


def test_the_profile_of_the_runs_device_is_shown() -> None:
    meta = _meta(backend="nvmevirt", nr_zones=144, zone_size_lba=65536, lba_bytes=512)
    profile, why = profile_for_run(str(SAMPLE_PROFILE), meta)
    assert profile is not None and why == "" and profile["device"]["nr_zones"] == 144


def test_input_stamp_follows_the_inputs(tmp_path: Path) -> None:
    nb = ROOT / "notebooks" / "1-overview.ipynb"
    run = tmp_path / "run"
    (run / "raw").mkdir(parents=True)
    (run / "raw" / "nvme.csv").write_text("a\n")
    first = input_stamp(nb, {"run_dir": str(run)}, [run])
    assert input_stamp(nb, {"run_dir": str(run)}, [run]) == first
    (run / "derived").mkdir()
    (run / "derived" / "events.parquet").write_text("x")  # made from raw/: not an input
    assert input_stamp(nb, {"run_dir": str(run)}, [run]) == first
    (run / "raw" / "nvme.csv").write_text("a\nb\n")
    assert input_stamp(nb, {"run_dir": str(run)}, [run]) != first
    assert input_stamp(nb, {"run_dir": str(run), "top": 3}, [run]) != input_stamp(nb, {"run_dir": str(run)}, [run])


def test_only_picks_the_loop_pages_and_the_rounds_pages_apart() -> None:
    """`ztbp report LOOP --rounds --only 1,7,8`: the loop's notebook 8 for its page, the run notebooks 1 and 7 for
    each round; a selection that names no notebook is an error."""
    assert only_for(["1", "7", "8-loop"], (INPUT_LOOP,)) == ["8-loop"]
    assert only_for(["1", "7", "8-loop"], (INPUT_RUN, INPUT_APP_RUN)) == ["1", "7"]
    assert only_for(["1"], (INPUT_LOOP,)) == [] and only_for(None, (INPUT_LOOP,)) is None
    with pytest.raises(ZtbpError, match="no notebook '42'"):
        only_for(["42"], (INPUT_RUN,))

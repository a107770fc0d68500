"""`ztbp report` on the sample run, opened in headless Chromium: no JavaScript error, no network request (the
report opens offline), every plot rendered with data, code hidden until asked for. Saves a screenshot of the index
as a test artefact under reports/test-artefacts/.

Needs the Debian packages chromium and chromium-driver (`just deps`) and selenium (`just setup`).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest

from ztbp.paths import REPORTS, ROOT
from ztbp.report import notebooks as report

CHROMIUM_FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage", "--window-size=1280,1000")
ARTEFACTS = REPORTS / "test-artefacts"
#: The committed sample run the browser opens the report of.
SAMPLE_RUN = "tests/data/runs/sample-paper80"
#: Any request with one of these schemes means the page is not self-contained.
NETWORK_SCHEMES = {"http", "https", "ws", "wss", "ftp"}

PLOTS_JS = """
return Array.from(document.querySelectorAll('.plotly-graph-div')).map(el => {
  const box = el.getBoundingClientRect();
  const axes = Object.keys(el._fullLayout || {}).filter(k => /^[xy]axis[0-9]*$/.test(k)).map(k => el._fullLayout[k]);
  const sane = axes.length > 0 && axes.every(a => (a.range || []).every(v => typeof v === 'string' ||
      (Number.isFinite(v) && (a.type !== 'log' || Math.abs(v) < 30))));
  const len = v => (v != null && typeof v.length === 'number') ? v.length : 0;
  const points = (el._fullData || []).reduce((n, t) => n + Math.max(len(t.x), len(t.y), len(t.z)), 0);
  return {id: el.id, rendered: el.classList.contains('js-plotly-plot') && !!el._fullLayout,
          traces: (el.data || []).length, points: points, svg: el.querySelectorAll('svg.main-svg').length,
          width: box.width, height: box.height, axes_sane: sane};
});
"""
REQUESTS_JS = "return performance.getEntriesByType('resource').map(e => e.name);"


def _binary(*names: str) -> str:
    for n in names:
        path = shutil.which(n) or (f"/usr/bin/{n}" if Path(f"/usr/bin/{n}").is_file() else None)
        if path:
            return path
    pytest.fail(f"{' or '.join(names)} not found: install the Debian packages chromium and chromium-driver "
                "(`just deps`)")


@pytest.fixture(scope="module")
def sample_report(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    """`ztbp report` on the committed sample run, as `just report` runs it (into a temporary folder)."""
    out = tmp_path_factory.mktemp("browser") / "report"
    proc = subprocess.run([sys.executable, "-m", "ztbp.cli", "report", SAMPLE_RUN, "-o", str(out), "--json"],
                          cwd=ROOT, capture_output=True, text=True, timeout=1200, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout), out


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = _binary("chromium", "chromium-browser")
    profile = tempfile.mkdtemp(prefix="ztbp-chromium-")
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={profile}"):
        opts.add_argument(flag)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    driver = webdriver.Chrome(service=Service(_binary("chromedriver")), options=opts)
    driver.set_page_load_timeout(120)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def _open(driver: Any, page: Path) -> dict[str, Any]:
    driver.get_log("browser")  # drop what an earlier page left
    driver.get_log("performance")
    driver.get(page.as_uri())
    deadline = time.monotonic() + 30
    while driver.execute_script("return document.readyState") != "complete" and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.3)  # plotly draws synchronously on load; leave a moment for late errors
    network = [json.loads(e["message"])["message"] for e in driver.get_log("performance")]
    urls = [m["params"]["request"]["url"] for m in network if m.get("method") == "Network.requestWillBeSent"]
    return {"logs": driver.get_log("browser"), "plots": driver.execute_script(PLOTS_JS),
            "requests": urls + driver.execute_script(REQUESTS_JS)}


def _figure_outputs(executed: Path) -> int:
    nb = nbformat.read(str(executed), as_version=4)
    return sum("plotly-graph-div" in o.get("data", {}).get("text/html", "")
               for c in nb.cells for o in c.get("outputs", []))


def test_report_pages_render_offline_without_errors(sample_report: tuple[dict[str, Any], Path],
                                                    browser: Any) -> None:
    res, out = sample_report
    assert res["ok"] and len(res["pages"]) == len(report.notebooks(None, (report.INPUT_RUN,)))
    pages = [p["html"] for p in res["pages"]]
    assert sorted(p.name for p in out.glob("*.html")) == sorted(["index.html", *pages])
    assert len(list(out.glob("*.js"))) == 1  # plotly.js, once for the whole report
    for page in ["index.html", *pages]:
        seen = _open(browser, out / page)
        errors = [e["message"] for e in seen["logs"] if e["level"] == "SEVERE"]
        assert not errors, f"{page}: JavaScript / loading errors: {errors}"
        remote = [u for u in seen["requests"] if u.split(":", 1)[0].lower() in NETWORK_SCHEMES]
        assert not remote, f"{page} asked the network for {remote}: the report must open offline"
        if page == "index.html":
            assert not seen["plots"]
            continue
        expected = _figure_outputs(out / page.replace(".html", ".ipynb"))
        assert len(seen["plots"]) == expected, f"{page}: {len(seen['plots'])} plots drawn, {expected} made"
        for plot in seen["plots"]:
            assert plot["rendered"] and plot["traces"] > 0 and plot["points"] > 0 and plot["svg"] > 0, \
                f"{page}: plot {plot} did not render with data"
            assert plot["width"] > 100 and plot["height"] > 100, f"{page}: plot {plot} has no size"
            assert plot["axes_sane"], f"{page}: plot {plot} has an axis range that is not finite (log axis?)"
        if page == "3-layers.html":  # the sample run has no layer probe: a note instead of plots
            assert "not captured in this run" in browser.find_element("tag name", "body").text
        else:
            assert seen["plots"], f"{page} drew no plot"


def test_code_hidden_until_asked_and_index_links(sample_report: tuple[dict[str, Any], Path], browser: Any) -> None:
    res, out = sample_report
    _open(browser, out / "2-zones.html")
    code = [e for e in browser.find_elements("css selector", ".jp-CodeCell .jp-InputArea")]
    assert code and not any(e.is_displayed() for e in code), "code cells are shown by default"
    browser.find_element("id", "ztbp-toggle-code").click()
    assert all(e.is_displayed() for e in code)
    assert browser.find_element("id", "ztbp-toggle-code").text == "hide code"
    _open(browser, out / "index.html")
    links = [a.get_attribute("href") for a in browser.find_elements("css selector", "li.card h2 a")]
    assert [Path(h).name for h in links if h.endswith(".html")] == [p["html"] for p in res["pages"]]
    assert [Path(h).name for h in links if not h.endswith(".html")] == [f"{Path(SAMPLE_RUN).name}.pftrace"]
    body = browser.find_element("tag name", "body").text
    assert f"ZTBP report — {Path(SAMPLE_RUN).name}" in body
    assert body.count(" ok") >= 6 and "failed" not in body
    assert "hot zones:" in body  # the clustering summary made it to the index


def test_index_screenshot_artefact(sample_report: tuple[dict[str, Any], Path], browser: Any) -> None:
    _, out = sample_report
    _open(browser, out / "index.html")
    height = int(browser.execute_script("return document.documentElement.scrollHeight"))
    browser.set_window_size(1280, min(max(height, 800), 6000))
    ARTEFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTEFACTS / f"{Path(SAMPLE_RUN).name}-index.png"
    assert browser.save_screenshot(str(shot))
    assert shot.stat().st_size > 20_000  # a rendered page, not a blank one
    png = shot.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    print(f"\nscreenshot of the report index: {shot}")
    browser.set_window_size(1280, 1000)


def test_layers_page_of_a_layer_probe_run(tmp_path: Path, browser: Any) -> None:
    """The sample run has no layer probe; a run with raw/layers.csv draws the Table-I bars, by group and by zone."""
    from test_figures import make_layers_run

    run = make_layers_run(tmp_path / "layers-run")
    out = tmp_path / "report"
    proc = subprocess.run([sys.executable, "-m", "ztbp.cli", "report", str(run), "-o", str(out), "--only", "3"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = _open(browser, out / "3-layers.html")
    assert not [e["message"] for e in seen["logs"] if e["level"] == "SEVERE"]
    assert not [u for u in seen["requests"] if u.split(":", 1)[0].lower() in NETWORK_SCHEMES]
    assert len(seen["plots"]) == 2  # by op and size, per zone
    for plot in seen["plots"]:
        assert plot["rendered"] and plot["traces"] == 7 and plot["points"] > 0 and plot["axes_sane"], plot
    body = browser.find_element("tag name", "body").text
    assert "layer breakdown: 7 layers" in body and "not captured" not in body


@pytest.fixture(scope="module")
def qemu_loop_report(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path, Path]:
    """`ztbp report LOOP --rounds --only 1,7,8` on a two-round QEMU loop made without a VM (tests/loop_fixture.py):
    the loop's page and each round's overview and device pages, the ones these tests open."""
    from loop_fixture import make_loop

    base = tmp_path_factory.mktemp("loop-browser")
    loop = make_loop(base / "loop-qemu", "qemu", reads=5000)
    out = base / "report"
    proc = subprocess.run([sys.executable, "-m", "ztbp.cli", "report", str(loop), "--rounds", "--only", "1,7,8",
                           "-o", str(out), "--json"], cwd=ROOT, capture_output=True, text=True, timeout=1200,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "without encryption" not in proc.stderr and "WARNING" not in proc.stderr, proc.stderr[-3000:]
    return json.loads(proc.stdout), loop, out


def _screenshot(browser: Any, path: Path) -> None:
    height = int(browser.execute_script("return document.documentElement.scrollHeight"))
    browser.set_window_size(1280, min(max(height, 800), 4000))
    assert browser.save_screenshot(str(path)) and path.stat().st_size > 20_000
    print(f"\nscreenshot: {path}")
    browser.set_window_size(1280, 1000)


def test_loop_front_page_answers_with_loop_json_figures(qemu_loop_report: tuple[dict[str, Any], Path, Path],
                                                        browser: Any) -> None:
    res, loop, out = qemu_loop_report
    doc = json.loads((loop / "loop.json").read_text())
    first, last = doc["rounds"][0], doc["rounds"][-1]
    seen = _open(browser, out / "index.html")
    assert not [e["message"] for e in seen["logs"] if e["level"] == "SEVERE"]

    def value(key: str) -> str:
        return browser.find_element("css selector", f"#headline-{key} .value").text

    assert value("hit_model") == (f"{100 * first['model']['sent_hit_ratio']:.1f} % → "
                                  f"{100 * last['model']['sent_hit_ratio']:.1f} %")
    assert value("hit_device") == "not counted by this device"  # QEMU counts no hits
    assert value("speed") == "no verdict"  # the device refused SET: nothing was in force, both sides the same device
    speed = browser.find_element("css selector", "#headline-speed .detail").text
    assert "read IOPS (fio)" in speed and "95 % CI" in speed and "[" in speed
    assert "the device never held a configuration" in speed
    sent = ", ".join(map(str, first["config"]["hot_zones"]))
    refused = last["applied_before"]["set_exit_code"]
    assert value("zones") == f"sent {sent} → refused (ztbp-ctl set exit {refused})"
    rows = sum(e["read_rows"] for e in doc["rounds"])
    reads = sum(e["fio_reads"] for e in doc["rounds"])
    lost = sum(e["lost"] for e in doc["rounds"])
    assert value("rows") == f"{rows:,} read rows for {reads:,} fio reads, {lost:,} lost events"
    body = browser.find_element("tag name", "body").text
    assert "None" not in body and "refuses the ZTBP SET command" in body
    links = [Path(a.get_attribute("href")).parent.name for a in browser.find_elements("css selector", "li a")
             if a.get_attribute("href").endswith("/index.html")]
    assert links == [e["run"] for e in doc["rounds"]]
    # no horizontal scroll bar on the front page
    assert browser.execute_script("return document.documentElement.scrollWidth <= window.innerWidth")
    _screenshot(browser, out.parent / "loop-index.png")


def test_round_pages_show_tables_and_name_their_run(qemu_loop_report: tuple[dict[str, Any], Path, Path],
                                                    browser: Any) -> None:
    _, loop, out = qemu_loop_report
    page = out / "round-01" / "1-overview.html"
    seen = _open(browser, page)
    assert not [e["message"] for e in seen["logs"] if e["level"] == "SEVERE"]
    source = browser.find_element("id", "ztbp-source").text
    assert "run round-01" in source and f"loop {loop.name}" in source and "(qemu)" in source
    tables = browser.find_elements("css selector", ".ztbp-table table")
    assert tables and all(t.is_displayed() for t in tables)
    heads = [th.text for th in tables[0].find_elements("css selector", "th")]
    assert "commands" in heads and "lat p50 (µs)" in heads, heads
    body = browser.find_element("tag name", "body").text
    assert "shape: (" not in body
    _screenshot(browser, out.parent / "round-01-overview.png")


def test_qemu_device_page_says_no_profile_exists(qemu_loop_report: tuple[dict[str, Any], Path, Path],
                                                browser: Any) -> None:
    _, _, out = qemu_loop_report
    _open(browser, out / "round-02" / "7-device.html")
    body = browser.find_element("tag name", "body").text
    assert "no interference profile exists for this device" in body and "ztbp profile --backend qemu" in body
    assert "run round-02" in browser.find_element("id", "ztbp-source").text
    assert "interference profile of" not in body and "144 zones of" not in body  # the sample profile is not drawn

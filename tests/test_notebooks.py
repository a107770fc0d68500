"""The notebooks: thin (only calls into the package), papermill-parameterised, and they run without raising on a
synthetic run, on a run without the layer probe (nor reads, fio or lost-event counts), with parameters from YAML.

nbval (`pytest --nbval-lax notebooks/`, part of `just test`) runs them on the committed sample run and checks
the outputs of their summary cells; this file checks what nbval cannot.
"""

from __future__ import annotations

import ast
import importlib
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import nbformat
import papermill
import pytest

from ztbp.acquire.synth import HOT_ZONES, write_run
from ztbp.paths import NOTEBOOKS, ROOT
from ztbp.report import notebooks as nbs
from ztbp.report import render
from ztbp.report.pages import PLOTLY_JS

NOTEBOOK_PATHS = sorted(NOTEBOOKS.glob("[0-9]*.ipynb"))
RUN_NOTEBOOKS = [p for p in NOTEBOOK_PATHS if nbs.notebook_input(p) == nbs.INPUT_RUN]
#: The committed default input of each kind of notebook (the first parameter's value): the small real capture, a
#: small db_bench capture on btrfs zoned (`ztbp capture-app`), a closed loop on NVMeVirt (`ztbp loop`).
SAMPLE_RUN, SAMPLE_APP_RUN = "tests/data/runs/sample-paper80", "tests/data/runs/sample-rocksdb-btrfs"
SAMPLES = {nbs.INPUT_RUN: SAMPLE_RUN, nbs.INPUT_APP_RUN: SAMPLE_APP_RUN,
           nbs.INPUT_LOOP: "tests/data/loops/sample-nvmevirt"}


def _code_cells(path: Path) -> list[Any]:
    return [c for c in nbformat.read(str(path), as_version=4).cells if c.cell_type == "code"]


def test_one_notebook_per_question() -> None:
    assert [p.stem for p in NOTEBOOK_PATHS] == ["1-overview", "2-zones", "3-layers", "4-sequentiality",
                                                 "5-clustering", "6-cache", "7-device", "8-loop", "9-app"]
    assert {p.stem: nbs.notebook_input(p) for p in NOTEBOOK_PATHS if p not in RUN_NOTEBOOKS} == {
        "8-loop": nbs.INPUT_LOOP, "9-app": nbs.INPUT_APP_RUN}


def _names_something(dotted: str) -> bool:
    """A dotted name `ztbp.x.y` is a module of the package, or an attribute of the longest module it starts with."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def test_the_readme_lists_every_notebook_and_names_only_what_exists() -> None:
    text = (NOTEBOOKS / "README.md").read_text()
    assert set(re.findall(r"`([\w-]+\.ipynb)`", text)) == {p.name for p in NOTEBOOKS.glob("*.ipynb")}
    names = set(re.findall(r"\bztbp(?:\.\w+)+", text))
    assert names, "the README names the package modules the notebooks call"
    files = set(re.findall(r"\b(?:pipelines|tests)/[\w/.-]+\.py\b", text))
    assert [n for n in sorted(names) if not _names_something(n)] == []
    assert [f for f in sorted(files) if not (ROOT / f).is_file()] == []


@pytest.mark.parametrize("path", NOTEBOOK_PATHS, ids=lambda p: p.stem)
def test_notebook_is_thin_and_parameterised(path: Path) -> None:
    cells = _code_cells(path)
    params = [c for c in cells if "parameters" in c.metadata.get("tags", [])]
    assert len(params) == 1 and params[0] is cells[0], "the first code cell, and only it, is tagged parameters"
    declared = papermill.inspect_notebook(str(path))
    lines = [ln for ln in params[0].source.splitlines() if ln.strip()]
    assert len(declared) == len(lines), f"papermill cannot read every parameter line: {list(declared)}"
    for line in lines:
        (stmt,) = ast.parse(line).body
        assert isinstance(stmt, ast.AnnAssign), f"not `name: type = value`: {line}"
        ast.literal_eval(stmt.value)  # a literal, not an expression
        assert "  # " in line and line.split("  # ", 1)[1].strip(), f"parameter without a comment: {line}"
    kind = nbs.notebook_input(path)
    assert ast.literal_eval(ast.parse(lines[0]).body[0].value) == SAMPLES[kind]  # type: ignore[attr-defined]
    assert lines[0].startswith(f"{nbs.FIRST_PARAMETER[kind]}: str = ")
    assert (ROOT / SAMPLES[kind]).is_dir(), f"{path.name}: its default input {SAMPLES[kind]} is not committed"
    for cell in cells:
        tree = ast.parse(cell.source)
        for node in ast.walk(tree):
            assert not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda), \
                f"{path.name}: definitions belong in the package, not in notebooks"
            if isinstance(node, ast.Import):
                pytest.fail(f"{path.name}: `import {node.names[0].name}`: notebooks only use `from ztbp… import`")
            if isinstance(node, ast.ImportFrom):
                assert node.module and (node.module == "ztbp" or node.module.startswith("ztbp.")), \
                    f"{path.name}: imports from {node.module}, not the ztbp package"
    checked = [c for c in cells if nbs.CHECK_MARK in c.source]
    assert checked, "no summary cell for nbval to check"
    for c in checked:
        assert nbs.SUMMARY_TAG in c.metadata.get("tags", [])
        assert c.outputs and c.outputs[0].get("text"), "checked cell without a stored output " \
                                                        "(run `just update-notebooks`)"
    unchecked_with_output = [c.source for c in cells if c.outputs and nbs.CHECK_MARK not in c.source]
    assert not unchecked_with_output, "only checked cells keep outputs in git"


@pytest.mark.parametrize("sample", [SAMPLE_RUN, SAMPLE_APP_RUN])
def test_sample_run_is_small_and_clean(sample: str) -> None:
    run = ROOT / sample
    assert (run / "meta.json").is_file() and (run / "raw" / "nvme.csv").is_file()
    size = sum(p.stat().st_size for p in run.rglob("*") if p.is_file() and "derived" not in p.parts)
    assert size <= 5 * 1024 * 1024
    tracked = subprocess.run(["git", "ls-files", str(run)], cwd=ROOT, capture_output=True, text=True,
                             check=False).stdout.split()
    if tracked:  # in a git checkout: derived/ is never committed
        assert not [t for t in tracked if "/derived/" in t]
        ignored = subprocess.run(["git", "check-ignore", "-q", str(run / "derived" / "events.parquet")],
                                 cwd=ROOT, check=False)
        assert ignored.returncode == 0, "derived/ of a sample run must be git-ignored"


def _errors(executed: Path) -> list[str]:
    nb = nbformat.read(str(executed), as_version=4)
    return [f"{o.ename}: {o.evalue}" for c in nb.cells for o in c.get("outputs", []) if o.output_type == "error"]


def _summary(out: Path, stem: str) -> str:
    return "\n".join(nbs.summary_text(nbformat.read(str(out / f"{stem}.ipynb"), as_version=4)))


@pytest.fixture(scope="module")
def synthetic_report(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    """All notebooks on a synthetic paper80 run, with parameters from a YAML file (as `-f` gives them)."""
    base = tmp_path_factory.mktemp("nb-synth")
    run = base / "synth-paper80"
    write_run(run, "paper80", 5000, seed=2)
    params = base / "params.yaml"
    params.write_text("top: 3\nnts_mib: 0.5\ncache_mib: 16\ntime_bins: 30\n")
    res = render.render(run, base / "report", nbs.load_parameters(str(params), None), log=lambda s: None)
    return res, base / "report"


@pytest.fixture(scope="module")
def bare_report(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    """All notebooks on a run without the layer probe, without reads, fio output or lost-event counts."""
    base = tmp_path_factory.mktemp("nb-bare")
    run = base / "writes-only"
    write_run(run, "seqwrite", 400, seed=2)
    meta = json.loads((run / "meta.json").read_text())
    for key in ("lost_events", "probes", "created"):
        meta.pop(key)
    meta["synthetic"] = False
    (run / "meta.json").write_text(json.dumps(meta))
    assert not (run / "raw" / "layers.csv").exists()
    res = render.render(run, base / "report", log=lambda s: None)
    return res, base / "report"


@pytest.mark.parametrize("fixture", ["synthetic_report", "bare_report"])
def test_every_notebook_runs_without_raising(fixture: str, request: pytest.FixtureRequest) -> None:
    res, out = request.getfixturevalue(fixture)
    assert [p["notebook"] for p in res["pages"]] == [p.stem for p in RUN_NOTEBOOKS]
    for page in res["pages"]:
        assert page["ok"], f"{page['notebook']}: {page['error']}"
        assert not _errors(out / f"{page['notebook']}.ipynb")
        assert (out / page["html"]).stat().st_size > 10_000
    assert res["ok"] and (out / "index.html").is_file() and (out / PLOTLY_JS).is_file()


def test_synthetic_report_shows_the_run(synthetic_report: tuple[dict[str, Any], Path]) -> None:
    _, out = synthetic_report
    assert "synthetic run (ztbp synth)" in _summary(out, "1-overview")
    assert "(top 3 of 64 zones by reads" in _summary(out, "2-zones")  # top: 3 from the YAML file
    assert _summary(out, "3-layers") == "layer breakdown: not captured in this run (no raw/layers.csv)"
    assert "NTS 512 KiB" in _summary(out, "4-sequentiality")  # nts_mib: 0.5
    hot = _summary(out, "5-clustering").splitlines()[-1]
    assert hot.startswith("hot zones: ") and sorted(json.loads(hot.split(": ", 1)[1])) == sorted(HOT_ZONES)
    cache = _summary(out, "6-cache")
    assert "cache 16 MiB = 4096 pages" in cache  # cache_mib: 16
    assert "general policies (libCacheSim" in cache and "zone-LRU with the detected zones" in cache
    # 5,000 reads never fill a 16 MiB cache: zone-LRU cannot beat LRU on the held-out half, so ztbp-ctl refuses
    assert "recommend: false" in cache and "refused by ztbp-ctl (exit code 16, not-recommended)" in cache
    # the report pages carry no plotly.js of their own: they load the folder's single copy
    page = (out / "2-zones.html").read_text()
    assert page.count('<script src="plotly.min.js"></script>') == 1
    assert "cdn.plot.ly" not in page and "require.min.js" not in page and "mathjax" not in page.lower()
    assert len(page) < 1_500_000


def test_bare_report_degrades_gracefully(bare_report: tuple[dict[str, Any], Path]) -> None:
    _, out = bare_report
    quality = _summary(out, "1-overview")
    assert "lost-event count is not recorded" in quality
    overview = (out / "1-overview.html").read_text()
    assert "fio output: not captured in this run" in overview
    assert _summary(out, "3-layers") == "layer breakdown: not captured in this run (no raw/layers.csv)"
    assert "not captured in this run" in (out / "3-layers.html").read_text()
    assert "cluster: only 0 reads: too few to cluster" in _summary(out, "5-clustering")
    assert "refused by ztbp-ctl (exit code 7, no-zones)" in _summary(out, "6-cache")


def test_cache_notebook_reads_the_events_once_and_simulates_once(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Notebook 6's cells, run in-process on a fresh copy of a run: events.parquet is read once, the 64 MiB cache is
    simulated once (the configuration reuses the clustering and the simulation of the notebook)."""
    import shutil

    from ztbp.analysis import cachesim
    from ztbp.io import nvme

    run = tmp_path / "run"
    write_run(run, "paper80", 20_000, seed=3)
    reads, sims = [], []
    real_read, real_sim = nvme.pl.read_parquet, cachesim.simulate
    monkeypatch.setattr(nvme.pl, "read_parquet", lambda *a, **k: reads.append(a) or real_read(*a, **k))
    monkeypatch.setattr(cachesim, "simulate", lambda *a, **k: sims.append(a[2:]) or real_sim(*a, **k))
    cells = _code_cells(NOTEBOOKS / "6-cache.ipynb")
    ns: dict[str, Any] = {}
    exec(cells[0].source, ns)  # parameters
    ns["run_dir"] = str(run)
    for cell in cells[1:]:
        exec(cell.source, ns)
    assert ns["run"].event_loads == 1 and len(reads) == 1
    assert len(sims) == 1, f"the cache was simulated {len(sims)} times: {sims}"
    assert sorted(ns["cfg"]["hot_zones"]) == sorted(ns["cl"]["hot_zones"]) == sorted(HOT_ZONES)
    assert ns["res"]["dry_run"] is True  # send=False by default: nothing is sent while a report renders
    shutil.rmtree(run)

"""Figures, report helpers and the write-back step that the notebooks call, checked against the analysis they draw."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio
import polars as pl
import pytest

from conftest import make_run
from ztbp import stages
from ztbp.acquire.synth import HOT_ZONES, write_run
from ztbp.analysis import chains, frag, zones
from ztbp.analysis.params import ClusterParams
from ztbp.errors import ZtbpError
from ztbp.io.run import Run, load
from ztbp.present import figures, tables, text
from ztbp.report import notebooks as report
from ztbp.writeback import ctl


@pytest.fixture(scope="module")
def paper80(tmp_path_factory: pytest.TempPathFactory) -> Run:
    root = tmp_path_factory.mktemp("fig") / "paper80"
    write_run(root, "paper80", 4000, seed=3)
    return load(root)


@pytest.fixture(scope="module")
def writes_only(tmp_path_factory: pytest.TempPathFactory) -> Run:
    root = tmp_path_factory.mktemp("fig") / "seqwrite"
    write_run(root, "seqwrite", 600, seed=3)
    return load(root)


def _trace_sum(fig: go.Figure, name: str) -> float:
    return float(sum(np.nansum(np.asarray(t.y, dtype=float)) for t in fig.data if t.name == name))


def test_zone_heat_bars_are_the_zone_table(paper80: Run) -> None:
    zt = zones.zone_table(paper80.events, paper80.nr_zones, paper80.lba_bytes)
    fig = figures.zone_heat(zt)
    assert isinstance(fig, go.Figure)
    for col in ("reads", "writes", "appends", "resets"):
        (trace,) = [t for t in fig.data if t.name == col]
        assert list(trace.x) == zt["zone"].to_list()
        assert list(trace.y) == zt[col].to_list()
    assert _trace_sum(fig, "reads") == int((paper80.events["op"] == "read").sum())


def test_lba_heatmap_counts_every_command(paper80: Run) -> None:
    fig = figures.lba_time_heatmap(paper80.events, paper80.meta, time_bins=20, lba_bins=16)
    (hm,) = fig.data
    counts = np.asarray(hm.customdata)
    assert counts.shape == (16, 20)
    assert counts.sum() == int((paper80.events["nlb"] > 0).sum())
    reads = figures.lba_time_heatmap(paper80.events, paper80.meta, 20, 64, op="read")
    per_zone = np.asarray(reads.data[0].customdata).sum(axis=1)
    assert set(np.argsort(per_zone)[-5:]) == set(HOT_ZONES)  # one row per zone: the hot ones are the hottest
    np.testing.assert_allclose(np.asarray(hm.z), np.log10(1 + counts))


def test_zone_latency_shows_read_zones_only(paper80: Run) -> None:
    zt = zones.zone_table(paper80.events, paper80.nr_zones, paper80.lba_bytes)
    fig = figures.zone_latency(zt)
    p50, p99 = fig.data
    read_zones = zt.filter(pl.col("reads") > 0)
    assert list(p50.x) == read_zones["zone"].to_list()
    assert all(a <= b for a, b in zip(p50.y, p99.y, strict=True))


def test_chain_figures_follow_chains_report(paper80: Run) -> None:
    nts = 4 << 20
    cr = chains.chains_report(paper80.events, "write", nts, paper80.lba_bytes)
    fig = figures.chain_cdf(cr)
    chains_line, bytes_line = fig.data
    assert list(chains_line.x) == [r["bytes_le"] for r in cr["chain_cdf"]]
    assert chains_line.y[-1] == pytest.approx(1.0) and bytes_line.y[-1] == pytest.approx(1.0)
    (vline,) = fig.layout.shapes
    assert vline.x0 == nts == vline.x1
    assert fig.layout.annotations[0].x == pytest.approx(math.log10(nts))  # log axis: annotations in log10 units
    assert f"{cr['frac_chains_ge_nts']:.1%}" in fig.layout.annotations[0].text
    sizes = figures.size_cdf(cr)
    assert list(sizes.data[0].x) == [r["bytes"] for r in cr["size_cdf"]]
    shares = figures.nts_shares(cr)
    assert list(shares.data[0].y) == [cr["frac_chains_ge_nts"], cr["frac_bytes_ge_nts"]]


def test_frag_figure_matches_frag_table(paper80: Run) -> None:
    ft = frag.frag_table(paper80.events, paper80.nr_zones, paper80.lba_bytes)
    fig = figures.frag_per_zone(ft, paper80.lba_bytes)
    touched = tables.frag_view(ft)
    assert _trace_sum(fig, "read fragments") == int(touched["read_fragments"].sum())
    assert _trace_sum(fig, "write fragments") == int(touched["write_fragments"].sum())
    assert "frag (read)" in text.frag_headline(ft) and "frag (write)" in text.frag_headline(ft)


def test_cluster_figures(paper80: Run) -> None:
    params = ClusterParams()
    cl = stages.cluster(paper80, params)
    grid = figures.cluster_grid(cl)
    for hm, key in zip(grid.data, ("silhouette", "silhouette_time"), strict=True):  # KFold, then time-blocked
        z = np.asarray(hm.z, dtype=float)
        for g in cl["grid"]:
            i = [str(m) for m in hm.y].index(str(g["min_samples"]))
            j = [str(e) for e in hm.x].index(str(g["eps"]))
            if g[key] is None:
                assert np.isnan(z[i, j])
            else:
                assert z[i, j] == pytest.approx(g[key])
    assert sum("★" in t for hm in grid.data for row in hm.text for t in row) == 1
    cells = tables.cluster_cells(paper80, cl, params)
    assert int(cells["reads"].sum()) == cl["reads"]
    fig = figures.cluster_map(cells, cl["hot_zones"], params.cells_per_zone, cl["cell_bytes"])
    assert sum(len(t.x) for t in fig.data) == cells.height
    assert len(fig.layout.shapes) == len(cl["hot_zones"])  # one shaded band per hot zone
    zt = zones.zone_table(paper80.events, paper80.nr_zones, paper80.lba_bytes)
    bars = figures.hot_zone_bars(zt, cl["hot_zones"])
    red = [z for z, c in zip(bars.data[0].x, bars.data[0].marker.color, strict=True) if c == figures.HOT_COLOUR]
    assert sorted(red) == sorted(cl["hot_zones"])


def test_cache_figures_follow_simulate(paper80: Run) -> None:
    sim = stages.simulate(paper80, 8, 4, list(HOT_ZONES), with_sweep=True)
    fig = figures.cache_sweep(sim)
    policies = {**figures.POLICY_NAMES, **figures.GENERAL_NAMES}  # the project's, then libCacheSim's
    assert [t.name for t in fig.data] == list(policies.values())
    for t, p in zip(fig.data, policies, strict=True):
        assert list(t.y) == [r[p] for r in sim["sweep"]]
        assert t.line.dash == ("dash" if p in figures.GENERAL_NAMES else "solid")
    (vline,) = fig.layout.shapes
    assert vline.x0 == 8 and 10 ** fig.layout.annotations[0].x == pytest.approx(8)  # the chosen cache size
    belady = next(t for t in fig.data if t.name == "Belady")
    for t in fig.data:  # Belady bounds every policy at every size
        assert all(b >= y - 1e-12 for b, y in zip(belady.y, t.y, strict=True))
    bars = figures.hit_ratio_bars(sim)
    assert list(bars.data[0].y) == [sim[p] for p in policies]
    assert "cachesim:" in text.cache_text(sim) and "(from ztbp cluster)" in text.cache_text(sim)


def test_empty_pictures_are_notes_not_empty_figures(writes_only: Run) -> None:
    """A run without reads draws no empty plot: every read figure says why instead."""
    run = writes_only
    zt = zones.zone_table(run.events, run.nr_zones, run.lba_bytes)
    cr = chains.chains_report(run.events, "read", 4 << 20, run.lba_bytes)
    cl = stages.cluster(run)
    cells = tables.cluster_cells(run, cl)
    for obj in (figures.zone_latency(zt), figures.size_cdf(cr), figures.chain_cdf(cr), figures.nts_shares(cr),
                figures.cluster_grid(cl), figures.cluster_map(cells, [], 32, cl["cell_bytes"]),
                figures.hot_zone_bars(zt, []),
                figures.lba_time_heatmap(run.events, run.meta, op="read")):
        assert isinstance(obj, figures.Note), obj
        assert obj.text and obj.text in obj._repr_html_()
    assert isinstance(figures.zone_heat(zt), go.Figure)  # writes and resets are still there
    assert isinstance(figures.frag_per_zone(ft := frag.frag_table(run.events, run.nr_zones, run.lba_bytes)),
                      go.Figure), ft


def test_report_renderer_leaves_plotlyjs_out(monkeypatch: pytest.MonkeyPatch, paper80: Run) -> None:
    old = pio.renderers.default
    try:
        monkeypatch.setenv(figures.REPORT_ENV, "1")
        assert figures.setup() == figures.REPORT_RENDERER
        fig = figures.ops_over_time(paper80.events, 10)
        bundle = fig._repr_mimebundle_()
        assert set(bundle) == {"text/html"}
        page = bundle["text/html"]
        assert "Plotly.newPlot" in page and len(page) < 200_000  # plotly.js itself is ~4 MB
        assert "cdn.plot.ly" not in page and "<script src=" not in page
    finally:
        pio.renderers.default = old


def test_ops_over_time_counts_commands(paper80: Run) -> None:
    fig = figures.ops_over_time(paper80.events, bins=25)
    width_s = float(fig.data[0].x[1] - fig.data[0].x[0])
    total = sum(float(np.sum(t.y)) * width_s for t in fig.data)
    assert total == pytest.approx(paper80.events.height, rel=1e-6)


def test_overview_and_quality(tmp_path: Path, paper80: Run) -> None:
    ov = tables.overview(paper80)
    assert ov["commands"] == paper80.events.height == sum(ov["by_op"].values())
    assert ov["by_op"]["read"] == 4000
    shown = text.overview_text(ov)
    assert "paper80" in shown and "64 zones of 32 MiB" in shown and "nvme=0" in shown
    assert tables.quality_warnings(paper80) == ["synthetic run (ztbp synth): the commands were generated, not "
                                                "traced on a device"]
    # a traced run with problems: a garbage line, an error status, lost events, interrupted, fio disagrees
    rows = [("read", 8192 * i, 1) for i in range(50)]
    root = make_run(tmp_path / "bad", rows, synthetic=False, lost_events={"nvme": 7}, complete=False)
    with (root / "raw" / "nvme.csv").open("a") as f:
        f.write("1,2,3\n")
        f.write("99999,1000,0,1,5,1,2,read,0,1,,6\n")
    fio = {"jobs": [{"jobname": "paper80", "read": {"total_ios": 100, "iops": 1000.0, "bw_bytes": 4096000,
                                                    "clat_ns": {"mean": 80000.0,
                                                                "percentile": {"50.000000": 75000,
                                                                               "99.000000": 160000}}},
                     "write": {"total_ios": 0}}]}
    (root / "raw" / "fio.json").write_text(json.dumps(fio))
    run = load(root)
    warns = "\n".join(tables.quality_warnings(run))
    assert "interrupted" in warns
    assert "skipped 1 lines" in warns and "wrong field count" in warns
    assert "lost 7 events" in warns
    assert "1 commands completed with a non-zero NVMe status" in warns
    assert "fio completed 100 reads but the trace holds 51" in warns
    assert text.quality_text([]) == "data quality: no warning"
    fv = tables.fio_view(run)
    assert isinstance(fv, pl.DataFrame)
    assert fv.to_dicts() == [{"job": "paper80", "dir": "read", "ios": 100, "iops": 1000.0,
                              "MiB_per_s": 4096000 / (1 << 20), "clat_mean_us": 80.0, "clat_p50_us": 75.0,
                              "clat_p99_us": 160.0}]
    (root / "raw" / "fio.json").write_text("{not json")  # a Run keeps what it read: open the run again
    assert "could not be read" in str(tables.fio_view(load(root)))
    assert "not captured in this run" in str(tables.fio_view(paper80))
    probes = tables.probes_table(run)
    assert probes.filter(pl.col("probe") == "nvme")["lost_events"].to_list() == ["7"]


def test_layers_view_without_and_with_a_probe_file(tmp_path: Path, paper80: Run) -> None:
    view = tables.layers_view(paper80)
    assert view["status"] == "absent"
    assert text.layers_view_text(view) == "layer breakdown: not captured in this run (no raw/layers.csv)"
    assert isinstance(tables.layers_table(view), figures.Note)
    assert isinstance(figures.layer_bars(view), figures.Note)
    assert isinstance(figures.zone_layer_bars(view), figures.Note)
    root = make_run(tmp_path / "lay", [("read", 0, 1)])
    (root / "raw" / "layers.csv").write_text("# ztbp layers v1\nts_ns,op\n")
    v2 = tables.layers_view(load(root))
    assert v2["status"] in {"unavailable", "ok", "error"}  # never an exception, whatever ztbp.layers gives
    assert v2["message"]


LAYER_COLS = ("crossing_ns", "syscall_ns", "vfs_ns", "fs_ns", "block_ns", "driver_ns", "device_ns", "completion_ns")


def make_layers_run(root: Path, n: int = 400, seed: int = 5) -> Path:
    """A run with raw/nvme.csv and a raw/layers.csv in the "# ztbp layers v1" format of probes/FORMAT.md:
    synchronous reads of 4 and 8 KiB on the raw zoned device, each request's layers adding up to e2e_ns."""
    rng = np.random.default_rng(seed)
    zones_of = rng.integers(0, 8, n)
    slba = zones_of * 8192 + rng.integers(0, 8192, n)
    make_run(root, [("read", int(s), 1) for s in slba], synthetic=False, lost_events={"nvme": 0, "layers": 0})
    times = {c: rng.integers(1_000, 50_000, n) for c in LAYER_COLS}
    times["fs_ns"] = np.zeros(n, dtype=np.int64)  # raw block device: no file system
    nbytes = np.where(rng.random(n) < 0.75, 4096, 8192)
    lines = ["# ztbp layers v1", "ts_ns,tid,mode,op,bytes,dev,sector,zone,nrq,e2e_ns," + ",".join(LAYER_COLS)
             + ",stack"]
    for i in range(n):
        e2e = sum(int(times[c][i]) for c in LAYER_COLS)
        lines.append(f"{1000 + 10 * i},42,sync,read,{nbytes[i]},259:0,{slba[i] * 8},{zones_of[i]},1,{e2e},"
                     + ",".join(str(int(times[c][i])) for c in LAYER_COLS) + ",bdev")
    (root / "raw" / "layers.csv").write_text("\n".join(lines) + "\n")
    return root


def test_layers_view_of_a_layer_probe_run(tmp_path: Path) -> None:
    root = make_layers_run(tmp_path / "layers")
    view = tables.layers_view(load(root))
    assert view["status"] == "ok", view["message"]
    csv = pl.read_csv(root / "raw" / "layers.csv", skip_rows=1)
    names = [r["layer"] for r in view["layers"]]
    assert names == ["kernel crossing", "syscall", "vfs", "block", "nvme driver", "device", "completion"]
    assert sum(r["share"] for r in view["layers"]) == pytest.approx(1.0, abs=1e-5)
    table = tables.layers_table(view)
    assert isinstance(table, pl.DataFrame)
    expected = [round(float(csv[c].mean())) / 1000 for c in LAYER_COLS if c != "fs_ns"]
    assert table["mean_us"].to_list() == pytest.approx(expected)
    assert sorted(g["label"] for g in view["groups"]) == ["op=read, size=4096", "op=read, size=8192"]
    assert sorted(int(z["zone"]) for z in view["zones"]) == sorted(csv["zone"].unique().to_list())
    bars = figures.layer_bars(view)
    assert [t.name for t in bars.data] == names
    assert list(bars.data[0].x) == ["all requests", "op=read, size=4096", "op=read, size=8192"]
    zbars = figures.zone_layer_bars(view)
    assert len(zbars.data[0].x) == csv["zone"].n_unique()
    assert text.layers_view_text(view).startswith("layer breakdown: 7 layers, mean end-to-end ")


def test_layer_figures_from_the_layers_json_shape() -> None:
    """The shape `ztbp layers --json` is specified to give (issue 4), drawn as stacked bars."""
    layers = [{"layer": "syscall", "mean_ns": 2000, "p50_ns": 1800, "p99_ns": 5000, "share": 0.1},
              {"layer": "device", "mean_ns": 18000, "p50_ns": 17000, "p99_ns": 40000, "share": 0.9}]
    raw = {"layers": layers,
           "groups": [{"op": "read", "size": 4096, "layers": layers[:1]}],
           "zones": [{"zone": 7, "layers": layers}]}
    groups = tables._layer_groups(raw)
    view = {"status": "ok", "layers": layers, "groups": [g for g in groups if g["zone"] is None],
            "zones": [g for g in groups if g["zone"] is not None]}
    fig = figures.layer_bars(view)
    assert [t.name for t in fig.data] == ["syscall", "device"]
    assert list(fig.data[0].x) == ["all requests", "op=read, size=4096"]
    assert list(fig.data[1].y) == [18.0, 0.0]
    zfig = figures.zone_layer_bars(view)
    assert list(zfig.data[0].x) == ["zone=7"]
    table = tables.layers_table(view)
    assert table["mean_us"].to_list() == [2.0, 18.0]
    assert "2 layers, mean end-to-end 20.0 µs" in text.layers_view_text(view)


def test_device_apply_dry_run_sends_the_top_five(paper80: Run) -> None:
    made = stages.config(paper80, 8, 4)
    res = ctl.apply(paper80.paths, made, force=not made["recommend"])
    cfg = json.loads(Path(res["config"]).read_text())
    assert res["ok"] and res["exit_code"] == 0 and res["dry_run"]
    r = res["result"]
    assert r["opcode"] == 153 and r["cdw10"] == 99 and r["dry_run"] is True
    top5 = [s["zone"] for s in sorted(cfg["zone_scores"], key=lambda s: -s["share"])][:5]
    assert [r[f"cdw{i}"] for i in range(11, 16)] == top5
    assert sorted(top5) == sorted(HOT_ZONES)
    shown = text.apply_text(res)
    assert "dry run" in shown and "opcode 153 (0x99)" in shown and "cdw10=99" in shown


def test_device_apply_refuses_a_configuration_that_is_not_recommended(tmp_path: Path) -> None:
    """A config that says "recommend": false (here: a threshold no cache reaches) is refused by ztbp-ctl with exit
    code 16 and its reason, and sent with force."""
    write_run(tmp_path / "z", "paper80", 20_000, seed=4)
    run = load(tmp_path / "z")
    cfg = stages.config(run, 64, 4, min_gain=0.5)  # a threshold no cache reaches
    assert cfg["recommend"] is False and "below the threshold +0.50" in cfg["recommend_reason"]
    res = ctl.apply(run.paths, cfg)
    assert not res["ok"] and res["exit_code"] == 16 and res["result"]["error"] == "not-recommended"
    assert cfg["recommend_reason"] in res["message"]
    assert "refused by ztbp-ctl (exit code 16, not-recommended)" in text.apply_text(res)
    forced = ctl.apply(run.paths, cfg, force=True)
    assert forced["ok"] and forced["command"].endswith("--force") and forced["result"]["zones"] == cfg["hot_zones"]


def test_device_apply_reports_a_refusal(writes_only: Run) -> None:
    res = ctl.apply(writes_only.paths, stages.config(writes_only, 64, 4))
    assert not res["ok"] and res["exit_code"] == 7  # ztbp-ctl: no-zones
    assert "no hot zones" in res["message"]
    assert "refused by ztbp-ctl (exit code 7, no-zones)" in text.apply_text(res)


def test_load_parameters_and_notebook_selection(tmp_path: Path) -> None:
    f = tmp_path / "p.yaml"
    f.write_text("cache_mib: 32\neps: [0.02, 0.03]\n")
    assert report.load_parameters(str(f), [["top", "4"], ["heatmap_op", "read"]]) == {
        "cache_mib": 32, "eps": [0.02, 0.03], "top": 4, "heatmap_op": "read"}
    f.write_text("- a\n- b\n")
    with pytest.raises(ZtbpError, match="must hold a mapping"):
        report.load_parameters(str(f), None)
    f.write_text("a: [1\n")
    with pytest.raises(ZtbpError, match="not valid YAML"):
        report.load_parameters(str(f), None)
    with pytest.raises(ZtbpError, match="does not exist"):
        report.load_parameters(str(tmp_path / "missing.yaml"), None)
    assert [p.stem for p in report.notebooks(["6", "1-overview"])] == ["6-cache", "1-overview"]
    with pytest.raises(ZtbpError, match="no notebook '10'"):
        report.notebooks(["10"])
    with pytest.raises(ZtbpError, match="no notebook '8' for this input"):
        report.notebooks(["8"], (report.INPUT_RUN,))


def test_report_cli_bad_input_is_a_message(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from ztbp.cli import main

    assert main(["report", str(tmp_path / "nope")]) == 4
    assert "does not exist" in capsys.readouterr().err
    root = make_run(tmp_path / "r", [("read", 0, 1)])
    assert main(["report", str(root), "-p", "no_such_param", "1", "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "unknown notebook parameter(s) no_such_param" in err and "run_dir" in err
    assert main(["report"]) == 2
    assert "give a run directory" in capsys.readouterr().err


def test_probe_stats_of_the_sample_run(paper80: Run) -> None:
    from ztbp.paths import ROOT

    sample = load(ROOT / "tests" / "data" / "runs" / "sample-paper80")
    stats = tables.probe_stats_view(sample)
    assert isinstance(stats, pl.DataFrame)
    d = dict(stats.iter_rows())
    assert int(d["rows"]) == sample.events.height  # every row the probe wrote was ingested
    assert int(d["perf_lost"]) == 0 and sample.meta["lost_events"] == {"nvme": 0}
    assert str(tables.probe_stats_view(paper80)) == "probe statistics: not recorded in this run"


def test_report_several_runs_one_broken(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Like `just report-all`: a broken run is reported and skipped, the others still get their report."""
    from ztbp.cli import main
    from ztbp.report import render

    monkeypatch.setattr(render, "REPORTS", tmp_path / "reports")
    good = make_run(tmp_path / "good", [("read", 8192 * i, 1) for i in range(20)])
    assert main(["report", str(tmp_path / "missing"), str(good), "--only", "3", "--json"]) == 1
    out, err = capsys.readouterr()
    assert "missing" in err and "does not exist" in err and "1 of 2 runs could not be reported" in err
    (res,) = json.loads(out)
    assert res["run"] == "good" and res["ok"] and [p["notebook"] for p in res["pages"]] == ["3-layers"]
    assert Path(res["index"]) == tmp_path / "reports" / "good" / "index.html" and Path(res["index"]).is_file()

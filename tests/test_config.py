"""`ztbp config`: learnt on the run's first part, judged on the rest with the five zones it sends; negative controls
are not recommended, the paper's workloads are."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_cluster import NEGATIVE

from ztbp import stages
from ztbp.acquire.synth import SynthGeometry, SynthOptions, write_run
from ztbp.cli import main
from ztbp.io.run import load
from ztbp.writeback.config import recommend, sent_zones

READS = 200_000


def _run(root: Path, pattern: str, opts: SynthOptions = SynthOptions(), geo: SynthGeometry = SynthGeometry(),
         seed: int = 1) -> Path:
    write_run(root, pattern, READS, seed, geo, opts)
    return root


@pytest.mark.parametrize(("pattern", "opts"), NEGATIVE)
def test_negative_controls_are_not_recommended(tmp_path: Path, pattern: str, opts: SynthOptions) -> None:
    cfg = stages.config(load(_run(tmp_path / "r", pattern, opts)), 64, 4)
    assert cfg["recommend"] is False
    assert cfg["hot_zones"] == [] and "nothing to send" in cfg["recommend_reason"]


@pytest.mark.parametrize("pattern", ["paper80", "paper60"])
def test_paper_workloads_are_recommended_with_their_held_out_gain(tmp_path: Path, pattern: str) -> None:
    cfg = stages.config(load(_run(tmp_path / "r", pattern)), 64, 4)
    h = cfg["held_out"]
    assert sorted(cfg["hot_zones"]) == [1, 7, 11, 15, 19] and cfg["recommend"] is True
    assert (h["train_reads"], h["test_reads"], h["requests"]) == (READS // 2, READS // 2, READS // 2)
    assert h["gain"] == pytest.approx(h["zone_lru"] - h["lru"]) and h["gain"] >= 0.01
    assert f"gains {h['gain']:+.4f}" in cfg["recommend_reason"] and "at least the threshold +0.01" in \
        cfg["recommend_reason"]


def test_only_the_five_zones_sent_are_predicted_with(tmp_path: Path) -> None:
    hot = (2, 4, 6, 8, 10, 12, 14, 16)
    run = load(_run(tmp_path / "r", "hotzones", SynthOptions(hot_zones=hot, hot_share=0.8, region=None)))
    cfg = stages.config(run, 64, 4)
    assert sorted(cfg["hot_zones_found"]) == list(hot)
    assert len(cfg["hot_zones"]) == 5 and set(cfg["hot_zones"]) < set(hot)
    assert cfg["hot_zones"] == [s["zone"] for s in sent_zones(cfg["zone_scores"])]  # in ztbp-ctl's --top5 order
    assert cfg["held_out"]["hot_zones"] == cfg["hot_zones"] and cfg["predicted"]["cache_pages"] == 16384
    whole = stages.simulate(run, 64, 4, cfg["hot_zones"], general=False)
    assert cfg["predicted"]["zone_lru"] == whole["zone_lru"]


def test_sent_zones_follow_ztbp_ctl_top5() -> None:
    scores = [{"zone": z, "reads": r, "share": s} for z, r, s in
              [(3, 10, 0.1), (9, 30, 0.3), (1, 20, 0.3), (4, 50, 0.05), (5, 5, 0.2), (6, 7, 0.2), (2, 1, 0.01)]]
    assert [s["zone"] for s in sent_zones(scores)] == [9, 1, 6, 5, 3]  # shares, ties by reads


def test_recommend_reasons() -> None:
    base = {"train_share": 0.5, "train_reads": 100, "test_reads": 100, "gain": 0.02}
    assert recommend([1], base, 0.01) == (True, "zone-LRU with zones [1] gains +0.0200 hit ratio over LRU on the "
                                                "held-out 50% of the reads (100 reads), at least the threshold +0.01")
    assert recommend([1], {**base, "gain": 0.005}, 0.01)[0] is False
    assert recommend([1], {**base, "gain": -0.1}, 0.01)[1].endswith("below the threshold +0.01")
    assert "nothing to evaluate on" in recommend([1], {**base, "test_reads": 0}, 0.01)[1]
    assert "nothing to send" in recommend([], base, 0.01)[1]


def test_config_cli_options_and_errors(tmp_path: Path, capsys) -> None:
    run = _run(tmp_path / "r", "paper80")
    out = tmp_path / "c.json"
    assert main(["config", str(run), "-o", str(out), "--train-share", "0.25", "--min-gain", "0.5"]) == 0
    cfg = json.loads(out.read_text())
    assert cfg["held_out"]["train_reads"] == READS // 4 and cfg["recommend"] is False and cfg["min_gain"] == 0.5
    text = capsys.readouterr().out
    assert "recommend: false" in text and "refuse this configuration (exit code 16) unless --force" in text
    assert main(["config", str(run), "-o", str(out), "--train-share", "1"]) == 2
    assert "--train-share" in capsys.readouterr().err
    assert main(["config", str(run), "-o", str(out), "--min-gain", "-1"]) == 2
    assert "--min-gain" in capsys.readouterr().err


def test_apply_refuses_unless_forced(tmp_path: Path, capsys) -> None:
    """`ztbp apply` (dry run) on a configuration that is not recommended: ztbp-ctl's exit code 16, then --force."""
    run = _run(tmp_path / "r", "paper60")
    assert main(["apply", str(run), "--min-gain", "0.9", "--json"]) == 16
    res = json.loads(capsys.readouterr().out)
    assert res["exit_code"] == 16 and "not recommended" in res["message"] and res["result"]["error"] == \
        "not-recommended"
    assert main(["apply", str(run), "--min-gain", "0.9", "--force", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["ok"] and res["dry_run"] and sorted(res["result"]["zones"]) == [1, 7, 11, 15, 19]
    assert main(["apply", str(run), "--json"]) == 0  # recommended: sent (dry run) without --force
    assert json.loads(capsys.readouterr().out)["ok"]

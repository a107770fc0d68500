"""`ztbp compare` and the statistics behind it (analysis/compare.py) on known answers: a known shift is found with
the right sign and an interval that covers it, no shift gives "no difference within noise" about as often as the
level promises, ABBA order cancels a drift, and two rounds on a device that did not change (6,898 vs 5,414 IOPS)
are no difference within the assumed run-to-run noise."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest

from conftest import make_run
from ztbp.analysis.compare import (
    LEVEL_VERDICTS,
    NO_DIFFERENCE,
    VERDICTS,
    ab_effects,
    ab_repeats,
    block_figures,
    paired_effect,
    run_effect,
)
from ztbp.cli import main
from ztbp.contract import LOOP_FORMAT
from ztbp.errors import CompareError, ZtbpError
from ztbp.present.compare import compare_text, effects_figure

CV = 0.08                                   # block-to-block noise of the synthetic blocks
SIGMA = math.sqrt(math.log1p(CV * CV))      # its log-scale standard deviation
SEEDS = 400


def _pairs(seed: int, shift: float, pairs: int = 6) -> tuple[np.ndarray, np.ndarray]:
    """Per-pair IOPS of arm A and arm B: a level that moves from pair to pair, B = A x (1 + shift), CV noise."""
    rng = np.random.default_rng(seed)
    level = 6_000 * rng.lognormal(0, 0.2, pairs)
    return (level * rng.lognormal(0, SIGMA, pairs),
            level * (1 + shift) * rng.lognormal(0, SIGMA, pairs))


def _iops(a: Any, b: Any) -> dict[str, Any]:
    return paired_effect(a, b, metric="read IOPS", unit="IOPS", better="higher")


# ---- paired blocks ----------------------------------------------------------------------------------------------
def test_a_known_shift_is_found_with_its_sign_and_covered() -> None:
    got = _iops(*_pairs(1, 0.20))
    assert got["verdict"] == "faster" and got["improved"] is True
    assert got["ci"][0] > 0 and got["ci"][0] <= 20 <= got["ci"][1]
    assert got["n_pairs"] == 6 and got["change_unit"] == "%" and got["p_value"] < 0.05
    assert got["line"].startswith("read IOPS +") and got["line"].endswith("(95 % CI, 6 block pairs): faster")
    # latency (lower is better) 20 % lower: faster too; 20 % higher: slower
    a, b = _pairs(2, -0.20)
    assert paired_effect(a, b, metric="p50", unit="us", better="lower")["verdict"] == "faster"
    assert paired_effect(b, a, metric="p50", unit="us", better="lower")["verdict"] == "slower"


def test_over_many_seeds_a_shift_is_covered_and_mostly_found() -> None:
    results = [_iops(*_pairs(s, 0.20)) for s in range(SEEDS)]
    covered = sum(r["ci"][0] <= 20 <= r["ci"][1] for r in results) / SEEDS
    assert abs(covered - 0.95) <= 3 * math.sqrt(0.95 * 0.05 / SEEDS)
    assert sum(r["verdict"] == "faster" for r in results) / SEEDS > 0.75   # power at +20 %, 8 % CV, 6 pairs
    assert not any(r["verdict"] == "slower" for r in results)


def test_no_shift_is_no_difference_and_false_positives_stay_near_alpha() -> None:
    assert _iops(*_pairs(1, 0.0))["verdict"] == NO_DIFFERENCE
    false_positives = sum(_iops(*_pairs(s, 0.0))["verdict"] != NO_DIFFERENCE for s in range(SEEDS))
    band = 3 * math.sqrt(SEEDS * 0.05 * 0.95)
    assert abs(false_positives - 0.05 * SEEDS) <= band, false_positives    # 20 +- 13 of 400


def _abba(order: str, pairs: int = 6, effect: float = 0.20, drift: float = 0.05, seed: int = 3) -> tuple[list, list]:
    """Blocks in time order with a steady drift of `drift` (log) per block; pairs in `order` ("ABBA": (on, off),
    (off, on), ...; "ABAB": (on, off) every time). Returns (off values, on values) per pair."""
    rng = np.random.default_rng(seed)
    off, on, k = [], [], 0
    for p in range(pairs):
        arms = ("on", "off") if order == "ABAB" or p % 2 == 0 else ("off", "on")
        for arm in arms:
            v = 6_000 * math.exp(drift * k) * (1 + effect if arm == "on" else 1) * rng.lognormal(0, 0.01)
            (on if arm == "on" else off).append(v)
            k += 1
    return off, on


def test_abba_order_cancels_a_drift_that_biases_a_fixed_order() -> None:
    abba = _iops(*_abba("ABBA"))
    assert abba["ci"][0] <= 20 <= abba["ci"][1] and abs(abba["change"] - 20) < 1.5 and abba["verdict"] == "faster"
    fixed = _iops(*_abba("ABAB"))                 # B always first: the drift of one block (-5 %) stays in
    assert fixed["change"] < 18 and not fixed["ci"][0] <= 20 <= fixed["ci"][1]


def test_hit_ratio_on_the_difference_scale_in_points() -> None:
    got = paired_effect([30.1, 29.5, 31.0], [35.2, 34.1, 36.0], metric="model hit ratio", unit="%",
                        better="higher", scale="difference", words=LEVEL_VERDICTS)
    assert got["verdict"] == "higher" and got["change_unit"] == "pp" and abs(got["change"] - 4.9) < 0.01
    assert got["mean_a"] == pytest.approx(30.2) and "B - A" in got["method"]
    assert VERDICTS == ("faster", "slower", NO_DIFFERENCE) and LEVEL_VERDICTS[:2] == ("higher", "lower")


@pytest.mark.parametrize("a,b", [([1.0], [2.0]), ([1.0, 2.0], [1.0]), ([1.0, 0.0], [1.0, 2.0]),
                                 ([1.0, -2.0], [1.0, 2.0]), ([1.0, math.nan], [1.0, 2.0]),
                                 ([1.0, math.inf], [1.0, 2.0]), ([1.0, None], [1.0, 2.0])])
def test_paired_effect_refuses_what_it_cannot_measure(a: list, b: list) -> None:
    with pytest.raises(CompareError) as e:
        _iops(a, b)
    assert isinstance(e.value, ValueError) and isinstance(e.value, ZtbpError)


def test_paired_effect_refuses_bad_options() -> None:
    for kw in ({"better": "up"}, {"better": "higher", "scale": "ratio"}, {"better": "higher", "alpha": 1.5}):
        with pytest.raises(CompareError):
            paired_effect([1, 2], [2, 3], metric="m", unit="", **kw)


# ---- a loop's A/B blocks ----------------------------------------------------------------------------------------
def _block(rnd: int, pair: int, arm: str, iops: float, listed_p50: float, other_p50: float,
           hit: float | None, device_hit: float | None = None) -> dict[str, Any]:
    return {"round": rnd, "run": f"round-{rnd:02d}", "arm": arm, "pair": pair, "device_holds": arm == "on",
            "device": {"hit_ratio": device_hit},
            "fio": {"read_iops": iops, "p50_us": 1e6 * 36 / iops, "p99_us": 5e6 * 36 / iops, "runtime_ms": 5000},
            "latency": {"all": {"reads": 1000, "p50_us": (listed_p50 * 4 + other_p50) / 5},
                        "listed": {"reads": 800, "p50_us": listed_p50},
                        "unlisted": {"reads": 200, "p50_us": other_p50}},
            "model": {"hit_ratio": hit}}


def _blocks(seed: int, gain: float, listed_gain: float, pairs: int = 6) -> list[dict[str, Any]]:
    """ABBA blocks from round 2: IOPS x (1 + gain) and listed-zone latency x (1 - listed_gain) when on, CV noise."""
    rng = np.random.default_rng(seed)
    out, rnd = [], 2
    for p in range(1, pairs + 1):
        for arm in (("on", "off") if p % 2 else ("off", "on")):
            on = arm == "on"
            n = rng.lognormal(0, SIGMA, 3)
            hit = 0.27 + (0.06 * on) + rng.normal(0, 0.005)
            # the device's own: 5 points higher when the configuration acts, with the model's noise
            device_hit = hit - 0.02 - (0.01 if gain > 0 else 0.06) * on
            out.append(_block(rnd, p, arm, 6_000 * (1 + gain * on) * n[0], 2_000 * (1 - listed_gain * on) * n[1],
                              2_000 * n[2], hit, device_hit))
            rnd += 1
    return out


def test_ab_effects_finds_the_configuration_s_effects() -> None:
    got = ab_effects(_blocks(4, gain=0.25, listed_gain=0.5, pairs=8))
    e = got["effects"]
    # eight pairs: the device's seven measures are judged together (Holm), so one of them needs a smaller p-value
    # than alone (six pairs of these gave read IOPS +20 % [+4.5, +37.8], p 0.019: 0.077 in the family)
    assert got["pairs"] == 8 and got["dropped"] == [] and got["absent"] == {}
    assert e["read_iops"]["verdict"] == "faster" and e["read_iops"]["ci"][0] <= 25 <= e["read_iops"]["ci"][1]
    assert e["fio_p50"]["verdict"] == "faster" and e["fio_p50"]["change"] < 0
    assert e["device_p50_listed"]["verdict"] == "faster"
    assert e["device_p50_listed"]["ci"][0] <= -50 <= e["device_p50_listed"]["ci"][1]
    assert e["device_p50_unlisted"]["verdict"] == NO_DIFFERENCE
    assert e["hit_ratio"]["verdict"] == "higher" and e["hit_ratio"]["change_unit"] == "pp"
    assert e["hit_ratio"]["ci"][0] <= 6 <= e["hit_ratio"]["ci"][1]
    assert got["verdict"]["key"] == "read_iops" and got["verdict"]["verdict"] == "faster"
    json.dumps(got, allow_nan=False)  # loop.json can hold it


def test_ab_effects_on_a_device_that_did_not_change() -> None:
    got = ab_effects(_blocks(5, gain=0.0, listed_gain=0.0))
    assert {k: e["verdict"] for k, e in got["effects"].items() if k != "hit_ratio"} == {
        k: NO_DIFFERENCE for k in ("read_iops", "fio_p50", "fio_p99", "device_p50", "device_p50_listed",
                                   "device_p50_unlisted", "device_hit_ratio")}
    assert got["verdict"]["line"].endswith(NO_DIFFERENCE)


def test_ab_effects_leaves_out_missing_values_and_half_pairs() -> None:
    blocks = _blocks(6, gain=0.2, listed_gain=0.3)
    blocks[3]["fio"]["read_iops"] = None
    for b in blocks:
        b["model"]["hit_ratio"] = None
    blocks.append(_block(14, 7, "on", 7000, 1000, 2000, None))     # an interrupted loop: pair 7 has one block
    got = ab_effects(blocks)
    assert got["pairs"] == 6 and len(got["dropped"]) == 1 and "pair 7" in got["dropped"][0]
    assert "read_iops" not in got["effects"] and "fio.read_iops" in got["absent"]["read_iops"]["reason"]
    assert "pair 2" in got["absent"]["read_iops"]["reason"]
    assert "hit_ratio" in got["absent"] and "fio_p50" in got["effects"]
    assert got["verdict"]["key"] == "device_p50"          # the headline falls back to the device's latency


@pytest.mark.parametrize("bad", [[{"pair": 1, "arm": "maybe"}], [{"arm": "on"}], ["x"],
                                 [{"pair": 1, "arm": "on"}, {"pair": 1, "arm": "on"}]])
def test_ab_effects_refuses_malformed_blocks(bad: list) -> None:
    with pytest.raises(CompareError):
        ab_effects(bad)


# ---- two runs ---------------------------------------------------------------------------------------------------
LISTED = [1, 7, 11, 15, 19]


def _events(seed: int, n: int = 20_000, rate: float = 6_000.0, lat_us: float = 2_000.0,
            listed_factor: float = 1.0, level: float = 1.0) -> pl.DataFrame:
    """Reads at `rate`/s over 32 zones (80 % on the listed ones), log-normal device latency of median `lat_us`,
    times `listed_factor` in the listed zones; `level`: a run-level factor on the rate and latency."""
    rng = np.random.default_rng(seed)
    ts = 1e9 + np.cumsum(rng.exponential(1e9 / (rate * level), n))
    hot = rng.random(n) < 0.8
    zone = np.where(hot, rng.choice(LISTED, n), rng.choice([z for z in range(32) if z not in LISTED], n))
    lat = lat_us / level * 1000 * rng.lognormal(0, 0.5, n) * np.where(hot, listed_factor, 1.0)
    return pl.DataFrame({"op": ["read"] * n, "zone": zone, "ts_ns": ts.astype(np.uint64),
                         "lat_ns": lat.astype(np.uint64)})


def test_run_effect_finds_a_shift_in_one_zone_class() -> None:
    got = run_effect(_events(1), _events(2, listed_factor=0.6), None, None, listed=LISTED)
    e = got["effects"]
    assert e["device_p50_listed"]["verdict"] == "faster"
    assert e["device_p50_listed"]["ci"][0] <= -40 <= e["device_p50_listed"]["ci"][1]
    assert e["device_p50_unlisted"]["verdict"] == NO_DIFFERENCE
    assert e["read_rate"]["verdict"] == NO_DIFFERENCE
    d = got["distributions"]
    assert d["a"]["listed"]["p50_us"] == pytest.approx(2000, rel=0.05)
    assert d["b"]["listed"]["p50_us"] == pytest.approx(1200, rel=0.05)
    assert d["b"]["unlisted"]["p50_us"] == pytest.approx(2000, rel=0.1) and d["a"]["all"]["reads"] == 20_000
    assert set(d["a"]["all"]) == {"reads", "p50_us", "p90_us", "p99_us", "mean_us"}
    assert "fio" in got["absent"]["read_iops"]["reason"] and got["verdict"]["key"] == "read_rate"
    json.dumps(got, allow_nan=False)


def test_run_effect_without_a_shift_is_no_difference() -> None:
    got = run_effect(_events(3), _events(4), None, None, listed=LISTED)
    assert {e["verdict"] for e in got["effects"].values()} == {NO_DIFFERENCE}


def test_two_rounds_of_an_unchanged_device_are_no_difference_within_noise() -> None:
    """Issue 25: QEMU refused the configuration, so nothing changed; fio said 6,898 -> 5,414 IOPS (-21.5 %)."""
    fio_a = {"read_iops": 6898.0, "read_clat_p50_us": 36 / 6898 * 1e6, "read_clat_p99_us": 5 * 36 / 6898 * 1e6}
    fio_b = {"read_iops": 5414.0, "p50_us": 36 / 5414 * 1e6, "p99_us": 5 * 36 / 5414 * 1e6}  # a round's keys
    a, b = _events(5, rate=6898, lat_us=36 / 6898 * 1e6), _events(6, rate=5414, lat_us=36 / 5414 * 1e6)
    got = run_effect(a, b, fio_a, fio_b, listed=LISTED, noise_cv=0.10)
    iops = got["effects"]["read_iops"]
    assert round(iops["change"], 1) == -21.5 and iops["verdict"] == NO_DIFFERENCE and iops["ci"][1] > 0
    assert {e["verdict"] for e in got["effects"].values()} == {NO_DIFFERENCE}
    assert "CV of 10 %" in got["method"] and "assumed" in iops["line"] and got["noise_cv"] == 0.10
    # without the run-to-run noise the trace's blocks alone would call it slower
    bare = run_effect(a, b, fio_a, fio_b, listed=LISTED, noise_cv=0.0)
    assert bare["effects"]["read_rate"]["verdict"] == "slower" and "read_iops" in bare["absent"]


def test_run_effect_false_positives_under_run_to_run_noise() -> None:
    """Runs that differ only by a run-level factor of CV 10 %: "no difference" in about 95 % of the pairs."""
    sigma = math.sqrt(math.log1p(0.01))
    rng = np.random.default_rng(7)
    wrong = 0
    for s in range(100):
        la, lb = rng.lognormal(0, sigma, 2)
        got = run_effect(_events(1000 + s, n=3000, level=la), _events(2000 + s, n=3000, level=lb), None, None,
                         listed=LISTED)
        wrong += got["effects"]["read_rate"]["verdict"] != NO_DIFFERENCE
    assert wrong <= 12, wrong      # 5 expected (the Welch part only widens the interval)


def test_block_figures_cut_time_into_equal_blocks() -> None:
    ev = pl.DataFrame({"op": ["read"] * 40, "zone": [1] * 20 + [2] * 20, "ts_ns": list(range(0, 4_000, 100)),
                       "lat_ns": [1000] * 20 + [3000] * 20})
    got = block_figures(ev, [1], blocks=2)
    assert got["listed"]["p50"] == [1.0] and got["unlisted"]["p50"] == [3.0]
    assert got["all"]["p50"] == [1.0, 3.0] and got["all"]["rate"] == pytest.approx([20 / 1950e-9, 20 / 1950e-9])


@pytest.mark.parametrize("kw", [{"blocks": 1}, {"blocks": 1001}, {"blocks": 2.5}, {"noise_cv": -0.1},
                                {"noise_cv": math.nan}, {"noise_cv": 2.0}, {"listed": [-1]}])
def test_run_effect_refuses_bad_options(kw: dict) -> None:
    with pytest.raises(CompareError):
        run_effect(_events(1, n=500), _events(2, n=500), None, None, **{"listed": LISTED, **kw})


def test_run_effect_refuses_a_run_without_reads() -> None:
    empty = _events(1, n=500).filter(pl.col("op") == "write")
    with pytest.raises(CompareError, match="run B"):
        run_effect(_events(1, n=500), empty, None, None, listed=LISTED)


def test_no_listed_zones_leave_the_listed_class_out() -> None:
    got = run_effect(_events(1, n=2000), _events(2, n=2000), None, None, listed=[])
    assert "device_p50_listed" in got["absent"] and "device_p50_unlisted" in got["effects"]


# ---- what a person sees -----------------------------------------------------------------------------------------
def test_text_and_figure_say_the_verdict_and_draw_intervals() -> None:
    res = ab_effects(_blocks(4, gain=0.25, listed_gain=0.5, pairs=8))
    text = compare_text(res)
    assert "95 % CI" in text and text.splitlines()[-2].startswith("verdict: read IOPS (fio) +")
    assert text.splitlines()[-1].startswith("differences beyond the noise: read IOPS (fio) faster")
    fig = effects_figure(res)
    assert all(t.type == "scatter" for t in fig.data)                 # points with intervals, no bare bars
    assert sum(len(t.x) for t in fig.data) == len(res["effects"])
    assert all(t.error_x.array is not None for t in fig.data)
    assert any(s.x0 == 0 for s in fig.layout.shapes)                  # the zero line
    assert "model hit ratio (pp)" in [y for t in fig.data for y in t.y]
    assert effects_figure({"effects": {}}).layout.annotations[0].text == "nothing could be compared"


# ---- the command line -------------------------------------------------------------------------------------------
def _cli_run(root: Path, seed: int, listed_factor: float, fio_iops: float) -> Path:
    """A small run on disk: reads of known latency (x listed_factor in the listed zones) and fio totals."""
    ev = _events(seed, n=3000, listed_factor=listed_factor)
    reqs = [("read", z * 8192, 1, lat) for z, lat in zip(ev["zone"].to_list(), ev["lat_ns"].to_list(), strict=True)]
    return make_run(root, reqs, fio={"read_iops": fio_iops, "read_clat_p50_us": 36e6 / fio_iops,
                                     "read_clat_p99_us": 180e6 / fio_iops, "runtime_ms": 3000},
                    workload={"name": "test", "hot_zones": LISTED})


def test_cli_compares_two_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = _cli_run(tmp_path / "a", 1, 1.0, 6898), _cli_run(tmp_path / "b", 2, 0.5, 5414)
    assert main(["compare", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "listed zones: 1, 7, 11, 15, 19 (the workload's hot zones" in out
    row = next(line for line in out.splitlines() if line.startswith("device read p50, listed zones"))
    assert row.endswith("faster")
    row = next(line for line in out.splitlines() if line.startswith("read IOPS (fio)"))
    assert "-21.5 %" in row and row.endswith(NO_DIFFERENCE)
    assert out.rstrip().splitlines()[-2].startswith("verdict: read IOPS (fio) -21.5 %")
    assert main(["compare", str(a), str(b), "--json", "--listed", "2,3", "--blocks", "5", "--noise-cv", "0.12"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["listed"] == [2, 3] and doc["listed_from"] == "--listed" and doc["blocks"] == 5
    assert doc["noise_cv"] == 0.12 and doc["effects"]["read_iops"]["verdict"] == NO_DIFFERENCE
    assert doc["a_run"].endswith("a") and doc["distributions"]["b"]["listed"]["reads"] > 0


def test_cli_on_synthetic_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for name, seed in (("a", "1"), ("b", "2")):
        assert main(["synth", str(tmp_path / name), "--reads", "20000", "--seed", seed]) == 0
    capsys.readouterr()
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {e["verdict"] for e in doc["effects"].values()} == {NO_DIFFERENCE}
    assert "no fio totals" in doc["absent"]["read_iops"]["reason"]


@pytest.mark.parametrize("change", [{"zone_size_lba": 4096, "zone_cap_lba": 4096, "nr_zones": 128},
                                    {"lba_bytes": 512}])
def test_cli_refuses_runs_of_two_geometries_without_force(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                         change: dict) -> None:
    a, b = _cli_run(tmp_path / "a", 1, 1.0, 6898), _cli_run(tmp_path / "b", 2, 0.5, 5414)
    meta = json.loads((b / "meta.json").read_text())
    (b / "meta.json").write_text(json.dumps({**meta, **change}))
    assert main(["compare", str(a), str(b)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "a zone id names other blocks in each" in err and "--force" in err
    assert main(["compare", str(a), str(b), "--force", "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["effects"] and "ztbp compare: warning: A has zones of 8192 LBAs" in err
    assert main(["compare", str(a), "--force"]) == 2  # a loop's A/B blocks share one geometry: no --force there
    assert "--force: options of two runs" in capsys.readouterr().err


@pytest.mark.parametrize("args,msg", [(["--blocks", "1"], "--blocks"), (["--blocks", "x"], "--blocks"),
                                      (["--noise-cv", "inf"], "--noise-cv"), (["--noise-cv", "-1"], "--noise-cv"),
                                      (["--listed", "a,b"], "--listed")])
def test_cli_bounds_its_options(tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list, msg: str) -> None:
    a = _cli_run(tmp_path / "a", 1, 1.0, 6898)
    assert main(["compare", str(a), str(a), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("ztbp compare: error: ") and msg in err


def _loop_dir(root: Path, ab: dict[str, Any] | None) -> Path:
    root.mkdir()
    doc: dict[str, Any] = {"format": LOOP_FORMAT, "backend": "nvmevirt",
                           "rounds": [{"round": 1, "run": "round-01"}], "stopped": "rounds done"}
    if ab is not None:
        doc["ab"] = ab
    (root / "loop.json").write_text(json.dumps(doc))
    return root


def test_cli_on_a_loop_s_ab_blocks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocks = _blocks(4, gain=0.25, listed_gain=0.5, pairs=8)
    loop = _loop_dir(tmp_path / "loop", {"blocks": blocks, "listed": LISTED, "effects": {"stale": True}})
    assert main(["compare", str(loop)]) == 0
    out = capsys.readouterr().out
    assert "8 complete pair(s) of blocks" in out and "verdict: read IOPS (fio) +" in out
    assert main(["compare", str(loop), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["effects"]["read_iops"]["verdict"] == "faster" and doc["listed"] == LISTED  # recomputed
    assert doc["effects"] == ab_effects(blocks)["effects"]
    assert main(["compare", str(loop), "--blocks", "4"]) == 2
    assert "options of two runs" in capsys.readouterr().err


def test_cli_refuses_a_loop_without_ab_blocks_and_a_lone_run(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    loop = _loop_dir(tmp_path / "loop", None)
    assert main(["compare", str(loop)]) == 2
    assert "no A/B blocks" in capsys.readouterr().err
    run = _cli_run(tmp_path / "a", 1, 1.0, 6898)
    assert main(["compare", str(run)]) == 2
    assert "not a loop directory" in capsys.readouterr().err


def test_repeats_of_a_negative_control_mostly_say_no_difference() -> None:
    """Ten repeats of five pairs with no effect: each metric's verdicts add up to ten. Over 400 such repeats each
    measure alone finds an effect by chance in about alpha of them (read IOPS: 21), any of the device's seven in
    far more (70: a "faster" or "slower" somewhere one repeat in six); judged as a family (Holm) any of them in at
    most alpha (10: fewer than 5 %, as the measures move together)."""
    got = ab_repeats(_blocks(7, gain=0.0, listed_gain=0.0, pairs=50), 10)
    assert (got["groups"], got["pairs_per_group"], got["left_out_pairs"]) == (10, 5, 0)
    for tally in got["verdicts"].values():
        assert sum(v for k, v in tally.items() if k != "metric") == 10
    alone = unadjusted = family = 0
    for seed in range(40):
        for r in ab_repeats(_blocks(seed, gain=0.0, listed_gain=0.0, pairs=50), 10)["results"]:
            measures = [e for e in r["effects"].values() if e["family"]]
            assert len(measures) == 7 and all(e["p_holm"] >= e["p_value"] for e in measures)
            alone += r["effects"]["read_iops"]["p_value"] < 0.05
            unadjusted += any(e["p_value"] < 0.05 for e in measures)
            family += any(e["verdict"] != NO_DIFFERENCE for e in measures)
    assert 4 <= alone <= 40  # 400 repeats at alpha 0.05: 20 expected, a binomial band of about +-13
    assert unadjusted >= 50 and family <= 20, (unadjusted, family)
    found = ab_repeats(_blocks(8, gain=0.3, listed_gain=0.5, pairs=50), 10)["verdicts"]["read_iops"]
    assert found.get("faster", 0) >= 8


def test_repeats_need_two_pairs_each(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(CompareError, match="cannot make 4 repeats"):
        ab_repeats(_blocks(9, gain=0.0, listed_gain=0.0, pairs=7), 4)
    loop = _loop_dir(tmp_path / "loop", {"blocks": _blocks(4, 0.0, 0.0, pairs=10), "listed": LISTED})
    assert main(["compare", str(loop), "--repeats", "5"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("5 repeats of 2 pairs of blocks each") and "read IOPS (fio):" in out
    assert main(["compare", str(loop), "--repeats", "6"]) == 2 and "cannot make 6 repeats" in capsys.readouterr().err
    run = _cli_run(tmp_path / "a", 1, 1.0, 6898)
    assert main(["compare", str(run), str(run), "--repeats", "2"]) == 2
    assert "--repeats: an option of a loop" in capsys.readouterr().err


# ---- verdicts a reader can trust ---------------------------------------------------------------------------------
def _iops_blocks(iops: list[float]) -> list[dict[str, Any]]:
    """A/B blocks in ABBA order (pair 1 on/off, pair 2 off/on, ...) with fio's read IOPS only."""
    arms = [arm for p in range(1, len(iops) // 2 + 1) for arm in (("on", "off") if p % 2 else ("off", "on"))]
    return [{"round": i + 2, "arm": arm, "pair": i // 2 + 1, "device_holds": arm == "on", "fio": {"read_iops": x}}
            for i, (arm, x) in enumerate(zip(arms, iops, strict=True))]


def test_one_outlier_block_cannot_swing_the_median_of_three_pairs() -> None:
    """A loop of three pairs whose IOPS verdict one block decided: 8,174 / 7,299 / 7,407 / 4,926 / 8,772 / 7,353 IOPS
    (on, off, off, on, on, off). Pairs 1 and 3 say +12.0 % and +19.3 %; block 4 (4,926, on) makes pair 2 -33.5 %
    and pulls the mean to -3.9 %. The median of the pairs stays +12.0 % whatever that block measured; three pairs
    cannot give a 95 % distribution-free interval, and their noise asks for many more pairs."""
    iops = [8_174, 7_299, 7_407, 4_926, 8_772, 7_353]
    got = ab_effects(_iops_blocks(iops))
    e = got["effects"]["read_iops"]
    assert [round(x, 1) for x in e["pair_changes"]] == [12.0, -33.5, 19.3]
    assert round(e["change"], 1) == -3.9 and round(e["median"], 1) == 12.0
    assert e["verdict"] == NO_DIFFERENCE and e["hodges_lehmann"]["ci"] is None
    assert "3 pairs cannot give a 95 % distribution-free interval (at most 75.00 %; 6 pairs are needed)" in \
        e["hodges_lehmann"]["note"]
    for outlier in (1_000, 3_000, 7_000):  # whatever block 4 measured, the median stays; the mean does not
        moved = ab_effects(_iops_blocks([*iops[:3], outlier, *iops[4:]]))["effects"]["read_iops"]
        assert round(moved["median"], 1) == 12.0 and abs(moved["change"] - e["change"]) > 5
    assert e["plan"]["pairs"] > 50 and got["family"]["plan"]["key"] == "read_iops"
    text = compare_text(got)
    assert "pairs +12.0, -33.5, +19.3 %; median +12.0 %" in text
    assert "the mean (-3.9 %) and the median are on two sides of no change: one pair decides the mean" in text
    assert f"pairs needed (read IOPS (fio)): {e['plan']['pairs']} — a change of 10 % found with 80 % power" in text


def test_a_verdict_the_median_of_the_pairs_does_not_share_is_undecided() -> None:
    # eight pairs a hair slower (-1 %), six much faster (+49 %): the mean says faster (p 0.01), the median slower
    ratios = [math.exp(-0.01)] * 8 + [math.exp(0.4)] * 6
    iops = [x for p, r in enumerate(ratios, start=1) for x in ((1000 * r, 1000) if p % 2 else (1000, 1000 * r))]
    e = ab_effects(_iops_blocks(iops))["effects"]["read_iops"]
    assert e["p_holm"] < 0.05 and e["change"] > 0 and e["median"] < 0
    assert e["verdict"].startswith("undecided") and e["improved"] is None


def test_a_device_that_never_held_the_configuration_gets_no_verdict() -> None:
    blocks = _blocks(4, gain=0.25, listed_gain=0.5, pairs=8)  # a clear effect in the numbers...
    for b in blocks:
        b["device_holds"] = False  # ...on a device that refused every SET (QEMU's namespace)
    got = ab_effects(blocks)
    assert got["device_held"] is False and got["verdict"]["verdict"] is None
    assert got["verdict"]["line"] == ("no verdict: the device never held the configuration (every SET refused): "
                                      "both arms ran the same device")
    measures = [e for e in got["effects"].values() if e["family"]]
    assert all(e["verdict"].startswith("no verdict") and e["improved"] is None for e in measures)
    assert got["effects"]["hit_ratio"]["verdict"] == "higher"  # the model's: what the zones would gain
    assert "the figures are a negative control" in compare_text(got)

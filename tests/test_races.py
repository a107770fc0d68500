"""Two commands racing for one name: `ztbp synth` and `ztbp import` writing one new run, two captures or loops
claiming one run folder, two reports writing one report folder. Both start at once (a barrier, and a second one
where each has checked the name and is about to take it); exactly one gets the name, the other says so and writes
nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ztbp import contract
from ztbp.acquire import capture
from ztbp.acquire.capture import CaptureError, start_run
from ztbp.acquire.synth import write_run
from ztbp.errors import ZtbpError
from ztbp.files import CLAIM_MARK, ClaimError
from ztbp.io.importers import import_trace
from ztbp.paths import TEST_DATA, RunPaths

PKG = Path(__file__).parents[1] / "pipelines"


def race(calls: list[Callable[[], Any]]) -> list[Any]:
    """Run the calls in threads released together by a barrier; each one's result or the exception it raised."""
    start = threading.Barrier(len(calls))
    out: list[Any] = [None] * len(calls)

    def one(i: int) -> None:
        start.wait(10)
        try:
            out[i] = calls[i]()
        except Exception as e:  # noqa: BLE001 - the loser's error is the result looked at
            out[i] = e

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return out


def both_at(monkeypatch: pytest.MonkeyPatch, module: Any, name: str, n: int = 2) -> None:
    """`module.name` waits until n callers have reached it: every racer has checked the name and now takes it."""
    gate = threading.Barrier(n)
    real = getattr(module, name)

    def wrapped(*a: Any, **k: Any) -> Any:
        gate.wait(60)
        return real(*a, **k)

    monkeypatch.setattr(module, name, wrapped)


def one_winner(results: list[Any], error: type[BaseException]) -> int:
    """Exactly one result is not an exception; the other is `error` saying another command made the name first."""
    winners = [i for i, r in enumerate(results) if not isinstance(r, BaseException)]
    losers = [r for r in results if isinstance(r, BaseException)]
    assert len(winners) == 1, results
    assert all(isinstance(e, error) and "another command" in str(e) and "wrote nothing" in str(e) for e in losers), \
        losers
    return winners[0]


def no_leftovers(folder: Path) -> None:
    """Nothing of a loser beside the run: no temporary folder or file."""
    assert [p.name for p in folder.iterdir() if p.name.startswith(".")] == []


# ---- whole runs: synth and import --------------------------------------------------------------------------------
@pytest.mark.parametrize("existing", [False, True], ids=["new-folder", "empty-folder"])
def test_two_synths_of_one_new_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, existing: bool) -> None:
    run = tmp_path / "runs" / "r"
    (run if existing else run.parent).mkdir(parents=True)
    both_at(monkeypatch, contract, "publish_new")
    results = race([lambda seed=seed: write_run(run, "paper80", 20_000, seed) for seed in (1, 2)])
    winner = one_winner(results, ClaimError)
    assert json.loads((run / "meta.json").read_text())["workload"]["seed"] == winner + 1
    assert sorted(p.name for p in run.iterdir()) == ["meta.json", "raw"]
    no_leftovers(run.parent)


def test_two_imports_of_one_new_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = RunPaths(tmp_path / "r")
    both_at(monkeypatch, contract, "publish_new")
    src = {"msr": TEST_DATA / "import" / "msr.csv", "alibaba": TEST_DATA / "import" / "alibaba.csv"}
    results = race([lambda f=fmt, s=path: import_trace(s, run, f, zone_size_bytes=1 << 20)
                    for fmt, path in src.items()])
    winner = one_winner(results, ClaimError)
    assert json.loads(run.meta.read_text())["workload"]["name"] == f"import-{list(src)[winner]}"
    no_leftovers(tmp_path)


def test_two_synth_commands_at_once(tmp_path: Path) -> None:
    """The command itself, twice, in processes of their own that start their command together (a gate file)."""
    gate = tmp_path / "go"
    script = ("import os, sys, time\nfrom ztbp.cli import main\n"
              f"while not os.path.exists({str(gate)!r}):\n    time.sleep(0.001)\nsys.exit(main(sys.argv[1:]))")
    env = {**os.environ, "PYTHONPATH": str(PKG)}
    run = tmp_path / "r"
    procs = [subprocess.Popen([sys.executable, "-c", script, "synth", str(run), "--reads", "50000", "--seed",
                               str(seed)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for seed in (1, 2)]
    gate.touch()
    done = [(p.wait(120), p.stderr.read()) for p in procs]  # type: ignore[union-attr]
    assert sorted(rc for rc, _ in done) == [0, 2], done
    rc, err = next(d for d in done if d[0])
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ztbp synth: error: ") and "Traceback" not in err
    assert "already holds a run" in err or "another command" in err  # refused before it began, or at the end
    winner = next(i for i, (rc, _) in enumerate(done) if rc == 0)
    assert json.loads((run / "meta.json").read_text())["workload"]["seed"] == winner + 1
    assert sorted(p.name for p in run.iterdir()) == ["meta.json", "raw"]
    no_leftovers(tmp_path)


# ---- folders written over time: a capture's run, a loop's folder --------------------------------------------------
@pytest.mark.parametrize("existing", [False, True], ids=["new-folder", "empty-folder"])
@pytest.mark.parametrize("kind", ["capture", "loop"])
def test_two_captures_or_loops_claim_one_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, existing: bool,
                                               kind: str) -> None:
    out = tmp_path / "out"
    if existing:
        out.mkdir()
    both_at(monkeypatch, capture, "claim_dir")

    def start(i: int) -> RunPaths:
        meta = None if kind == "loop" else contract.new_meta(
            device="nvme0n1", lba_bytes=4096, zone_size_lba=8192, zone_cap_lba=8192, nr_zones=64, synthetic=False,
            workload={"name": f"racer-{i}"}, backend="qemu")
        return start_run("x", str(out), meta, vm=False)

    winner = one_winner(race([lambda i=i: start(i) for i in (0, 1)]), CaptureError)
    if kind == "loop":
        assert [p.name for p in out.iterdir()] == [CLAIM_MARK]
    else:
        assert [p.name for p in out.iterdir()] == ["meta.json"]
        meta = json.loads((out / "meta.json").read_text())
        assert meta["workload"]["name"] == f"racer-{winner}" and meta["complete"] is False
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # the loser's claim folder is gone


def test_a_folder_that_holds_something_is_not_claimed(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(CaptureError, match="already exists and is not empty"):
        start_run("x", str(out), None, vm=False)
    assert [p.name for p in out.iterdir()] == ["notes.txt"]


# ---- reports ----------------------------------------------------------------------------------------------------
def test_two_reports_into_one_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ztbp.report import watch as report_watch

    journal = tmp_path / "j"
    journal.mkdir()
    start = {"kind": "start", "wall": 1.7e9, "window": 0, "resumed": False,
             "meta": {"zone_size_lba": 1024, "lba_bytes": 4096, "nr_zones": 128}}
    (journal / "watch.jsonl").write_text(json.dumps(start) + "\n")
    out = tmp_path / "report"
    both_at(monkeypatch, report_watch, "writing")
    # the first in holds the folder until the other has given up: the two overlap, whoever comes first
    other_done = threading.Event()
    real = report_watch.write_plotlyjs
    monkeypatch.setattr(report_watch, "write_plotlyjs", lambda o: (other_done.wait(30), real(o)))

    def report() -> dict[str, Any]:
        try:
            return report_watch.render_watch(journal, out, log=lambda s: None)
        except ZtbpError:
            other_done.set()
            raise

    results = race([report, report])
    one_winner(results, ClaimError)
    assert sorted(p.name for p in out.iterdir()) == [".lock", "index.html", "plotly.min.js"]
    assert "being written by another command now" in str(next(r for r in results if isinstance(r, Exception)))


def test_the_journals_parts_follow_no_planted_name(tmp_path: Path) -> None:
    """A watch journal's Parquet part is written under a name no one can guess and renamed into place: a link
    planted at the name a part was once written under first (rows-00000.tmp) is not followed, and a link planted at
    the part's own name is refused, its target untouched."""
    import polars as pl

    from ztbp.errors import FileSystemError
    from ztbp.io.journal import ROWS, Journal, part_name

    victim = tmp_path / "victim"
    victim.write_text("keep me")
    folder = tmp_path / "watch"
    j = Journal(folder, 1 << 30)
    (folder / ROWS / part_name(0)).with_suffix(".tmp").symlink_to(victim)
    j.rows(pl.DataFrame({"ts_ns": [1, 2], "zone": [0, 1]}))
    assert pl.read_parquet(folder / ROWS / part_name(0))["zone"].to_list() == [0, 1]
    (folder / ROWS / part_name(1)).symlink_to(victim)
    with pytest.raises((ZtbpError, FileSystemError), match="not a regular file"):
        j.rows(pl.DataFrame({"ts_ns": [3], "zone": [2]}))
    assert victim.read_text() == "keep me"
    assert not [p for p in (folder / ROWS).iterdir() if p.name.startswith(".")]  # no temporary left

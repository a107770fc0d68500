"""Paths read from a loop stay inside the loop directory: a round's `run` in loop.json must be the plain name of
a folder in it (`ztbp report LOOPDIR --rounds` joined `"../../x"` to the output folder and wrote pages outside
`-o`); anything else is refused in one line with a non-zero exit before a notebook runs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ztbp.cli import main
from ztbp.errors import ZtbpError
from ztbp.io.loop import read_loop, round_dir

ROOT = Path(__file__).resolve().parents[1]
SAMPLE_RUN = ROOT / "tests" / "data" / "runs" / "sample-paper80"
SAMPLE_LOOP = ROOT / "tests" / "data" / "loops" / "sample-nvmevirt"


def _loop(tmp_path: Path, run: object) -> Path:
    loop = tmp_path / "loop"
    loop.mkdir()
    doc = json.loads((SAMPLE_LOOP / "loop.json").read_text())
    doc["rounds"][0]["run"] = run
    (loop / "loop.json").write_text(json.dumps(doc))
    return loop


@pytest.mark.parametrize("run", ["../../x", "/tmp/x", "..", ".", "", "a/b", "a\\b", None, 7])
def test_a_round_run_must_be_a_plain_name(tmp_path: Path, run: object) -> None:
    with pytest.raises(ZtbpError, match="not the plain name of a folder"):
        read_loop(_loop(tmp_path, run))


def test_a_round_run_must_be_a_folder_inside_the_loop(tmp_path: Path) -> None:
    loop = _loop(tmp_path, "round-01")
    with pytest.raises(ZtbpError, match="not a folder inside"):
        round_dir(loop, "round-01")  # missing
    outside = tmp_path / "elsewhere"
    shutil.copytree(SAMPLE_RUN, outside)
    (loop / "round-01").symlink_to(outside)
    with pytest.raises(ZtbpError, match="not a folder inside"):
        round_dir(loop, "round-01")  # a link out of the loop
    (loop / "round-01").unlink()
    (loop / "round-01").mkdir()
    assert round_dir(loop, "round-01") == loop / "round-01"


def test_cli_report_rounds_refuses_a_path_out_of_the_loop(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    loop = _loop(tmp_path, "../../x")
    out = tmp_path / "report"
    rc = main(["report", str(loop), "--rounds", "-o", str(out)])
    err = capsys.readouterr().err
    assert rc != 0 and len(err.strip().splitlines()) == 1 and "plain name" in err, err
    assert not out.exists() and not (tmp_path.parent / "x").exists()

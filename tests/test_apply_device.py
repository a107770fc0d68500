"""`ztbp apply --device`: a device that starts with '-' would read as a ztbp-ctl option (`--device=--dry-run`):
it is refused in one line, and the device reaches ztbp-ctl after `--`."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from ztbp.cli import main
from ztbp.errors import ZtbpError
from ztbp.paths import RunPaths
from ztbp.writeback import ctl
from ztbp.writeback.ctl import check_device

SAMPLE_RUN = Path(__file__).resolve().parents[1] / "tests" / "data" / "runs" / "sample-paper80"


@pytest.mark.parametrize("dev", ["--dry-run", "-h", "--force"])
def test_a_device_that_reads_as_an_option_is_refused(dev: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ZtbpError, match="starts with '-'"):
        check_device(dev)
    rc = main(["apply", str(SAMPLE_RUN), f"--device={dev}"])
    err = capsys.readouterr().err
    assert rc != 0 and len(err.strip().splitlines()) == 1 and "starts with '-'" in err, err


def test_apply_puts_the_device_after_double_dash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[list[str]] = []

    def fake_run(argv: list[str], **_: object) -> subprocess.CompletedProcess[str]:
        seen.append(argv)
        return subprocess.CompletedProcess(argv, 0, '{"ok": true}\n', "")

    monkeypatch.setattr(ctl, "ensure_ctl", lambda: Path("/bin/true"))
    monkeypatch.setattr(ctl.subprocess, "run", fake_run)
    cfg = {"format": "ztbp-cache-config/1", "hot_zones": [1]}
    res = ctl.apply(RunPaths(tmp_path), cfg, "/dev/nvme0n1")
    assert seen[0][-2:] == ["--", "/dev/nvme0n1"] and res["ok"]
    ctl.apply(RunPaths(tmp_path), cfg, None)
    assert "--dry-run" in seen[1] and "--" not in seen[1]

"""The real application path: one small db_bench capture on btrfs zoned in QEMU (`ztbp capture-app rocksdb`: the
file system on the ZNS namespace, RocksDB's GetImpl/WriteImpl traced by uprobes, the streaming NVMe probe with the
issuing thread, the cache probe, FIEMAP of every file), then `ztbp appops`, `ztbp files`, `ztbp config` on it.

One boot, a few thousand operations (~4 min under TCG)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ztbp import paths
from ztbp.contract import APPOPS_COLUMNS, APPOPS_VERSION_LINE, read_meta
from ztbp.paths import RunPaths

pytestmark = pytest.mark.vm

KEYS = 3_000
READS = 400


def _ztbp(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ztbp.cli", *args], capture_output=True, text=True, cwd=paths.ROOT)


@pytest.fixture(scope="module")
def app_run(tmp_path_factory: pytest.TempPathFactory) -> RunPaths:
    out = tmp_path_factory.mktemp("app") / "rocksdb-btrfs"
    proc = _ztbp("capture-app", "rocksdb", "--fs", "btrfs", "--keys", str(KEYS), "--reads", str(READS),
                 "--out", str(out), "--timeout", "1500")
    print(proc.stdout[-3000:], proc.stderr[-3000:])
    assert proc.returncode == 0, proc.stderr[-2000:]
    return RunPaths(out)


def test_every_get_is_one_row_and_matches_db_bench(app_run: RunPaths) -> None:
    lines = app_run.probe_csv("appops").read_text().splitlines()
    assert lines[0] == APPOPS_VERSION_LINE and lines[1] == ",".join(APPOPS_COLUMNS)
    meta = read_meta(app_run)
    phases = {p["phase"]: p for p in meta["app"]["phases"]}
    assert set(phases) >= {"fill", "readrandom"} and all(p["status"] == 0 for p in phases.values())
    db = phases["readrandom"]["db_bench"]["readrandom"]
    assert db["operations"] == READS
    start, end = phases["readrandom"]["start_ns"], phases["readrandom"]["end_ns"]
    gets = [r.split(",") for r in lines[2:] if r.split(",")[4] == "get"]
    in_phase = [g for g in gets if start <= int(g[2]) <= end]
    assert abs(len(in_phase) - db["operations"]) <= 0.01 * db["operations"], (len(in_phase), db)
    assert [f["op"] for f in meta["app"]["functions"]] == ["get", "write"]
    assert all(f["symbol"].startswith("_ZN7rocksdb6DBImpl") for f in meta["app"]["functions"])


def test_appops_accounts_for_every_read(app_run: RunPaths) -> None:
    proc = _ztbp("appops", str(app_run.root), "--json")
    assert proc.returncode == 0, proc.stderr
    r = json.loads(proc.stdout)
    assert r["commands"] == r["attributed"] + r["unattributed"] > 0
    get = r["ops"]["get"]
    assert abs(get["ops"] - READS) <= 0.01 * READS
    assert get["ios_mean"] >= 0.5, "direct Gets on a fresh small DB reach the device"
    assert sum(get["ios_hist"].values()) == get["ops"]
    caches = r.get("caches")
    assert caches and caches["dc_lookups"] > 0, "the cache probe counted dentry lookups"


def test_every_sst_file_has_its_zones_and_reads(app_run: RunPaths) -> None:
    proc = _ztbp("files", str(app_run.root), "--json")
    assert proc.returncode == 0, proc.stderr
    r = json.loads(proc.stdout)
    sst = [t for t in r["table"] if t["path"].endswith(".sst")]
    assert sst and len(sst) == r["sst_files"]
    nr_zones = read_meta(app_run)["nr_zones"]
    for t in sst:
        assert t["fragments"] >= 1 and t["zones"] and all(0 <= z < nr_zones for z in t["zones"]), t
    assert r["reads_in_files"] + r["reads_outside_files"] > 0
    # the fill settles its compactions and readrandom runs without them, so the Gets read files that are still
    # there when the layout is taken: (nearly) every read of the phase lies in a file (the rest: file-system metadata)
    assert r["reads_outside_files"] <= 0.05 * (r["reads_in_files"] + r["reads_outside_files"]), r
    assert r["reads_in_files"] >= sum(t["reads"] for t in sst)


def test_the_decision_rule_runs_on_the_application_run(app_run: RunPaths) -> None:
    proc = _ztbp("config", str(app_run.root), "--json", "-o", str(Path(app_run.root) / "derived" / "cfg.json"))
    assert proc.returncode == 0, proc.stderr
    cfg = json.loads(proc.stdout)
    assert isinstance(cfg["recommend"], bool) and cfg["recommend_reason"]
    if not cfg["recommend"]:
        assert "nothing to send" in cfg["recommend_reason"] or cfg["held_out"]["gain"] < 0.01 + 1e-9

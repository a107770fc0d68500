"""`ztbp batch` on a real dask.distributed LocalCluster of 2 worker processes: the same results as the sequential
loop, a broken run reported without stopping the others, an existing scheduler by address, and one run's zone and
cell aggregates over its partitions equal to the streaming and in-memory paths."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from polars.testing import assert_frame_equal

from ztbp.acquire.synth import write_run
from ztbp.analysis.streaming import cell_counts_lazy, zone_table_lazy
from ztbp.analysis.zones import zone_table
from ztbp.cli import main
from ztbp.control import batch
from ztbp.control.batch import client, partition_aggregates, run_batch
from ztbp.errors import ZtbpError
from ztbp.io.run import load
from ztbp.io.stream import Parts, ingest_stream
from ztbp.paths import RunPaths

PATTERNS = ("paper80", "uniform", "seqread", "zipf")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    base = tmp_path_factory.mktemp("batch")
    out = []
    for i, pat in enumerate(PATTERNS):
        write_run(base / f"r{i}-{pat}", pat, 20_000, seed=i)
        out.append(str(base / f"r{i}-{pat}"))
    broken = base / "broken"
    write_run(broken, "uniform", 100, seed=9)
    (broken / "raw" / "nvme.csv").write_text("not a trace\n")
    return [*out, str(broken)]


@pytest.fixture(scope="module")
def dask_client():
    with client(None, workers=2) as c:
        yield c


def test_cluster_equals_sequential(runs: list[str]) -> None:
    seq = run_batch(runs, sequential=True)
    par = run_batch(runs, workers=2)
    assert par["workers"] == 2 and par["scheduler"].startswith("tcp://")
    for a, b in zip(seq["runs"], par["runs"], strict=True):
        assert a["run"] == b["run"]
        assert a.get("digest") == b.get("digest") and a.get("result") == b.get("result")
    ok = [r for r in par["runs"] if "digest" in r]
    assert len(ok) == len(PATTERNS)
    assert ok[0]["result"]["cluster"]["hot_zones"]  # paper80 has hot zones; the others' figures differ
    assert len({r["digest"] for r in ok}) == len(PATTERNS)
    broken = par["runs"][-1]
    assert "error" in broken and "nvme.csv" in broken["error"]
    stored = json.loads((Path(runs[0]) / "derived" / "batch.json").read_text())
    assert stored["digest"] == ok[0]["digest"]


def test_existing_scheduler_by_address(runs: list[str], dask_client) -> None:
    res = run_batch(runs[:2], scheduler=dask_client.scheduler.address, analyses=("zones", "chains"))
    assert res["scheduler"] == dask_client.scheduler.address and res["workers"] == 2
    assert set(res["runs"][0]["result"]) == {"zones", "chains"}


def test_unreachable_scheduler_says_what_to_do(runs: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(batch, "CONNECT_TIMEOUT_S", 2)  # nothing listens on port 9: no need to wait 20 s
    with pytest.raises(ZtbpError, match="cannot reach the Dask scheduler"):
        run_batch(runs[:1], scheduler="tcp://127.0.0.1:9")


def test_partition_aggregates_equal_streaming_and_memory(runs: list[str], dask_client) -> None:
    rp = RunPaths(Path(runs[0]))
    ingest_stream(rp, window_s=0.2, zone_parts=8)
    parts = Parts(rp.events_parts)
    assert len(parts.files()) > 8  # several tasks of files_per_task files
    run = load(rp.root)
    agg = partition_aggregates(rp.events_parts, run.meta, dask_client, files_per_task=4)
    assert_frame_equal(agg["zones"], zone_table_lazy(parts.scan(), run.nr_zones, run.lba_bytes))
    assert_frame_equal(agg["zones"], zone_table(run.events, run.nr_zones, run.lba_bytes))
    assert_frame_equal(agg["cells"], cell_counts_lazy(parts.scan(), run.meta, 32))
    assert int(agg["cells"]["reads"].sum()) == 20_000


def test_cli_batch(runs: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["batch", *runs[:2], "--sequential", "--analyses", "zones,cachesim", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["scheduler"] == "sequential" and len(out["runs"]) == 2
    assert main(["batch", runs[-1], "--sequential"]) == 1  # the broken run fails the command
    assert "1 failed" in capsys.readouterr().out
    assert main(["batch", runs[0], "--analyses", "zones,nope"]) == 2


def test_the_batch_command_offers_the_registry() -> None:
    """`ztbp batch --analyses` names the in-memory stages of the registry, in its order (spelled out in the CLI so
    that building the parser loads no stage)."""
    from ztbp.cli.scale import BATCH_ANALYSES
    from ztbp.stages import MEMORY

    assert BATCH_ANALYSES == MEMORY == batch.ANALYSES

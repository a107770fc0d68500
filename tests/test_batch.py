"""`ztbp batch` on a real dask.distributed LocalCluster of 2 worker processes: the same results as the sequential
loop, a broken run reported without stopping the others, an existing scheduler by address (checked first: tcp://
only to this machine unless --insecure, tls:// with its certificates, a real TLS cluster), and one run's zone and
cell aggregates over its partitions equal to the streaming and in-memory paths."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from polars.testing import assert_frame_equal

from ztbp.acquire.synth import write_run
from ztbp.analysis.chunked import cell_counts_lazy, zone_table_lazy
from ztbp.analysis.zones import zone_table
from ztbp.cli import main
from ztbp.control import batch
from ztbp.control.batch import client, partition_aggregates, run_batch
from ztbp.control.scheduler import Scheduler, connect_args
from ztbp.errors import ZtbpError
from ztbp.io.parts import Parts, ingest_stream
from ztbp.io.run import load
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


# --- an existing scheduler: its address checked, TLS offered -----------------------------------------------------
@pytest.mark.parametrize(("address", "fragment"), [
    ("junk", "is not an address"),
    ("10.0.0.5:8786", "is not an address"),
    ("tcp://10.0.0.5", "is not an address"),
    ("tcp://10.0.0.5:8786/path", "is not an address"),
    ("tcp://host name:8786", "is not an address"),
    ("ws://10.0.0.5:8786", "ws:// is not accepted"),
    ("inproc://10.0.0.5:8786", "inproc:// is not accepted"),
    ("tcp://10.0.0.5:0", "port 0 is not between"),
    ("tcp://[::1]:70000", "port 70000 is not between"),
    ("tcp://10.0.0.5:8786", "plain tcp:// to another machine"),
    ("tcp://sched.lab.example:8786", "plain tcp:// to another machine"),
    ("tls://10.0.0.5:8786", "tls:// needs --tls-ca-file"),
])
def test_a_scheduler_address_is_checked(address: str, fragment: str) -> None:
    with pytest.raises(ZtbpError, match=fragment):
        connect_args(Scheduler(address))


@pytest.mark.parametrize("address", ["tcp://127.0.0.1:8786", "tcp://localhost:8786", "tcp://[::1]:8786",
                                     "tcp://127.0.0.2:1"])
def test_plain_tcp_to_this_machine_is_accepted(address: str) -> None:
    assert connect_args(Scheduler(address)) == (address, None)


def test_plain_tcp_elsewhere_needs_insecure() -> None:
    assert connect_args(Scheduler("tcp://10.0.0.5:8786", insecure=True)) == ("tcp://10.0.0.5:8786", None)
    with pytest.raises(ZtbpError, match="unpickles"):
        connect_args(Scheduler("tcp://10.0.0.5:8786"))


def test_tls_options_are_checked(tmp_path: Path) -> None:
    ca, cert = tmp_path / "ca.pem", tmp_path / "client.pem"
    ca.write_text("x")
    cert.write_text("x")
    with pytest.raises(ZtbpError, match="need a tls:// scheduler address"):
        connect_args(Scheduler("tcp://127.0.0.1:8786", tls_ca_file=str(ca)))
    with pytest.raises(ZtbpError, match="--tls-key .*: no such file"):
        connect_args(Scheduler("tls://10.0.0.5:8786", str(ca), str(cert), str(tmp_path / "missing.pem")))
    address, security = connect_args(Scheduler("tls://10.0.0.5:8786", str(ca), str(cert)))
    assert address == "tls://10.0.0.5:8786"
    assert security.require_encryption and security.tls_ca_file == str(ca) and security.tls_client_cert == str(cert)


@pytest.mark.parametrize(("argv", "fragment"), [
    (["--scheduler", "tcp://10.0.0.5:8786"], "plain tcp:// to another machine"),
    (["--scheduler", "nope"], "is not an address"),
    (["--tls-cert", "c.pem"], "--tls-cert given without --scheduler"),
    (["--insecure"], "--insecure given without --scheduler"),
])
def test_cli_batch_refuses_a_scheduler_in_one_line(runs: list[str], argv: list[str], fragment: str,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["batch", runs[0], *argv]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and fragment in err, err


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)


def _signed(folder: Path, name: str, ca: str | None) -> tuple[str, str]:
    """A certificate and its key: signed by the CA `ca` (its .pem and -key.pem in `folder`), or self-signed."""
    key, cert = str(folder / f"{name}-key.pem"), str(folder / f"{name}.pem")
    if ca is None:
        _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert, "-days", "1",
                 "-subj", f"/CN={name}")
        return cert, key
    csr = str(folder / f"{name}.csr")
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", csr, "-subj", f"/CN={name}")
    _openssl("x509", "-req", "-in", csr, "-CA", str(folder / f"{ca}.pem"), "-CAkey", str(folder / f"{ca}-key.pem"),
             "-CAcreateserial", "-out", cert, "-days", "1")
    return cert, key


@pytest.mark.skipif(shutil.which("openssl") is None, reason="making test certificates needs openssl")
def test_a_tls_scheduler_end_to_end(runs: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A real TLS cluster: a client with a certificate of its CA runs the batch; one of another CA is refused."""
    from distributed import LocalCluster
    from distributed.security import Security

    ca, _ = _signed(tmp_path, "ca", None)
    server, server_key = _signed(tmp_path, "scheduler", "ca")
    client_cert, client_key = _signed(tmp_path, "client", "ca")
    rogue, rogue_key = _signed(tmp_path, "rogue", None)
    sec = Security(require_encryption=True, tls_ca_file=ca, tls_scheduler_cert=server, tls_scheduler_key=server_key,
                   tls_worker_cert=server, tls_worker_key=server_key, tls_client_cert=client_cert,
                   tls_client_key=client_key)
    with LocalCluster(n_workers=1, threads_per_worker=1, protocol="tls", security=sec, dashboard_address=":0",
                      env=batch.ONE_THREAD) as lc:
        address = lc.scheduler_address
        assert address.startswith("tls://")
        res = run_batch(runs[:1], scheduler=Scheduler(address, ca, client_cert, client_key), analyses=("zones",))
        assert res["scheduler"] == address and "digest" in res["runs"][0]
        monkeypatch.setattr(batch, "CONNECT_TIMEOUT_S", 5)
        with pytest.raises(ZtbpError, match="cannot reach the Dask scheduler"):
            run_batch(runs[:1], scheduler=Scheduler(address, ca, rogue, rogue_key), analyses=("zones",))

"""Bad input, every user-facing command: broken runs (meta.json, raw/, derived/), broken application and layer
files, broken traces to import, a run that is a file, every numeric option at 0, negative, NaN, inf and huge, and
every field of every file the workbench writes and reads back tampered (meta.json, loop.json, the watch journal,
cache-config.json, the profile's files).

For each case the command either refuses — a non-zero exit and exactly one `ztbp CMD: error: ...` line on stderr
that names the problem — or it runs, exit 0, and counts what it skipped. Never a traceback, and never a half-written
file that a later command trusts (no temporary file left behind, no output file written by a command that failed,
derived data always matching its record).

The commands that boot QEMU or need a zoned device (capture, capture-host, capture-layers, capture-app, profile, loop)
and the two that hand over to an outside program (report runs the notebooks with papermill, apply runs ztbp-ctl) are
not run: the functions that would start the VM, a workload on this machine, papermill or ztbp-ctl are replaced by a
sentinel (NotStarted), so their argument checks run and a bad value must be refused before the sentinel is reached.
Everything runs in-process through ztbp.cli.main.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import re
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from loop_fixture import ab_blocks, round_entry
from tamper import Case, cases, expect_refused, tampered

from ztbp.cli import build_parser, main
from ztbp.cli.common import Bounded, BoundedList, BoundedSize
from ztbp.contract import META, probe_header
from ztbp.errors import ZtbpError
from ztbp.io.journal import DECISION, RECORDS, state_spec
from ztbp.io.loop import LOOP
from ztbp.io.profile import PROFILE, Z2C
from ztbp.paths import TEST_DATA
from ztbp.writeback.config import CONFIG as CONFIG_SPEC

BAD_NUMBERS = ("0", "-1", "nan", "inf", "1e300")
ERROR_LINE = re.compile(r"^ztbp [\w-]+: error: \S")
#: Commands that start something outside the process; their starting function is the sentinel.
STARTERS = ("capture", "capture-host", "capture-layers", "capture-app", "profile", "loop", "report", "apply")


class NotStarted(ZtbpError):
    """Raised where a command would boot the VM, run a workload here, papermill or ztbp-ctl."""

    code = 97


def _never(*_a: object, **_k: object) -> None:
    raise NotStarted("the test stops here: the command would start the VM, a workload, papermill or ztbp-ctl")


PARSER = build_parser()


@pytest.fixture(autouse=True)
def nothing_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    import ztbp.acquire.app
    import ztbp.acquire.capture
    import ztbp.acquire.channel
    import ztbp.acquire.host
    import ztbp.acquire.layers
    import ztbp.acquire.vm
    import ztbp.cli
    import ztbp.control.loop
    import ztbp.control.profile
    import ztbp.report.render
    import ztbp.writeback.ctl  # noqa: F401 - loaded so that every binding of a starter is replaced

    for name, mod in list(sys.modules.items()):
        if name.startswith("ztbp."):
            for attr in ("start_run", "run_in_guest", "run_here", "run_loop", "run_profile", "ensure_ctl"):
                if hasattr(mod, attr):
                    monkeypatch.setattr(mod, attr, _never)
    monkeypatch.setattr(ztbp.report.render, "_run_pages", _never)  # after the run is loaded: papermill never starts
    monkeypatch.setattr(ztbp.cli, "build_parser", lambda: PARSER)  # built once: ~1,000 commands run here


# --- running a command ---------------------------------------------------------------------------------------------
def run_cli(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def assert_refused(rc: int, err: str, *names: str) -> str:
    """A non-zero exit and exactly one error line, no traceback; the line names each of `names`."""
    assert "Traceback" not in err, err
    lines = [ln for ln in err.splitlines() if ERROR_LINE.match(ln)]
    assert rc != 0 and len(lines) == 1, (rc, err)
    assert all(n in lines[0] for n in names), (names, lines[0])
    return lines[0]


def assert_ok_or_refused(rc: int, err: str) -> None:
    """Exit 0, or a refusal as above (the sentinel counts as one)."""
    assert "Traceback" not in err, err
    if rc != 0:
        assert_refused(rc, err)


def assert_no_temporary_file(run: Path) -> None:
    left = list(run.rglob(".*.tmp")) if run.is_dir() else []
    assert not left, left


def assert_later_commands_see_the_trace(run: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """What a later command reads from the run's derived/ is what a clean ingest of raw/ gives."""
    clean = tmp_path / "clean"
    shutil.copytree(run, clean, ignore=shutil.ignore_patterns("derived"))
    for cmd in (["zones", "--json"], ["stream", "--json", "--analyses", "zones,opcodes"]):
        later = run_cli(capsys, [cmd[0], run, *cmd[1:]])
        fresh = run_cli(capsys, [cmd[0], clean, *cmd[1:]])
        assert later[0] == fresh[0] == 0, later[2]
        keep = ("zones", "opcodes", "rows")
        assert {k: v for k, v in json.loads(later[1]).items() if k in keep} == \
            {k: v for k, v in json.loads(fresh[1]).items() if k in keep}


# --- the runs -------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small synthetic run: meta.json and raw/nvme.csv."""
    root = tmp_path_factory.mktemp("plain") / "run"
    assert main(["synth", str(root), "--reads", "1500", "--zones", "32", "--no-prefill"]) == 0
    return root


@pytest.fixture(scope="module")
def base(plain: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The small run ingested, clustered and streamed once (so derived/ is there to be broken)."""
    root = tmp_path_factory.mktemp("base") / "run"
    shutil.copytree(plain, root)
    assert main(["ingest", str(root)]) == 0
    assert main(["cluster", str(root), "--eps", "0.02", "--min-samples", "20", "--no-widen"]) == 0
    assert main(["stream", str(root), "--analyses", "zones"]) == 0
    return root


@pytest.fixture(scope="module")
def groups(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("z2c") / "z2c.json"
    path.write_text(json.dumps({"groups": {str(z): z % 4 for z in range(32)}}))
    return path


def fresh_copy(base: Path, tmp_path: Path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(base, run)
    return run


def _meta(run: Path, **changes: object) -> None:
    meta = json.loads((run / "meta.json").read_text())
    meta.update(changes)
    (run / "meta.json").write_text(json.dumps(meta))


def _append(path: Path, data: bytes) -> None:
    with path.open("ab") as f:
        f.write(data)


NVME = Path("raw") / "nvme.csv"
GOOD_ROW = b"2000000000,1000,0,1,1,1,2,read,8,1,,0\n"


def _deep(run: Path) -> None:
    (run / "meta.json").write_text("[" * 100_000 + "]" * 100_000)


#: breakage -> (what it does to a run, the words the error line must hold); None: the run stays usable.
BROKEN_RUNS: dict[str, tuple[Callable[[Path], None], tuple[str, ...] | None]] = {
    "meta-missing": (lambda r: (r / "meta.json").unlink(), ("meta.json is missing",)),
    "meta-not-json": (lambda r: (r / "meta.json").write_text("{not json"), ("not valid JSON",)),
    "meta-not-utf8": (lambda r: (r / "meta.json").write_bytes(b'{"format": "\xff"}'), ("not valid JSON",)),
    "meta-nested-100000-deep": (_deep, ("nested too deep",)),
    "meta-a-list": (lambda r: (r / "meta.json").write_text("[1, 2]"), ("must hold a JSON object",)),
    "meta-nr-zones-10^12": (lambda r: _meta(r, nr_zones=10**12), ("'nr_zones'", "[1, 16777216]")),
    "meta-zone-size-2^64": (lambda r: _meta(r, zone_size_lba=2**64, zone_cap_lba=2**64), ("'zone_size_lba'",)),
    "meta-zone-of-2^50-bytes": (lambda r: _meta(r, zone_size_lba=2**38, zone_cap_lba=2**38, lba_bytes=4096),
                                ("beyond 2^48",)),
    "meta-lba-3-bytes": (lambda r: _meta(r, lba_bytes=3), ("'lba_bytes'", "[512, 65536]")),
    "meta-nr-zones-a-float": (lambda r: _meta(r, nr_zones=64.5), ("'nr_zones' is 64.5, not a whole number",)),
    "meta-capacity-beyond-size": (lambda r: _meta(r, zone_cap_lba=10**6), ("'zone_cap_lba'",)),
    "meta-lost-events-a-string": (lambda r: _meta(r, lost_events="none"), ("'lost_events' must be an object",)),
    "meta-lost-events-negative": (lambda r: _meta(r, lost_events={"nvme": -3}), ("'lost_events.nvme'",)),
    "meta-lost-events-a-list": (lambda r: _meta(r, lost_events={"nvme": [1]}), ("'lost_events.nvme'",)),
    "meta-hot-zones-a-string": (lambda r: _meta(r, workload={"name": "x", "hot_zones": "1,2"}),
                                ("'workload.hot_zones'",)),
    "meta-workload-a-list": (lambda r: _meta(r, workload=[1]), ("'workload' must be an object",)),
    "raw-missing": (lambda r: (r / NVME).unlink(), ("has no NVMe trace",)),
    "raw-empty": (lambda r: (r / NVME).write_bytes(b""), ("is empty",)),
    "raw-garbage-bytes": (lambda r: (r / NVME).write_bytes(b"\x00\xff\xfe garbage\n" * 10),
                          ("expected '# ztbp nvme v1'",)),
    "raw-version-2": (lambda r: (r / NVME).write_text("# ztbp nvme v2\nts_ns\n"), ("'nvme v2' is not supported",)),
    "raw-wrong-header": (lambda r: (r / NVME).write_text("# ztbp nvme v1\nts,lat\n"), ("line 2 must be the header",)),
    "raw-a-directory": (lambda r: ((r / NVME).unlink(), (r / NVME).mkdir()), ("has no NVMe trace",)),
    "run-is-a-file": (lambda r: (shutil.rmtree(r), r.write_text("not a run\n")), ("is a file, not a run directory",)),
    "run-missing": (lambda r: shutil.rmtree(r), ("does not exist",)),
    # the run stays usable: what is wrong is skipped and counted, or made again
    "raw-u64-row": (lambda r: _append(r / NVME, b"1,1,0,1,1,1,2,read,18446744073709551615,1,,0\n"), None),
    "raw-cut-last-line": (lambda r: _append(r / NVME, GOOD_ROW[:-4]), None),
    "raw-far-zone": (lambda r: _append(r / NVME, f"1,1,0,1,1,1,2,read,{((1 << 24) - 1) * 8192},1,,0\n".encode()), None),
    "raw-garbage-rows": (lambda r: _append(r / NVME, b"garbage\n\xff\xfe\n1,2,3\n" + GOOD_ROW), None),
    "raw-same-size-edit": (lambda r: _same_size_edit(r / NVME), None),
    "derived-junk-events": (lambda r: (r / "derived" / "events.parquet").write_bytes(b"PAR1 junk PAR1"), None),
    "derived-half-events": (lambda r: _cut_half(r / "derived" / "events.parquet"), None),
    "derived-junk-ingest-json": (lambda r: (r / "derived" / "ingest.json").write_text("{"), None),
    "derived-deep-ingest-json": (lambda r: (r / "derived" / "ingest.json").write_text("[" * 100_000), None),
    "derived-junk-dataset": (lambda r: (r / "derived" / "events-parts" / "dataset.json").write_text("[]"), None),
    "derived-junk-part": (lambda r: next((r / "derived" / "events-parts").glob("*/*/*.parquet")).write_bytes(b"x"),
                          None),
    "derived-junk-cluster": (lambda r: (r / "derived" / "cluster.json").write_text("{]"), None),
    "geometry-changed": (lambda r: _meta(r, zone_size_lba=4096, zone_cap_lba=4096, nr_zones=128), None),
}


def _same_size_edit(path: Path) -> None:
    import os

    st = path.stat()
    data = path.read_bytes()
    i = data.rindex(b",read,") + len(b",read,")
    path.write_bytes(data[:i] + (b"9" if data[i:i + 1] != b"9" else b"8") + data[i + 1:])
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def _cut_half(path: Path) -> None:
    import os

    st = path.stat()
    path.write_bytes(path.read_bytes()[: st.st_size // 2])
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def run_commands(run: Path, out: Path, groups: Path) -> dict[str, list[object]]:
    """Every command that takes a run, with the options that keep it small."""
    grid = ["--eps", "0.02", "--min-samples", "20", "--no-widen"]
    return {
        "ingest": ["ingest", run, "--json"],
        "zones": ["zones", run, "--json"],
        "chains": ["chains", run, "--json"],
        "frag": ["frag", run, "--json"],
        "opcodes": ["opcodes", run, "--json"],
        "cluster": ["cluster", run, "--json", *grid],
        "cachesim": ["cachesim", run, "--json", "--hot-zones", "1", "--no-general"],
        "config": ["config", run, "-o", out / "cache-config.json", *grid],
        "apply": ["apply", run, "--json", *grid],
        "resets": ["resets", run, "--json"],
        "conflicts": ["conflicts", run, "--json", "--groups", groups, "--max-commands", "500"],
        "perfetto": ["perfetto", run, "-o", out / "run.pftrace"],
        "stream": ["stream", run, "--json", "--analyses", "zones,opcodes,chains"],
        "shards": ["shards", run, "--json", "--rates", "0.5", "--hot-zones", "1"],
        "layers": ["layers", run, "--json"],
        "appops": ["appops", run, "--json"],
        "files": ["files", run, "--json"],
        "report": ["report", run, "-o", out / "report"],
        "batch": ["batch", run, "--sequential", "--analyses", "zones", "--json"],
    }


#: What a usable run is asked (every analysis once, on the trace with garbage rows).
USABLE = ("ingest", "zones", "stream")
HEAVY_ON = {"raw-garbage-rows": ("chains", "frag", "opcodes", "cluster", "cachesim", "config", "resets", "conflicts",
                                 "perfetto", "shards"),
            "derived-junk-cluster": ("cluster",),
            "raw-far-zone": ("frag", "cluster", "cachesim", "resets", "perfetto")}
CASES = [(b, c) for b, (_, words) in BROKEN_RUNS.items() if words is not None
         for c in run_commands(Path(), Path(), Path())]
CASES += [(b, c) for b, (_, words) in BROKEN_RUNS.items() if words is None for c in USABLE + HEAVY_ON.get(b, ())]


@pytest.mark.parametrize(("breakage", "command"), CASES, ids=[f"{b}-{c}" for b, c in CASES])
def test_a_broken_run(plain: Path, base: Path, groups: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                      breakage: str, command: str) -> None:
    run = fresh_copy(base if breakage.startswith(("derived", "geometry", "raw-same")) else plain, tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    breaks, words = BROKEN_RUNS[breakage]
    breaks(run)
    rc, stdout, err = run_cli(capsys, run_commands(run, out, groups)[command])
    assert "Traceback" not in err + stdout
    assert_no_temporary_file(run)
    if words is None:
        assert rc == 0, err
        assert_counted(breakage, command, run, stdout, err)
        assert_later_commands_see_the_trace(run, capsys, tmp_path)
        return
    if run.is_dir():  # a command that failed left no derived data behind (derived/.lock, the folder's lock, holds none)
        left = sorted(p.name for p in (run / "derived").iterdir()) if (run / "derived").is_dir() else []
        assert set(left) <= {".lock"} or command == "stream", left
    elif command == "batch":  # a batch names each failed run in its output and goes on with the others
        assert rc == 1 and any(all(w in ln for w in words) for ln in stdout.splitlines()), stdout
    elif command in ("appops", "files", "layers") and not breakage.startswith(("meta", "run")):
        assert_refused(rc, err)  # a trace-less run has no application or layer file: that is said first
    else:
        assert_refused(rc, err, *words)
        assert list(out.iterdir()) == []  # a command that failed wrote nothing


def assert_counted(breakage: str, command: str, run: Path, stdout: str, err: str) -> None:
    """A usable broken run: what was skipped is counted, what was found changed is said."""
    rec = json.loads((run / "derived" / "ingest.json").read_text()) if command != "stream" else \
        json.loads((run / "derived" / "events-parts" / "dataset.json").read_text())["ingest"]
    skipped = {"raw-u64-row": 1, "raw-cut-last-line": 1, "raw-garbage-rows": 3}.get(breakage, 0)
    assert rec["skipped"] == skipped, rec
    if command == "ingest":
        assert json.loads(stdout)["skipped"] == skipped
    changed = "derived/events.parquet is not the file the last ingest wrote"
    if breakage in ("derived-junk-events", "derived-half-events") and command == "ingest":
        assert json.loads(stdout)["reingest"] == changed
    elif breakage in ("derived-junk-events", "derived-half-events") and command != "stream":
        assert f"warning: {run}: {changed}; ingesting raw/nvme.csv again" in err
    if breakage == "raw-same-size-edit" and command != "stream":
        assert rec["reingest"] == "raw/nvme.csv changed although its size did not"
    if breakage in ("derived-junk-dataset", "derived-junk-part", "raw-same-size-edit", "geometry-changed"):
        assert command != "stream" or "ingest" in json.loads(stdout)  # the dataset was made again


# --- application and layer files ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def app_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("app") / "run"
    shutil.copytree(TEST_DATA / "runs" / "sample-rocksdb-btrfs", root)
    return root


RAW = Path("raw")
#: breakage of an application run -> (the file it breaks, what it does, the error's words; None: counted and skipped)
BROKEN_APP: dict[str, tuple[str, Callable[[Path], None], tuple[str, ...] | None]] = {
    "appops-garbage": ("appops.csv", lambda r: _append(r / RAW / "appops.csv", b"garbage\n1,2,x,4,get,0\n"), None),
    "appops-not-utf8": ("appops.csv", lambda r: _append(r / RAW / "appops.csv", b"1,2,3,4,g\xffet,0\n"), None),
    "appops-cut": ("appops.csv", lambda r: _append(r / RAW / "appops.csv", b"4407173316609,1026,69630"), None),
    "appops-overflow": ("appops.csv", lambda r: _append(r / RAW / "appops.csv", b"99999999999999999999,1,2,3,g,0\n"),
                        None),
    "cachestat-garbage": ("cachestat.csv", lambda r: _append(r / RAW / "cachestat.csv", b"\x00\x01\x02\n"), None),
    "files-cut": ("files.csv", lambda r: _append(r / RAW / "files.csv", b"000001.sst,12,0,0,0,4096,1,4096,la"), None),
    "nvme-tid-garbage": ("nvme.csv", lambda r: _append(r / RAW / "nvme.csv", b"1,2,3\n"), None),
    "appops-version-2": ("appops.csv", lambda r: (r / RAW / "appops.csv").write_text("# ztbp appops v2\nop_id\n"),
                         ("'appops v2' is not supported",)),
    "cachestat-empty": ("cachestat.csv", lambda r: (r / RAW / "cachestat.csv").write_text(""), ("is empty",)),
    "files-wrong-header": ("files.csv", lambda r: (r / RAW / "files.csv").write_text("# ztbp files v1\npath\n"),
                           ("line 2 must be the header",)),
    "appops-missing": ("appops.csv", lambda r: (r / RAW / "appops.csv").unlink(), ("appops.csv is missing",)),
    "nvme-without-tid": ("nvme.csv", lambda r: (r / RAW / "nvme.csv").write_text(probe_header("nvme")),
                         ("no tid column",)),
    "meta-phases-a-string": ("meta.json", lambda r: _meta(r, app={"phases": "readrandom"}), ("'app.phases'",)),
    "meta-phase-without-times": ("meta.json", lambda r: _meta(r, app={"phases": [{"phase": "readrandom"}]}),
                                 ("meta.json:1: 'app.phases[0].start_ns' is missing",)),
}
#: the files each application command reads
APP_READS = {"appops": ("meta.json", "appops.csv", "cachestat.csv", "nvme.csv"),
             "files": ("meta.json", "files.csv", "nvme.csv")}
APP_CASES = [(b, c) for b in BROKEN_APP for c in APP_READS]


@pytest.mark.parametrize(("breakage", "command"), APP_CASES, ids=[f"{b}-{c}" for b, c in APP_CASES])
def test_a_broken_application_run(app_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], breakage: str,
                                  command: str) -> None:
    run = fresh_copy(app_run, tmp_path)
    file, breaks, words = BROKEN_APP[breakage]
    breaks(run)
    rc, stdout, err = run_cli(capsys, [command, run, "--json"])
    assert "Traceback" not in err + stdout
    if file not in APP_READS[command]:
        assert rc == 0, err
    elif words is not None:
        assert_refused(rc, err, *words)
    else:
        assert rc == 0, err
        read = json.loads(stdout)["read"][f"raw/{file}"]
        assert read["skipped"] >= 1 and read["rows"] > 0, read


def _layers_run(base: Path, tmp_path: Path, body: bytes, header: str | None = None) -> Path:
    run = fresh_copy(base, tmp_path)
    row = b"1000,7,sync,read,4096,259:0,0,0,1,900,10,10,10,10,10,10,800,40,bdev\n"
    (run / RAW / "layers.csv").write_bytes((header or probe_header("layers")).encode() + row * 3 + body)
    return run


@pytest.mark.parametrize(("body", "header", "words"), [
    (b"garbage\n", None, None),
    (b"1,2,sync,read\n", None, None),
    (b"1000,7,sync,read,4096,259:0,0,0,1,900,10,10,10,10,10,10,800,40,bd", None, None),
    (b"99999999999999999999,7,sync,read,4096,259:0,0,0,1,900,10,10,10,10,10,10,800,40,bdev\n", None, None),
    (b"1000,7,s\xffync,read,4096,259:0,0,0,1,900,10,10,10,10,10,10,800,40,bdev\n", None, None),
    (b"", "# ztbp layers v9\nts_ns\n", ("'layers v9' is not supported",)),
    (b"", "# ztbp layers v1\nts_ns,tid\n", ("line 2 must be the header",)),
], ids=["garbage", "short", "cut", "overflow", "not-utf8", "version-9", "wrong-header"])
def test_a_broken_layer_file(base: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], body: bytes,
                             header: str | None, words: tuple[str, ...] | None) -> None:
    run = _layers_run(base, tmp_path, body, header)
    rc, stdout, err = run_cli(capsys, ["layers", run, "--json"])
    if words is not None:
        assert_refused(rc, err, *words)
        return
    assert rc == 0 and "Traceback" not in err, err
    read = json.loads(stdout)["read"]
    assert (read["rows"], read["skipped"]) == (3, 1), read


# --- importing ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("setup", "words"), [
    ("missing-source", ("does not exist",)),
    ("empty-source", ("no alibaba command found",)),
    ("garbage-source", ("no alibaba command found",)),
    ("binary-source", ("no alibaba command found",)),
    ("run-is-a-file", ("exists and is not a directory",)),
    ("run-exists", ("already holds a run", "--force")),
    ("overflowing-rows", None),
])
def test_a_broken_import(base: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], setup: str,
                         words: tuple[str, ...] | None) -> None:
    src, run = tmp_path / "trace.csv", tmp_path / "imported"
    good = "2,R,4096,4096,1577808000000100\n"
    content = {"empty-source": b"", "garbage-source": b"garbage\nmore,garbage\n", "binary-source": b"\x00\xff" * 64,
               "overflowing-rows": f"{good}2,R,{2**64 - 1},4096,1\n2,R,4096,4096,{2**64 - 1}\n".encode()}
    if setup != "missing-source":
        src.write_bytes(content.get(setup, good.encode()))
    if setup == "run-is-a-file":
        run.write_text("a file\n")
    if setup == "run-exists":
        shutil.copytree(base, run)
    rc, stdout, err = run_cli(capsys, ["import", src, run, "--format", "alibaba", "--zone-size", "1M", "--json"])
    if words is not None:
        assert_refused(rc, err, *words)
        assert setup != "run-exists" or (run / "raw" / "nvme.csv").read_bytes() == (base / NVME).read_bytes()
        assert not (run / "raw" / "nvme.csv").exists() or setup == "run-exists"
        return
    assert rc == 0, err
    assert json.loads(stdout)["import"]["skipped"] == 2


def test_synth_over_a_run_and_onto_a_file(base: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = fresh_copy(base, tmp_path)
    before = (run / NVME).read_bytes()
    assert_refused(*run_cli(capsys, ["synth", run, "--reads", "10"])[::2], "already holds a run", "--force")
    assert (run / NVME).read_bytes() == before
    f = tmp_path / "file"
    f.write_text("x\n")
    assert_refused(*run_cli(capsys, ["synth", f, "--reads", "10"])[::2], "is not a directory")


# --- numbers ----------------------------------------------------------------------------------------------------------
def _subparsers() -> dict[str, argparse.ArgumentParser]:
    sub = next(a for a in PARSER._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


BOUNDED = (Bounded, BoundedList, BoundedSize)


def test_every_numeric_option_is_bounded_and_its_default_inside() -> None:
    numeric = []
    for name, p in _subparsers().items():
        for a in p._actions:
            assert a.type not in (int, float), f"ztbp {name} {a.option_strings}: a bare {a.type.__name__}"
            if isinstance(a.type, BOUNDED):
                numeric.append((name, a.option_strings[0]))
                if a.default is not None:
                    value = a.type(a.default) if isinstance(a.default, str) else a.default
                    values = value if isinstance(value, tuple) else (value,)
                    assert all(a.type.bound.contains(v) for v in values), (name, a.option_strings, a.default)
            elif isinstance(a.default, int | float) and not isinstance(a.default, bool):
                pytest.fail(f"ztbp {name} {a.option_strings}: a number without a bound")
    assert len(numeric) > 90


def required_args(command: str, tmp: Path, run: Path, groups: Path) -> list[object]:
    """What each command needs besides the option under test (small, so an accepted value runs quickly)."""
    src = tmp / "trace.csv"
    small = ["--eps", "0.02", "--min-samples", "20", "--no-widen"]
    return {
        "synth": [tmp / "new", "--reads", "300", "--zones", "16"],
        "import": [src, tmp / "new", "--format", "alibaba", "--zone-size", "1M"],
        "workload": ["paper80", "-o", tmp / "job.fio"],
        "capture-host": ["/dev/ztbp-no-such-device", "paper80"],
        "capture-app": ["rocksdb"],
        "conflicts": [run, "--groups", groups, "--max-commands", "300"],
        "config": [run, "-o", tmp / "cfg.json", *small],
        "apply": [run, *small],
        "cluster": [run, *small],
        "cachesim": [run, "--no-general"],
        "shards": [run, "--rates", "0.5"],
        "stream": [run, "--analyses", "zones"],
        "batch": [run, "--sequential", "--analyses", "zones"],
        "perfetto": [run, "-o", tmp / "t.pftrace"],
    }.get(command, [run] if command not in ("capture", "capture-layers", "profile", "loop", "regime") else [])


def _parses(t: Bounded | BoundedList | BoundedSize, value: str) -> bool:
    try:
        t(value)
    except argparse.ArgumentTypeError:
        return False
    return True


NUMERIC = [(c, a.option_strings[0], v) for c, p in _subparsers().items() for a in p._actions
           if isinstance(a.type, BOUNDED) for v in BAD_NUMBERS]
#: Options that take numbers as text: lists of zones, sizes, regions, time windows.
TEXT_NUMBERS = [(c, o, v) for c, o in (
    ("synth", "--region"), ("synth", "--hot-zones"), ("cachesim", "--hot-zones"), ("shards", "--hot-zones"),
    ("perfetto", "--window"), ("perfetto", "--zones"), ("profile", "--zones"), ("profile", "--bs"),
    ("workload", "--region"), ("workload", "--hot-zones"), ("capture", "--zone-cap"), ("capture", "--conv-ns"),
    ("capture", "--nvmevirt-storage"), ("capture-layers", "--size"), ("capture-app", "--cache-size"),
    ("loop", "--hot-zones"), ("loop", "--conv-ns"), ("regime", "--outstanding"),
) for v in (*BAD_NUMBERS, "-1:inf", "1e300:", "0,nan", "99999999999999999999")]


@pytest.mark.parametrize(("command", "option", "value"), NUMERIC + TEXT_NUMBERS,
                         ids=[f"{c}{o}={v}" for c, o, v in NUMERIC + TEXT_NUMBERS])
def test_a_bad_number(base: Path, groups: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str,
                      option: str, value: str) -> None:
    """Refused with one line naming the option and its range, or — when the value is inside the range (0 where 0
    means "none" or "all") — the command runs as it would, and a starter stops at the sentinel."""
    action = next(a for a in _subparsers()[command]._actions if option in a.option_strings)
    refused = isinstance(action.type, BOUNDED) and not _parses(action.type, value)
    run = tmp_path / "run"
    if not refused:  # the command runs: it gets a real run and a real trace to import
        shutil.copytree(base, run)
        (tmp_path / "trace.csv").write_text("2,R,4096,4096,1577808000000100\n")
    rc, stdout, err = run_cli(capsys, [command, *required_args(command, tmp_path, run, groups), option, value])
    assert "Traceback" not in err + stdout
    if refused:
        line = assert_refused(rc, err, f"argument {option}", "give")
        assert str(action.type.bound) in line or isinstance(action.type, BoundedSize), line
        return
    assert_ok_or_refused(rc, err)
    assert_no_temporary_file(run)


# --- the files a command is given besides the run -------------------------------------------------------------------
CONFIG = {"format": "ztbp-cache-config/1", "hot_zones": [1]}


@pytest.mark.parametrize(("command", "content", "words"), [
    ("cachesim", b"{not json", ("is not valid JSON",)),
    ("cachesim", b"[" * 100_000, ("nested too deep",)),
    ("cachesim", b"\xff\xfe", ("is not valid JSON",)),
    ("cachesim", json.dumps({**CONFIG, "format": "x"}).encode(), ("'format' must be",)),
    ("cachesim", json.dumps({**CONFIG, "hot_zones": [2**70]}).encode(), ("'hot_zones[0]' is",)),
    ("cachesim", json.dumps({**CONFIG, "hot_zones": [1e300]}).encode(), ("'hot_zones[0]' is",)),
    ("cachesim", json.dumps({**CONFIG, "hot_zones": [40]}).encode(), ("beyond the device's 32 zones",)),
    ("conflicts", b"{not json", ("is not valid JSON",)),
    ("conflicts", b"{" * 100_000, ("is not valid JSON",)),
    ("conflicts", json.dumps({"groups": {"1": 2**70}}).encode(), ("'groups.1'", "outside [0, 2147483647]")),
    ("conflicts", json.dumps({"groups": {str(2**40): 1}}).encode(), ("not a zone id in [0, 16777215]",)),
    ("conflicts", json.dumps({"groups": [1, 2]}).encode(), ("not a zone-to-group table",)),
], ids=lambda v: v if isinstance(v, str) else None)
def test_a_broken_side_file(base: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str,
                            content: bytes, words: tuple[str, ...]) -> None:
    run = fresh_copy(base, tmp_path)
    side = tmp_path / "side.json"
    side.write_bytes(content)
    flag = {"cachesim": "--config", "conflicts": "--groups"}[command]
    rc, stdout, err = run_cli(capsys, [command, run, flag, side, "--json"])
    assert_refused(rc, err, *words)


# --- the library, as notebooks call it ------------------------------------------------------------------------------
def _stage_calls() -> list[tuple[str, Callable[[object, float], object]]]:
    """(the range of units.LIMITS the parameter has, a stage called with it)"""
    from ztbp import stages
    from ztbp.analysis.device_params import FarParams
    from ztbp.analysis.dispatch import DispatchModel
    from ztbp.analysis.params import ClusterParams
    from ztbp.stages import streamed

    return [
        ("nts-mib", lambda run, x: stages.chains(run, nts_mib=x)),
        ("chain-window", lambda run, x: stages.chains(run, window=x)),
        ("cache-mib", lambda run, x: stages.simulate(run, x, 4, [1], general=False)),
        ("page-kib", lambda run, x: stages.simulate(run, 64, x, [1], general=False)),
        ("eps", lambda run, x: stages.cluster(run, ClusterParams(eps=(x,)))),
        ("hot-factor", lambda run, x: stages.cluster(run, ClusterParams(hot_factor=x))),
        ("seed", lambda run, x: stages.cluster(run, ClusterParams(seed=x))),
        ("min-gain", lambda run, x: stages.config(run, 64, 4, min_gain=x)),
        ("train-share", lambda run, x: stages.config(run, 64, 4, train_share=x)),
        ("far-t", lambda run, x: stages.resets(run, FarParams(t=x))),
        ("far-line", lambda run, x: stages.resets(run, FarParams(slope=x))),
        ("bin-s", lambda run, x: stages.conflicts(run, {0: 0}, bin_s=x)),
        ("queue-depth", lambda run, x: stages.conflicts(run, {0: 0}, model=DispatchModel(queue_depth=x))),
        ("nts-mib", lambda run, x: streamed.chains(run, nts_mib=x)),
        ("cache-mib", lambda run, x: streamed.cachesim(run, cache_mib=x)),
        ("rate", lambda run, x: streamed.shards(run, rate=x)),
    ]


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -1.0, 1e300], ids=str)
def test_the_stages_refuse_what_the_options_refuse(base: Path, tmp_path: Path, value: float) -> None:
    """A notebook passing a parameter the command line would refuse gets the same one-line ZtbpError, not an empty
    answer or a traceback from deep inside an analysis."""
    from ztbp.io.run import load
    from ztbp.units import LIMITS

    run = load(fresh_copy(base, tmp_path))
    for name, call in _stage_calls():
        if LIMITS[name].contains(value):
            continue
        with pytest.raises(ZtbpError, match="out of range: give"):
            call(run, value)
            pytest.fail(f"{name} took {value}")


# --- tampered files the workbench wrote and reads back ------------------------------------------------------------
# Every field each file's spec declares (tests/tamper.py): a wrong type, NaN, ±inf, 1e300, -5, removed, zone lists
# outside the geometry. A tampered number is always refused with one line naming the file, its line and the field,
# or, where the file can go on (a journal), its record is skipped and counted; never a traceback, and never a verdict
# computed from a tampered number.
META_DOC = {"format": "ztbp-run/1", "device": "nvme0n1", "lba_bytes": 4096, "zone_size_lba": 8192,
            "zone_cap_lba": 8192, "nr_zones": 32, "synthetic": True, "backend": "synth", "complete": True,
            "created": "2026-01-01T00:00:00Z", "lost_events": {"nvme": 0}, "versions": {"fio": "3.33"},
            "probes": {"nvme": {"file": "raw/nvme.csv", "version": 1}},
            "workload": {"name": "paper80", "hot_zones": [1, 7, 11]}, "loop": {"zones_in_force": [1, 7]},
            "app": {"phases": [{"phase": "load", "start_ns": 1, "end_ns": 2, "db_bench": {}}]},
            "fio": {"read_ios": 1500, "write_ios": 0, "read_iops": 12_500.0, "write_iops": 0.0, "runtime_ms": 120,
                    "read_clat_p50_us": 80.0, "read_clat_p90_us": 90.0, "read_clat_p99_us": 120.0}}
_ROUND = round_entry(1, "nvmevirt", 20_000, [], 16_000.0)
_MODEL = "policy=zone_lru entries=16384 hit_ns=372000 miss_ns=3900000 shortcut=0 skip_nand=1"
_SERVICE = {"profile": "zn540", "slow": 10, "cache_entries": 4096, "read_model": _MODEL,
            "decomposition": {"statement": "x"},
            **{arm: {c: {"reads": 100, "hit_ratio": 0.3, "mean_us": 900.0, "measured_mean_us": 1000.0}
                     for c in ("all", "listed", "other")} for arm in ("off", "on")}}
LOOP_DOC = {"format": "ztbp-loop/1", "backend": "nvmevirt", "rounds_asked": 9, "min_gain": 0.01, "cache_mib": 64,
            "page_kib": 4, "stopped": "A/B done", "complete": True, "interrupted": False, "guest_status": 0,
            "workload": {"name": "paper80", "reads": 20_000, "jobs": 4, "iodepth": 1},
            "emulator": {"read_service_model": {"profile": "zn540", "slow": 10, "read_model": _MODEL}},
            "session": {"setups": 1, "lost": 0}, "rounds": [_ROUND],
            "ab": {"pairs": 4, "reads_per_block": 3000, "listed": [1, 7], "config": "round-01/c.json",
                   "order": ["on", "off"], "device_acted": True, "blocks": ab_blocks(0.3), "effects": None,
                   "service_model": _SERVICE}}
CONFIG_DOC = {"format": "ztbp-cache-config/1", "hot_zones": [1, 7], "zone_size_lba": 8192, "lba_bytes": 4096,
              "nr_zones": 32, "zone_scores": [{"zone": 1, "share": 0.3, "reads": 400}], "hot_zones_found": [1, 7],
              "cache_mib": 64, "recommend": True, "recommend_reason": "x", "min_gain": 0.01, "source_run": "run",
              "held_out": {"gain": 0.05, "train_share": 0.5, "train_reads": 700, "test_reads": 700},
              "predicted": {}, "cluster": {}}
PROFILE_DOC = {"format": "ztbp-profile/1", "zones": [0, 1, 2], "groups": {"0": 0, "1": 0, "2": 1},
               "matrix": [[1.0, 0.5, None], [0.5, 1.0, 0.9], [None, 0.9, 1.0]],
               "device": {"name": "nvme0n1", "backend": "synth", "nr_zones": 32, "zone_bytes": 32 << 20},
               "spec": {"rw": "read", "block_bytes": 4096, "iodepth": 1, "seconds": 1.0, "fresh": False},
               "timing": {"boot_s": 1.0, "fill_s": 1.0, "measure_s": 1.0, "total_s": 3.0, "measurements": 9,
                          "fresh_wraps": 0, "budget_exhausted": False},
               "verdict": {"structure": True, "reason": "x"}, "threshold": 0.9, "threshold_mib": None,
               "reference": "median", "solo": {"0": 100.0, "1": 100.0, "2": 100.0},
               "key": {"name": "zn540", "ari_channel": 0.5, "ari_die": 0.5},
               "pairs": [{"a": 0, "b": 1, "ratio": 0.5, "bw_a": 25.0, "bw_b": 25.0, "interferes": True, "measured": 2},
                         {"a": 1, "b": 2, "ratio": 0.9, "bw_a": 45.0, "bw_b": 45.0, "interferes": False}],
               "noise": {"sd": 0.05, "drift": 0.01, "repeats": 4},
               "request": {"full_matrix": False, "min_separation": 0.15}, "full_matrix": False}
GROUPS_DOC = {"groups": {"0": 0, "1": 2}}


def _ids(cs: list[Case]) -> list[str]:
    return [c.name for c in cs]


def assert_names_the_field(line: str, file: str, case: Case) -> None:
    """The refusal names the file (and its line, where the file is JSON the workbench wrote) and the field."""
    assert file in line, (file, line)
    key = next((str(k) for k in reversed(case.where) if isinstance(k, str)), None)
    assert key is None or key in line, (key, line)


META_CASES = list(cases(META, META_DOC))


@pytest.mark.parametrize("case", META_CASES, ids=_ids(META_CASES))
def test_a_tampered_meta_json(plain: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], case: Case) -> None:
    run = fresh_copy(plain, tmp_path)
    (run / "meta.json").write_text(json.dumps(tampered(META_DOC, case), indent=2))
    rc, _, err = run_cli(capsys, ["zones", run, "--json"])
    if expect_refused(META, META_DOC, case):
        assert_names_the_field(assert_refused(rc, err, "meta.json"), "meta.json", case)
    else:
        assert_ok_or_refused(rc, err)


LOOP_CASES = list(cases(LOOP, LOOP_DOC))


@pytest.mark.parametrize("case", LOOP_CASES, ids=_ids(LOOP_CASES))
def test_a_tampered_loop_json(tmp_path: Path, capsys: pytest.CaptureFixture[str], case: Case) -> None:
    """`ztbp compare LOOPDIR` on its A/B blocks: a tampered figure is refused, never compared."""
    loop = tmp_path / "loop"
    loop.mkdir()
    (loop / "loop.json").write_text(json.dumps(tampered(LOOP_DOC, case), indent=1))
    rc, out, err = run_cli(capsys, ["compare", loop, "--json"])
    if expect_refused(LOOP, LOOP_DOC, case):
        assert_names_the_field(assert_refused(rc, err, "loop.json"), "loop.json", case)
        assert out == ""  # no verdict
    else:
        assert_ok_or_refused(rc, err)


@pytest.mark.parametrize(("off", "on", "words"), [  # block 0 is pair 1's "on" block (ABBA)
    (1e-300, 1e300, "'ab.blocks[0].fio.read_iops' is 1e+300, outside [0.001, 1000000000]"),
    (1e-300, 1000.0, "'ab.blocks[1].fio.read_iops' is 1e-300, outside [0.001, 1000000000]"),
    (1000.0, True, "'ab.blocks[0].fio.read_iops' must be a number, found true"),
    (1000.0, float("nan"), "'ab.blocks[0].fio.read_iops' is nan, not a finite number"),
    (1000.0, "1200", "'ab.blocks[0].fio.read_iops' must be a number, found '1200'"),
], ids=["1e-300-vs-1e300", "1e-300", "true", "nan", "a-string"])
def test_compare_on_absurd_block_iops_says_no_verdict(tmp_path: Path, capsys: pytest.CaptureFixture[str], off: Any,
                                                      on: Any, words: str) -> None:
    doc = copy.deepcopy(LOOP_DOC)
    for blk in doc["ab"]["blocks"]:
        blk["fio"]["read_iops"] = on if blk["arm"] == "on" else off
    (tmp_path / "loop.json").write_text(json.dumps(doc, indent=1))
    rc, out, err = run_cli(capsys, ["compare", tmp_path])
    line = assert_refused(rc, err, "loop.json", words)
    assert re.search(r"loop\.json:\d+: '", line) and "faster" not in out + err and out == ""


JOURNAL_T0 = 1.7e9


def journal_records() -> list[dict[str, Any]]:
    """A short session's records as control/watch.py writes them: a hold, an apply and its verify, a hold."""
    def state(in_force: list[int], applies: list[float]) -> dict[str, Any]:
        return {"in_force": in_force, "candidate": [], "candidate_streak": 0, "low_gain_streak": 0,
                "applies": applies, "backoff": [[[2, 5], JOURNAL_T0 + 9000.0]]}

    meta = {"lba_bytes": 4096, "zone_size_lba": 1024, "zone_cap_lba": 1024, "nr_zones": 128}
    lat = {"in_force": {"reads": 10, "p50_us": 8.0, "p99_us": 9.0, "mean_us": 8.5}, "other": None}
    recs: list[dict[str, Any]] = [{"kind": "start", "wall": JOURNAL_T0, "resumed": False, "window": 0, "meta": meta,
                                   "state": state([], []), "window_commands": 10_000, "window_s": None,
                                   "warm_up_s": 1.0}]
    for w, (action, in_force) in enumerate((("hold", []), ("apply", [3, 17]), ("hold", [3, 17]))):
        wall = JOURNAL_T0 + 600.0 * (w + 1)
        recs.append({"kind": "window", "wall": wall, "window": w, "t_end": wall, "commands": 10_000, "reads": 9000,
                     "lost": 0, "late_rows": 0, "hot": [3, 17], "previous_hot": [3, 17], "held_out_gain": 0.05,
                     "in_force_gain": 0.04, "order_hold_s": 0.5, "read_lat": lat,
                     "device": {"reads": 9000, "hits": 2700, "hit_ratio": 0.3, "note": None,
                                "status_reads": 9000 * (w + 1), "status_hits": 2700 * (w + 1)}})
        recs.append({"kind": "decision", "wall": wall, "window": w, "action": action, "reason": "x",
                     "zones": [3, 17], "state": state(in_force, [JOURNAL_T0 + 1200.0] if in_force else [])})
        if action == "apply":
            recs.append({"kind": "apply", "wall": wall, "window": w, "zones": [3, 17], "sent": [3, 17], "ok": True,
                         "exit_code": 0, "message": None})
    recs.insert(-1, {"kind": "verify", "wall": JOURNAL_T0 + 1800.0, "window": 2, "zones": [3, 17],
                     "measured_gain": 0.04, "status_reads_delta": 9000, "status_hits_delta": 2700,
                     "device_hit_ratio": 0.3, "device_note": None, "reads_traced": 9000, "span_s": 600.0,
                     "status_matches": True})
    recs.append({"kind": "rollback", "wall": JOURNAL_T0 + 1900.0, "window": 2, "zones": [3, 17], "reason": "x",
                 "ok": True, "message": None})
    recs.append({"kind": "stop", "wall": JOURNAL_T0 + 2000.0, "windows": 3, "commands": 30_000, "lost": 0,
                 "late_rows": 0, "in_force": [], "why": "the source ended"})
    return recs


JOURNAL = journal_records()
#: the last decision: what --resume starts from
LAST_DECISION = max(i for i, r in enumerate(JOURNAL) if r["kind"] == DECISION)
RESUME_CASES = [c for c in cases(RECORDS[DECISION], JOURNAL[LAST_DECISION]) if c.where[0] != "kind"]
#: the other records, read by `ztbp report JOURNAL`: one record of each kind
REPORT_CASES = [(i, c) for i, r in enumerate(JOURNAL) if i in {next(j for j, x in enumerate(JOURNAL)
                                                                     if x["kind"] == r["kind"])}
                for c in cases(RECORDS[r["kind"]], r) if c.where[0] != "kind" and c.what != "10000-zones"]


def _write_journal(folder: Path, recs: list[Any]) -> None:
    folder.mkdir()
    (folder / "watch.jsonl").write_bytes(b"".join(json.dumps(r).encode() + b"\n" if isinstance(r, dict) else r
                                                  for r in recs))


@pytest.mark.parametrize("case", RESUME_CASES, ids=_ids(RESUME_CASES))
def test_watch_resumes_from_a_tampered_decision(tmp_path: Path, case: Case) -> None:
    """The last decision tampered: skipped and counted (the state of the decision before it is resumed), or, when
    it checks as a record but its state does not fit the device, one line naming the file, its line and the
    field; never a traceback, never a state taken from a tampered number."""
    from ztbp.analysis.watch import WatchParams
    from ztbp.control.watch import Session, WatchRequest

    recs = [*JOURNAL[:LAST_DECISION], tampered(JOURNAL[LAST_DECISION], case)]
    _write_journal(tmp_path / "j", recs)
    meta = JOURNAL[0]["meta"]
    record_refused = expect_refused(RECORDS[DECISION], JOURNAL[LAST_DECISION], case)
    state_refused = not record_refused and expect_refused(state_spec(meta["nr_zones"]), JOURNAL[LAST_DECISION]["state"],
                                                          Case(case.where[1:], case.what, case.value, None)) \
        if case.where[0] == "state" and len(case.where) > 1 else False
    try:
        s = Session(WatchRequest(dict(meta), WatchParams(), tmp_path / "j", resume=True), _Device())
    except ZtbpError as e:
        assert state_refused, f"refused a resumable journal: {e}"
        assert "\n" not in str(e) and re.search(r"watch\.jsonl:\d+: 'state", str(e)), str(e)
        return
    s.journal.close()
    assert not state_refused
    if record_refused:
        assert s.resume_skipped == [len(recs)] and s.state.in_force == (3, 17) and s.window == 3
    else:
        assert s.resume_skipped == []


def _last_decision(**change: Any) -> bytes:
    """The last decision's line with `change` (a value None: the field removed)."""
    rec = {**JOURNAL[LAST_DECISION], **change}
    return json.dumps({k: v for k, v in rec.items() if v is not None}).encode() + b"\n"


#: lines that are no record a session can resume from, in the place of the last decision
NO_RECORD: dict[str, bytes] = {
    "not-an-object": b"[1, 2]\n", "not-utf8": b"\xff\xfe\x00 not utf-8\n", "cut": b'{"kind": "decision", "wall": 1',
    "window-a-string": _last_decision(window="7"), "window-nan": _last_decision(window=math.nan),
    "window-inf": _last_decision(window=math.inf), "window-1e300": _last_decision(window=1e300),
    "window-negative": _last_decision(window=-5), "state-a-string": _last_decision(state="none"),
    "state-missing": _last_decision(state=None),
    "a-zone-twice": _last_decision(state={**JOURNAL[LAST_DECISION]["state"], "in_force": [3, 3]}),
}


@pytest.mark.parametrize("bad", NO_RECORD.values(), ids=NO_RECORD.keys())
def test_watch_resume_skips_a_line_that_is_no_record(tmp_path: Path, bad: bytes) -> None:
    from ztbp.analysis.watch import WatchParams
    from ztbp.control.watch import Session, WatchRequest

    _write_journal(tmp_path / "j", [*JOURNAL[:LAST_DECISION + 1], bad])
    s = Session(WatchRequest(dict(JOURNAL[0]["meta"]), WatchParams(), tmp_path / "j", resume=True), _Device())
    s.journal.close()
    assert s.resume_skipped == [LAST_DECISION + 2] and s.state.in_force == (3, 17) and s.window == 3


@pytest.mark.parametrize(("zones", "words"), [
    ([3, 200], "'state.in_force[1]' is 200, outside [0, 127]"),
    (list(range(10_000)), "'state.in_force' holds 10000 items, more than 128"),
])
def test_watch_refuses_to_resume_a_set_in_force_outside_the_device(tmp_path: Path, zones: list[int],
                                                                  words: str) -> None:
    from ztbp.analysis.watch import WatchParams
    from ztbp.control.watch import Session, WatchRequest

    last = copy.deepcopy(JOURNAL[LAST_DECISION])
    last["state"]["in_force"] = zones
    _write_journal(tmp_path / "j", [*JOURNAL[:LAST_DECISION], last])
    with pytest.raises(ZtbpError) as e:
        Session(WatchRequest(dict(JOURNAL[0]["meta"]), WatchParams(), tmp_path / "j", resume=True), _Device())
    line = str(e.value)
    assert f"watch.jsonl:{LAST_DECISION + 1}: {words}" in line and "\n" not in line


class _Device:
    """A device that is never asked anything while a session is only opened."""

    def set(self, zones: tuple[int, ...]) -> dict[str, Any]:
        raise AssertionError("no SET while resuming")

    stop = status = set  # type: ignore[assignment]


@pytest.mark.parametrize(("index", "case"), REPORT_CASES, ids=[f"{JOURNAL[i]['kind']}-{c.name}"
                                                              for i, c in REPORT_CASES])
def test_a_tampered_record_is_skipped_and_counted_by_the_report(tmp_path: Path, index: int, case: Case) -> None:
    """What `ztbp report JOURNAL` reads (io/journal.read_records; the page says the lines skipped, as
    tests/test_watch_report.py shows): the tampered record skipped and counted, every other one read."""
    from ztbp.io.journal import read_records

    recs = list(JOURNAL)
    recs[index] = tampered(JOURNAL[index], case)
    start = [JOURNAL[0]] if index == 0 else []  # a journal without a start is no session: keep one
    _write_journal(tmp_path / "j", [*start, *recs])
    records, skipped = read_records(tmp_path / "j")
    refused = expect_refused(RECORDS[JOURNAL[index]["kind"]], JOURNAL[index], case)
    assert skipped == ([index + 1 + len(start)] if refused else [])
    assert len(records) == len(start) + len(recs) - refused


CONFIG_CASES = list(cases(CONFIG_SPEC, CONFIG_DOC))


@pytest.mark.parametrize("case", CONFIG_CASES, ids=_ids(CONFIG_CASES))
def test_a_tampered_cache_config(base: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], case: Case) -> None:
    run = fresh_copy(base, tmp_path)
    cfg = tmp_path / "cache-config.json"
    cfg.write_text(json.dumps(tampered(CONFIG_DOC, case), indent=2))
    rc, _, err = run_cli(capsys, ["cachesim", run, "--config", cfg, "--json", "--no-general"])
    if expect_refused(CONFIG_SPEC, CONFIG_DOC, case):
        assert_names_the_field(assert_refused(rc, err, "cache-config.json"), "cache-config.json", case)
    else:
        assert_ok_or_refused(rc, err)


PROFILE_CASES = list(cases(PROFILE, PROFILE_DOC))


@pytest.mark.parametrize("case", PROFILE_CASES, ids=_ids(PROFILE_CASES))
def test_a_tampered_profile(tmp_path: Path, case: Case) -> None:
    """The device notebook's profile (present/device_study.profile_for_run): a tampered profile is not shown, and
    the reason is one line naming the file and the field."""
    from ztbp.present.device_study import profile_for_run, profile_text

    (tmp_path / "profile.json").write_text(json.dumps(tampered(PROFILE_DOC, case), indent=1))
    profile, why = profile_for_run(str(tmp_path), {"backend": "synth", "nr_zones": 32, "zone_size_lba": 8192,
                                                   "lba_bytes": 4096})
    if expect_refused(PROFILE, PROFILE_DOC, case):
        assert profile is None and "\n" not in why
        assert_names_the_field(why, "profile.json", case)
    else:
        assert profile is not None or "another device" in why
        assert profile is None or "interference profile of nvme0n1" in profile_text(profile)  # the notebook's text


GROUPS_CASES = list(cases(Z2C, GROUPS_DOC))


@pytest.mark.parametrize("case", GROUPS_CASES, ids=_ids(GROUPS_CASES))
def test_a_tampered_zone_to_group_table(base: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                       case: Case) -> None:
    run = fresh_copy(base, tmp_path)
    z2c = tmp_path / "z2c.json"
    z2c.write_text(json.dumps(tampered(GROUPS_DOC, case), indent=1))
    rc, _, err = run_cli(capsys, ["conflicts", run, "--groups", z2c, "--json", "--max-commands", "500"])
    if expect_refused(Z2C, GROUPS_DOC, case):
        assert_names_the_field(assert_refused(rc, err, "z2c.json"), "z2c.json", case)
    else:
        assert_ok_or_refused(rc, err)


def test_a_profiles_stored_verdict_is_never_shown(tmp_path: Path) -> None:
    """The committed profile's verdict is computed again from its pairs (the same answer); its stored verdict set to
    the opposite, or a pair's interference flag contradicting its ratio, changes nothing the notebook shows."""
    from ztbp.present.device_study import profile_for_run, profile_text

    src = Path(__file__).parent / "data" / "profiles" / "sample-nvmevirt" / "profile.json"
    doc = json.loads(src.read_text())
    meta = {"backend": doc["device"]["backend"], "nr_zones": doc["device"]["nr_zones"],
            "zone_size_lba": doc["device"]["zone_bytes"] // 4096, "lba_bytes": 4096}
    (tmp_path / "profile.json").write_text(json.dumps(doc))
    honest, why = profile_for_run(str(tmp_path), meta)
    assert honest is not None, why
    assert honest["verdict"]["recomputed"] and honest["verdict"]["structure"] is doc["verdict"]["structure"] is True
    assert honest["verdict"]["reason"] == doc["verdict"]["reason"]
    lied = {**doc, "verdict": {"structure": False, "reason": "no structure: planted"},
            "pairs": [{**p, "interferes": not p["interferes"]} for p in doc["pairs"]]}
    (tmp_path / "profile.json").write_text(json.dumps(lied))
    got, why = profile_for_run(str(tmp_path), meta)
    assert got is not None, why
    assert got["verdict"] == honest["verdict"] and "planted" not in profile_text(got)
    # the same pairs with ratios that say nothing interferes: no structure, whatever the file claims
    flat = {**doc, "pairs": [{**p, "ratio": 1.0} for p in doc["pairs"]]}
    (tmp_path / "profile.json").write_text(json.dumps(flat))
    got, _ = profile_for_run(str(tmp_path), meta)
    assert got is not None and got["verdict"]["structure"] is False
    assert "NO STRUCTURE" in profile_text(got)

"""ztbp-ctl, the ioctl helper: command encoding, every validation error and its exit code.

The tests build the tool with make (plain and with ASan/UBSan) and drive the binaries; every test runs
against both builds, and a sanitizer report fails the test. Nothing here needs an NVMe device: the
commands are checked through --dry-run, and the device checks through /dev/null, regular files and a
non-zoned block device when one exists. The VM test (tests/test_ztbp_ctl_vm.py) covers a real zoned
namespace.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOOL = ROOT / "tools" / "ztbp-ctl"

#: The documented exit codes (--help and tools/ztbp-ctl/README.md must list exactly these).
EXIT = {
    "ok": 0,
    "internal": 1,
    "usage": 2,
    "zones-syntax": 3,
    "too-many-zones": 4,
    "zone-out-of-range": 5,
    "duplicate-zone": 6,
    "no-zones": 7,
    "opcode-refused": 8,
    "config-read": 10,
    "config-too-large": 11,
    "config-json": 12,
    "config-format": 13,
    "config-schema": 14,
    "geometry-mismatch": 15,
    "not-recommended": 16,
    "device-open": 20,
    "permission": 21,
    "not-a-device": 22,
    "not-nvme": 23,
    "not-zoned": 24,
    "geometry": 25,
    "no-ztbp-protocol": 30,
    "device-status": 31,
    "timeout": 32,
    "ioctl": 33,
}
SUB = {"set": 99, "info": 98, "status": 97, "stop": 96}
FORMAT = "ztbp-cache-config/1"
SANITIZER_MARKS = ("runtime error:", "AddressSanitizer", "LeakSanitizer", "UndefinedBehaviorSanitizer")


@dataclass(frozen=True)
class Ctl:
    """One build of ztbp-ctl."""

    binary: Path
    sanitized: bool

    def run(self, *args: str, user: str | None = None) -> subprocess.CompletedProcess[str]:
        cmd = [str(self.binary), *args]
        if user is not None:
            cmd = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", *cmd]
        env = dict(os.environ)
        env["ASAN_OPTIONS"] = "detect_leaks=1:abort_on_error=0:exitcode=99"
        env["UBSAN_OPTIONS"] = "print_stacktrace=1:halt_on_error=1"
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60, check=False)
        for mark in SANITIZER_MARKS:
            assert mark not in proc.stderr, f"sanitizer report for {args}:\n{proc.stderr}"
        assert proc.returncode != 99, f"sanitizer exit for {args}:\n{proc.stderr}"
        return proc


def _make(target: str) -> None:
    proc = subprocess.run(["make", "-s", "-C", str(TOOL), target], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, f"make {target} failed:\n{proc.stdout}\n{proc.stderr}"


@pytest.fixture(scope="session", params=["plain", "asan"])
def ctl(request: pytest.FixtureRequest) -> Ctl:
    """The tool, built with make: the plain build and the ASan/UBSan build."""
    if request.param == "plain":
        _make("all")
        return Ctl(TOOL / "build" / "ztbp-ctl", sanitized=False)
    _make("asan")
    return Ctl(TOOL / "build" / "asan" / "ztbp-ctl", sanitized=True)


def expect_fail(proc: subprocess.CompletedProcess[str], name: str, fragment: str = "") -> None:
    """The run failed with the exit code called `name`, a one-line message, and nothing on stdout."""
    assert proc.returncode == EXIT[name], (proc.returncode, proc.stderr)
    assert proc.stderr.startswith("ztbp-ctl: error: "), proc.stderr
    assert proc.stdout == ""
    if fragment:
        assert fragment in proc.stderr, proc.stderr


def dry(ctl: Ctl, *args: str) -> dict[str, Any]:
    proc = ctl.run(*args, "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    out = json.loads(proc.stdout)
    assert isinstance(out, dict)
    return out


def config(**over: Any) -> dict[str, Any]:
    """A cache-config.json as probes/FORMAT.md describes it; keyword arguments replace keys (None drops)."""
    hot = over.pop("hot_zones", [7, 1, 11, 15, 19])
    shares = [round(0.3 - 0.04 * i, 3) for i in range(len(hot))]
    doc: dict[str, Any] = {
        "format": FORMAT,
        "hot_zones": hot,
        "zone_scores": [
            {"zone": z, "reads": 1000 - 10 * i, "share": shares[i]} for i, z in enumerate(hot) if isinstance(z, int)
        ],
        "zone_size_lba": 8192,
        "lba_bytes": 4096,
        "nr_zones": 32,
        "cache_mib": 64,
        "source_run": "20261122T110200Z-paper80",
        "predicted": {"lru": {"hit_ratio": 0.41}, "zone_lru": {"hit_ratio": 0.57}},
        "cluster": {"eps": 0.12, "min_samples": 4, "silhouette": 0.61},
        "created": "2026-11-22T11:02:00Z",
    }
    for key, value in over.items():
        if value is None:
            doc.pop(key, None)
        else:
            doc[key] = value
    return doc


@pytest.fixture
def write_cfg(tmp_path: Path) -> Iterator[Any]:
    counter = iter(range(10**6))

    def write(content: dict[str, Any] | str | bytes) -> str:
        path = tmp_path / f"cfg{next(counter)}.json"
        if isinstance(content, dict):
            path.write_text(json.dumps(content, indent=1))
        elif isinstance(content, str):
            path.write_text(content)
        else:
            path.write_bytes(content)
        return str(path)

    yield write


# ---- command encoding -------------------------------------------------------------------------------


def test_set_zones_encoding(ctl: Ctl) -> None:
    out = dry(ctl, "set", "--zones", "1,7,11,15,19")
    assert out["opcode"] == 153 == 0x99
    assert out["cdw10"] == 99
    assert [out[f"cdw{i}"] for i in range(11, 16)] == [1, 7, 11, 15, 19]
    assert out["nsid"] == 0
    assert out["zones"] == [1, 7, 11, 15, 19]
    assert out["dry_run"] is True and out["command"] == "set" and out["device"] is None


def test_dry_run_names_device_without_opening_it(ctl: Ctl) -> None:
    out = dry(ctl, "set", "/dev/does-not-exist-nvme9n9", "--zones", "3")
    assert out["device"] == "/dev/does-not-exist-nvme9n9"


@pytest.mark.parametrize("zones", [[4, 2], [0], [9, 8, 7], [4294967295, 0, 5, 6]])
def test_fewer_than_five_zones_repeat_the_last(ctl: Ctl, zones: list[int]) -> None:
    out = dry(ctl, "set", "--zones", ",".join(map(str, zones)))
    dwords = [out[f"cdw{i}"] for i in range(11, 16)]
    assert dwords == zones + [zones[-1]] * (5 - len(zones))
    assert out["zones"] == zones


@pytest.mark.parametrize("command", ["info", "status", "stop"])
def test_other_subcommands(ctl: Ctl, command: str) -> None:
    out = dry(ctl, command, "/dev/nvme0")
    assert out["cdw10"] == SUB[command]
    assert [out[f"cdw{i}"] for i in range(11, 16)] == [0] * 5
    assert out["opcode"] == 0x99 and out["zones"] == []


@pytest.mark.parametrize(("value", "expected"), [("0xc0", 0xC0), ("192", 192), ("0x88", 0x88), ("252", 252),
                                               ("0x99", 0x99)])
def test_opcode_override(ctl: Ctl, value: str, expected: int) -> None:
    assert dry(ctl, "status", "--opcode", value)["opcode"] == expected
    assert dry(ctl, "status", f"--opcode={value}")["opcode"] == expected


def test_nsid_and_timeout(ctl: Ctl) -> None:
    out = dry(ctl, "set", "--zones", "2", "--nsid", "1", "--timeout-ms", "2500")
    assert out["nsid"] == 1 and out["timeout_ms"] == 2500
    assert dry(ctl, "stop")["timeout_ms"] == 10000


def test_json_escapes_device_path(ctl: Ctl) -> None:
    odd = 'dev/"q"\\\tx\u00e9\x01'
    assert dry(ctl, "info", odd)["device"] == odd


def test_json_escapes_bytes_that_are_not_utf8(ctl: Ctl) -> None:
    proc = ctl.run("info", "--dry-run", os.fsdecode(b"a\xffb"))
    assert proc.returncode == 0
    assert json.loads(proc.stdout)["device"] == "a\u00ffb"


def test_set_from_config(ctl: Ctl, write_cfg: Any) -> None:
    hot = [7, 1, 11, 15, 19]
    out = dry(ctl, "set", "--config", write_cfg(config(hot_zones=hot)))
    assert [out[f"cdw{i}"] for i in range(11, 16)] == hot and out["cdw10"] == 99


def test_top5_takes_highest_shares(ctl: Ctl, write_cfg: Any) -> None:
    hot = [10, 11, 12, 13, 14, 15, 16]
    shares = [0.1, 0.2, 0.05, 0.3, 0.15, 0.12, 0.08]
    reads = [100, 200, 50, 300, 150, 120, 80]
    scores = [{"zone": z, "reads": r, "share": s} for z, r, s in zip(hot, reads, shares, strict=True)]
    out = dry(ctl, "set", "--top5", "--config", write_cfg(config(hot_zones=hot, zone_scores=scores)))
    expected = [z for z, _ in sorted(zip(hot, shares, strict=True), key=lambda t: -t[1])[:5]]
    assert out["zones"] == expected


def test_top5_ties_broken_by_reads_then_order(ctl: Ctl, write_cfg: Any) -> None:
    hot = [3, 4, 5, 6, 7, 8]
    reads = [10, 30, 30, 20, 10, 5]
    scores = [{"zone": z, "reads": r, "share": 0.1} for z, r in zip(hot, reads, strict=True)]
    out = dry(ctl, "set", "--top5", "--config", write_cfg(config(hot_zones=hot, zone_scores=scores)))
    ranked = sorted(range(len(hot)), key=lambda i: (-reads[i], i))
    assert out["zones"] == [hot[i] for i in ranked[:5]]


def test_top5_without_scores_uses_hot_zone_order(ctl: Ctl, write_cfg: Any) -> None:
    hot = [9, 2, 30, 4, 17, 6, 1]
    out = dry(ctl, "set", "--top5", "--config", write_cfg(config(hot_zones=hot, zone_scores=None)))
    assert out["zones"] == hot[:5]


def test_top5_with_five_or_fewer_sends_all(ctl: Ctl, write_cfg: Any) -> None:
    out = dry(ctl, "set", "--top5", "--config", write_cfg(config(hot_zones=[5, 6])))
    assert out["zones"] == [5, 6]


def test_minimal_config_and_unknown_keys(ctl: Ctl, write_cfg: Any) -> None:
    text = '\n {"format" : "ztbp-cache-config/1", "hot_zones":[ 0 ,31], "future": {"a": [1e5, -0.5, null, true]}}\n'
    assert dry(ctl, "set", "--config", write_cfg(text))["zones"] == [0, 31]


def test_config_strings_with_escapes_accepted(ctl: Ctl, write_cfg: Any) -> None:
    doc = config(source_run="r\u00e9n \U0001f600 \"q\" \\ /", created="2026-11-22T11:02:00Z")
    path = write_cfg(json.dumps(doc, ensure_ascii=True))
    assert dry(ctl, "set", "--config", path)["zones"] == doc["hot_zones"]
    path = write_cfg(json.dumps(doc, ensure_ascii=False).encode())
    assert dry(ctl, "set", "--config", path)["zones"] == doc["hot_zones"]


def test_config_size_limit_boundary(ctl: Ctl, write_cfg: Any) -> None:
    body = json.dumps(config()).encode()
    exact = body + b" " * (64 * 1024 - len(body))
    assert len(exact) == 64 * 1024
    assert dry(ctl, "set", "--config", write_cfg(exact))["zones"] == config()["hot_zones"]
    expect_fail(ctl.run("set", "--dry-run", "--config", write_cfg(exact + b" ")), "config-too-large", "65537 bytes")


def test_accepts_what_ztbp_config_writes(tmp_path: Path) -> None:
    """The real producer: `ztbp synth` + `ztbp config`, then ztbp-ctl reads the file (as `just apply` does)."""
    ztbp = Path(sys.executable).with_name("ztbp")
    if not ztbp.exists():
        pytest.skip("the ztbp CLI is not installed in this environment (just setup)")
    _make("all")
    run, cfg = tmp_path / "run", tmp_path / "run" / "derived" / "cache-config.json"
    for args in (["synth", str(run), "--pattern", "paper80", "--reads", "20000", "--seed", "3"],
                 ["config", str(run), "-o", str(cfg)]):
        proc = subprocess.run([str(ztbp), *args], capture_output=True, text=True, timeout=300, check=False)
        assert proc.returncode == 0, proc.stderr
    doc = json.loads(cfg.read_text())
    ranked = sorted(range(len(doc["zone_scores"])),
                    key=lambda i: (-doc["zone_scores"][i]["share"], -doc["zone_scores"][i]["reads"], i))
    force = () if doc["recommend"] else ("--force",)
    out = dry(Ctl(TOOL / "build" / "ztbp-ctl", sanitized=False), "set", "--top5", "--config", str(cfg), *force)
    assert out["zones"] == [doc["zone_scores"][i]["zone"] for i in ranked[:5]]
    assert set(out["zones"]) <= set(doc["hot_zones"]) and all(z < doc["nr_zones"] for z in out["zones"])


def test_not_recommended_config_is_refused_unless_forced(ctl: Ctl, write_cfg: Any) -> None:
    reason = "zone-LRU with zones [7, 1, 11, 15, 19] gains -0.0042 hit ratio over LRU on the held-out 50% of the reads"
    path = write_cfg(config(recommend=False, recommend_reason=reason))
    expect_fail(ctl.run("set", "--dry-run", "--config", path), "not-recommended",
                f"the config is not recommended: {reason} (--force sends it anyway)")
    proc = ctl.run("set", "--dry-run", "--config", path, "--json")
    assert proc.returncode == EXIT["not-recommended"]
    assert json.loads(proc.stdout)["error"] == "not-recommended"
    assert dry(ctl, "set", "--config", path, "--force")["zones"] == [7, 1, 11, 15, 19]
    # refused before any device is opened: a missing device does not matter
    expect_fail(ctl.run("set", "/dev/does-not-exist", "--config", path), "not-recommended")
    assert dry(ctl, "set", "--config", write_cfg(config(recommend=True, recommend_reason="gains +0.05")))["zones"]
    assert dry(ctl, "set", "--config", write_cfg(config(recommend=False)), "--force")["cdw10"] == SUB["set"]
    expect_fail(ctl.run("set", "--dry-run", "--config", write_cfg(config(recommend=False))), "not-recommended",
                '"recommend": false')


def test_not_recommended_reason_stays_on_one_line(ctl: Ctl, write_cfg: Any) -> None:
    path = write_cfg(config(recommend=False, recommend_reason="line one\nline two\u0000" + "é" * 300))
    proc = ctl.run("set", "--dry-run", "--config", path)
    expect_fail(proc, "not-recommended", "line one line two")
    assert proc.stderr.count("\n") == 1
    proc.stderr.encode("utf-8")  # cut on a character boundary


# ---- validation errors and exit codes ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        ([], "no command"),
        (["frobnicate"], "unknown command"),
        (["set", "--dry-run", "--zones", "1", "--bogus"], "unknown option"),
        (["set", "--dry-run"], "exactly one of --config FILE or --zones LIST"),
        (["set", "--dry-run", "--zones", "1", "--config", "x.json"], "exactly one of"),
        (["set", "--dry-run", "--zones", "1", "--top5"], "--top5"),
        (["set", "--zones", "1"], "no device given"),
        (["set", "/dev/a", "/dev/b", "--zones", "1"], "more than one device"),
        (["set", "--dry-run", "--zones", "1", "--zones", "2"], "given twice"),
        (["set", "--dry-run", "--zones"], "needs a value"),
        (["status", "--dry-run", "--json", "--json"], "given twice"),
        (["status", "--dry-run", "--json=1"], "takes no value"),
        (["status", "--dry-run", "--opcode", "256"], "--opcode"),
        (["status", "--dry-run", "--opcode", "-1"], "--opcode"),
        (["status", "--dry-run", "--opcode", "0x"], "--opcode"),
        (["status", "--dry-run", "--opcode", "0x99", "--opcode", "0x99"], "given twice"),
        (["status", "--dry-run", "--timeout-ms", "0"], "--timeout-ms"),
        (["status", "--dry-run", "--timeout-ms", "600001"], "--timeout-ms"),
        (["status", "--dry-run", "--nsid", "4294967296"], "--nsid"),
        (["status", "--dry-run", "--config", "x.json"], "belong to 'set'"),
        (["info", "--dry-run", "--zones", "1"], "belong to 'set'"),
        (["geometry", "/dev/null", "--dry-run"], "'geometry' takes"),
        (["geometry", "/dev/null", "--opcode", "0x99"], "'geometry' takes"),
        (["help", "extra"], "takes no arguments"),
        (["set", "", "--zones", "1"], "empty device"),
    ],
)
def test_usage_errors(ctl: Ctl, args: list[str], fragment: str) -> None:
    proc = ctl.run(*args)
    assert proc.returncode == EXIT["usage"]
    assert fragment in proc.stderr
    assert "--help" in proc.stderr


@pytest.mark.parametrize("zones", ["", "a", "1,,2", "1,", ",1", "1, 2", " 1", "+1", "-1", "1.0", "0x10", "4294967296"])
def test_zones_syntax(ctl: Ctl, zones: str) -> None:
    expect_fail(ctl.run("set", "--dry-run", "--zones", zones), "zones-syntax", "--zones")


def test_zone_id_limit_is_32_bit(ctl: Ctl) -> None:
    assert dry(ctl, "set", "--zones", "4294967295")["cdw11"] == 4294967295


def test_too_many_zones(ctl: Ctl, write_cfg: Any) -> None:
    expect_fail(ctl.run("set", "--dry-run", "--zones", "1,2,3,4,5,6"), "too-many-zones", "6 zones")
    hot = [1, 2, 3, 4, 5, 6, 7]
    expect_fail(ctl.run("set", "--dry-run", "--config", write_cfg(config(hot_zones=hot))), "too-many-zones", "--top5")


def test_zone_out_of_range_of_config(ctl: Ctl, write_cfg: Any) -> None:
    path = write_cfg(config(hot_zones=[1, 32], nr_zones=32))
    expect_fail(ctl.run("set", "--dry-run", "--config", path), "zone-out-of-range", "32")
    assert dry(ctl, "set", "--config", write_cfg(config(hot_zones=[0, 31], nr_zones=32)))["zones"] == [0, 31]


def test_duplicate_zones(ctl: Ctl, write_cfg: Any) -> None:
    expect_fail(ctl.run("set", "--dry-run", "--zones", "3,5,3"), "duplicate-zone", "zone 3 twice")
    path = write_cfg(config(hot_zones=[4, 9, 4], zone_scores=None))
    expect_fail(ctl.run("set", "--dry-run", "--config", path), "duplicate-zone", "4 twice")


def test_no_zones(ctl: Ctl, write_cfg: Any) -> None:
    expect_fail(ctl.run("set", "--dry-run", "--config", write_cfg(config(hot_zones=[]))), "no-zones")


@pytest.mark.parametrize("opcode", ["0", "0x80", "0x84", "0x06", "134"])
def test_standard_opcodes_refused(ctl: Ctl, opcode: str) -> None:
    expect_fail(ctl.run("status", "--dry-run", "--opcode", opcode), "opcode-refused", "standard NVMe admin opcode")


@pytest.mark.parametrize("opcode", ["0xc1", "0xc2", "0xc3", "0x87", "0x9a", "255"])
def test_opcodes_that_declare_a_data_transfer_refused(ctl: Ctl, opcode: str) -> None:
    """The command carries no buffer: an opcode whose low two bits declare a transfer would move data to or from
    address 0. 0x99, the protocol's own opcode, stays."""
    expect_fail(ctl.run("status", "--dry-run", "--opcode", opcode), "opcode-refused", "declares a data transfer")
    expect_fail(ctl.run("status", "/dev/null", "--opcode", opcode), "opcode-refused")


def test_double_dash_ends_the_options(ctl: Ctl) -> None:
    """After `--` an argument is the device even when it starts with '-' (`ztbp apply` passes the device there)."""
    proc = ctl.run("set", "--dry-run", "--zones", "1", "--", "--json")
    assert proc.returncode == 0 and json.loads(proc.stdout)["device"] == "--json"
    expect_fail(ctl.run("set", "--zones", "1", "--", "/dev/null"), "not-nvme")
    expect_fail(ctl.run("set", "--zones", "1", "--", "/dev/null", "/dev/zero"), "usage", "more than one device")
    expect_fail(ctl.run("set", "--dry-run"), "usage")


def test_config_read_errors(ctl: Ctl, tmp_path: Path) -> None:
    expect_fail(ctl.run("set", "--dry-run", "--config", str(tmp_path / "missing.json")), "config-read", "cannot open")
    expect_fail(ctl.run("set", "--dry-run", "--config", str(tmp_path)), "config-read", "not a regular file")


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   ",
        '{"format": "ztbp-cache-config/1", "hot_zones": [1,],}',
        '{"format": "ztbp-cache-config/1", "hot_zones": [1]} // comment',
        "{'format': 'ztbp-cache-config/1', 'hot_zones': [1]}",
        '{"format": "ztbp-cache-config/1", "hot_zones": [NaN]}',
        '{"format": "ztbp-cache-config/1", "hot_zones": [01]}',
        '{"format": "ztbp-cache-config/1", "hot_zones": [1], "hot_zones": [2]}',
        '{"format": "ztbp-cache-config/1", "hot_zones": [1]} {}',
        '{"format": "ztbp-cache-config/1", "hot_zones": [1], "x": "\x01"}',
        '{"format": "ztbp-cache-config/1", "hot_zones": [1], "x": "\\ud800"}',
        '{"format": "ztbp-cache-config/1", "hot_zones": [1], "x": "\\q"}',
        '{"format": "ztbp-cache-config/1", "hot_zones": [1], "x": tru}',
        '{"format": "ztbp-cache-config/1", "hot_zones": [1.]}',
        '{"format": "ztbp-cache-config/1", "hot_zones": [1]',
        '{"format": "ztbp-cache-config/1" "hot_zones": [1]}',
        '{"format": "ztbp-cache-config/1", "hot_zones": [1], "x": ' + "[" * 100 + "]" * 100 + "}",
    ],
)
def test_config_not_json(ctl: Ctl, write_cfg: Any, text: str) -> None:
    expect_fail(ctl.run("set", "--dry-run", "--config", write_cfg(text)), "config-json", "line ")


@pytest.mark.parametrize(
    "raw",
    [
        b'{"format": "ztbp-cache-config/1", "hot_zones": [1], "x": "\xff"}',
        b'{"format": "ztbp-cache-config/1", "hot_zones": [1], "x": "\xc0\xaf"}',
        b'{"format": "ztbp-cache-config/1", "hot_zones": [1], "x": "\xed\xa0\x80"}',
        b'\xef\xbb\xbf{"format": "ztbp-cache-config/1", "hot_zones": [1]}',
        b'{"format": "ztbp-cache-config/1", "hot_zones": [1], "x": "a\x00b"}',
    ],
)
def test_config_bad_bytes(ctl: Ctl, write_cfg: Any, raw: bytes) -> None:
    expect_fail(ctl.run("set", "--dry-run", "--config", write_cfg(raw)), "config-json")


def test_json_error_position(ctl: Ctl, write_cfg: Any) -> None:
    text = '{\n  "format": "ztbp-cache-config/1",\n  "hot_zones": [1,]\n}'
    proc = ctl.run("set", "--dry-run", "--config", write_cfg(text))
    expect_fail(proc, "config-json", "line 3, column 19: trailing comma")


@pytest.mark.parametrize(
    ("doc", "fragment"),
    [
        ({"hot_zones": [1]}, 'no "format" key'),
        ({"format": "ztbp-cache-config/2", "hot_zones": [1]}, '"ztbp-cache-config/2"'),
        ({"format": "ztbp-run/1", "hot_zones": [1]}, "reads only"),
        ({"format": 1, "hot_zones": [1]}, "an integer"),
        ({"format": "ztbp-cache-config/1 ", "hot_zones": [1]}, "reads only"),
    ],
)
def test_config_format_line(ctl: Ctl, write_cfg: Any, doc: dict[str, Any], fragment: str) -> None:
    expect_fail(ctl.run("set", "--dry-run", "--config", write_cfg(doc)), "config-format", fragment)


@pytest.mark.parametrize(
    ("over", "fragment"),
    [
        ({"hot_zones": None, "zone_scores": None}, '"hot_zones" must be an array'),
        ({"hot_zones": "1,2"}, '"hot_zones" must be an array'),
        ({"hot_zones": [1.0], "zone_scores": None}, "hot_zones[0]"),
        ({"hot_zones": [-1], "zone_scores": None}, "hot_zones[0]"),
        ({"hot_zones": [3, 4294967296], "zone_scores": None}, "hot_zones[1]"),
        ({"hot_zones": [3, "4"], "zone_scores": None}, "hot_zones[1]"),
        ({"zone_scores": [{"zone": 7, "reads": 1, "share": 0.5}]}, "zone_scores"),
        ({"zone_scores": {"zone": 7}}, "zone_scores"),
        ({"nr_zones": 0}, '"nr_zones"'),
        ({"nr_zones": "32"}, '"nr_zones"'),
        ({"lba_bytes": 4096.5}, '"lba_bytes"'),
        ({"zone_size_lba": -8192}, '"zone_size_lba"'),
        ({"cache_mib": 1.5}, '"cache_mib"'),
        ({"source_run": 5}, '"source_run"'),
        ({"created": None, "predicted": []}, '"predicted"'),
        ({"cluster": "dbscan"}, '"cluster"'),
        ({"recommend": "false"}, '"recommend" must be true or false'),
        ({"recommend": 0}, '"recommend" must be true or false'),
        ({"recommend_reason": 3}, '"recommend_reason"'),
        ({"held_out": [0.1]}, '"held_out"'),
    ],
)
def test_config_schema(ctl: Ctl, write_cfg: Any, over: dict[str, Any], fragment: str) -> None:
    doc = config(**{k: v for k, v in over.items() if v is not None})
    for key, value in over.items():
        if value is None:
            doc.pop(key, None)
    expect_fail(ctl.run("set", "--dry-run", "--config", write_cfg(doc)), "config-schema", fragment)


@pytest.mark.parametrize(
    ("field", "value", "fragment"),
    [
        ("zone", 8, "zone_scores[1].zone is 8"),
        ("reads", -1, "zone_scores[1].reads"),
        ("share", 1.5, "zone_scores[1].share"),
        ("share", "0.5", "zone_scores[1].share"),
        ("zone", None, "zone_scores[1].zone"),
    ],
)
def test_zone_scores_checked(ctl: Ctl, write_cfg: Any, field: str, value: Any, fragment: str) -> None:
    doc = config()
    if value is None:
        del doc["zone_scores"][1][field]
    else:
        doc["zone_scores"][1][field] = value
    expect_fail(ctl.run("set", "--dry-run", "--config", write_cfg(doc)), "config-schema", fragment)


def test_long_number_literals_read_exactly(ctl: Ctl, write_cfg: Any) -> None:
    """A share written with many digits is compared by its value, not by a truncated prefix."""
    text = json.dumps(config(hot_zones=[4]))
    large = "0." + "0" * 80 + "5e+90"  # 5e9: only the exponent at the end makes it large
    expect_fail(ctl.run("set", "--dry-run", "--config", write_cfg(text.replace("0.3", large))),
                "config-schema", "share")
    tiny = "0." + "0" * 80 + "1"
    assert dry(ctl, "set", "--config", write_cfg(text.replace("0.3", tiny)))["zones"] == [4]


def test_config_top_level_must_be_object(ctl: Ctl, write_cfg: Any) -> None:
    expect_fail(ctl.run("set", "--dry-run", "--config", write_cfg("[1, 2]")), "config-schema", "top level")


# ---- device checks (no NVMe needed) ------------------------------------------------------------------


def test_missing_device(ctl: Ctl) -> None:
    expect_fail(ctl.run("set", "/dev/no-such-nvme9n9", "--zones", "1"), "device-open", "No such file")
    expect_fail(ctl.run("geometry", "/dev/no-such-nvme9n9"), "device-open")


def test_regular_file_is_not_a_device(ctl: Ctl, tmp_path: Path) -> None:
    f = tmp_path / "plain"
    f.write_text("x")
    expect_fail(ctl.run("status", str(f)), "not-a-device", "not a block or character device")
    expect_fail(ctl.run("geometry", str(tmp_path)), "not-a-device")


def test_char_device_that_is_not_nvme(ctl: Ctl) -> None:
    expect_fail(ctl.run("set", "/dev/null", "--zones", "1"), "not-nvme", "not an NVMe device")
    expect_fail(ctl.run("geometry", "/dev/null"), "not-nvme")
    # sysfs decides before anything is sent, so --force does not send to it either
    expect_fail(ctl.run("status", "/dev/null", "--force"), "not-nvme", "nothing was sent")


def _ioctls(args: list[str], tmp_path: Path) -> list[str] | None:
    """The ioctls the plain build makes on descriptors other than stdin/out/err, or None without strace."""
    if shutil.which("strace") is None:
        return None
    _make("all")
    log = tmp_path / "strace.log"
    proc = subprocess.run(["strace", "-f", "-e", "trace=ioctl", "-o", str(log), str(TOOL / "build" / "ztbp-ctl"),
                           *args], capture_output=True, text=True, timeout=60, check=False)
    if not log.is_file() or "ptrace" in proc.stderr:
        return None
    return [ln for ln in log.read_text().splitlines() if re.search(r"ioctl\((?![012],)\d+", ln)]


@pytest.mark.parametrize("args", [["status", "/dev/null", "--force"], ["geometry", "/dev/null"],
                                  ["set", "/dev/zero", "--zones", "1", "--force"], ["info", "/dev/full"]])
def test_nothing_is_sent_to_a_device_that_is_not_nvme(args: list[str], tmp_path: Path) -> None:
    """No NVMe ioctl (not even NVME_IOCTL_ID or Identify) reaches a device whose sysfs entry is not NVMe."""
    seen = _ioctls(args, tmp_path)
    if seen is None:
        pytest.skip("strace is not installed or cannot trace here")
    assert seen == []


@pytest.fixture
def loop_device(tmp_path: Path) -> Iterator[str]:
    """A loop device over a small file: a block device of another driver than NVMe."""
    if os.geteuid() != 0 or shutil.which("losetup") is None:
        pytest.skip("needs root and losetup to make a loop device")
    backing = tmp_path / "backing.img"
    backing.write_bytes(b"\0" * (1 << 20))
    made = subprocess.run(["losetup", "--find", "--show", str(backing)], capture_output=True, text=True,
                          timeout=30, check=False)
    if made.returncode != 0:
        pytest.skip(f"losetup cannot make a loop device here: {made.stderr.strip()}")
    dev = made.stdout.strip()
    try:
        yield dev
    finally:
        subprocess.run(["losetup", "--detach", dev], capture_output=True, timeout=30, check=False)


@pytest.mark.parametrize("args", [["geometry"], ["geometry", "--json"], ["status"], ["status", "--force"],
                                  ["info"], ["stop"], ["set", "--zones", "1"], ["set", "--zones", "1", "--force"]])
def test_no_ioctl_reaches_a_loop_device(args: list[str], loop_device: str, tmp_path: Path) -> None:
    """Every command on a loop device: refused as not NVMe from sysfs alone, with no ioctl on it at all (the block
    layer's zone ioctls included)."""
    seen = _ioctls([args[0], loop_device, *args[1:]], tmp_path)
    if seen is None:
        pytest.skip("strace is not installed or cannot trace here")
    assert seen == []
    proc = subprocess.run([str(TOOL / "build" / "ztbp-ctl"), args[0], loop_device, *args[1:]], capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 23 and "nothing was sent" in proc.stdout + proc.stderr, proc.stderr


def _non_zoned_block_device() -> str | None:
    for queue in sorted(Path("/sys/block").glob("*/queue/zoned")):
        dev = Path("/dev") / queue.parent.parent.name
        try:
            if queue.read_text().strip() == "none" and stat.S_ISBLK(dev.stat().st_mode) and os.access(dev, os.R_OK):
                size = int((queue.parent.parent / "size").read_text())
                if size > 0 and not queue.parent.parent.name.startswith("nvme"):
                    return str(dev)
        except OSError:
            continue
    return None


def test_non_zoned_block_device(ctl: Ctl) -> None:
    dev = _non_zoned_block_device()
    if dev is None:
        pytest.skip("no readable non-zoned, non-NVMe block device here")
    try:
        os.close(os.open(dev, os.O_RDONLY | os.O_NONBLOCK))
    except OSError as exc:  # e.g. a container's device policy: ztbp-ctl must then say why
        denied = exc.errno in (errno.EACCES, errno.EPERM)
        expect_fail(ctl.run("geometry", dev), "permission" if denied else "device-open")
        pytest.skip(f"{dev} cannot be opened here ({exc.strerror})")
    expect_fail(ctl.run("geometry", dev), "not-nvme", "nothing was sent")
    expect_fail(ctl.run("set", dev, "--zones", "1"), "not-nvme")
    expect_fail(ctl.run("set", dev, "--zones", "1", "--force"), "not-nvme", "nothing was sent")


def test_permission_error_says_root(ctl: Ctl) -> None:
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to run as an unprivileged user")
    folder = Path(tempfile.mkdtemp(prefix="ztbp-ctl-perm-"))
    try:
        folder.chmod(0o755)
        node = folder / "nvme-like"
        os.mknod(node, 0o600 | stat.S_IFCHR, os.makedev(1, 3))  # a root-only char device
        binary = folder / "ztbp-ctl"
        shutil.copy2(ctl.binary, binary)
        binary.chmod(0o755)
        proc = Ctl(binary, ctl.sanitized).run("status", str(node), user="65534")
        expect_fail(proc, "permission", "needs root")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# ---- output and documentation ------------------------------------------------------------------------


def test_json_error_output(ctl: Ctl) -> None:
    proc = ctl.run("set", "--dry-run", "--zones", "1,1", "--json")
    assert proc.returncode == EXIT["duplicate-zone"]
    out = json.loads(proc.stdout)
    assert out == {
        "ok": False,
        "exit_code": EXIT["duplicate-zone"],
        "error": "duplicate-zone",
        "message": proc.stderr.removeprefix("ztbp-ctl: error: ").rstrip("\n"),
    }


def _table(text: str, pattern: str) -> dict[str, int]:
    return {m.group(2): int(m.group(1)) for m in re.finditer(pattern, text, re.M)}


def test_help_lists_every_exit_code(ctl: Ctl) -> None:
    proc = ctl.run("--help")
    assert proc.returncode == 0 and proc.stderr == ""
    assert _table(proc.stdout, r"^\s+(\d+)\s+([a-z-]+)\s+\S") == EXIT
    for command in ("geometry", "set", "info", "status", "stop"):
        assert f"  {command} " in proc.stdout
    assert ctl.run("set", "--help").stdout == proc.stdout


def test_readme_lists_every_exit_code() -> None:
    readme = (TOOL / "README.md").read_text()
    section = readme.split("## ztbp-ctl exit codes", 1)[1].split("\n## ", 1)[0]
    assert _table(section, r"^\|\s*(\d+)\s*\|\s*`([a-z-]+)`\s*\|") == EXIT
    top = (ROOT / "README.md").read_text()
    assert "tools/ztbp-ctl/README.md#ztbp-ctl-exit-codes" in top


def test_version(ctl: Ctl) -> None:
    proc = ctl.run("--version")
    assert proc.returncode == 0 and re.fullmatch(r"ztbp-ctl \d+\.\d+\.\d+\n", proc.stdout)


# ---- the fuzz target's seed corpus -----------------------------------------------------------------


def test_fuzz_seed_corpus_runs_clean() -> None:
    """The libFuzzer target builds and runs every committed seed once without a finding."""
    if shutil.which("clang") is None:
        pytest.skip("clang (the fuzz target's compiler) is not installed")
    _make("fuzz")
    corpus = TOOL / "fuzz" / "corpus"
    seeds = sorted(corpus.iterdir())
    assert len(seeds) >= 10
    assert {p.read_bytes()[:1] for p in seeds} == {b"0", b"1", b"3"}  # every mode is seeded
    proc = subprocess.run(
        [str(TOOL / "build" / "fuzz" / "ztbp-ctl-fuzz"), "-runs=0", str(corpus)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"INFO: seed corpus: files: {len(seeds)}" in proc.stderr


@pytest.mark.parametrize(("seed", "message"), [
    # zone_size_lba and lba_bytes both 4294967295: their product does not fit 64 signed bits; compared unsigned
    # with an overflow check it is a plain mismatch (UBSan aborts the fuzz target on a signed overflow)
    ("main-geometry-overflow.bin", "the config was made for 4 zones of 4294967295 LBAs of 4294967295 bytes"),
    ("main-not-nvme-force.bin", "is not an NVMe device; nothing was sent"),
    ("main-set-block-config.bin", "accepted hot zones 3,1,2"),
])
def test_fuzz_seeds_through_main_and_the_stubbed_device(seed: str, message: str) -> None:
    """main.c and device.c over the fuzz target's stubbed system calls (no real device): the geometry check of
    a config with 32-bit maxima, --force on a device sysfs does not call NVMe, and a SET that reaches the
    device."""
    if shutil.which("clang") is None:
        pytest.skip("clang (the fuzz target's compiler) is not installed")
    _make("fuzz")
    proc = subprocess.run([str(TOOL / "build" / "fuzz" / "ztbp-ctl-fuzz"), "-runs=1",
                           str(TOOL / "fuzz" / "corpus" / seed)], capture_output=True, text=True, timeout=60,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert message in proc.stdout + proc.stderr

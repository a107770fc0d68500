"""probes/FORMAT.md, the contract constants and the header each probe prints must say the same thing."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ztbp import contract
from ztbp.paths import PROBES

FORMAT_MD = PROBES / "FORMAT.md"
#: Probe scripts that write each versioned file (every one must print the contract's header).
WRITERS: dict[str, tuple[str, ...]] = {
    "nvme": ("nvme_zone.bt", "nvme_zone_stream.bt"),
    "layers": ("layers.bt",),
    "appops": ("appops.bt",),
    "cachestat": ("cachestat.bt",),
}


def format_sections() -> dict[str, dict[str, object]]:
    """Every `## raw/<probe>.csv — `# ztbp <probe> vN`` section: its version line, header block and table columns."""
    text = FORMAT_MD.read_text()
    out: dict[str, dict[str, object]] = {}
    heads = list(re.finditer(r"^## raw/(?P<probe>[a-z0-9_]+)\.csv — `(?P<version># ztbp [^`]+)`\s*$", text, re.M))
    for i, m in enumerate(heads):
        body = text[m.end(): heads[i + 1].start() if i + 1 < len(heads) else len(text)]
        body = body.split("\n## ", 1)[0]
        block = re.search(r"```\n(?P<header>[^\n]+)\n```", body)
        table = re.findall(r"^\| `(?P<col>[a-z0-9_]+)` \|", body, re.M)
        out[m["probe"]] = {"version": m["version"], "header": block["header"].split(",") if block else None,
                           "table": table}
    return out


def printed_header(script: Path) -> tuple[str, list[str]]:
    """The two header lines a bpftrace probe prints in BEGIN (its first two printf strings)."""
    lines = re.findall(r'printf\("([^"%]*)\\n"\);', script.read_text())
    assert len(lines) >= 2, f"{script.name}: no header printf found"
    return lines[0], lines[1].split(",")


def test_format_md_documents_every_probe_file_of_the_contract() -> None:
    assert set(format_sections()) == set(contract.PROBE_FILES)


@pytest.mark.parametrize("probe", sorted(contract.PROBE_FILES))
def test_format_md_matches_the_contract_constants(probe: str) -> None:
    version, columns = contract.PROBE_FILES[probe]
    sec = format_sections()[probe]
    assert sec["version"] == version
    assert sec["header"] == list(columns), "the header block in FORMAT.md differs from the contract's columns"
    assert sec["table"] == list(columns), "FORMAT.md's column table must list every column once, in file order"


@pytest.mark.parametrize("probe,script", [(p, s) for p, scripts in sorted(WRITERS.items()) for s in scripts])
def test_each_probe_prints_the_contract_header(probe: str, script: str) -> None:
    version, columns = printed_header(PROBES / script)
    assert version == contract.PROBE_FILES[probe][0]
    base = list(contract.PROBE_FILES[probe][1])
    extra = list(contract.NVME_EXTRA_COLUMNS) if probe == "nvme" else []
    assert columns in (base, base + extra), "a probe prints the contract's columns, then only the allowed extras"


def test_the_app_capture_writes_the_files_header_of_the_contract() -> None:
    """raw/files.csv comes from vm/guest/app-capture.sh (filefrag), not from a probe: its header is the contract's."""
    script = (PROBES.parent / "vm" / "guest" / "app-capture.sh").read_text()
    assert f'FILES_VERSION="{contract.FILES_VERSION_LINE}"' in script
    assert f'FILES_HEADER="{",".join(contract.FILES_COLUMNS)}"' in script


def test_probe_header_text_is_what_readers_expect() -> None:
    text = contract.probe_header("nvme")
    assert text.splitlines() == [contract.NVME_VERSION_LINE, ",".join(contract.NVME_COLUMNS)]


def test_a_drifted_document_is_caught(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The checker itself: a FORMAT.md whose header block loses a column no longer matches."""
    drifted = FORMAT_MD.read_text().replace("ts_ns,lat_ns,ctrl,qid", "ts_ns,ctrl,qid", 1)
    (tmp_path / "FORMAT.md").write_text(drifted)
    monkeypatch.setattr(__import__(__name__), "FORMAT_MD", tmp_path / "FORMAT.md")
    assert format_sections()["nvme"]["header"] != list(contract.NVME_COLUMNS)

"""probes/one-liners.md: at least 12 documented one-liners, each compiled and attached by bpftrace in the guest.

bpftrace 0.17 (Debian 12) has no --dry-run. The closest checks it offers: `--emit-elf FILE` runs the parser, the
semantic analysis (tracepoint fields, BTF types, map types) and the code generation without attaching; and
`-c /bin/true` attaches every probe, runs the command and exits — the only way 0.17 reports a kfunc or kprobe
that does not exist (--emit-elf accepts those silently). The VM test does both for every one-liner.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "probes" / "one-liners.md"
VMTEST = ROOT / "vm" / "vmtest.sh"
_BLOCK = re.compile(r"^## (?P<title>.+?)\n(?P<body>.*?)(?=^## |\Z)", re.S | re.M)
_CMD = re.compile(r"```sh\n(bpftrace -e .+?)\n```", re.S)

GUEST_SCRIPT = r"""
set -u
modprobe ext4; modprobe btrfs
O=/ztbp/out
i=0
while IFS= read -r prog; do
	i=$((i + 1))
	timeout 120 bpftrace --emit-elf /tmp/one.elf -e "$prog" > "$O/$i.elf.out" 2>&1; echo $? > "$O/$i.elf.rc"
	timeout 120 bpftrace -e "$prog" -c /bin/true > "$O/$i.run.out" 2>&1; echo $? > "$O/$i.run.rc"
done < "$O/programs.txt"
echo "$i" > "$O/finished"
"""


def one_liners() -> list[tuple[str, str, str]]:
    """(section title, bpftrace program, description) of every one-liner on the page."""
    out = []
    for m in _BLOCK.finditer(PAGE.read_text()):
        body = m["body"]
        for cmd in _CMD.findall(body):
            argv = shlex.split(cmd)
            assert argv[:2] == ["bpftrace", "-e"] and len(argv) == 3, f"{m['title']}: not `bpftrace -e PROGRAM`"
            after = body.split(cmd, 1)[1].split("```", 1)[1]
            out.append((m["title"], argv[2], after.strip()))
    return out


def test_at_least_twelve_one_liners_each_says_what_it_prints() -> None:
    ol = one_liners()
    assert len(ol) >= 12
    titles = [t for t, _, _ in ol]
    assert len(set(titles)) == len(titles), "one one-liner per section"
    for title, prog, desc in ol:
        assert "\n" not in prog, f"{title}: a one-liner is one line"
        assert re.search(r"\bPrints\b", desc), f"{title}: say what it prints"
    topics = " ".join(titles).lower()
    for topic in ("reads per zone", "resets per second", "append latency", "size histogram", "write-pointer"):
        assert topic in topics


@pytest.mark.vm
def test_every_one_liner_compiles_and_attaches_in_the_guest(tmp_path: Path) -> None:
    if not VMTEST.exists():
        pytest.skip("vm/vmtest.sh (the VM harness) is not in this checkout")
    if shutil.which("qemu-system-x86_64") is None:
        pytest.fail("qemu-system-x86_64 is missing: run `just deps`")
    ol = one_liners()
    # the last program is a control: a kfunc that does not exist must fail the attach check
    control = "kfunc:vmlinux:ztbp_no_such_function { @calls = count(); }"
    (tmp_path / "programs.txt").write_text("".join(prog + "\n" for _, prog, _ in ol) + control + "\n")
    (tmp_path / "guest.sh").write_text(GUEST_SCRIPT)
    proc = subprocess.run([str(VMTEST), "-o", str(tmp_path), "-q", "-t", "1500", "--zones", "8", "--",
                           "bash /ztbp/out/guest.sh"], capture_output=True, text=True, timeout=1600, check=False)
    console = (tmp_path / "console.log").read_text(errors="replace") if (tmp_path / "console.log").exists() else ""
    assert (tmp_path / "finished").exists(), f"vmtest exit {proc.returncode}\n{proc.stderr[-2000:]}\n{console[-3000:]}"
    failures = {}
    for i, (title, _, _) in enumerate(ol, start=1):
        elf_rc = int((tmp_path / f"{i}.elf.rc").read_text())
        elf_out = (tmp_path / f"{i}.elf.out").read_text(errors="replace")
        run_rc = int((tmp_path / f"{i}.run.rc").read_text())
        run_out = (tmp_path / f"{i}.run.out").read_text(errors="replace")
        if elf_rc != 0 or "ERROR" in elf_out or "WARNING" in elf_out:
            failures[title] = f"--emit-elf exit {elf_rc}: {elf_out[-600:]}"
        elif run_rc != 0 or "ERROR" in run_out or not re.search(r"Attaching \d+ probes?\.\.\.", run_out):
            failures[title] = f"attach exit {run_rc}: {run_out[-600:]}"
    (tmp_path / "failures.json").write_text(json.dumps(failures, indent=2))
    assert not failures, json.dumps(failures, indent=2)
    n = len(ol) + 1
    control_out = (tmp_path / f"{n}.run.out").read_text(errors="replace")
    assert int((tmp_path / f"{n}.run.rc").read_text()) != 0 or "ERROR" in control_out, control_out

"""probes/one-liners.md and probes/*.bt: every one-liner and every probe compiled and attached by bpftrace in the
guest, on both guest suites (Debian 12: Linux 6.1, bpftrace 0.17; Debian 13: Linux 6.12, bpftrace 0.23), one boot
per suite.

One check per program: `-c /bin/true` parses it, runs the semantic analysis and code generation (a warning of any
of them fails the check), attaches every probe, runs the command and exits — the only way bpftrace 0.17 reports a
kfunc or kprobe that does not exist (its compile-only modes, `--emit-elf` and `-d`, accept those silently). A
separate compile-only pass (`--dry-run` on 0.23) would find nothing more and doubled the test's time under TCG.

The one-liners are checked together first: one program holding them all, each one's maps renamed apart
(`@x` -> `@p3_x`), so one bpftrace start (BTF, LLVM, attach: seconds each under TCG) serves fifteen. When that
program fails, each one-liner is checked alone, so a failure still names its one-liner.
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
_MAP = re.compile(r"@(\w*)")
_BLOCK = re.compile(r"^## (?P<title>.+?)\n(?P<body>.*?)(?=^## |\Z)", re.S | re.M)
_CMD = re.compile(r"```sh\n(bpftrace -e .+?)\n```", re.S)

SUITES = ("bookworm", "trixie")
GUEST_SCRIPT = r"""
set -u
modprobe ext4; modprobe btrfs
O=/ztbp/out
. /etc/os-release; echo "$VERSION_CODENAME $(uname -r) $(bpftrace --version)" > "$O/guest"
check() { # STEM TIMEOUT BPFTRACE-ARGS...: attach, run /bin/true, exit; status, output and seconds under STEM
	local stem="$1" limit="$2" t0
	shift 2
	t0=$(date +%s.%N)
	timeout "$limit" "$@" -c /bin/true < /dev/null > "$O/$stem.run.out" 2>&1; echo $? > "$O/$stem.run.rc"
	echo "$(date +%s.%N) $t0" | awk '{printf "%.1f\n", $1 - $2}' > "$O/$stem.run.s"
}
# the map-size variable this bpftrace reads (0.23 warns about 0.17's name): probe-lib.sh's bpftrace_env
. /ztbp/src/vm/guest/probe-lib.sh
keys="$(bpftrace_env map_keys)"
# one at a time: two bpftraces attaching at once locked up the guest kernel under TCG (seen once)
n="$(wc -l < "$O/programs.txt")"
check all 300 bpftrace "$O/together.bt"
together=0
if [ "$(cat "$O/all.run.rc")" = 0 ] && grep -q "Attaching" "$O/all.run.out" \
	&& ! grep -q -e ERROR -e WARNING "$O/all.run.out"; then
	together=1
fi
echo "$together" > "$O/together"
i=0
while IFS= read -r prog; do
	i=$((i + 1))
	if [ "$together" = 1 ] && [ "$i" -lt "$n" ]; then  # the last program is the control: always alone
		for x in rc out; do cp "$O/all.run.$x" "$O/$i.run.$x"; done
		echo 0 > "$O/$i.run.s"
	else
		check "$i" 120 bpftrace -e "$prog"
	fi
done < "$O/programs.txt"
while IFS= read -r p; do  # the probes no other VM test of this suite compiles and attaches
	check "$p" 300 env "$keys=4096" bpftrace "/ztbp/src/probes/$p"
done < "$O/probes.txt"
echo "$i" > "$O/finished"
"""
#: Probes compiled once per guest: these (suite, probe) are compiled and attached in that suite's guest by another VM
#: test of the suite's run (a capture that uses them), so this one does not compile them again (~30-50 s each under
#: TCG); the test checks that those tests still run them.
ELSEWHERE: dict[tuple[str, str], tuple[str, str]] = {
    ("bookworm", "layers.bt"): ("test_layers_vm.py", '"capture-layers"'),
    ("trixie", "layers.bt"): ("test_layers_vm.py", '"trixie"'),
    ("trixie", "nvme_zone_stream.bt"): ("test_layers_vm.py", '"trixie"'),  # capture-layers runs both probes
    ("bookworm", "nvme_zone.bt"): ("test_capture_vm.py", '"capture", "paper80"'),
    ("bookworm", "nvme_zone_stream.bt"): ("test_layers_vm.py", '"capture-layers"'),  # and the host path's watch
}


def probes() -> list[str]:
    """probes/*.bt but templates (placeholders such as __BINARY__, filled in by the capture that uses them)."""
    return sorted(p.name for p in (ROOT / "probes").glob("*.bt") if not re.search(r"__[A-Z]+__", p.read_text()))


def test_the_probes_compiled_elsewhere_are_compiled_there() -> None:
    for (suite, probe), (module, needle) in ELSEWHERE.items():
        assert probe in probes(), probe
        text = (ROOT / "tests" / module).read_text()
        assert needle in text and "pytest.mark.vm" in text, (suite, probe, module)


# the last program is a control: a kfunc that does not exist must fail the attach check
CONTROL = "kfunc:vmlinux:ztbp_no_such_function { @calls = count(); }"


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


def together(programs: list[str]) -> str:
    """One program holding every one-liner, each one's maps renamed apart (`@x` -> `@p3_x`, `@` -> `@p3_`); a
    program may have one BEGIN and one END, so theirs become one each, in the one-liners' order."""
    lines, special = [], {"BEGIN": [], "END": []}
    for i, prog in enumerate(programs, 1):
        prog = _MAP.sub(lambda m, i=i: f"@p{i}_{m[1]}", prog)
        for name, bodies in special.items():
            bodies += [b.strip().rstrip(";") + ";" for b in re.findall(rf"\b{name}\s*{{([^{{}}]*)}}", prog)]
            prog = re.sub(rf"\b{name}\s*{{[^{{}}]*}}", "", prog).strip()
        lines.append(prog)
    lines += [f"{name} {{ {' '.join(bodies)} }}" for name, bodies in special.items() if bodies]
    return "".join(line + "\n" for line in lines)


def test_the_program_of_all_one_liners_keeps_their_maps_apart() -> None:
    progs = ["t:a:b { @x = count(); @ = count(); } END { clear(@x) }",
             "t:a:c { @x[1] = sum(2); @inflight++; } END { clear(@x); }"]
    assert together(progs) == ("t:a:b { @p1_x = count(); @p1_ = count(); }\n"
                               "t:a:c { @p2_x[1] = sum(2); @p2_inflight++; }\n"
                               "END { clear(@p1_x); clear(@p2_x); }\n")
    text = together([prog for _, prog, _ in one_liners()])
    assert "@reads_per_zone" not in text and text.count("END") == 1


def _failure(out: Path, stem: str, attach_line: re.Pattern[str]) -> str | None:
    """What went wrong with the check of one program (compile, attach, run), or None."""
    run_rc = int((out / f"{stem}.run.rc").read_text())
    run_out = (out / f"{stem}.run.out").read_text(errors="replace")
    if run_rc != 0 or "ERROR" in run_out or "WARNING" in run_out or not attach_line.search(run_out):
        return f"exit {run_rc}: {run_out[-600:]}"
    return None


def _seconds(out: Path) -> dict[str, float]:
    """Each program's check time in the guest, by file stem."""
    return {p.name.removesuffix(".run.s"): float(p.read_text()) for p in out.glob("*.run.s")}


@pytest.fixture(scope="module", params=SUITES)
def guest_checks(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """One boot per suite: every one-liner (and a control that must fail), then every probe, compiled and
    attached."""
    if not VMTEST.exists():
        pytest.skip("vm/vmtest.sh (the VM harness) is not in this checkout")
    if shutil.which("qemu-system-x86_64") is None:
        pytest.fail("qemu-system-x86_64 is missing: run `just deps`")
    suite = request.param
    out = tmp_path_factory.mktemp(f"one-liners-{suite}")
    (out / "programs.txt").write_text("".join(prog + "\n" for _, prog, _ in one_liners()) + CONTROL + "\n")
    (out / "together.bt").write_text(together([prog for _, prog, _ in one_liners()]))
    (out / "probes.txt").write_text("".join(p + "\n" for p in probes() if (suite, p) not in ELSEWHERE))
    (out / "guest.sh").write_text(GUEST_SCRIPT)
    # the device of the layer and application captures (64 zones and a conventional namespace): the same shared guest
    proc = subprocess.run([str(VMTEST), "--suite", suite, "-o", str(out), "-q", "-t", "1800", "--conv-ns", "1G", "--",
                           "bash /ztbp/out/guest.sh"], capture_output=True, text=True, timeout=2400, check=False)
    console = (out / "console.log").read_text(errors="replace") if (out / "console.log").exists() else ""
    assert (out / "finished").exists(), f"vmtest exit {proc.returncode}\n{proc.stderr[-2000:]}\n{console[-3000:]}"
    return suite, out


@pytest.mark.vm
def test_every_one_liner_compiles_and_attaches_in_the_guest(guest_checks: tuple[str, Path]) -> None:
    suite, out = guest_checks
    assert (out / "guest").read_text().startswith(suite)
    ol = one_liners()
    attach_line = re.compile(r"Attach(ing|ed) \d+ probes?")
    failures = {title: f for i, (title, _, _) in enumerate(ol, start=1)
                if (f := _failure(out, str(i), attach_line)) is not None}
    (out / "failures.json").write_text(json.dumps(failures, indent=2))
    assert not failures, json.dumps(failures, indent=2)
    took = _seconds(out)
    slowest = sorted(took.items(), key=lambda kv: -kv[1])[:5]
    print(f"{suite}: {len(took)} checks took {sum(took.values()):.0f} s in the guest (one-liners together: "
          f"{(out / 'together').read_text().strip() == '1'}); slowest {slowest}")
    n = len(ol) + 1
    control_out = (out / f"{n}.run.out").read_text(errors="replace")
    assert int((out / f"{n}.run.rc").read_text()) != 0 or "ERROR" in control_out, control_out


#: (suite, probe) pairs known not to work, with the reason; the test fails when one starts working (remove it then)
KNOWN_FAILURES: dict[tuple[str, str], str] = {}


@pytest.mark.vm
def test_every_probe_compiles_and_attaches_in_the_guest(guest_checks: tuple[str, Path]) -> None:
    """probes/*.bt: one source for both suites, each compiled and attached (BEGIN prints its header) in each suite's
    guest, here or (ELSEWHERE) by the capture that uses it."""
    suite, out = guest_checks
    here = [p for p in probes() if (suite, p) not in ELSEWHERE]
    assert here
    failures = {p: f for p in here if (f := _failure(out, p, re.compile(r"^# ztbp \w+ v\d+$|Attach", re.M)))}
    known = {p for (s, p) in KNOWN_FAILURES if s == suite}
    assert set(failures) - known == set(), json.dumps(failures, indent=2)
    assert known <= set(failures), f"{sorted(known - set(failures))} now work on {suite}: drop them from KNOWN_FAILURES"

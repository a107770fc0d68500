"""vm/guest/probe-lib.sh on the host: the map-size formula, the loss rule and the start/stop rules.

The start and stop rules are driven against a stand-in for bpftrace (a small Python process that prints a probe
header and answers SIGINT the ways bpftrace has been seen to: at once, only the second time, never); the real
bpftrace runs through the same functions in the VM tests (test_capture_vm.py, test_layers_vm.py).
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from ztbp import paths

PROBE_LIB = paths.ROOT / "vm" / "guest" / "probe-lib.sh"
#: short waits, but not for attaching: the stand-in's Python start-up took over 4 s on a loaded 2-core host (a test
#: that expects the attach timeout sets its own)
FAST = "PROBE_RESIGNAL_IDLE=1; PROBE_STOP_IDLE=3; PROBE_KILL_WAIT=1; PROBE_ATTACH_TIMEOUT=60; PROBE_DRAIN_STILL=1"

FAKE_BPFTRACE = r"""#!/usr/bin/env python3
# Stands in for bpftrace in tests/test_probe_lib.py. FAKE_BT: prompt (stops at the first SIGINT), miss-first (at
# the second), deaf (never: SIGTERM ends it), crash (exits before attaching), silent (never prints its header),
# slow (busy for 3 s after SIGINT, then stops), miss-first-polling (at the second, waiting in epoll_wait meanwhile and
# using some CPU every second, as bpftrace under emulation).
import os, signal, sys, time
mode = os.environ["FAKE_BT"]
if sys.argv[1:2] == ["--help"]:  # the variables a bpftrace reads: 0.17 (Debian 12) or 0.23 (Debian 13) names
    print("BPFTRACE_MAX_MAP_KEYS" if os.environ.get("FAKE_BT_NEW") else "BPFTRACE_MAP_KEYS_MAX")
    sys.exit(0)
seen = 0
def on_int(sig, frame):
    global seen
    seen += 1
    if mode == "deaf" or (mode in ("miss-first", "miss-first-polling") and seen == 1):
        return
    if mode == "slow":
        t = time.monotonic()
        while time.monotonic() - t < 3:
            pass
    print("@completed: 3\n@lost: 0", flush=True)
    sys.exit(0)
signal.signal(signal.SIGINT, on_int)
if mode == "crash":
    print("ERROR: Could not resolve kfunc", file=sys.stderr)
    sys.exit(1)
if mode != "silent":
    print("Attaching 2 probes...\n# ztbp layers v1\nts_ns,tid\n1,2\n3,4\n5,6", flush=True)
if mode == "miss-first-polling":
    import select
    ep = select.epoll()
    while True:
        ep.poll(0.1)
        t = time.monotonic()
        while time.monotonic() - t < 0.03:  # CPU every second: a stop rule that waits for none never resignals
            pass
while True:
    time.sleep(0.2)
"""


def lib(tmp: Path, script: str, env: dict[str, str] | None = None,
        timeout: int = 60) -> subprocess.CompletedProcess[str]:
    """Run `script` in bash with probe-lib.sh sourced, TMP = tmp (guest.env there) and the fast timeouts."""
    full = f'. "{PROBE_LIB}"; {FAST}; TMP="{tmp}"; : > "$TMP/guest.env"; {script}'
    return subprocess.run(["bash", "-c", full], capture_output=True, text=True, timeout=timeout, check=False,
                          env={**os.environ, **(env or {})})


def guest_env(tmp: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in (tmp / "guest.env").read_text().splitlines())


@pytest.fixture
def fake_bpftrace(tmp_path: Path) -> dict[str, str]:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    exe = bindir / "bpftrace"
    exe.write_text(FAKE_BPFTRACE)
    exe.chmod(0o755)
    (tmp_path / "probe.bt").write_text("tracepoint:syscalls:sys_enter_read { @completed = count(); }\n")
    return {"PATH": f"{bindir}:{os.environ['PATH']}"}


def test_map_size_formula_override_and_memory_cap(tmp_path: Path) -> None:
    res = lib(tmp_path, 'map_keys_for 200000; probe_map_keys nvme 200000 256; echo "$PROBE_KEYS"')
    assert res.stdout.split() == ["350000", "350000"]
    assert guest_env(tmp_path)["probe_nvme_max_rows"] == "350000"
    res = lib(tmp_path, 'probe_map_keys layers 8 3200; echo "$PROBE_KEYS"', {"ZTBP_MAX_ROWS": "4"})
    assert res.stdout.split()[-1] == "4"
    avail_kb = int(next(line.split()[1] for line in Path("/proc/meminfo").read_text().splitlines()
                        if line.startswith("MemAvailable:")))
    res = lib(tmp_path, f'probe_map_keys big 200000 {avail_kb * 1024}; echo "$PROBE_KEYS"')
    assert res.stdout.split()[-1] == "1"  # a quarter of the memory holds no row of that size: one, not the default
    assert "room for" in res.stdout and "counted as lost" in res.stdout


@pytest.mark.parametrize("out,err,misses,expected", [
    # streaming NVMe probe: its own submission count; 5 events lost in the perf buffer, 6 completed rows unwritten
    (["# ztbp nvme v1", "h", "1", "2", "3", "@completed: 9", "@setups: 10"], ["Lost 5 events"], 0,
     {"rows": "3", "completed": "9", "setups": "10", "perf_lost": "5", "lost": "7"}),
    # layer probe: rows all written, 2 requests it counted as lost, 1 skipped program run
    (["# ztbp layers v1", "h", "1", "2", "3", "4", "@completed: 4", "@lost: 2"], [], 1,
     {"rows": "4", "completed": "4", "setups": "5", "perf_lost": "0", "lost": "3"}),
    # layer probe: 2 requests lost for sure, 3 calls counted before it knew whether they were requests
    (["# ztbp layers v1", "h", "1", "@completed: 1", "@lost: 2", "@unsure: 3"], [], 0,
     {"rows": "1", "completed": "1", "setups": "1", "perf_lost": "0", "lost": "5", "unsure": "3"}),
    # nothing lost anywhere (the negative control)
    (["# ztbp layers v1", "h", "1", "@completed: 1", "@lost: 0"], [], 0,
     {"rows": "1", "completed": "1", "setups": "1", "perf_lost": "0", "lost": "0"}),
])
def test_loss_rule(tmp_path: Path, out: list[str], err: list[str], misses: int, expected: dict[str, str]) -> None:
    name = out[0].split()[2]
    (tmp_path / f"{name}.out").write_text("\n".join(out) + "\n")
    (tmp_path / f"{name}.err").write_text("\n".join(err) + "\n")
    res = lib(tmp_path, f'PROBE_MODE[{name}]=stream; probe_extract {name}; probe_account {name} {misses}; '
                        'echo "rows=$PROBE_ROWS lost=$PROBE_LOST status=$STATUS"')
    assert f"rows={expected['rows']} lost={expected['lost']} status=complete" in res.stdout, res.stdout + res.stderr
    env = guest_env(tmp_path)
    for key in ("rows", "completed", "setups", "perf_lost"):
        assert env[f"probe_{name}_{key}"] == expected[key], key
    assert env[f"lost_events_{name}"] == expected["lost"]
    if name == "layers":
        assert env["probe_layers_unsure"] == expected.get("unsure", "0")
    assert (tmp_path / f"{name}.csv").read_text().splitlines()[0] == out[0]


def test_counters_missing_fail_the_capture(tmp_path: Path) -> None:
    (tmp_path / "layers.out").write_text("# ztbp layers v1\nh\n1\n")
    (tmp_path / "layers.err").write_text("")
    res = lib(tmp_path, 'PROBE_MODE[layers]=stream; probe_extract layers; probe_account layers 0; '
                        'echo "status=$STATUS"')
    assert "did not print its counters" in res.stdout and "status=failed" in res.stdout


@pytest.mark.parametrize("mode,clean", [("prompt", True), ("miss-first", True), ("deaf", False)])
def test_start_and_stop_rules(tmp_path: Path, fake_bpftrace: dict[str, str], mode: str, clean: bool) -> None:
    """A bpftrace that misses the first SIGINT gets another one and exits cleanly; one that never answers is
    terminated, and the capture is marked failed because its counters never came."""
    res = lib(tmp_path, f'probe_start layers "{tmp_path}/probe.bt" 0 && probe_stop layers; '
                        'echo "status=$STATUS rows=$PROBE_ROWS pids=${#PROBE_PID[@]}"',
              {**fake_bpftrace, "FAKE_BT": mode})
    assert "stage probe layers attached after" in res.stdout, res.stdout + res.stderr
    assert "pids=0" in res.stdout  # no bpftrace left behind
    assert ("terminating it" in res.stdout) is (not clean)
    assert (f"status={'complete' if clean else 'failed'} rows=3") in res.stdout, res.stdout
    env = guest_env(tmp_path)
    assert env["probe_layers_mode"] == "stream" and env["probe_layers_rows"] == "3"
    if clean:
        assert env["lost_events_layers"] == "0"


def test_a_missed_sigint_is_sent_again_while_bpftrace_waits_in_its_event_loop(tmp_path: Path,
                                                                               fake_bpftrace: dict[str, str]) -> None:
    """Seen in the guest: bpftrace missed the SIGINT and stayed in epoll_wait, its polling using CPU every second,
    so a rule that resends only after seconds without CPU waited 529 and 649 s. In its event loop it prints
    nothing: the SIGINT is sent again, and it exits cleanly (here within the 8 s this test allows)."""
    res = lib(tmp_path, f'PROBE_STOP_TIMEOUT=8; probe_start layers "{tmp_path}/probe.bt" 0 && probe_stop layers; '
                        'echo "status=$STATUS rows=$PROBE_ROWS"', {**fake_bpftrace, "FAKE_BT": "miss-first-polling"})
    assert "terminating it" not in res.stdout and "status=complete rows=3" in res.stdout, res.stdout + res.stderr


def test_a_probe_slow_to_exit_is_described_while_it_is_waited_for(tmp_path: Path,
                                                                  fake_bpftrace: dict[str, str]) -> None:
    """A bpftrace busy after SIGINT is waited for (it is working), and said where it is: each thread's state,
    kernel wait channel and CPU ticks; then it exits cleanly."""
    res = lib(tmp_path, f'PROBE_EXIT_TELL=1; probe_start layers "{tmp_path}/probe.bt" 0 && probe_stop layers; '
                        'echo "status=$STATUS rows=$PROBE_ROWS"', {**fake_bpftrace, "FAKE_BT": "slow"})
    told = [line for line in res.stdout.splitlines() if "still exiting after" in line]
    assert told and re.search(r"threads \(id:state:wchan:ticks\): \d+:R:[^:]*:\d+ ", told[0]), res.stdout
    assert "terminating it" not in res.stdout and "status=complete rows=3" in res.stdout, res.stdout


@pytest.mark.parametrize("mode,timeout,message", [
    # a crash ends the wait at once: the long timeout keeps a busy machine from reaching it first (a fresh
    # machine's package installs beside the unit tests once delayed the stand-in's crash past 4 s)
    ("crash", 50, "bpftrace layers exited: ERROR: Could not resolve kfunc"),
    ("silent", 4, "did not attach within 4 s")])
def test_a_probe_that_does_not_attach_is_an_error(tmp_path: Path, fake_bpftrace: dict[str, str], mode: str,
                                                  timeout: int, message: str) -> None:
    res = lib(tmp_path, f'PROBE_ATTACH_TIMEOUT={timeout}; probe_start layers "{tmp_path}/probe.bt" 0; '
                        'echo "rc=$? pids=${#PROBE_PID[@]}"', {**fake_bpftrace, "FAKE_BT": mode})
    assert message in res.stdout and "rc=1 pids=0" in res.stdout, res.stdout + res.stderr


@pytest.mark.parametrize("new,variable", [("", "BPFTRACE_MAP_KEYS_MAX"), ("1", "BPFTRACE_MAX_MAP_KEYS")])
def test_map_probe_gets_its_map_size(tmp_path: Path, fake_bpftrace: dict[str, str], new: str, variable: str) -> None:
    """A probe that keeps @rows (map mode) is started with its map size, under the variable's name in that
    bpftrace (0.17: BPFTRACE_MAP_KEYS_MAX; 0.23: BPFTRACE_MAX_MAP_KEYS, where the old name is deprecated), and a
    small perf buffer."""
    (tmp_path / "map.bt").write_text("kfunc:x { @rows[1] = 1; }\n")
    spy = tmp_path / "bin" / "bpftrace"
    spy.write_text("#!/bin/bash\nenv | grep '^BPFTRACE_' | sort > \"$SPY\"\n" + "exec python3 - \"$@\" <<'EOF'\n"
                   + FAKE_BPFTRACE.split("\n", 1)[1] + "EOF\n")
    # the stand-in prints the layer probe's header, not the NVMe probe's: it is given up on after 4 s
    res = lib(tmp_path, f'PROBE_ATTACH_TIMEOUT=4; probe_start nvme "{tmp_path}/map.bt" 1234; '
              'probe_signal_until_exit nvme',
              {**fake_bpftrace, "FAKE_BT": "prompt", "FAKE_BT_NEW": new, "SPY": str(tmp_path / "spy.txt")})
    assert "attached" in res.stdout or "exited" in res.stdout, res.stdout + res.stderr
    assert (tmp_path / "spy.txt").read_text().split() == [f"{variable}=1234", "BPFTRACE_PERF_RB_PAGES=64"]


@pytest.mark.parametrize("order", [("1", "2"), ("2", "1")])
def test_namespace_dev_follows_the_nsid_not_the_disk_name(tmp_path: Path, order: tuple[str, str]) -> None:
    """Linux 6.12 names namespaces in the order its parallel scan finds them: nvme0n1 may be nsid 2."""
    for i, nsid in enumerate(order, start=1):
        (tmp_path / f"nvme0n{i}").mkdir()
        (tmp_path / f"nvme0n{i}" / "nsid").write_text(nsid + "\n")
    r = lib(tmp_path, 'echo "$(namespace_dev 1) $(namespace_dev 2) $(namespace_dev 3)"',
            env={"SYS_BLOCK": str(tmp_path)})
    zns, conv = ("/dev/nvme0n1", "/dev/nvme0n2") if order == ("1", "2") else ("/dev/nvme0n2", "/dev/nvme0n1")
    assert r.stdout.split() == [zns, conv, "/dev/nvme0n3"], r.stderr  # nsid 3 absent: the usual name



def test_a_capture_that_fails_with_a_probe_running_keeps_its_rows(tmp_path: Path,
                                                                   fake_bpftrace: dict[str, str]) -> None:
    """The EXIT trap the file-system captures share (capture_on_exit): a capture that dies with a probe still
    running stops it, is marked failed, saves the probe's rows and stderr and its guest.env, and keeps the
    script's exit status."""
    out, work = tmp_path / "out", tmp_path / "work"
    work.mkdir()
    script = (f'OUT="{out}"; MNT="{tmp_path}/not-mounted"; '
              'save_outputs() { save_probe_files layers nvme; save_status; }; trap capture_on_exit EXIT; '
              f'probe_start layers "{tmp_path}/probe.bt" 0 || exit 9; exit 3')
    res = lib(work, script, {**fake_bpftrace, "FAKE_BT": "prompt"})
    assert res.returncode == 3, res.stdout + res.stderr
    assert (out / "raw" / "layers.csv").read_text().splitlines()[2:] == ["1,2", "3,4", "5,6"]
    assert not (out / "raw" / "nvme.csv").exists()  # a probe that never ran leaves nothing, and no error
    saved = dict(line.split("=", 1) for line in (out / ".capture" / "guest.env").read_text().splitlines())
    assert saved["status"] == "failed" and saved["probe_layers_rows"] == "3"


def test_the_mailbox_both_halves(tmp_path: Path) -> None:
    """The host posts numbered requests (io/mailbox.py), the guest library finds each unanswered one, answers it
    whole and the host reads the status; a wait for a message that never comes gives up, or stops at the stop
    file."""
    from ztbp.io.mailbox import Mailbox

    box = Mailbox(tmp_path / "req", tmp_path / "res").open(fresh=True)
    first, second = box.request("fio", "job 1\n"), box.request("reset", "0 2\n")
    serve = ('while mailbox_next "$REQ" "$RES"; do f="$NEXT" id="$NEXT_ID"; '
             'wc -c < "$f" | mailbox_answer "$RES/$id.out"; mailbox_status "$RES" "$id" "${id: -1}"; done')
    proc = lib(tmp_path, f'REQ="{box.outbox}"; RES="{box.answers}"; {serve}')
    assert proc.returncode == 0, proc.stderr
    assert (box.status(first, 1), box.status(second, 1)) == (1, 2)
    assert box.read_text(f"{first}.out").strip() == "6" and not list(box.answers.glob("*.tmp"))
    assert box.status(box.request("fio", "never served\n"), 0.2) is None
    proc = lib(tmp_path, f'STOP_FILE="{tmp_path}/stop"; MAILBOX_POLL_S=0.1; mailbox_wait "{tmp_path}/x" 1 loop')
    assert proc.returncode == 1 and "ZTBP: error loop: no x from the host within 1 s" in proc.stdout
    (tmp_path / "stop").touch()
    proc = lib(tmp_path, f'STOP_FILE="{tmp_path}/stop"; mailbox_wait "{tmp_path}/x" 60 loop')
    assert proc.returncode == 1 and "ZTBP: loop stop requested" in proc.stdout


def test_the_waits_poll_without_external_commands(tmp_path: Path) -> None:
    """A fork costs ~60 ms under TCG, so the guest scripts' waits poll with builtins: `nap` sleeps on a FIFO (made
    once: mkfifo and rm are the only commands it may run), `has_line` and `lines_matching` read small files. Here
    they run with nothing else on the PATH, so any other command would fail."""
    import shutil
    import time

    bindir = tmp_path / "bin"
    bindir.mkdir()
    for tool in ("mkfifo", "rm"):
        (bindir / tool).symlink_to(shutil.which(tool) or f"/bin/{tool}")
    (tmp_path / "out").write_text('Attaching 2 probes...\n# ztbp nvme v1\n{"kind": "window"}\n{"kind": "window"}')
    script = (f'PATH="{bindir}"; TMPDIR="{tmp_path}"; O="{tmp_path}/out"; nap 0.3; nap 0.3; '
              'has_line "$O" "# ztbp nvme v1" && echo header; '
              'has_line "$O" "# ztbp nvme" || echo "no prefix match"; has_line "$O.none" "*" || echo "no file"; '
              """lines_matching "$O" '*"kind": "window"*'; echo "windows $MATCHED"; """
              'lines_matching "$O.none" "*"; echo "none $MATCHED"')
    t0 = time.monotonic()
    res = lib(tmp_path, script)
    assert res.returncode == 0 and res.stderr == "", res.stderr
    assert res.stdout.splitlines() == ["header", "no prefix match", "no file", "windows 2", "none 0"]
    assert time.monotonic() - t0 >= 0.6
    assert not list(tmp_path.glob(".ztbp-nap.*"))  # the FIFO's name is gone once it is open


def test_recursion_misses_are_summed_over_the_descriptors_with_builtins(tmp_path: Path) -> None:
    """The runs of a probe's programs the kernel skipped, summed over bpftrace's descriptors (fdinfo), read with
    builtins: bpftrace holds one for each program, map and perf event, and a fork each took seconds under TCG."""
    fdinfo = tmp_path / "proc" / "42" / "fdinfo"
    fdinfo.mkdir(parents=True)
    (fdinfo / "3").write_text("pos:\t0\nflags:\t02000002\nprog_type:\t26\nrecursion_misses:\t7\n")
    (fdinfo / "4").write_text("pos:\t0\nmap_type:\t1\n")
    (fdinfo / "5").write_text("prog_type:\t5\nrecursion_misses:\t0\n")
    (fdinfo / "6").write_text("recursion_misses:\t12\n")
    bindir = tmp_path / "bin"
    bindir.mkdir()  # nothing on the PATH: any command but builtins would fail
    # and its CPU ticks (user + system: fields 14 and 15 of its stat, a command name with spaces and parentheses)
    (tmp_path / "proc" / "42" / "stat").write_text("42 (bpf (x) y) S 1 42 42 0 -1 4194560 9 0 0 0 120 35 0 0 20 0\n")
    res = lib(tmp_path, f'PATH="{bindir}"; recursion_misses 42; recursion_misses 43; cpu_ticks 42; cpu_ticks 43',
              env={"SYS_PROC": str(tmp_path / "proc")})
    assert res.returncode == 0 and res.stderr == "" and res.stdout.splitlines() == ["19", "0", "155"], res


def test_versions_are_asked_once_per_boot_in_the_guest_pool(tmp_path: Path) -> None:
    """record_versions: the tools' versions into guest.env; with ZTBP_VERSIONS_CACHE (the guest pool) the second
    command reads them from the boot's file without starting a program (nothing on the PATH then)."""
    cache = tmp_path / "versions.env"
    first = lib(tmp_path, "record_versions", env={"ZTBP_VERSIONS_CACHE": str(cache)})
    assert first.returncode == 0, first.stderr
    fields = guest_env(tmp_path)
    assert set(fields) >= {"suite", "debian", "kernel", "kernel_version", "bpftrace", "fio", "nvme_cli", "blkzone"}
    assert fields["kernel"] and cache.read_text().splitlines() == (tmp_path / "guest.env").read_text().splitlines()
    bindir = tmp_path / "bin"
    bindir.mkdir()
    again = lib(tmp_path, f'PATH="{bindir}"; record_versions', env={"ZTBP_VERSIONS_CACHE": str(cache)})
    assert again.returncode == 0 and again.stderr == "" and guest_env(tmp_path) == fields, again.stderr


def test_say_logs_each_stage_after_the_uptime_when_asked(tmp_path: Path) -> None:
    """In the guest pool (ZTBP_STAGE_LOG, vm/guest/pool.sh) each progress line is also kept after the uptime, to
    time a command's stages afterwards; without the variable nothing but the line itself."""
    log = tmp_path / "stages.log"
    res = lib(tmp_path, 'say "stage one"; say "progress traced=5"', env={"ZTBP_STAGE_LOG": str(log)})
    assert res.returncode == 0 and res.stdout.splitlines() == ["ZTBP: stage one", "ZTBP: progress traced=5"]
    lines = [line.split(" ", 1) for line in log.read_text().splitlines()]
    assert [m for _, m in lines] == ["stage one", "progress traced=5"]
    assert all(float(up) > 0 for up, _ in lines)
    res = lib(tmp_path, 'say "stage two"', env={"ZTBP_STAGE_LOG": ""})
    assert res.returncode == 0 and res.stdout == "ZTBP: stage two\n" and len(log.read_text().splitlines()) == 2


def test_a_guest_script_run_here_reports_its_lines_and_status(tmp_path: Path) -> None:
    """capture-host and loop --host run the guest script on this machine (acquire.channel.run_here): its
    environment with ZTBP_STOP_FILE, its lines, its exit status."""
    from ztbp.acquire.channel import run_here

    script = tmp_path / "guest.sh"
    script.write_text('echo "ZTBP: stage out $ZTBP_OUT"; echo "stop $ZTBP_STOP_FILE"; exit 3\n')
    lines: list[str] = []
    status, interrupted = run_here(script, {"ZTBP_OUT": "/o"}, tmp_path / "stop", lines.append)
    assert (status, interrupted) == (3, False)
    assert lines == ["ZTBP: stage out /o", f"stop {tmp_path / 'stop'}"]


def test_settings_take_the_hosts_variable_else_the_default(tmp_path: Path) -> None:
    """`settings NAME=DEFAULT`: $ZTBP_NAME when set and not empty, else the default (spaces, '=' and shell
    characters kept as text); NAME:VAR=DEFAULT reads $ZTBP_VAR."""
    script = ('settings KEYS=20000 READS=2000 FUNCTIONS="get=a::b write=c::d" STATUS_EXPR:STATUS="(int64)*(uint8 *)x" '
              'EMPTY=; printf "%s|" "$KEYS" "$READS" "$FUNCTIONS" "$STATUS_EXPR" "$EMPTY"')
    res = lib(tmp_path, script, {"ZTBP_KEYS": "5", "ZTBP_READS": "", "ZTBP_STATUS": "$(touch pwned) `id`"})
    assert res.returncode == 0, res.stderr
    assert res.stdout == "5|2000|get=a::b write=c::d|$(touch pwned) `id`||"
    assert not (tmp_path / "pwned").exists() and not Path("pwned").exists()


def test_zone_cap_sectors_reads_blkzones_first_zone(tmp_path: Path) -> None:
    """The zone capacity record_device records and host-path.sh's workload keeps within: blkzone's "cap 0x...",
    in 512-byte sectors (a real-drive-shaped zone: 64 MiB holding 48 MiB)."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "blkzone").write_text('#!/bin/sh\necho "  start: 0x000000000, len 0x020000, cap 0x018000, '
                                    'wptr 0x000000 reset:0 non-seq:0, zcond: 1(em) [type: 2(SEQ_WRITE_REQUIRED)]"\n')
    (bindir / "blkzone").chmod(0o755)
    r = lib(tmp_path, "zone_cap_sectors /dev/nvme0n1", env={"PATH": f"{bindir}:{os.environ['PATH']}"})
    assert r.stdout.strip() == str(48 * 1024 * 1024 // 512), r.stderr


def test_a_module_whose_device_the_driver_gave_up_on_is_loaded_again_at_once(tmp_path: Path) -> None:
    """module_load: when the kernel says the nvme driver gave up on the module's device ("Device not ready"), the
    module is unloaded and loaded again within a second, not after the whole wait for the device."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    calls = tmp_path / "calls"
    for name, body in (("insmod", f'echo "insmod $*" >> "{calls}"'), ("rmmod", f'echo "rmmod $*" >> "{calls}"'),
                       # the driver gives up on the first load only
                       ("dmesg", f'grep -q insmod "{calls}" 2> /dev/null && '
                                 'echo "nvme nvme0: Device not ready; aborting initialisation, CSTS=0x0"; true')):
        (bindir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bindir / name).chmod(0o755)
    res = lib(tmp_path, f'ZTBP_KO=/x/nvmev.ko; ZTBP_KO_PARAMS="cpus=1,2"; module_load "{tmp_path}/nvme0n1"',
              env={"PATH": f"{bindir}:{os.environ['PATH']}", "ZTBP_MODULE_WAIT_S": "3"})
    assert res.returncode == 1
    assert calls.read_text().splitlines() == ["insmod -- /x/nvmev.ko cpus=1,2", "rmmod -- nvmev",
                                              "insmod -- /x/nvmev.ko cpus=1,2"]
    said = [line for line in res.stdout.splitlines() if "gave up" in line or "error" in line]
    assert said == ["ZTBP: stage module the nvme driver gave up on the device before it was ready (1 s after insmod): "
                    "rmmod and insmod again",
                    f"ZTBP: error {tmp_path}/nvme0n1 did not appear within 3 s after loading the module"], res.stdout

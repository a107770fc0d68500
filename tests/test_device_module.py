"""`--module KO --module-params "k=v ..."` (capture-host, loop --host, watch): a device made by a kernel module whose
threads stall RCU-tasks grace periods (NVMeVirt) exists only between the probe's attach and its detach. On a fake
machine (modprobe / insmod / rmmod recorded, a sysfs and a device node that exist only while the module is loaded)
and a stand-in bpftrace: the order of operations, the refusals, a load that times out. No VM, no real module."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from ztbp.acquire import module as mod
from ztbp.acquire.module import DeviceModule, Machine, ModuleError
from ztbp.acquire.watch_synth import replay
from ztbp.analysis.watch import Decision, WatchParams, WatchState
from ztbp.cli import main
from ztbp.control import watch as cw
from ztbp.control import watch_run
from ztbp.control.watch import Session, WatchRequest
from ztbp.io.journal import read_journal

DEV = "/dev/nvme0n1"
A = (3, 17, 40, 77, 101)
META = {"zone_size_lba": 1024, "lba_bytes": 4096, "nr_zones": 128}


class FakeMachine:
    """modprobe, insmod and rmmod appended to the log file (which a stand-in bpftrace writes too); while the module
    is loaded, DEV is a block device (the file `present` exists) and sysfs holds its queue (a host-managed namespace
    of 128 zones of 4 MiB, 4 KiB blocks) and /sys/module/NAME. `appears`: per insmod, whether DEV appears."""

    def __init__(self, tmp: Path, appears: tuple[bool, ...] = (True, True, True), insmod_rc: int = 0,
                 insmod_err: str = "") -> None:
        self.tmp, self.appears, self.insmod_rc, self.insmod_err = tmp, list(appears), insmod_rc, insmod_err
        self.log = tmp / "log"
        self.log.touch()
        self.sysfs = tmp / "sys"
        (self.sysfs / "block").mkdir(parents=True, exist_ok=True)
        self.present = tmp / "present"
        self.now = 0.0
        self.machine = Machine(run=self.run, is_block=self.is_block, sysfs=self.sysfs, sleep=self.sleep,
                               clock=lambda: self.now)

    def say(self, line: str) -> None:
        with self.log.open("a") as f:
            f.write(line + "\n")

    def lines(self) -> list[str]:
        return self.log.read_text().splitlines()

    def run(self, argv: list[str]) -> tuple[int | None, str, str]:
        self.say(" ".join(argv))
        if argv[0] == "insmod":
            if self.insmod_rc:
                return self.insmod_rc, "", self.insmod_err
            (self.sysfs / "module" / "nvmev").mkdir(parents=True, exist_ok=True)
            if self.appears.pop(0):
                self._appear()
            return 0, "", self.insmod_err
        if argv[0] == "rmmod":
            if (self.sysfs / "module" / "nvmev").exists():
                (self.sysfs / "module" / "nvmev").rmdir()
            self.present.unlink(missing_ok=True)
            q = self.sysfs / "block" / "nvme0n1" / "queue"
            for f in q.glob("*"):
                f.unlink()
            if q.exists():
                q.rmdir()
                q.parent.rmdir()
        return 0, "", ""

    def _appear(self) -> None:
        q = self.sysfs / "block" / "nvme0n1" / "queue"
        q.mkdir(parents=True)
        for name, value in (("zoned", "host-managed"), ("logical_block_size", "4096"), ("chunk_sectors", "8192"),
                            ("nr_zones", "128")):
            (q / name).write_text(value + "\n")
        self.present.touch()

    def is_block(self, path: Path) -> bool:
        return path == Path(DEV) and self.present.exists()

    def sleep(self, s: float) -> None:
        self.now += s


@pytest.fixture
def ko(tmp_path: Path) -> Path:
    f = tmp_path / "nvmev.ko"
    f.write_bytes(b"\x7fELF")
    return f


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeMachine:
    m = FakeMachine(tmp_path)
    monkeypatch.setattr(mod, "MACHINE", m.machine)
    monkeypatch.setenv("ZTBP_SYSFS", str(m.sysfs))
    return m


PARAMS = "memmap_start=4G memmap_size=1025M cpus=1,2"


# ---- the module: validation, load, unload ------------------------------------------------------------------------
def test_a_module_and_its_parameters_are_checked(ko: Path, tmp_path: Path) -> None:
    m = DeviceModule(ko, f"  {PARAMS} ").validate()
    assert m.ko.is_absolute() and m.params == PARAMS and m.name == "nvmev"
    assert m.env() == {"ZTBP_KO": str(ko.resolve()), "ZTBP_KO_PARAMS": PARAMS}
    assert DeviceModule(ko).validate().env()["ZTBP_KO_PARAMS"] == ""
    with pytest.raises(ModuleError, match="no such file"):
        DeviceModule(tmp_path / "gone.ko").validate()
    (tmp_path / "nvmev.o").write_bytes(b"")
    with pytest.raises(ModuleError, match=r"NAME\.ko"):
        DeviceModule(tmp_path / "nvmev.o").validate()
    for bad in ("cpus=1,2 $(reboot)", "memmap_size", "a=b;c", "a=*", "x=`id`", "a=b|c", "=1", "a='1'", "a=é"):
        with pytest.raises(ModuleError, match="--module-params"):
            DeviceModule(ko, bad).validate()
    with pytest.raises(ModuleError, match="at most"):
        DeviceModule(ko, "a=1 " * 400).validate()


def test_load_waits_for_the_device_and_unload_removes_it(ko: Path, fake: FakeMachine) -> None:
    m = DeviceModule(ko, PARAMS).validate()
    with m.loaded(DEV) as appeared:
        assert appeared == 0 and fake.machine.is_block(Path(DEV))
    assert not fake.present.exists()
    assert fake.lines() == ["modprobe -- nvme", f"insmod -- {ko.resolve()} {PARAMS}", "rmmod -- nvmev"]


def test_a_module_named_like_an_option_reaches_every_command_after_a_double_dash(tmp_path: Path,
                                                                                fake: FakeMachine) -> None:
    """`--module ./-f.ko` once ran `rmmod -f` (force-unload every module it names); a `--` ends the options."""
    ko = tmp_path / "-f.ko"
    ko.write_bytes(b"\x7fELF")
    m = DeviceModule(ko).validate()
    with m.loaded(DEV):
        pass
    assert fake.lines() == ["modprobe -- nvme", f"insmod -- {ko.resolve()}", "rmmod -- -f"]
    assert all(line.split()[1] == "--" for line in fake.lines())


def test_a_device_that_never_appears_is_one_error_and_the_module_is_unloaded(ko: Path, tmp_path: Path) -> None:
    fake = FakeMachine(tmp_path, appears=(False,), insmod_err="nvmev: loading out-of-tree module taints kernel.")
    with pytest.raises(ModuleError) as e:
        DeviceModule(ko, PARAMS).validate().load(DEV, 2.0, fake.machine)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"{DEV} did not appear within 2 s after insmod nvmev.ko {PARAMS}")
    assert "insmod said: nvmev: loading out-of-tree module taints kernel." in msg
    assert "the module was unloaded again" in msg
    assert fake.lines()[-1] == "rmmod -- nvmev" and fake.now >= 2.0


def test_insmod_failing_and_a_module_loaded_already_are_refused(ko: Path, tmp_path: Path) -> None:
    fake = FakeMachine(tmp_path, insmod_rc=1, insmod_err="insmod: ERROR: could not insert module nvmev.ko: "
                                                         "Cannot allocate memory\n")
    with pytest.raises(ModuleError) as e:
        DeviceModule(ko, PARAMS).validate().load(DEV, m=fake.machine)
    assert str(e.value) == (f"insmod nvmev.ko {PARAMS} failed (exit 1): insmod: ERROR: could not insert module "
                            f"nvmev.ko: Cannot allocate memory; {DEV} was not created")
    (fake.sysfs / "module" / "nvmev").mkdir(parents=True)
    with pytest.raises(ModuleError, match="loaded already: unload it first"):
        DeviceModule(ko).validate().load(DEV, m=fake.machine)


def test_the_module_is_unloaded_when_the_reading_fails(ko: Path, fake: FakeMachine) -> None:
    from ztbp.acquire.capture import CaptureError
    from ztbp.acquire.drive import check_zoned

    with pytest.raises(CaptureError), DeviceModule(ko).validate().loaded(DEV):
        check_zoned("/dev/nvme1n1", fake.sysfs)  # not the module's device
    assert fake.lines()[-1] == "rmmod -- nvmev" and not fake.present.exists()


def test_bad_module_options_are_one_line_before_anything_runs(ko: Path, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("ZTBP_SYSFS", str(tmp_path))
    cases = [(["watch", DEV, "--module", str(ko), "--module-params", "a=$(id)"], "--module-params: 'a=$(id)'"),
             (["watch", DEV, "--module", str(tmp_path / "no.ko")], f"--module {tmp_path / 'no.ko'}: no such file"),
             (["capture-host", DEV, "uniform", "--module", str(ko), "--module-params", "cpus"], "'cpus' is not"),
             (["loop", "--host", DEV, "--module-params", "a=1"], "--module-params needs --module KO"),
             (["loop", "--module", str(ko)], "--module is for --host DEV")]
    for argv, said in cases:
        rc = main([*argv, *(["--journal", str(tmp_path / "j")] if argv[0] == "watch" else [])])
        out = capsys.readouterr()
        lines = out.err.strip().splitlines()
        assert rc == 2 and out.out == "" and len(lines) == 1 and said in lines[0], (argv, out.err)
        assert lines[0].startswith(f"ztbp {argv[0]}: error: ")
    assert not (tmp_path / "j").exists()


# ---- capture-host and loop --host ------------------------------------------------------------------------------
def fake_blkzone(monkeypatch: pytest.MonkeyPatch, fake: FakeMachine) -> None:
    """blkzone's report of the zone capacity logged (it needs the device); the zones hold their size."""

    def zone_cap(dev: str, error: Any) -> int | None:
        assert fake.machine.is_block(Path(dev)), "blkzone report of a device that is not there"
        fake.say(f"blkzone report {dev}")
        return None

    monkeypatch.setattr(mod, "host_zone_cap", zone_cap)


def host_tools(monkeypatch: pytest.MonkeyPatch, fake: FakeMachine, *modules: Any) -> None:
    """bpftrace, fio and blkzone found, root, and blkzone's report logged."""
    for m in modules:
        monkeypatch.setattr(m.shutil, "which", lambda t: f"/usr/bin/{t}")
        monkeypatch.setattr(m.os, "geteuid", lambda: 0)
    fake_blkzone(monkeypatch, fake)


def test_capture_host_reads_the_geometry_with_the_module_then_the_script_loads_it(
        ko: Path, fake: FakeMachine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from ztbp.acquire import drive
    from ztbp.acquire import host as capture_host

    host_tools(monkeypatch, fake, drive)
    seen: dict[str, str] = {}

    def run_here(script: Path, env: dict[str, str], stop: Path, on_line: Any) -> tuple[int, bool]:
        assert not fake.present.exists(), "the device must be gone before the script's probe attaches"
        fake.say(f"script {script.name}")
        seen.update(env)
        return 0, False

    monkeypatch.setattr(capture_host, "run_here", run_here)
    out = tmp_path / "run"
    rc = main(["capture-host", DEV, "uniform", "--no-prefill", "--reads", "1000", "--region", "64M", "--out",
               str(out), "--module", str(ko), "--module-params", PARAMS, "--json"])
    capsys.readouterr()
    assert rc == 0
    assert fake.lines() == ["modprobe -- nvme", f"insmod -- {ko.resolve()} {PARAMS}", f"blkzone report {DEV}",
                            "rmmod -- nvmev", "script capture.sh"]
    assert seen["ZTBP_KO"] == str(ko.resolve()) and seen["ZTBP_KO_PARAMS"] == PARAMS and seen["ZTBP_DEV"] == DEV
    meta = json.loads((out / "meta.json").read_text())
    assert meta["device_module"] == {"ko": str(ko.resolve()), "params": PARAMS}
    assert (meta["nr_zones"], meta["zone_size_lba"], meta["lba_bytes"]) == (128, 1024, 4096)


def test_capture_host_without_a_module_still_needs_the_device(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("ZTBP_SYSFS", str(tmp_path))
    assert main(["capture-host", DEV, "uniform", "--no-prefill"]) == 2
    assert "no such block device" in capsys.readouterr().err


def test_loop_host_reads_the_geometry_with_the_module_and_hands_it_to_loop_sh(
        ko: Path, fake: FakeMachine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ztbp.acquire import drive
    from ztbp.acquire.workload import WorkloadOptions
    from ztbp.control import loop
    from ztbp.writeback import ctl

    host_tools(monkeypatch, fake, drive)
    m = DeviceModule(ko, PARAMS).validate()
    assert mod.device_geometry(DEV, fake.sysfs, m) == (4096, 4 << 20, 128, None)
    assert fake.lines() == ["modprobe -- nvme", f"insmod -- {ko.resolve()} {PARAMS}", f"blkzone report {DEV}",
                            "rmmod -- nvmev"]
    seen: dict[str, str] = {}

    def run_here(script: Path, env: dict[str, str], stop: Path, on_line: Any, after: Any) -> tuple[int, bool]:
        assert not fake.present.exists()
        fake.say(f"script {script.name}")
        seen.update(env)
        return 0, True  # as if stopped at once: no round

    monkeypatch.setattr(loop, "run_here", run_here)
    monkeypatch.setattr(ctl, "ensure_ctl", lambda: Path("/bin/true"))
    req = loop.LoopRequest(workload=WorkloadOptions(name="uniform", reads=1000, region_bytes=64 << 20),
                           backend="host", host_device=DEV, out=str(tmp_path / "loop"), module=m)
    doc = loop.run_loop(req)
    assert doc["interrupted"] is True
    assert fake.lines()[4:] == ["modprobe -- nvme", f"insmod -- {ko.resolve()} {PARAMS}", f"blkzone report {DEV}",
                                "rmmod -- nvmev", "script loop.sh"]
    assert seen["ZTBP_KO"] == str(ko.resolve()) and seen["ZTBP_KO_PARAMS"] == PARAMS
    with pytest.raises(loop.LoopError, match="--module is for --host"):
        loop.LoopRequest(workload=WorkloadOptions(name="uniform"), module=m).validate()


def test_the_guest_scripts_load_the_module_after_the_probe_and_unload_it_before_it_stops() -> None:
    """capture.sh and loop.sh, which capture-host and loop --host run here with ZTBP_KO: module_prepare, the probe,
    module_load, and only then the device's checks; module_unload before the probe stops, on every way out."""
    from ztbp import paths

    lib = (paths.VM / "guest" / "probe-lib.sh").read_text()
    bring_up = lib[lib.index("\ndevice_bring_up() {"):]
    bring_up = bring_up[:bring_up.index("\n}\n")]
    order = [bring_up.index(s) for s in ("module_prepare", '"$start"', 'module_load "$dev"', 'record_device "$dev"')]
    assert order == sorted(order)
    for name, stop in (("capture.sh", "stop_probe"), ("loop.sh", "probe_stop nvme")):
        text = (paths.VM / "guest" / name).read_text()
        body = text[text.index("\nmain() {"):]
        assert 'device_bring_up "$DEV" start_probe' in body, name
        assert "module_prepare" not in body and "module_load" not in body, name  # one bring-up, in probe-lib.sh
        if name == "capture.sh":
            assert body.index("module_unload") < body.index("stop_probe\n")
        exit_fn = "on_exit" if name == "capture.sh" else "finish"
        handler = text[text.index(f"\n{exit_fn}() {{"):]
        handler = handler[:handler.index("\n}\n")]
        assert handler.index("module_unload") < handler.index(stop), name


# ---- watch ------------------------------------------------------------------------------------------------------
class LoggedDevice:
    """ztbp-ctl's answers, each command in the log."""

    def __init__(self, fake: FakeMachine) -> None:
        self.fake = fake

    def set(self, zones: tuple[int, ...]) -> dict[str, Any]:
        assert self.fake.present.exists()
        self.fake.say("ctl set")
        return {"ok": True, "exit_code": 0}

    def stop(self) -> dict[str, Any]:
        assert self.fake.present.exists(), "STOP sent to a device whose module is gone"
        self.fake.say("ctl stop")
        return {"ok": True, "exit_code": 0}

    def status(self) -> dict[str, Any]:
        return {"ok": False}


def fake_bpftrace(tmp: Path, fake: FakeMachine, body: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A stand-in bpftrace first on PATH: logs its start, its SIGINT (then exits: it detached), runs `body`."""
    pid = tmp / "probe.pid"
    (tmp / "bpftrace").write_text(
        f"#!/bin/sh\necho $$ > {pid}\necho 'probe start' >> {fake.log}\n"
        f"trap 'echo \"probe stop\" >> {fake.log}; exit 0' INT\n{body}\n")
    (tmp / "bpftrace").chmod(0o755)
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setenv("PATH", f"{tmp}:{os.environ['PATH']}")
    return pid


HEADER = "echo '# ztbp nvme v1'; echo 'ts_ns,lat_ns,ctrl,qid,cid,nsid,opcode,op,slba,nlb,zone_action,status,tid'"


def rows(n: int, stride: int) -> str:
    return (f"i=0; while [ $i -lt {n} ]; do echo \"$i,100,0,1,$i,1,2,read,$((i * {stride})),1,,0,1\"; "
            "i=$((i + 1)); done")


def test_watch_loads_the_module_once_attached_and_unloads_it_before_the_probe_stops(
        ko: Path, fake: FakeMachine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """geometry (load, read, unload), the probe, its header, the load; on SIGTERM: STOP (a set in force and
    --on-exit stop), rmmod, and only then bpftrace's SIGINT; the rows read to the end."""
    pid = fake_bpftrace(tmp_path, fake, f"{HEADER}\nwhile [ ! -e {fake.present} ]; do sleep 0.05; done\n"
                                        f"{rows(2500, 53)}\nwhile ! grep -q 'ctl set' {fake.log}; do sleep 0.05; done\n"
                                        "kill -TERM $PPID\nwhile :; do sleep 0.05; done",
                        monkeypatch)
    monkeypatch.setattr(watch_run, "CtlDevice", lambda name: LoggedDevice(fake))
    fake_blkzone(monkeypatch, fake)

    def decide(state: WatchState, s: Any, params: WatchParams, now: float) -> tuple[Decision, WatchState]:
        if state.in_force:  # the first window's decision puts A in force; hold after
            return Decision("hold", "test"), state
        return Decision("apply", "test", A), WatchState(in_force=A, applies=(now,))

    monkeypatch.setattr(cw, "decide", decide)
    rc = main(["watch", DEV, "--window-commands", "1000", "--journal", str(tmp_path / "j"), "--on-exit", "stop",
               "--module", str(ko), "--module-params", PARAMS])
    out = capsys.readouterr()
    assert rc == 130, out.err
    insmod = f"insmod -- {ko.resolve()} {PARAMS}"
    assert fake.lines() == ["modprobe -- nvme", insmod, f"blkzone report {DEV}", "rmmod -- nvmev",  # the geometry
                            "probe start", "modprobe -- nvme", insmod,  # attached, then loaded
                            "ctl set",                               # the decision after window 0
                            "ctl stop", "rmmod -- nvmev", "probe stop"]  # the end, in this order
    assert "device stopped; module nvmev unloaded" in out.out
    recs = read_journal(tmp_path / "j")
    assert recs[0]["meta"]["device_module"] == {"ko": str(ko.resolve()), "params": PARAMS}
    assert [r["kind"] for r in recs][:3] == ["start", "attached", "module"]  # loaded once the probe attached
    loaded = [r for r in recs if r["kind"] == "module"]
    assert len(loaded) == 1 and loaded[0]["action"] == "loaded" and loaded[0]["device"] == DEV
    last = recs[-1]
    assert last["kind"] == "stop" and last["why"] == "interrupted (SIGTERM)"
    assert last["device"] == "stopped" and last["module"] == "nvmev unloaded"
    assert last["commands"] == 2_500  # every row read, those after the stop too
    with pytest.raises(ProcessLookupError):  # bpftrace is gone
        os.kill(int(pid.read_text()), 0)


def test_watch_a_module_that_does_not_load_ends_in_one_line_with_the_probe_detached(
        ko: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    fake = FakeMachine(tmp_path, appears=(True, False))  # the geometry's load works, the session's never appears
    monkeypatch.setattr(mod, "MACHINE", fake.machine)
    monkeypatch.setenv("ZTBP_SYSFS", str(fake.sysfs))
    pid = fake_bpftrace(tmp_path, fake, f"{HEADER}\nwhile :; do sleep 0.05; done", monkeypatch)
    fake_blkzone(monkeypatch, fake)
    rc = main(["watch", DEV, "--journal", str(tmp_path / "j"), "--module", str(ko)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1
    assert err[0].startswith(f"ztbp watch: error: {DEV} did not appear within 60 s after insmod nvmev.ko; "
                             "the module was unloaded again")
    insmod = f"insmod -- {ko.resolve()}"
    assert fake.lines() == ["modprobe -- nvme", insmod, f"blkzone report {DEV}", "rmmod -- nvmev",
                            "probe start", "modprobe -- nvme", insmod, "rmmod -- nvmev", "probe stop"]
    recs = read_journal(tmp_path / "j")
    assert [r["action"] for r in recs if r["kind"] == "module"] == ["failed"]
    assert recs[-1]["kind"] == "stop" and recs[-1]["why"].startswith(f"error: {DEV} did not appear")
    assert recs[-1]["module"] == "not loaded"
    with pytest.raises(ProcessLookupError):
        os.kill(int(pid.read_text()), 0)


def test_watch_with_a_module_refuses_a_missing_bpftrace_before_loading_it(
        ko: Path, fake: FakeMachine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert main(["watch", DEV, "--journal", str(tmp_path / "j"), "--module", str(ko)]) == 2
    assert "bpftrace not found" in capsys.readouterr().err
    assert fake.lines() == []


def test_a_released_session_journals_windows_but_decides_nothing(tmp_path: Path) -> None:
    """After the session let go of the device (STOP, then the module's unload), rows still draining from the probe
    close windows that are journaled, never acted on."""
    calls: list[str] = []

    class Dev:
        def set(self, zones: tuple[int, ...]) -> dict[str, Any]:
            calls.append("set")
            return {"ok": True}

        def stop(self) -> dict[str, Any]:
            calls.append("stop")
            return {"ok": True}

        def status(self) -> dict[str, Any]:
            return {"ok": False}

    s = Session(WatchRequest(META, WatchParams(k=1, cache_mib=8), tmp_path, window_commands=10_000, on_exit="stop"),
                Dev(), lambda: 1.7e9)
    s.on_release = lambda: (calls.append("unload"), {"module": "nvmev unloaded"})[1]
    s.state = WatchState(in_force=A)
    assert s.release() == {"device": "stopped", "module": "nvmev unloaded"}
    assert s.release() == {"device": "stopped", "module": "nvmev unloaded"}  # once
    out = s.run(replay([("hot", 30_000, A)], META, seed=3))
    assert calls == ["stop", "unload"] and out["windows"] == 3 and out["module"] == "nvmev unloaded"
    kinds = [r["kind"] for r in read_journal(tmp_path)]
    assert kinds.count("window") == 3 and "decision" not in kinds and kinds[-1] == "stop"

"""`--fio-file`: a user's fio job may set only read/write options (an allow-list); anything that runs a command,
reads or writes another file or loads code is refused by name, in one line. `filename=` is pointed at the
traced device."""

from __future__ import annotations

from pathlib import Path

import pytest

from ztbp.acquire.userjob import FIO_ENGINES, FIO_OPTIONS, check_fio_options, user_job
from ztbp.cli import main
from ztbp.errors import ZtbpError

DEV = "/dev/nvme0n1"

REALISTIC = [
    # the paper's read job, by hand
    "[global]\nioengine=io_uring\ndirect=1\nbs=4k\niodepth=32\nnumjobs=4\ngroup_reporting\nthread\n"
    "randrepeat=0\nnorandommap\nrandom_generator=tausworthe64\nrandseed=7\n\n"
    "[hot]\nrw=randread\nsize=256M\noffset=0\nrandom_distribution=zipf:1.2\nnumber_ios=100000\n",
    # a zoned write + read mix, time based, rate limited, with stonewall
    "; zoned mix\n[global]\nfilename=/dev/sdq\nzonemode=zbd\nzonesize=32M\nzonecapacity=30M\nmax_open_zones=8\n"
    "ioengine=libaio\ndirect=1\nruntime=30\ntime_based=1\nramp_time=2\n\n"
    "[fill]\nrw=write\nbs=128k\nzonerange=32M\noffset_increment=64M\nstonewall\n\n"
    "[mix]\nnew_group\nwait_for=fill\nstartdelay=1\nrw=randrw\nrwmixread=80\npercentage_random=90\nbsrange=4k-64k\n"
    "rate_iops=5000\nio_size=1G\n",
    # psync with bssplit, a name and a description, engine options of io_uring
    "[j]\nname=custom\ndescription=\"split sizes\"\nioengine=psync\nbssplit=4k/50:64k/50\nrw=read\n",
    "[j]\nioengine=io_uring\nhipri\nfixedbufs\nregisterfiles\nrw=randread\nRW = randread\n",
]


@pytest.mark.parametrize("job", REALISTIC)
def test_realistic_jobs_are_accepted_and_point_at_the_device(job: str) -> None:
    out = user_job(job, DEV)
    assert f"filename={DEV}" in out
    assert "/dev/sdq" not in out


REFUSED = {
    "exec_prerun": "exec_prerun=touch /tmp/pwned",
    "exec_postrun": "exec_postrun=rm -rf /",
    "include": "include other.fio",
    "write_iolog": "write_iolog=/etc/cron.d/x",
    "read_iolog": "read_iolog=/etc/shadow",
    "replay_redirect": "replay_redirect=/dev/sda",
    "filename_format": "filename_format=/tmp/$jobname.$filenum",
    "directory": "directory=/mnt",
    "opendir": "opendir=/etc",
    "write_bw_log": "write_bw_log=/tmp/bw",
    "write_lat_log": "write_lat_log=/tmp/lat",
    "verify": "verify=crc32c",
    "verify_state_save": "verify_state_save=1",
    "ioscheduler": "ioscheduler=none",
    "mem": "mem=mmaphuge:/hugetlbfs/file",
    "lockfile": "lockfile=exclusive",
    "unlink": "unlink=1",
    "allow_mounted_write": "allow_mounted_write=1",
    "cgroup": "cgroup=evil",
    "daemonize": "daemonize=1",
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_each_dangerous_option_is_refused_by_name(name: str) -> None:
    job = f"[global]\nioengine=psync\n[a]\nrw=randread\n{REFUSED[name]}\n"
    with pytest.raises(ZtbpError) as exc:
        user_job(job, DEV)
    msg = str(exc.value)
    assert "\n" not in msg and f"'{name}'" in msg and "line 5" in msg and "remove it" in msg


@pytest.mark.parametrize("engine", ["external:/tmp/evil.so", "exec", "filecreate", "io_uring_cmd", "sg", "spdk",
                                    "${ENGINE}", "libaio2"])
def test_engines_outside_the_safe_ones_are_refused(engine: str) -> None:
    with pytest.raises(ZtbpError, match=r"ioengine=.* is not allowed; use one of"):
        user_job(f"[a]\nrw=read\nioengine={engine}\n", DEV)


@pytest.mark.parametrize("engine", sorted(FIO_ENGINES))
def test_safe_engines_are_accepted(engine: str) -> None:
    check_fio_options(f"[a]\nioengine={engine}\nrw=read\n")


def test_comments_and_sections_are_not_options() -> None:
    check_fio_options("; exec_prerun=x\n# include y\n[exec_prerun]\nrw=read\n")


def test_the_allow_list_holds_no_option_that_reaches_outside_the_job() -> None:
    risky = {"exec_prerun", "exec_postrun", "include", "directory", "opendir", "filename_format", "write_iolog",
             "read_iolog", "replay_redirect", "ioscheduler", "mem", "iomem", "lockfile", "unlink", "verify",
             "verify_state_save", "verify_state_load", "write_bw_log", "write_lat_log", "write_iops_log",
             "write_hist_log", "cgroup", "uid", "gid", "daemonize", "allow_file_create", "nrfiles"}
    assert not risky & FIO_OPTIONS


def test_cli_loop_refuses_the_job_before_anything_starts(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    import ztbp.control.loop as control

    def boom(*_: object) -> None:
        raise AssertionError("the loop started")

    monkeypatch.setattr(control, "run_loop", boom)
    job = tmp_path / "job.fio"
    job.write_text("[a]\nrw=randread\nexec_prerun=touch /tmp/pwned\n")
    rc = main(["loop", "paper80", "--fio-file", str(job), "--out", str(tmp_path / "loop")])
    err = capsys.readouterr().err
    assert rc != 0 and len(err.strip().splitlines()) == 1 and "'exec_prerun' is not allowed" in err, err
    assert not (tmp_path / "loop").exists()


# ---- ztbp capture --fio-file: the same checks as the loop's, one line and a non-zero exit each --------------------
BAD_JOBS = {
    "a refused option": ("[a]\nrw=randread\nexec_prerun=touch /tmp/pwned\n", "'exec_prerun' is not allowed"),
    "an engine plug-in": ("[a]\nrw=randread\nioengine=external:/tmp/evil.so\n", "ioengine=external:/tmp/evil.so"),
    "no section": ("rw=randread\nbs=4k\n", "no [section] in the job file"),
    "another file": ("[a]\nrw=randread\nread_iolog=/etc/shadow\n", "'read_iolog' is not allowed"),
}


def _no_boot(monkeypatch: pytest.MonkeyPatch) -> None:
    import ztbp.acquire.capture as capture

    def boom(*_: object, **__: object) -> None:
        raise AssertionError("the capture started")

    monkeypatch.setattr(capture, "vm_device", boom)
    monkeypatch.setattr(capture, "start_run", boom)


@pytest.mark.parametrize("case", sorted(BAD_JOBS))
def test_cli_capture_refuses_a_bad_job_in_one_line(case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    _no_boot(monkeypatch)
    text, says = BAD_JOBS[case]
    job = tmp_path / "job.fio"
    job.write_text(text)
    rc = main(["capture", "paper80", "--fio-file", str(job), "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1 and says in err and "Traceback" not in err, err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("where", ["missing", "folder", "unreadable"])
def test_cli_capture_refuses_a_job_file_it_cannot_read(where: str, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    _no_boot(monkeypatch)
    job = tmp_path / "job.fio"
    if where == "folder":
        job.mkdir()
    elif where == "unreadable":
        job.write_text("[a]\nrw=read\n")
        monkeypatch.setattr(Path, "read_text", lambda *_a, **_k: (_ for _ in ()).throw(PermissionError(13, "denied")))
    rc = main(["capture", "--fio-file", str(job)])
    err = capsys.readouterr().err
    says = {"missing": "no such file", "folder": "is a folder", "unreadable": "cannot read it"}[where]
    assert rc == 2 and len(err.strip().splitlines()) == 1 and says in err and "Traceback" not in err, err


def test_capture_runs_the_users_job_on_the_traced_namespace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A good job reaches the guest with its filename= pointed at the namespace, after the preset's reset and
    prefill; meta.json says the run was driven by the file, not by the preset (no hot zones claimed)."""
    import json

    import ztbp.acquire.capture as capture
    from ztbp.acquire.workload import WorkloadOptions

    seen: dict[str, object] = {}

    def fake_run(run: object, meta: dict, cmd: capture.GuestCommand, progress: object) -> capture.CaptureOutcome:
        seen["jobs"] = {f.name: f.read_text() for f in cmd.files}
        seen["env"] = cmd.env
        seen["meta"] = json.loads(json.dumps(meta))
        return capture.CaptureOutcome({}, 0)

    monkeypatch.setattr(capture, "run_vm_capture", fake_run)
    monkeypatch.setattr(capture, "ensure_image", lambda **_: None)
    job = tmp_path / "mine.fio"
    job.write_text("[global]\nfilename=/dev/sda\nioengine=psync\n[r]\nrw=randread\nbs=4k\nsize=64M\nnumber_ios=3000\n")
    req = capture.VmCapture(workload=WorkloadOptions(name="paper80", reads=3000), out=str(tmp_path / "run"),
                            fio_file=job)
    assert capture.run_capture(req).exit_code == 0
    jobs = seen["jobs"]
    assert isinstance(jobs, dict) and set(jobs) == {"paper80.fio", "prefill.fio"}
    assert "filename=/dev/nvme0n1" in jobs["paper80.fio"] and "/dev/sda" not in jobs["paper80.fio"]
    assert "number_ios=3000" in jobs["paper80.fio"] and "zoned_abs" not in jobs["paper80.fio"]
    wl = seen["meta"]["workload"]  # type: ignore[index]
    assert wl["name"] == wl["kind"] == "fio-file" and wl["preset"] == "paper80" and "hot_zones" not in wl
    assert wl["file"] == str(job) and wl["prefill_zones"] == [0, 32]
    assert (tmp_path / "run").name == "run"

"""A user's fio job file (`--fio-file`): checked against an allow-list of fio options before anything boots, and
pointed at the traced namespace; a preset only chooses the zones reset and prefilled before it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ..errors import ZtbpError
from .workload import Workload

_FILENAME = re.compile(r"^(\s*filename\s*=).*$", re.M)

#: The fio options a user's job may set (`man fio`): what a read/write job on one device needs — the I/O pattern,
#: sizes, depth, the zoned mode, timing, rate, randomness, CPU placement and what is measured. Everything else is
#: refused: options that run commands (exec_prerun), read or write other files (include, directory, opendir,
#: filename_format, write_iolog, read_iolog, replay_*, the *_log options, verify state, mem=mmaphuge:FILE,
#: lockfile), load code (ioengine=external:), change the system (ioscheduler, cgroup, uid) or verify data.
_FIO_OPTION_NAMES = """
name description stonewall wait_for_previous new_group wait_for group_reporting numjobs thread startdelay
runtime timeout time_based ramp_time loops exitall exitall_on_error exit_what
rw readwrite rw_sequencer direct buffered atomic fsync fdatasync end_fsync fsync_on_close write_barrier
sync overwrite pre_read invalidate fadvise_hint
bs blocksize bsrange blocksize_range bssplit ba blockalign bs_unaligned blocksize_unaligned bs_is_seq_rand
zero_buffers refill_buffers scramble_buffers buffer_compress_percentage buffer_compress_chunk
dedupe_percentage iomem_align mem_align
size io_size io_limit filesize fill_device fill_fs offset offset_align offset_increment number_ios
iodepth iodepth_batch iodepth_batch_submit iodepth_batch_complete iodepth_batch_complete_min
iodepth_batch_complete_max iodepth_low io_submit_mode serialize_overlap
ioengine hipri fixedbufs registerfiles sqthread_poll sqthread_poll_cpu nonvectored uncached nowait
force_async userspace_reap cmdprio_percentage cmdprio_class cmdprio cmdprio_bssplit
norandommap softrandommap randrepeat allrandrepeat random_distribution percentage_random random_generator
randseed rwmixread rwmixwrite
zonemode zonesize zonerange zonecapacity zoneskip max_open_zones job_max_open_zones ignore_zone_limits
zone_reset_threshold zone_reset_frequency read_beyond_wp
rate rate_iops rate_min rate_iops_min rate_process rate_cycle rate_ignore_thinktime thinktime
thinktime_blocks thinktime_spin thinktime_blocks_type thinktime_iotime latency_target latency_window
latency_percentile latency_run max_latency
nice prio prioclass cpus_allowed cpus_allowed_policy cpumask numa_cpu_nodes numa_mem_policy
clat_percentiles lat_percentiles slat_percentiles percentile_list disable_lat disable_clat disable_slat
disable_bw_measurement gtod_reduce clocksource significant_figures kb_base unit_base
continue_on_error ignore_error error_dump
"""
FIO_OPTIONS = frozenset(_FIO_OPTION_NAMES.split())
#: I/O engines a user's job may name: the kernel's synchronous and asynchronous interfaces on the block device.
FIO_ENGINES = frozenset({"sync", "psync", "vsync", "pvsync", "pvsync2", "libaio", "io_uring", "posixaio", "null"})


def check_fio_options(text: str) -> None:
    """Refuse a fio job that sets an option outside FIO_OPTIONS (or an engine outside FIO_ENGINES), by line and
    name. `filename=` is allowed: user_job points it at the traced device."""
    for n, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line[0] in ";#" or (line.startswith("[") and line.endswith("]")):
            continue
        key, eq, value = line.partition("=")
        key = key.strip().lower()
        if key == "filename" and eq:
            continue
        if key not in FIO_OPTIONS:
            raise ZtbpError(f"--fio-file: line {n}: fio option {key.split()[0] if key else line!r} is not allowed; "
                            "a job may set only read/write options (rw, bs, iodepth, ioengine, size, offset, "
                            "zonemode, runtime, ...), never commands, other files or engine plug-ins: remove it")
        if key == "ioengine" and value.strip().lower() not in FIO_ENGINES:
            raise ZtbpError(f"--fio-file: line {n}: ioengine={value.strip()} is not allowed; use one of "
                            f"{', '.join(sorted(FIO_ENGINES))}")


def user_job(text: str, device: str) -> str:
    """A user's fio job file with every `filename=` pointing at the traced namespace (one added to [global], or
    a [global] section added, when it names none). Refuses a job without a section, or one that sets an option
    outside the allow-list (check_fio_options)."""
    if not re.search(r"^\s*\[[^\]]+\]", text, re.M):
        raise ZtbpError("--fio-file: no [section] in the job file; give a fio job file (see `man fio`)")
    check_fio_options(text)
    if _FILENAME.search(text):
        out = _FILENAME.sub(lambda m: f"{m.group(1)}{device}", text)
    elif re.search(r"^\s*\[global\]\s*$", text, re.M):
        out = re.sub(r"^(\s*\[global\]\s*)$", rf"\1\nfilename={device}", text, count=1, flags=re.M)
    else:
        out = f"[global]\nfilename={device}\n\n{text}"
    return out if out.startswith("; ") else f"; user fio job on {device}\n{out}"


def read_user_job(path: Path) -> str:
    """The text of a user's fio job file, checked before anything boots or touches a device: the file is there and
    readable, has a section and sets only allowed options (user_job). One ZtbpError line otherwise."""
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        raise ZtbpError(f"--fio-file {path}: no such file") from None
    except IsADirectoryError:
        raise ZtbpError(f"--fio-file {path} is a folder; give a fio job file") from None
    except OSError as e:
        raise ZtbpError(f"--fio-file {path}: cannot read it ({e.strerror or e})") from None
    user_job(text, "/dev/null")
    return text


def user_job_meta(wl: Workload, path: Path) -> dict[str, Any]:
    """The `workload` object (meta.json, loop.json) of a run driven by a user's job file: what the job does is in the
    file and in fio's output, not in a preset; the preset `wl` only chose the zones reset and prefilled first."""
    return {"name": "fio-file", "kind": "fio-file", "file": str(path), "preset": wl.name,
            "prefill_zones": [wl.prefill_zones.start, wl.prefill_zones.stop],
            "reset_zones": [wl.reset_zones.start, wl.reset_zones.stop]}

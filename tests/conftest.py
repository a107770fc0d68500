"""Shared test helpers: build small runs in the contract of probes/FORMAT.md."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from ztbp.contract import NVME_COLUMNS, NVME_VERSION_LINE, RUN_FORMAT
from ztbp.files import write_atomic

OPCODES = {"read": 2, "write": 1, "zone_append": 125, "zone_mgmt_send": 121, "zone_mgmt_recv": 122, "flush": 0}


def write_meta(run: Path, **overrides: Any) -> None:
    meta: dict[str, Any] = {"format": RUN_FORMAT, "device": "nvme0n1", "lba_bytes": 4096, "zone_size_lba": 8192,
                            "zone_cap_lba": 8192, "nr_zones": 64, "synthetic": True, "workload": {"name": "test"},
                            "lost_events": {"nvme": 0}}
    meta.update(overrides)
    run.mkdir(parents=True, exist_ok=True)
    (run / "meta.json").write_text(json.dumps(meta))


def row(op: str, slba: int, nlb: int, ts: int, lat: int = 1000, nsid: int = 1, action: str = "") -> str:
    """One nvme.csv line."""
    return f"{ts},{lat},0,1,{ts % 65536},{nsid},{OPCODES[op]},{op},{slba},{nlb},{action},0"


def make_run(root: Path, requests: Iterable[Sequence[Any]] = (), lines: Iterable[str] | None = None,
             **meta: Any) -> Path:
    """A run from (op, slba, nlb[, lat, nsid, action]) tuples in submission order, or from raw CSV lines."""
    write_meta(root, **meta)
    (root / "raw").mkdir(exist_ok=True)
    body = list(lines) if lines is not None else [
        row(op, slba, nlb, 1000 + 10 * i, *rest) for i, (op, slba, nlb, *rest) in enumerate(requests)]
    text = "\n".join([NVME_VERSION_LINE, ",".join(NVME_COLUMNS), *body]) + "\n"
    (root / "raw" / "nvme.csv").write_text(text)
    return root


@pytest.fixture
def run_factory(tmp_path: Path):
    counter = iter(range(10_000))

    def factory(requests: Iterable[Sequence[Any]] = (), lines: Iterable[str] | None = None, **meta: Any) -> Path:
        return make_run(tmp_path / f"run{next(counter)}", requests, lines, **meta)

    return factory


# --- the guest images: built in the background while the other tests run -------------------------------------
#: the background build of every suite's guest image (None: nothing to build, or not started)
_IMAGES: subprocess.Popen[bytes] | None = None
#: the folder of the shared guests (vm/vmtest.sh's guest pool), once a VM test asked for it
_POOL: Path | None = None
#: The VM tests run as two chains, each in order by one pytest-xdist worker with its own shared guests (`just test`
#: runs three workers: the third takes the unit tests and notebooks): a guest under TCG keeps about one host core
#: busy, so one chain alone left the second core idle once the unit tests were done. "vm-b": bookworm's default
#: device with a conventional namespace beside it (loop_run.CONV_NS: the application capture, zone cycling, the
#: fio-file capture, ztbp-ctl, Ctrl-C), then the layer captures and one-liners on it and on trixie's; "vm-a":
#: bookworm's default device (captures, QEMU's profile, QEMU's loops), the host path's real-drive-shaped device,
#: then NVMeVirt. Within a chain the files run in this order, so the tests of one guest follow each other and
#: (ZTBP_POOL_MAX) each guest boots once; trixie's boots last, for its two files.
#: Balanced by the shared guests' seconds at the end of a run: the host path (in vm-b, vm-b took 1,208 s to its quiet
#: files and vm-a 842 s) and QEMU's loops (about 230 s; their numba functions compiled on the host,
#: tests/numba_seed.py) run on vm-a's devices; the
#: fio-file capture, ztbp-ctl (38 s together) and the Ctrl-C capture (86-90 s) fill vm-b, whose QEMU tests share one
#: device (with the conventional namespace), so one guest boots for them. QEMU's profile stays in vm-a: in vm-b it
#: made vm-b take 1,100 s and NVMeVirt wait 147 s for it. The Zipf loop (42-57 s) stays in vm-a: in vm-b, vm-a
#: reached NVMeVirt while vm-b still compiled its one-liners and the unit tests ran, and NVMeVirt's positive control
#: (zones on one die form one group) failed; with HUSH, NVMeVirt waited 43 s for vm-b and the run took 1,324 s.
#: NVMeVirt's loop runs before its profile, which judges bandwidth against its noise: the other workers' leftovers
#: (vm-b's one-liner checks, the last unit tests) go beside the loop, whose tests count commands, and the profile
#: comes last (with HUSH, below); the other way round put vm-b's one-liners and a unit test beside the loop: 239 s
#: against 94-107 s.
VM_CHAINS = {"vm-b": ("test_app_vm.py", "test_resets_vm.py", "test_capture_fio_file_vm.py", "test_ztbp_ctl_vm.py",
                      "test_capture_ctrl_c_vm.py", "test_layers_vm.py", "test_one_liners_vm.py"),
             "vm-a": ("test_capture_vm.py", "test_device_qemu_vm.py", "test_loop_qemu_vm.py", "test_loop_zipf_vm.py",
                      "test_host_path_vm.py",
                      "test_loop_vm.py", "test_device_vm.py", "test_host_path_nvmevirt_vm.py")}
VM_ORDER = VM_CHAINS["vm-b"] + VM_CHAINS["vm-a"]
#: NVMeVirt's tests come last in their chain and wait until the other chain has ended (its worker leaves
#: CHAIN_STARTED and CHAIN_DONE files where the workers' basetemps meet, and stops its guests at its end): the
#: module's two threads busy-poll two vCPUs, so beside another guest they took two host cores from it for their
#: whole run, and their profile and A/B loop judge timing.
CHAIN_STARTED, CHAIN_DONE = "chain-{}.started", "chain-{}.done"
#: ... or until it reaches these files, which only compile and attach probes (no test there judges timing or counts
#: events): measured, NVMeVirt's tests otherwise sat idle 103 s of a run while the other chain compiled one-liners.
#: (The host path ran beside NVMeVirt once: both took twice as long, its setup 600 s against 314 s alone.)
QUIET_FILES = ("test_one_liners_vm.py",)
#: files whose guest no earlier file of their chain shares, after which no file needs the earlier guests: those stop
#: before them (an idle pooled guest still costs 2-7 % of a host core; the default device's guest sat idle through
#: the host path's 500 s)
FRESH_GUEST_FILES = ("test_host_path_vm.py",)
CHAIN_QUIET = "chain-{}.quiet"
#: the longest wait for the other chain (a guest there has its own timeouts; then NVMeVirt goes on anyway)
ALONE_WAIT_S = 3600


def is_nvmevirt(item: pytest.Item) -> bool:
    """A test of NVMeVirt (by its name, as the VM test files name them)."""
    return "nvmevirt" in item.name.lower()


def vm_chain(file: str) -> str:
    """The chain of a VM test file (a new one runs in vm-a, after the files named)."""
    return next((chain for chain, files in VM_CHAINS.items() if file in files), "vm-a")


def vm_order(item: pytest.Item) -> tuple[int, int, int]:
    """The place of a VM test: its chain, its file's place there, NVMeVirt's tests after the rest of their file."""
    name = item.path.name
    files = VM_CHAINS[vm_chain(name)]
    return (VM_ORDER.index(files[0]), files.index(name) if name in files else len(files), int(is_nvmevirt(item)))


def work_unit(nodeid: str) -> str:
    """What one pytest-xdist worker runs as a whole, in order: a chain of VM test files (tests/*_vm.py, VM_CHAINS)
    with its shared guests; a notebook's cells (they share its kernel, in order); any other test file (its
    module-scoped fixtures, such as a rendered report, are made once: one unit a test made the report fixtures
    twice, once on each worker)."""
    path = nodeid.split("::", 1)[0]
    if path.endswith("_vm.py"):
        return vm_chain(Path(path).name)
    return path


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """The scheduler of `work_unit` (xdist's own `--dist loadgroup` lost its groups on pytest 9.2: it renames node
    ids through a field pytest no longer reads, pytest-xdist issue 1386)."""
    from xdist.scheduler import LoadScopeScheduling

    config.option.loadscopereorder = False  # the units go out in the order of the items (work_order)

    class WorkUnits(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    return WorkUnits(config, log)


#: The seconds of the unit files that take ten or more, summed over their tests' setup, call and teardown
#: (`pytest -n 2 -m 'not vm' --durations=0 tests notebooks`, nothing else running). They go out first: in a
#: fresh-clone run the test house's file (32 s) and the browser test's (103 s) went out last, as files of few tests,
#: and ran for a minute after vm-a's last test, having waited for NVMeVirt's timing test (HUSH, below).
UNIT_SECONDS = {"tests/test_report_browser.py": 103, "tests/test_cluster.py": 90, "tests/test_probe_lib.py": 56,
                "tests/test_streaming.py": 47, "tests/test_bad_input.py": 42, "tests/test_batch.py": 36,
                "tests/test_notebooks.py": 34, "tests/test_test_house.py": 32, "tests/test_concurrent_runs.py": 26,
                "tests/test_cachesim.py": 23, "tests/test_config.py": 22, "tests/test_perfetto.py": 17,
                "tests/test_install_deps.py": 12, "tests/test_wheel.py": 12, "tests/test_watch_report.py": 12}


def work_order(nodeids: list[str]) -> list[str]:
    """The tests in the order pytest-xdist hands out their work units: the VM chains first (each takes a worker for
    most of the run), then the other units, the longest first (UNIT_SECONDS), then the largest (xdist's own order:
    with a unit a test file, a file of many small tests came before the VM chains), so that the last units out are
    short ones; a unit's tests keep their order."""
    units: dict[str, list[str]] = {}
    for nodeid in nodeids:
        units.setdefault(work_unit(nodeid), []).append(nodeid)

    def rank(unit: str) -> tuple[int, int, int]:
        if unit in VM_CHAINS:
            return (0, 0, 0)
        return (1, -UNIT_SECONDS.get(unit, 0), -len(units[unit]))

    return [nodeid for u in sorted(units, key=rank) for nodeid in units[u]]


@pytest.hookimpl(trylast=True)  # after `-m` has deselected what it deselects
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """The VM tests run last (in their own order), and when any is selected the guest images of both suites are
    built (or found cached) in the background meanwhile: on a fresh machine that is ~5 minutes of mmdebstrap taken
    off the critical path. vm/image.sh builds a suite once at a time, so a VM test that needs an image still being
    built waits for it. ZTBP_NO_IMAGE_PREBUILD=1 turns the background build off."""
    global _IMAGES
    vm = [i for i in items if i.get_closest_marker("vm") is not None]
    if strays := [i.nodeid for i in vm if work_unit(i.nodeid) not in VM_CHAINS]:
        raise pytest.UsageError(f"VM tests belong in tests/*_vm.py (one worker runs those in order): {strays[:3]}")
    if not vm:
        return
    vm.sort(key=vm_order)  # stable: a file's tests keep their order (NVMeVirt's after the rest)
    items[:] = [i for i in items if i.get_closest_marker("vm") is None] + vm
    if "PYTEST_XDIST_WORKER" in os.environ:  # every worker orders its items alike; the units go out in this order
        place = {nodeid: n for n, nodeid in enumerate(work_order([i.nodeid for i in items]))}
        items.sort(key=lambda i: place[i.nodeid])
    from ztbp import paths
    from ztbp.acquire.vm import SUITES

    config.ztbp_vm_selected = True  # type: ignore[attr-defined]
    if os.environ.get("ZTBP_NO_IMAGE_PREBUILD") == "1" or config.option.collectonly:
        return
    if os.environ.get("PYTEST_XDIST_WORKER", "gw0") != "gw0":  # one worker builds them
        return
    script = paths.ROOT / "vm" / "image.sh"
    builds = " && ".join(f"bash {script} --suite {s}" for s in SUITES)
    cache = getattr(config, "cache", None)  # none with -p no:cacheprovider
    log = Path(cache.mkdir("ztbp")) / "image-prebuild.log" if cache else Path(os.devnull)
    with open(log, "wb") as out:
        _IMAGES = subprocess.Popen(["bash", "-c", builds], stdout=out, stderr=subprocess.STDOUT,
                                   start_new_session=True)


@pytest.fixture(scope="session", autouse=True)
def shared_guests(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Boot once, test many: every VM test's guest command whose output folder lies under this session's temporary
    folder runs in a guest kept booted per configuration (vm/vmtest.sh's guest pool, vm/guest/pool.sh), so the
    suites boot bookworm, trixie and NVMeVirt once each instead of once a test module. ZTBP_NO_GUEST_POOL=1 boots
    a guest per command."""
    global _POOL
    if not getattr(request.config, "ztbp_vm_selected", False) or os.environ.get("ZTBP_NO_GUEST_POOL") == "1":
        yield
        return
    base = tmp_path_factory.getbasetemp()
    _POOL = base / "guest-pool"
    _POOL.mkdir(exist_ok=True)
    os.environ["ZTBP_GUEST_POOL"] = str(_POOL)
    os.environ["ZTBP_GUEST_POOL_SHARE"] = str(base)
    os.environ.setdefault("ZTBP_POOL_IDLE", "900")
    os.environ.setdefault("ZTBP_POOL_MAX", "3")  # see VM_CHAINS
    yield
    stop_shared_guests()


def stop_shared_guests() -> None:
    """Stop every guest of the pool (vmtest.sh kills QEMU on SIGTERM) and wait for each."""
    if _POOL is None:
        return
    for pidfile in _POOL.glob("*/pid"):
        try:
            pid = int(pidfile.read_text())
            os.kill(pid, signal.SIGTERM)
        except (OSError, ValueError):
            continue
        for _ in range(100):
            try:
                os.kill(pid, 0)
            except OSError:
                break
            time.sleep(0.1)


#: the chain NVMeVirt's tests run in (the last files of VM_CHAINS["vm-a"])
NVMEVIRT_CHAIN = "vm-a"
#: the chains this worker has started (their CHAIN_STARTED written)
_STARTED: set[str] = set()


def _meeting_place(config: pytest.Config) -> Path | None:
    """The folder pytest-xdist's workers share (their basetemps' parent); none without xdist, where one process runs
    every test in order anyway."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        return None
    return config._tmp_path_factory.getbasetemp().parent  # type: ignore[attr-defined]


def _chain_over(place: Path, chain: str) -> bool:
    """The chain has ended or reached its QUIET_FILES, or its worker has died. (The chain files are written
    atomically: one read while its writer had created it but not yet written the pid took an empty file for a dead
    worker, and NVMeVirt's stand-in started beside the other chain's first test in a fresh-clone run.)"""
    if (place / CHAIN_DONE.format(chain)).exists() or (place / CHAIN_QUIET.format(chain)).exists():
        return True
    started = place / CHAIN_STARTED.format(chain)
    return not _names_a_live_process(started) and started.exists()  # started by a process now gone


def _names_a_live_process(pid_file: Path) -> bool:
    """The file holds the pid of a running process."""
    try:
        os.kill(int(pid_file.read_text()), 0)
    except (OSError, ValueError):
        return False
    return True


#: The niceness of a pytest-xdist worker once it runs a test outside NVMEVIRT_CHAIN (ZTBP_UNIT_NICE; 0: none), and of
#: what it starts: the unit tests and notebooks, and vm-b's chain (its first tests, the one-liner file's three that
#: need no guest, lowered it from the start in the runs measured), take the CPU that vm-a's guests leave. vm-a ends
#: last and sets the run's length, NVMeVirt's timing tests at its end. Beside the unit tests a guest under TCG got
#: about two thirds of a core in a fresh-clone run (2 cores, 2 guests, the unit tests' worker busy for its first
#: 15 minutes); with this, vm-b's last guest still ended within 2-6 s of NVMeVirt's boot in three runs.
UNIT_NICE = int(os.environ.get("ZTBP_UNIT_NICE", "5"))


#: While a test marked `timing` runs in NVMEVIRT_CHAIN (NVMeVirt's profile: the positive control of the verdict, which
#: judges bandwidth against its noise), the other workers start no test (one already running goes on): it leaves
#: HUSH where the workers' folders meet, with its pid. In a fresh-clone run the unit tests' report and browser tests
#: ran beside it, one independent pair of zones measured 0.79 of twice its solo bandwidth (the others 0.95-1.0) and
#: the verdict called the grouping noise. At most HUSH_WAIT_S; each wait is logged in HUSH_WAITS (the run's summary).
HUSH, HUSH_WAITS, HUSH_WAIT_S = "hush", "hush-waits", 900


def _hushed(place: Path) -> bool:
    """A `timing` test of a live worker runs."""
    return _names_a_live_process(place / HUSH)


class _UnitPriority:
    """Under pytest-xdist, a worker's first test outside NVMEVIRT_CHAIN lowers its priority (UNIT_NICE), and each of
    its tests waits while a `timing` test runs (HUSH). A plugin, not this conftest's own hook, which would see the
    items under tests/ only: the notebooks too."""

    niced = False

    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        if "PYTEST_XDIST_WORKER" not in os.environ or work_unit(item.nodeid) == NVMEVIRT_CHAIN:
            return
        place = _meeting_place(item.config)
        if place is not None and _hushed(place):
            t0 = time.monotonic()
            while _hushed(place) and time.monotonic() - t0 < HUSH_WAIT_S:
                time.sleep(0.5)
            with open(place / HUSH_WAITS, "a") as log:
                log.write(f"{os.environ['PYTEST_XDIST_WORKER']} waited {time.monotonic() - t0:.0f} s to start "
                          f"{item.nodeid} while a timing test ran\n")
        if self.niced or UNIT_NICE <= 0:
            return
        os.nice(UNIT_NICE)
        self.niced = True


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(_UnitPriority(), "ztbp-unit-priority")


def _prebuild_nvmevirt() -> None:
    """NVMeVirt's modules for its tests, built in the background while the chain's other guests run (none to build
    when the cache has them: tests/nvmevirt_build.py). ZTBP_NO_IMAGE_PREBUILD=1 turns it off as well."""
    if os.environ.get("ZTBP_NO_IMAGE_PREBUILD") == "1":
        return
    import nvmevirt_build

    from ztbp.acquire.vm import VmError, image_dir

    try:
        release = nvmevirt_build.guest_release(image_dir())
    except (OSError, subprocess.SubprocessError, VmError):
        return  # no image yet: the tests build the modules themselves
    nvmevirt_build.prebuild(release)


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A chain's first test says the chain has started; NVMeVirt's tests wait until every other chain of the session
    is over."""
    place = _meeting_place(item.config) if item.get_closest_marker("vm") is not None else None
    if place is None:
        return
    chain = vm_chain(item.path.name)
    if chain not in _STARTED:
        _STARTED.add(chain)
        write_atomic(place / CHAIN_STARTED.format(chain), str(os.getpid()))
        if chain == NVMEVIRT_CHAIN and any(is_nvmevirt(i) for i in item.session.items):
            _prebuild_nvmevirt()
    if item.path.name in QUIET_FILES and chain != NVMEVIRT_CHAIN:
        write_atomic(place / CHAIN_QUIET.format(chain), str(os.getpid()))
    if chain != NVMEVIRT_CHAIN or not is_nvmevirt(item):
        return
    others = {vm_chain(i.path.name) for i in item.session.items if i.get_closest_marker("vm") is not None} - {chain}
    t0 = time.monotonic()
    while not all(_chain_over(place, c) for c in others) and time.monotonic() - t0 < ALONE_WAIT_S:
        time.sleep(1)
    if (waited := time.monotonic() - t0) >= 1 and _POOL is not None:
        with open(_POOL / "waits", "a") as log:
            log.write(f"{item.name} waited {waited:.0f} s for the other chain to end\n")
    if item.get_closest_marker("timing") is not None:
        write_atomic(place / HUSH, str(os.getpid()))


@pytest.hookimpl(trylast=True)  # after pytest's own teardown of the fixtures
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """The last test of a chain other than NVMeVirt's: its guests stop, then it says the chain is done. In NVMeVirt's
    chain, the guests stop before its first NVMeVirt test; in any chain, before a file of FRESH_GUEST_FILES."""
    place = _meeting_place(item.config) if item.get_closest_marker("vm") is not None else None
    chain = vm_chain(item.path.name)
    if place is None:
        return
    if item.get_closest_marker("timing") is not None:
        (place / HUSH).unlink(missing_ok=True)
    if nextitem is not None and nextitem.path.name in FRESH_GUEST_FILES and item.path.name != nextitem.path.name:
        stop_shared_guests()  # the guests so far have served
    if chain == NVMEVIRT_CHAIN:
        if not is_nvmevirt(item) and nextitem is not None and is_nvmevirt(nextitem):
            stop_shared_guests()  # its QEMU guest has served: NVMeVirt's guest boots alone
        return
    if nextitem is not None and nextitem.get_closest_marker("vm") is not None and vm_chain(nextitem.path.name) == chain:
        return
    stop_shared_guests()
    write_atomic(place / CHAIN_DONE.format(chain), str(os.getpid()))


def pool_summary(pool: Path) -> list[str]:
    """Boots, commands and hung boots of the shared guests, and what each guest ran, for the end of the run."""
    if not (pool / "jobs").exists():
        return []
    logs = {f: (pool / f).read_text().splitlines() if (pool / f).exists() else []
            for f in ("boots", "jobs", "hung-boots", "waits", "seconds")}
    # "boot KEY WALL [CPU]" and "job KEY OUT WALL RC [CPU]": seconds, CPU those of the guest's QEMU (vm/vmtest.sh)
    took = {tuple(f.split()[:3]): f.split()[3] for f in logs["seconds"] if len(f.split()) > 3}
    cpu = {tuple(f.split()[:3]): f.split()[5] for f in logs["seconds"] if len(f.split()) > 5}
    cpu |= {("boot", f.split()[1]): f.split()[3] for f in logs["seconds"]
            if f.startswith("boot ") and len(f.split()) > 3}
    known = [int(c) for c in cpu.values() if c.isdigit()]
    lines = [f"shared guests: {len(logs['jobs'])} guest commands in {len(logs['boots'])} boots; hung boots killed "
             f"and booted again: {len(logs['hung-boots'])}"
             + (f"; the guests' CPU: {sum(known)} s" if known else "")]

    def both(wall: str, c: str | None) -> str:
        return f"{wall} s" + (f" (CPU {c} s)" if c and c != "?" else "")

    for config in sorted(pool.glob("*/config")):
        key = config.parent.name
        conf = dict(line.split("=", 1) for line in config.read_text().splitlines() if "=" in line)
        device = ("NVMeVirt (no QEMU namespace)" if conf.get("no_zns") == "1" else
                  f"{conf.get('zones')} zones" + (" + conventional namespace" if conf.get("conv") else ""))
        ran = [f.split()[3] for f in logs["jobs"] if len(f.split()) > 3 and f.split()[2] == key]
        boots = [f.split()[2] for f in logs["seconds"] if f.startswith(f"boot {key} ")]
        cpus = f"{conf.get('smp')} CPU" + ("" if conf.get("smp") == "1" else "s")
        lines.append(f"  {Path(conf.get('image', '?')).name} ({device}, {cpus}; booted in "
                     f"{', '.join(both(b, cpu.get(('boot', key))) for b in boots) or '?'}): {len(ran)} commands: "
                     + ", ".join(f"{r.split('/')[0]} {both(took.get(('job', key, r), '?'), cpu.get(('job', key, r)))}"
                                 for r in ran))
    lines += [f"  {w}" for w in logs["hung-boots"] + logs["waits"]]
    return lines


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """The shared guests' summary: this process's pool, or under pytest-xdist its workers' (in their basetemps)."""
    controller = getattr(config, "workerinput", None) is None and hasattr(config, "_tmp_path_factory")
    if _POOL is not None:
        pools = [_POOL]
    elif controller:
        pools = sorted(config._tmp_path_factory.getbasetemp().glob("*/guest-pool"))
    else:
        pools = []
    for pool in pools:
        for line in pool_summary(pool):
            terminalreporter.write_line(line)
    if controller:
        hush = config._tmp_path_factory.getbasetemp() / HUSH_WAITS
        for line in hush.read_text().splitlines() if hush.exists() else []:
            terminalreporter.write_line(f"  {line}")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Never leave the background image build behind (a run stopped early kills it; image.sh cleans its folder),
    nor a shared guest, nor NVMeVirt's build."""
    stop_shared_guests()
    if "nvmevirt_build" in sys.modules:
        sys.modules["nvmevirt_build"].stop()
    if _IMAGES is not None and _IMAGES.poll() is None:
        os.killpg(_IMAGES.pid, signal.SIGTERM)
        _IMAGES.wait(timeout=60)

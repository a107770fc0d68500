"""A guest booted to serve the host: the host<->guest channel of the profiler (and of any command that keeps a
guest script running while the host decides what it does next).

`GuestSession` boots vm/vmtest.sh with a guest script through `run_in_guest` in a thread, waits until the
guest describes itself (a KEY=VALUE file in the shared folder), talks to it through a `Mailbox`
(io/mailbox.py; vm/guest/probe-lib.sh has the guest's half) and ends it: `close` posts "done" and waits,
`kill` stops vmtest.sh (which kills QEMU), so no QEMU outlives the command. A boot that prints nothing at all
within SILENT_BOOT_S (a hung boot, seen with NVMeVirt under TCG) is killed and booted again, BOOT_ATTEMPTS
times in all.

`run_here` is the same channel when the guest script runs on this machine (capture-host, loop --host): its
lines, its exit status, and the stop file for Ctrl-C.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ZtbpError
from ..io.mailbox import POLL_S, Mailbox
from .vm import Geometry, GuestResult, ensure_image, run_in_guest

#: Seconds the host waits for the guest to boot, load a module and describe itself.
BOOT_TIMEOUT_S = 600
#: Seconds without a single console line after which a boot counts as hung (the guest's first line, "up in",
#: comes after ~30 s under TCG); such a guest is killed and booted again, BOOT_ATTEMPTS times in all.
SILENT_BOOT_S = 240
BOOT_ATTEMPTS = 2
CLOSE_WAIT_S = 300  # after posting "done", before the guest is killed
KILL_WAIT_S = 30  # after SIGTERM to vmtest.sh (it kills QEMU at once), before SIGKILL to its group
DONE = "done"


class SilentBoot(Exception):
    """The guest printed nothing within SILENT_BOOT_S: its boot hung."""


@dataclass
class GuestSession:
    """vm/guest/`script` running in a booted guest with `out` as its shared folder, and its mailbox.

    `ready` is the file the guest writes into `out` once it is ready (read back as KEY=VALUE by `start`);
    `purpose` and `ready_what` name the session in errors ("the guest stopped before <purpose> was done", "the
    guest did not <ready_what>"), raised as `error`."""

    script: str
    out: Path
    mailbox: Mailbox
    ready: str
    geometry: Geometry | None = None
    extra_args: list[str] = field(default_factory=list)
    env: Mapping[str, str] | None = None
    files: Iterable[Path] = ()
    timeout_s: int = 7200
    on_line: Callable[[str], None] | None = None
    error: type[ZtbpError] = ZtbpError
    purpose: str = "the session"
    ready_what: str = "say it was ready"
    boot_attempts: int = field(default=0, init=False)
    _thread: threading.Thread | None = field(default=None, init=False, repr=False)
    _result: GuestResult | None = field(default=None, init=False, repr=False)
    _failure: BaseException | None = field(default=None, init=False, repr=False)
    _proc: subprocess.Popen[str] | None = field(default=None, init=False, repr=False)
    _lines: int = field(default=0, init=False, repr=False)

    def start(self) -> dict[str, str]:
        """Boot the guest (again after a silent boot) until it is ready; return what it wrote in `ready`."""
        self.mailbox.open(fresh=True)
        (self.out / self.ready).unlink(missing_ok=True)
        ensure_image(echo=self.say, error=self.error)
        for attempt in range(1, BOOT_ATTEMPTS + 1):
            self.boot_attempts = attempt
            self._boot()
            try:
                return self._wait_ready()
            except SilentBoot as e:
                self.kill()
                if attempt == BOOT_ATTEMPTS:
                    raise self.error(str(e)) from None
                self.say(f"boot-again {e}; killed it, booting again (attempt {attempt + 1} of {BOOT_ATTEMPTS})")
        raise AssertionError("unreachable")

    def _boot(self) -> None:
        self._lines, self._proc, self._result, self._failure = 0, None, None, None

        def boot() -> None:
            try:
                self._result = run_in_guest(f"bash /ztbp/src/vm/guest/{self.script}", self.out,
                                            geometry=self.geometry, timeout=self.timeout_s, files=self.files,
                                            env=self.env, extra_args=self.extra_args, on_line=self._line,
                                            on_start=self._started)
            except BaseException as e:  # noqa: BLE001 - surfaced by the waiting side
                self._failure = e

        self._thread = threading.Thread(target=boot, name=f"ztbp-guest-{self.script}", daemon=True)
        self._thread.start()

    def _started(self, proc: subprocess.Popen[str]) -> None:
        self._proc = proc

    def say(self, msg: str) -> None:
        """A progress line of the host's own, shown like the guest's stages."""
        if self.on_line is not None:
            self.on_line(f"ZTBP: stage {msg}")

    def _line(self, line: str) -> None:
        self._lines += 1
        if self.on_line is not None:
            self.on_line(line)

    def alive(self) -> None:
        """Raise when the guest is gone: waiting for it would be pointless."""
        if self._failure is not None:
            raise self.error(f"the VM failed: {self._failure}")
        if self._thread is not None and not self._thread.is_alive():
            status = self._result.status if self._result else "?"
            raise self.error(f"the guest stopped (status {status}) before {self.purpose} was done; see "
                             f"{self.console}")

    @property
    def console(self) -> Path:
        return self.out / "console.log"

    def _wait_ready(self) -> dict[str, str]:
        ready = Mailbox(self.out)
        t0 = time.monotonic()

        def check() -> None:
            self.alive()
            if self._lines == 0 and time.monotonic() - t0 > SILENT_BOOT_S:
                raise SilentBoot(f"the guest printed nothing on its console in {SILENT_BOOT_S} s (a hung boot)")

        if not ready.wait(self.ready, BOOT_TIMEOUT_S, check):
            raise self.error(f"the guest did not {self.ready_what} within {BOOT_TIMEOUT_S} s; see {self.console}")
        return ready.read_env(self.ready)

    def close(self) -> GuestResult | None:
        """Ask the guest to finish (post "done") and wait for it; kill it if it does not stop in CLOSE_WAIT_S."""
        if self._thread is None:
            return None
        self.mailbox.post(DONE, "")
        self._thread.join(timeout=CLOSE_WAIT_S)
        if self._thread.is_alive():
            self.kill()
        return self._result

    def kill(self) -> None:
        """Stop the guest now (vmtest.sh kills QEMU on SIGTERM) and wait for the boot thread: no QEMU outlives us."""
        if self._thread is None:
            return
        deadline = time.monotonic() + KILL_WAIT_S
        while self._proc is None and self._thread.is_alive() and time.monotonic() < deadline:
            time.sleep(POLL_S)  # the boot thread has not started vmtest.sh yet
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
        self._thread.join(timeout=KILL_WAIT_S)
        if self._proc is not None and self._proc.poll() is None:
            os.killpg(self._proc.pid, signal.SIGKILL)
            self._thread.join(timeout=KILL_WAIT_S)


# ---- a guest script run on this machine (capture-host, loop --host) ------------------------------------------
def run_here(script: Path, env: Mapping[str, str], stop_file: Path, on_line: Callable[[str], None],
             after_stop: Callable[[str], None] | None = None) -> tuple[int, bool]:
    """Run guest script `script` on this machine with `env` added to ours and ZTBP_STOP_FILE = `stop_file`; its
    lines go to `on_line`. Ctrl-C creates the stop file (the script stops early and saves what it has) and the
    lines that follow go to `after_stop` (default `on_line`). Returns (exit status, interrupted)."""
    full = {**os.environ, **env, "ZTBP_STOP_FILE": str(stop_file)}
    proc = subprocess.Popen(["bash", str(script)], env=full, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    assert proc.stdout is not None
    interrupted = False
    try:
        for line in proc.stdout:
            on_line(line.rstrip("\n"))
    except KeyboardInterrupt:
        interrupted = True
        stop_file.touch()
        for line in proc.stdout:
            (after_stop or on_line)(line.rstrip("\n"))
    return proc.wait(), interrupted

"""The host's half of the one host<->guest file protocol (the mailbox), used by the profiler and the closed loop.

The host and a guest script share a folder (the VM's /ztbp/out, or a folder of this machine when the script
runs here). The host posts messages into an outbox, each written whole under a temporary name and renamed, so
the guest never reads half of one; the guest answers into an inbox the same way (vm/guest/probe-lib.sh,
mailbox_answer), and the host waits for an answer by its name and reads it, as text or as KEY=VALUE lines. The
outbox and the inbox may be one folder (the loop's .loop/) or two (the profiler's req/ and res/).

Numbered requests (`request`, `status`) are the profiler's: NNNNN.KIND posted, NNNNN.rc answered with an exit
status (vm/guest/profile.sh serves them with mailbox_next).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..files import read_env, write_atomic

#: Seconds between two looks for an answer.
POLL_S = 0.1


@dataclass
class Mailbox:
    """The folders of one exchange: `outbox` (the host posts), `inbox` (the guest answers; default the outbox)."""

    outbox: Path
    inbox: Path | None = None
    _seq: int = field(default=0, init=False, repr=False)

    @property
    def answers(self) -> Path:
        return self.inbox if self.inbox is not None else self.outbox

    def open(self, fresh: bool = False) -> Mailbox:
        """Create the folders; `fresh`: emptied first (nothing of an earlier exchange is taken for an answer)."""
        for d in dict.fromkeys((self.outbox, self.answers)):
            if fresh and d.exists():
                shutil.rmtree(d)
            d.mkdir(parents=True, exist_ok=True)
        return self

    def post(self, name: str, text: str) -> Path:
        """Post message `name` whole (the folder is created when missing)."""
        self.outbox.mkdir(parents=True, exist_ok=True)
        path = self.outbox / name
        write_atomic(path, text)
        return path

    def answer(self, name: str) -> Path:
        return self.answers / name

    def has(self, name: str) -> bool:
        return self.answer(name).is_file()

    def read_env(self, name: str) -> dict[str, str]:
        """Answer `name` as KEY=VALUE lines ({} when the guest has not written it)."""
        return read_env(self.answer(name))

    def read_text(self, name: str) -> str:
        """Answer `name` as text ("" when the guest has not written it)."""
        path = self.answer(name)
        return path.read_text(errors="replace") if path.is_file() else ""

    def wait(self, name: str, timeout_s: float, check: Callable[[], None] = lambda: None) -> bool:
        """Wait until answer `name` is there (True) or `timeout_s` seconds passed (False); `check()` runs at each
        look and raises when waiting is pointless (the guest stopped)."""
        t0 = time.monotonic()
        while not self.has(name):
            check()
            if time.monotonic() - t0 > timeout_s:
                return False
            time.sleep(POLL_S)
        return True

    # ---- numbered requests answered with a status ---------------------------------------------------------
    def request(self, kind: str, text: str) -> str:
        """Post the next numbered request NNNNN.`kind`; return its id NNNNN."""
        self._seq += 1
        rid = f"{self._seq:05d}"
        self.post(f"{rid}.{kind}", text)
        return rid

    def status(self, rid: str, timeout_s: float, check: Callable[[], None] = lambda: None) -> int | None:
        """The exit status the guest answered request `rid` with (NNNNN.rc; 1 when empty), None after
        `timeout_s` seconds without one."""
        if not self.wait(f"{rid}.rc", timeout_s, check):
            return None
        return int(self.read_text(f"{rid}.rc").strip() or "1")

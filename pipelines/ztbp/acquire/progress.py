"""The progress a capture shows on stderr while the guest runs (stdout holds only the summary)."""

from __future__ import annotations

import sys
import time


class Progress:
    """Turns the guest's "ZTBP:" console lines into progress messages with a countdown (on stderr: stdout holds
    only the summary, a line or with --json the JSON document)."""

    def __init__(self, expected_reads: int, echo_console: bool) -> None:
        self.expected = expected_reads
        self.echo_console = echo_console
        self.start = time.monotonic()
        self.workload_start: float | None = None

    def __call__(self, line: str) -> None:
        if line.startswith("ZTBP: progress "):
            fields = dict(kv.split("=", 1) for kv in line.split()[2:] if "=" in kv)
            self._countdown(int(fields.get("fio") or 0), int(fields.get("traced") or 0))
        elif line.startswith("ZTBP: stage ") or line.startswith("ZTBP: error "):
            msg = line[len("ZTBP: "):].removeprefix("stage ")
            if msg.startswith("workload"):
                self.workload_start = time.monotonic()
            self.say(msg)
        elif line.startswith("vmtest:"):
            self.say(line[len("vmtest: "):])
        elif self.echo_console:
            print(f"  | {line}", file=sys.stderr, flush=True)

    def _countdown(self, done: int, traced: int) -> None:
        if self.workload_start is None:
            return
        if not self.expected:  # a user's job file: how many reads it does is fio's to say
            self.say(f"workload: {done:,} reads done ({traced:,} commands traced)")
            return
        elapsed = time.monotonic() - self.workload_start
        left = max(0, self.expected - done)
        eta = f"~{left / (done / elapsed):.0f} s left" if done and elapsed > 0 else "starting"
        self.say(f"workload: {done:,}/{self.expected:,} reads done, {eta} ({traced:,} commands traced)")

    def say(self, msg: str) -> None:
        print(f"[{time.monotonic() - self.start:6.1f}s] {msg}", file=sys.stderr, flush=True)


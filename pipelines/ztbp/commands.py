"""One outside command run with a timeout, its answer as data: the doctor's facts and a device module's load and
unload go through it (tests hand in a fake `Runner` instead)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable

#: (argv) -> (exit code, stdout, stderr); exit code None when the command could not run or did not answer in time
Runner = Callable[[list[str]], tuple[int | None, str, str]]


def run_command(argv: list[str], timeout_s: float) -> tuple[int | None, str, str]:
    """Run one outside command (stdin closed) for at most timeout_s; (exit code, stdout, stderr), exit code None if
    it could not run or gave no answer in time (stderr then says which)."""
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=timeout_s,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return None, "", f"no answer within {timeout_s:g} s"
    except OSError as e:
        return None, "", e.strerror or str(e)
    return proc.returncode, proc.stdout, proc.stderr

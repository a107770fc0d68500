"""The `ztbp` command line — the only part of the package that knows argparse.

Building the parser imports no stage: each command's options come from light modules (analysis/params.py,
acquire/workload.py, contract.py), and a command imports its stage only when it runs, so `ztbp --help` and
`ztbp --version` stay fast.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
from typing import Any

from .. import __version__
from ..errors import FileSystemError, ZtbpError
from ..files import os_error_line


def emit(obj: Any, as_json: bool, text: str | None = None) -> None:
    """Print a command's result: JSON (stable keys) with --json, else the human text."""
    if as_json:
        json.dump(obj, sys.stdout, indent=2, default=str)
        sys.stdout.write("\n")
    else:
        print(text if text is not None else json.dumps(obj, indent=2, default=str))


def build_parser() -> argparse.ArgumentParser:
    from . import acquire, analyse, app, apply, compare, device_study, doctor, export, loop, regime, report, scale
    from .common import say_bounds
    from .watch import register as register_watch

    parser = argparse.ArgumentParser(
        prog="ztbp", description="ZTBP workbench: analyse NVMe traces of zoned SSDs (see probes/FORMAT.md).")
    parser.add_argument("--version", action="version", version=f"ztbp {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    acquire.register_synth(sub)
    analyse.register(sub)
    acquire.register(sub)
    app.register(sub)
    apply.register(sub)
    compare.register(sub)
    device_study.register(sub)
    doctor.register(sub)
    loop.register(sub)
    regime.register(sub)
    report.register(sub)
    export.register(sub)
    scale.register(sub)
    register_watch(sub)
    say_bounds(parser)
    return parser


def on_sigint(signum: int, frame: Any) -> None:
    """Ctrl-C (or SIGTERM): a KeyboardInterrupt, unless one is already on its way. polars passes the signal on to
    Python after raising its own KeyboardInterrupt for it; raising a second one would break the first's clean-up (a
    temporary file left) and print a traceback."""
    if isinstance(sys.exc_info()[1], KeyboardInterrupt):
        return
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse printed the usage and its one-line error (or --help, --version)
        return e.code if isinstance(e.code, int) else 2
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    # Ctrl-C and SIGTERM alike end a command through KeyboardInterrupt, so its clean-up runs (temporary files,
    # the cache model's trace, locks); a command that needs more sets its own handlers inside
    previous = {sig: signal.signal(sig, on_sigint) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        return _run(args)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _run(args: argparse.Namespace) -> int:
    """A command, its errors as one line each: a ZtbpError with its code, an interruption with 130, an error of the
    file system no place explained with 74 (FileSystemError's code)."""
    warnings = _warnings_to_stderr(args.command)
    try:
        rc = args.func(args)
    except ZtbpError as e:
        print(f"ztbp {args.command}: error: {e}", file=sys.stderr)
        return e.code
    except KeyboardInterrupt:
        print(f"ztbp {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except OSError as e:
        print(f"ztbp {args.command}: error: {os_error_line(e)}", file=sys.stderr)
        return FileSystemError.code
    finally:
        logging.getLogger("ztbp").removeHandler(warnings)
    return int(rc or 0)


def _warnings_to_stderr(command: str) -> logging.Handler:
    """The package's warnings (derived data found changed and made again, ...) as one line each on stderr, named
    like the errors: `ztbp CMD: warning: ...`."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setLevel(logging.WARNING)
    handler.setFormatter(logging.Formatter(f"ztbp {command}: warning: %(message)s"))
    logging.getLogger("ztbp").addHandler(handler)
    return handler

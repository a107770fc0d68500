"""The `ztbp` command line. Each stage module registers its own subcommand with `register(subparsers)`."""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from typing import Any

from . import __version__
from .errors import ZtbpError

#: Stage modules, in the order their commands appear in --help. Each has register(subparsers).
COMMAND_MODULES: tuple[str, ...] = (
    "synth", "ingest", "zones", "chains", "frag", "cluster", "cachesim", "config", "layers", "opcodes",
    "workload", "capture", "report",
)


def emit(obj: Any, as_json: bool, text: str | None = None) -> None:
    """Print a command's result: JSON (stable keys) with --json, else the human text."""
    if as_json:
        json.dump(obj, sys.stdout, indent=2, default=str)
        sys.stdout.write("\n")
    else:
        print(text if text is not None else json.dumps(obj, indent=2, default=str))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ztbp", description="ZTBP workbench: analyse NVMe traces of zoned SSDs (see probes/FORMAT.md).")
    parser.add_argument("--version", action="version", version=f"ztbp {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            mod = importlib.import_module(f"ztbp.{name}")
        except ModuleNotFoundError as e:
            if e.name == f"ztbp.{name}":
                continue  # stage not present in this build
            raise
        mod.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
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
    return int(rc or 0)


if __name__ == "__main__":
    sys.exit(main())

"""Small file primitives every room shares: whole-file writes that a reader never sees half done, and the
KEY=VALUE files the guest scripts leave (guest.env, device.env, the loop's .loop/*.env)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

from .errors import ZtbpError


def check_target(path: Path) -> Path:
    """`path` as a target an output may replace: missing, or a regular file. A link (even to a regular file) or
    any other kind of file (a device, a folder, a pipe) is refused, so an output never replaces it or follows it
    out of its folder."""
    if path.is_symlink() or (path.exists() and not path.is_file()):
        raise ZtbpError(f"{path} exists and is not a regular file; give another output path")
    return path


@contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """A temporary path of a unique name beside `path` (".NAME.<random>.tmp", not yet created) for a writer that
    needs a path (a Parquet file, a CSV written in pieces); renamed over `path` when the block ends normally,
    removed when it raises. The target is checked with check_target before and after."""
    import secrets  # here, not at the top: building the CLI's parser imports this module (start-up time)

    check_target(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")
    try:
        yield tmp
        check_target(path)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@contextmanager
def atomic_writer(path: Path) -> Iterator[BinaryIO]:
    """A binary file that becomes `path` whole when the block ends: atomic_path's temporary name, created new
    (never an existing file, so nothing planted there is followed) with the mode open() gives."""
    with atomic_path(path) as tmp, tmp.open("xb") as f:
        yield f


def write_atomic(path: Path, data: str | bytes) -> None:
    """Write `path` whole (atomic_writer): a target that exists and is not a regular file (a link, a device, a
    folder) is refused, never replaced."""
    with atomic_writer(path) as f:
        f.write(data.encode() if isinstance(data, str) else data)


def write_json(path: Path, obj: Any) -> None:
    """`obj` as indented JSON, written whole (write_atomic)."""
    write_atomic(path, json.dumps(obj, indent=2, default=str) + "\n")


def read_env(path: Path) -> dict[str, str]:
    """KEY=VALUE lines of a file the guest wrote ({} when it is missing); lines without '=' are skipped."""
    if not path.is_file():
        return {}
    return dict(line.split("=", 1) for line in path.read_text(errors="replace").splitlines() if "=" in line)


def env_int(value: str | None) -> int | None:
    """A KEY=VALUE value as a non-negative integer, None when it is missing or not a number."""
    return int(value) if value and value.strip().isdigit() else None

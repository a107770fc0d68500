"""Small file primitives every room shares: whole-file writes that a reader never sees half done, and the
KEY=VALUE files the guest scripts leave (guest.env, device.env, the loop's .loop/*.env)."""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..errors import ZtbpError


@contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """A temporary path of a unique name beside `path` (".NAME.<random>.tmp", not yet created) for the caller to
    write; renamed over `path` when the block ends normally, removed when it raises. A target that exists and is
    not a regular file (a link, a device, a folder) is refused, never replaced. For files written in pieces (a
    CSV, a Parquet file, a trace); write_atomic writes one whole text or bytes."""
    if path.is_symlink() or (path.exists() and not path.is_file()):
        raise ZtbpError(f"{path} exists and is not a regular file; give another output path")
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_atomic(path: Path, data: str | bytes) -> None:
    """Write `path` whole: a temporary file of a unique name beside it, then renamed over it (atomic_path)."""
    with atomic_path(path) as tmp, tmp.open("xb") as f:
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

"""User-facing errors: the CLI prints the message (what went wrong, what to do) and exits with `code`."""

from __future__ import annotations


class ZtbpError(Exception):
    """An error the user can act on. Never shown as a traceback."""

    code: int = 2

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code


class FormatError(ZtbpError):
    """A file does not follow probes/FORMAT.md (wrong or missing version line, bad meta.json)."""

    code = 3


class MissingRunError(ZtbpError):
    """The run directory or one of its required files does not exist."""

    code = 4


class ProfileError(ZtbpError):
    """The interference profiler cannot measure (device, VM or fio trouble) or read a profile."""


class CompareError(ZtbpError, ValueError):
    """Two arms or two runs cannot be compared (too few pairs or blocks, values that are missing, not finite or not
    positive on a log scale). Also a ValueError: the statistics refuse their input."""


class FileSystemError(ZtbpError):
    """The file system refused a write: a folder that is a file, no permission, a full disk (74: sysexits'
    EX_IOERR, apart from the other codes)."""

    code = 74

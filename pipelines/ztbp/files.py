"""Small file primitives every room shares: whole-file writes that a reader never sees half done, folders made
with one clear error when the file system refuses, the lock of a folder two processes write, files handed back to
the user who ran sudo, and the KEY=VALUE files the guest scripts leave (guest.env, device.env, the loop's
.loop/*.env)."""

from __future__ import annotations

import errno
import json
import os
import re
import sys
import time
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, BinaryIO, NoReturn

from .errors import FileSystemError, ZtbpError

#: how long a command waits for another ztbp holding a folder's lock (an ingest of a large run takes minutes)
LOCK_WAIT_S = 1800.0
#: after how long a waiting command says what it waits for
LOCK_NOTICE_S = 3.0
#: (thread, lock file) -> how many times that thread holds it (it takes a lock it holds again at once; another
#: thread of the process waits for it like another process)
_HELD: dict[tuple[int, str], int] = {}


class ClaimError(ZtbpError):
    """Another command made the folder first (two commands raced for one name); this one wrote nothing."""


# ---- the user behind sudo -----------------------------------------------------------------------------------
def sudo_owner() -> tuple[int, int] | None:
    """(uid, gid) of the user who ran `sudo` when this process is root under sudo (SUDO_UID set, not 0), else None:
    what a root process creates in that user's tree is handed back to them (hand_over)."""
    uid, gid = os.environ.get("SUDO_UID", ""), os.environ.get("SUDO_GID", "")
    if os.geteuid() != 0 or not uid.isdigit() or int(uid) == 0:
        return None
    return int(uid), int(gid) if gid.isdigit() else -1


def hand_over(path: Path) -> None:
    """Give `path` (never a link's target) to the user who ran sudo when its folder is theirs (their tree, not a
    system folder); nothing when not under sudo. Best effort: a file system that keeps no owners stays as it is."""
    owner = sudo_owner()
    if owner is None:
        return
    with suppress(OSError):
        if path.parent.lstat().st_uid == owner[0]:
            os.chown(path, *owner, follow_symlinks=False)


def hand_over_tree(root: Path) -> None:
    """hand_over `root` and everything under it (what a script run as root left in a run directory)."""
    if sudo_owner() is None or not root.exists():
        return
    hand_over(root)
    for folder, dirs, files in os.walk(root):
        for name in (*dirs, *files):
            hand_over(Path(folder) / name)


# ---- errors of the file system ------------------------------------------------------------------------------
_OS_ERROR = re.compile(r"\(os error (\d+)\)")


def _errno_of(e: BaseException) -> int | None:
    """The errno of an OSError, or of a library's error that carries "(os error N)" (polars' writers)."""
    if isinstance(e, OSError) and e.errno:
        return e.errno
    m = _OS_ERROR.search(str(e))
    return int(m.group(1)) if m else None


def _blocker(path: Path) -> Path:
    """The first of `path`'s parents (or itself) that exists and is not a folder."""
    return next((p for p in (*reversed(path.parents), path) if p.exists() and not p.is_dir()), path)


def _explain(code: int, path: Path) -> str:
    if code in (errno.ENOSPC, errno.EDQUOT):
        return (f"cannot write {path}: no space left on its device ({os.strerror(code)}); free some space and run "
                "the command again")
    if code in (errno.ENOTDIR, errno.EEXIST):
        blocker = _blocker(path)
        return ("" if blocker == path else f"cannot write {path}: ") + f"{blocker} is a file, not a folder"
    if code in (errno.EACCES, errno.EPERM):
        return f"cannot write {path}: {os.strerror(code)} ({path.parent} is not writable by this user)"
    if code == errno.ELOOP:
        return f"cannot write {path}: it is a link; give another output path"
    return f"cannot write {path}: {os.strerror(code)}"


def fs_error(e: BaseException, path: Path, tmp: Path | None = None) -> FileSystemError | None:
    """The one-line error for `e` met while writing `path` (through its temporary name `tmp`), None when `e` is not
    an error of the file system. An error naming another file names that file."""
    code = _errno_of(e)
    if code is None:
        return None
    name = getattr(e, "filename", None)
    inside = tmp is not None and name is not None and (Path(name) == tmp or tmp in Path(name).parents)
    where = path if name is None or inside else Path(name)
    return FileSystemError(_explain(code, where))


def _reraise(e: BaseException, path: Path, tmp: Path | None = None) -> NoReturn:
    """Raise fs_error(e) in place of `e` when it is an error of the file system, else `e` itself (called in an
    except block)."""
    err = fs_error(e, path, tmp)
    if err is None:
        raise e
    raise err from None


def os_error_line(e: OSError) -> str:
    """An OSError no place explained, as one line: `<strerror>: <path>`."""
    what = e.strerror or str(e) or type(e).__name__
    return f"{what}: {e.filename}" if e.filename else what


def make_dir(path: Path) -> Path:
    """`path` as a folder, made with its missing parents (each handed to the user behind sudo); a file in the way,
    no permission or a full disk is one FileSystemError."""
    missing = [p for p in (path, *path.parents) if not p.exists()]
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        _reraise(e, path)
    for p in reversed(missing):
        hand_over(p)
    return path


# ---- one writer at a time ---------------------------------------------------------------------------------
def _say(message: str) -> None:
    print(f"ztbp: {message}", file=sys.stderr, flush=True)


def _open_lock(lock: Path) -> int:
    """The lock file's descriptor (made when missing, never through a link)."""
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    except OSError as e:
        _reraise(e, lock)
    hand_over(lock)
    return fd


def _acquire(fd: int, lock: Path, what: str, say: Callable[[str], None]) -> bool:
    """Take the flock on `fd`, waiting up to LOCK_WAIT_S; True when another process held it first."""
    import fcntl

    start, waited, told = time.monotonic(), False, False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return waited
        except BlockingIOError:
            pass
        except OSError as e:
            if e.errno in (errno.ENOLCK, errno.EOPNOTSUPP):
                return False  # a file system without locks: the writes are still atomic renames
            _reraise(e, lock)
        waited, elapsed = True, time.monotonic() - start
        if elapsed >= LOCK_WAIT_S:
            raise ZtbpError(f"another ztbp has held {lock} for {elapsed / 60:.0f} min; let it finish (or stop it) "
                            "and run this again")
        if not told and elapsed >= LOCK_NOTICE_S:
            say(f"waiting for another ztbp on {what} (it holds {lock}; at most {LOCK_WAIT_S / 60:.0f} min)")
            told = True
        time.sleep(0.1)


@contextmanager
def locked(lock: Path, what: str, say: Callable[[str], None] = _say) -> Iterator[bool]:
    """Hold an exclusive flock on the file `lock` (made when missing) for the block, and yield whether another
    process (or thread) held it first, and so may have made what this one came to make. Waits up to LOCK_WAIT_S,
    saying after LOCK_NOTICE_S what it waits for; a lock this thread holds is taken again at once. The kernel
    drops the lock when its process ends, however it ends: no stale lock stays behind."""
    import threading

    key = (threading.get_ident(), os.path.realpath(lock))
    if _HELD.get(key):
        _HELD[key] += 1
        try:
            yield False
        finally:
            _HELD[key] -= 1
        return
    fd = _open_lock(lock)
    try:
        waited = _acquire(fd, lock, what, say)
        _HELD[key] = 1
        try:
            yield waited
        finally:
            _HELD.pop(key, None)
    finally:
        os.close(fd)  # drops the flock


@contextmanager
def exclusive(lock: Path, what: str) -> Iterator[None]:
    """Hold the flock on the file `lock` (made when missing) for the block, or refuse at once with a ClaimError when
    another process (or thread) holds it: of two commands writing one folder at the same time (a report), the
    second says so and writes nothing."""
    import fcntl

    fd = _open_lock(lock)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ClaimError(f"{what} is being written by another command now (it holds {lock}); this one wrote "
                             "nothing: run it again once that one is done") from None
        except OSError as e:
            if e.errno not in (errno.ENOLCK, errno.EOPNOTSUPP):  # a file system without locks: go on
                _reraise(e, lock)
        yield
    finally:
        os.close(fd)


# ---- whole files --------------------------------------------------------------------------------------------
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
    removed when it raises (an error of the file system, such as a full disk, becomes one FileSystemError). The
    target is checked with check_target before and after; under sudo the file is handed to the user first."""
    check_target(path)
    tmp = sibling_tmp(path)
    try:
        yield tmp
        check_target(path)
        hand_over(tmp)
        os.replace(tmp, path)
    except BaseException as e:
        with suppress(OSError):  # never made (its folder is a file, a full disk): nothing to remove
            tmp.unlink(missing_ok=True)
        _reraise(e, path, tmp)


@contextmanager
def atomic_writer(path: Path) -> Iterator[BinaryIO]:
    """A binary file that becomes `path` whole when the block ends: atomic_path's temporary name, created new
    (never an existing file, so nothing planted there is followed) with the mode open() gives."""
    with atomic_path(path) as tmp, tmp.open("xb") as f:
        yield f


@contextmanager
def atomic_dir(path: Path) -> Iterator[Path]:
    """A temporary folder path beside `path` (not yet created) for a writer of many files; when the block ends
    normally it replaces `path` (a folder, or missing) in two renames, when it raises it is removed. A reader
    sees the old folder or the new one, never one half written (between the renames: none)."""
    import shutil

    if path.is_symlink() or (path.exists() and not path.is_dir()):
        raise ZtbpError(f"{path} exists and is not a folder; move it away")
    tmp = sibling_tmp(path)
    old = tmp.with_name(tmp.name.removesuffix(".tmp") + ".old")
    try:
        yield tmp
        hand_over_tree(tmp)
        _swap(tmp, path, old)
    except BaseException as e:
        shutil.rmtree(tmp, ignore_errors=True)
        _reraise(e, path, tmp)
    shutil.rmtree(old, ignore_errors=True)


def _swap(new: Path, path: Path, old: Path) -> None:
    """Put the folder `new` in the place of `path`, which moves to `old` (and back when the second rename fails)."""
    if path.exists():
        os.rename(path, old)
    try:
        os.rename(new, path)
    except BaseException:
        if old.exists() and not path.exists():
            os.rename(old, path)
        raise


# ---- names two commands may race for --------------------------------------------------------------------------
#: the mark a folder claimed with nothing of its own yet holds: a claimed folder is never empty, so no other claim
#: can take it over (claim_dir)
CLAIM_MARK = ".ztbp-claimed"


def sibling_tmp(path: Path, kind: str = "tmp") -> Path:
    """A unique, not yet existing name beside `path`: .NAME.<pid>-<random>.KIND."""
    import secrets  # here, not at the top: building the CLI's parser imports this module (start-up time)

    return path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.{kind}")


def publish_new(tmp: Path, path: Path, files: tuple[str, ...] = ()) -> None:
    """Make the folder `tmp` (built beside `path`) appear as `path`, exclusively: in one rename when `path` is
    missing or an empty folder; when it holds other entries, by linking tmp's `files` (paths inside it, in order)
    into it, each created new. When another command made `path` (or one of the files) first, a ClaimError and
    nothing of tmp left in `path`. tmp is removed either way."""
    import shutil

    try:
        try:
            os.rename(tmp, path)
            return
        except OSError as e:
            if e.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                _reraise(e, path, tmp)
            if not files or not path.is_dir():
                raise ClaimError(f"{path} was made by another command meanwhile; this one wrote nothing: "
                                 "choose another name") from None
        made: list[Path] = []
        try:
            for rel in files:
                make_dir((path / rel).parent)
                os.link(tmp / rel, path / rel)
                made.append(path / rel)
        except FileExistsError:
            for p in made:
                p.unlink(missing_ok=True)
            raise ClaimError(f"{path / rel} was made by another command meanwhile; this one wrote nothing") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def claim_dir(path: Path, first: dict[str, str] | None = None) -> Path:
    """`path` as a new folder that this command alone owns, holding the files `first` (name -> text) from the moment
    it appears (CLAIM_MARK when there are none: a claimed folder is never empty); a missing folder or an empty one
    is taken, one that holds anything is a ClaimError. Of two commands that claim one path at once, exactly one
    gets it and the other writes nothing."""
    make_dir(path.parent)
    tmp = sibling_tmp(path, "claim")
    try:
        tmp.mkdir()
        for name, text in (first or {CLAIM_MARK: ""}).items():
            (tmp / name).write_text(text)
        hand_over_tree(tmp)
    except OSError as e:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
        _reraise(e, path, tmp)
    publish_new(tmp, path)
    return path


def write_atomic(path: Path, data: str | bytes) -> None:
    """Write `path` whole (atomic_writer): a target that exists and is not a regular file (a link, a device, a
    folder) is refused, never replaced."""
    with atomic_writer(path) as f:
        f.write(data.encode() if isinstance(data, str) else data)


def write_json(path: Path, obj: Any) -> None:
    """`obj` as indented JSON, written whole (write_atomic)."""
    write_atomic(path, json.dumps(obj, indent=2, default=str) + "\n")


#: The longest line a reader of a trace or a probe file takes (a line of any of them holds under 200 bytes): a longer
#: one is skipped and counted, never held whole, so the memory a reader needs stays bounded on any input.
MAX_LINE_BYTES = 1 << 20
LONG_LINE = f"line longer than {MAX_LINE_BYTES >> 20} MiB"
#: The most lines one chunk of byte_chunks holds: a reader's memory grows with the lines of a chunk (a frame row, a
#: regex match per line), so a file of short lines (a gigabyte of newlines) is cut finer than its bytes alone say.
MAX_CHUNK_LINES = 1 << 20


def byte_chunks(path: Path, chunk_bytes: int, skip_lines: int = 0, digest: Any = None,
                on_long: Callable[[int], None] | None = None, max_line: int = MAX_LINE_BYTES,
                max_lines: int = MAX_CHUNK_LINES) -> Iterator[tuple[bytes, int]]:
    """Chunks of whole lines of a file (about chunk_bytes each, at most `max_lines` lines) and the 1-based line
    number each starts at; `digest` (a hashlib object), when given, is fed every byte of the file read. A line that
    outgrows `max_line` before its newline arrives is dropped as it is read, never held whole (at most chunk_bytes +
    max_line of the file are held), and on_long(its line number) is called; a line of that length inside one chunk
    is left to the reader, which skips it by its length. The `skip_lines` first lines (a header) are read past the
    same way.

    Only the file's last chunk can lack a trailing newline (a truncated last line)."""
    feed = digest.update if digest is not None else (lambda _b: None)
    dropped = on_long or (lambda _n: None)
    with path.open("rb") as f:
        line_no = 1
        for _ in range(skip_lines):
            got = False
            while piece := f.readline(max_line):
                feed(piece)
                got = True
                if piece.endswith(b"\n"):
                    break
            line_no += got
        rest, dropping = b"", False
        while True:
            buf = f.read(chunk_bytes)
            feed(buf)
            if not buf:
                if dropping:
                    dropped(line_no)
                elif rest:
                    yield rest, line_no
                return
            if dropping:  # the rest of a line too long: up to its newline
                nl = buf.find(b"\n")
                if nl < 0:
                    continue
                dropped(line_no)
                line_no, dropping, buf = line_no + 1, False, buf[nl + 1:]
            buf = rest + buf if rest else buf
            cut = buf.rfind(b"\n")
            chunk, rest = buf[: cut + 1], buf[cut + 1:]
            if len(rest) > max_line:
                rest, dropping = b"", True
            if chunk:
                line_no += yield from _pieces(chunk, line_no, max_lines)


def _pieces(chunk: bytes, first: int, max_lines: int, start: int = 0, end: int | None = None
            ) -> Generator[tuple[bytes, int], None, int]:
    """chunk[start:end] (whole lines starting at line `first`) in pieces of at most `max_lines` lines; returns its
    number of lines. A part with more is cut at lines' ends into as many equal parts by bytes as its lines ask
    for, each counted once (each byte is counted about twice in all, once for a chunk within the bound)."""
    end = len(chunk) if end is None else end
    n = chunk.count(b"\n", start, end)
    if n <= max_lines:
        yield (chunk if (start, end) == (0, len(chunk)) else chunk[start:end]), first
        return n
    parts = -(-n // max_lines) + 1
    cuts = [start]
    for k in range(1, parts):
        at = chunk.rfind(b"\n", cuts[-1], start + (end - start) * k // parts) + 1
        if at > cuts[-1]:
            cuts.append(at)
    if len(cuts) == 1:  # one line reaches past every cut: at its end
        cuts.append(chunk.find(b"\n", start, end) + 1)
    cuts.append(end)
    seen = 0
    for a, b in zip(cuts, cuts[1:], strict=False):
        if b > a:
            seen += yield from _pieces(chunk, first + seen, max_lines, a, b)
    return seen


def bounded_lines(f: BinaryIO, max_bytes: int) -> Iterator[tuple[int, bytes | None]]:
    """The lines of a binary file as (line number from 1, the line), never more than `max_bytes` of one held: a
    line longer than that is read past in pieces and given as None (for the reader to skip and count)."""
    n = 0
    while True:
        line = f.readline(max_bytes + 1)
        if not line:
            return
        n += 1
        if len(line) > max_bytes:
            while line and not line.endswith(b"\n"):
                line = f.readline(1 << 20)
            yield n, None
        else:
            yield n, line


def read_env(path: Path) -> dict[str, str]:
    """KEY=VALUE lines of a file the guest wrote ({} when it is missing); lines without '=' are skipped."""
    if not path.is_file():
        return {}
    return dict(line.split("=", 1) for line in path.read_text(errors="replace").splitlines() if "=" in line)


def env_int(value: str | None) -> int | None:
    """A KEY=VALUE value as a non-negative integer, None when it is missing or not a number."""
    return int(value) if value and value.strip().isdigit() else None

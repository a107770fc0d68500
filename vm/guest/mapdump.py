#!/usr/bin/env python3
"""mapdump.py - take the row map of probes/nvme_zone.bt out of a running bpftrace, fast.

bpftrace prints a map at exit one key at a time (two system calls and a formatted line per row: ~180 s for a
million rows under QEMU TCG). This reads the same map with BPF_MAP_LOOKUP_AND_DELETE_BATCH, tens of thousands of
rows per system call, and writes them in bpftrace's own print format ("@rows[k1, k2, k3, k4]: (v1, ..., v8)"),
so probes/nvme_zone.awk turns them into CSV exactly as it does bpftrace's dump. The rows it took are deleted from
the map: whatever completes afterwards stays there and bpftrace prints it at exit as before, so no row is lost
or written twice. Standard library only (it runs in the guest and on real machines).

With --raw it writes the batches as the kernel returned them, not formatted (RAW FORMAT below): under emulation
formatting a million rows in Python takes longer than reading them, so the loop (vm/guest/loop.sh) hands the raw
batches to the host, which formats them with --text, on the same code, at native speed.

USAGE:  mapdump.py [--raw] PID [KEY_WORDS VALUE_WORDS] > rows.dump
        mapdump.py --text FILE... > rows.dump       (the rows of --raw files in the print format)
        PID: the bpftrace process; the map is the hash map whose key and value are KEY_WORDS and VALUE_WORDS
        64-bit words (default 4 and 8: @rows[ts, ctrl, qid, cid] = (done, lat, nsid, opcode, slba, nlb, zsa,
        status) of probes/nvme_zone.bt). Exit status 0 with the row count on stderr ("mapdump: N rows"); 3 when no
        such map exists (nothing was taken: let bpftrace print it); 1 on an error (rows taken so far are written
        first).
RAW FORMAT: the 8 bytes "ZTBPROWS", KEY_WORDS and VALUE_WORDS as two little-endian 32-bit integers, then batches:
        a little-endian 64-bit row count N, N keys, N values (little-endian 64-bit words each).
Needs Linux >= 5.6 (pidfd_getfd, batch operations on hash maps) and CAP_SYS_PTRACE/CAP_BPF (root), x86_64 or
aarch64 (not for --text).
"""

from __future__ import annotations

import ctypes
import os
import platform
import struct
import sys
from typing import Any

SYSCALLS = {"x86_64": (321, 434, 438), "aarch64": (280, 434, 438)}  # bpf, pidfd_open, pidfd_getfd
BPF_MAP_LOOKUP_AND_DELETE_BATCH = 25
BPF_MAP_TYPE_HASH = 1
BATCH_ROWS = 16384
NO_MAP = 3


class BatchAttr(ctypes.Structure):
    """union bpf_attr, the `batch` member (include/uapi/linux/bpf.h)."""

    _fields_ = [("in_batch", ctypes.c_uint64), ("out_batch", ctypes.c_uint64), ("keys", ctypes.c_uint64),
                ("values", ctypes.c_uint64), ("count", ctypes.c_uint32), ("map_fd", ctypes.c_uint32),
                ("elem_flags", ctypes.c_uint64), ("flags", ctypes.c_uint64)]


def fdinfo(pid: int) -> dict[int, dict[str, str]]:
    """The BPF maps among the descriptors of `pid`: fd -> its fdinfo fields."""
    maps = {}
    for name in os.listdir(f"/proc/{pid}/fdinfo"):
        try:
            with open(f"/proc/{pid}/fdinfo/{name}") as f:
                fields = dict(line.split(":", 1) for line in f if ":" in line)
        except OSError:
            continue
        if "map_type" in fields:
            maps[int(name)] = {k.strip(): v.strip() for k, v in fields.items()}
    return maps


def find_map(pid: int, key_size: int, value_size: int) -> int | None:
    """The descriptor (in `pid`) of its one hash map with these sizes, or None."""
    found = [fd for fd, info in fdinfo(pid).items()
             if int(info["map_type"]) == BPF_MAP_TYPE_HASH and int(info["key_size"]) == key_size
             and int(info["value_size"]) == value_size]
    return found[0] if len(found) == 1 else None


RAW_MAGIC = b"ZTBPROWS"
RAW_HEAD = struct.Struct("<8sII")
RAW_COUNT = struct.Struct("<Q")


def print_lines(kb: bytes, vb: bytes, kfmt: struct.Struct, vfmt: struct.Struct) -> str:
    """One batch of keys and values (packed words) as bpftrace print lines."""
    return "".join(f"@rows[{', '.join(map(str, k))}]: ({', '.join(map(str, v))})\n"
                   for k, v in zip(kfmt.iter_unpack(kb), vfmt.iter_unpack(vb), strict=True))


def dump(pid: int, key_words: int, value_words: int, out: Any, raw: bool = False) -> int:
    """Write every row of the map as a bpftrace print line (`raw`: the batches as they are, to the binary stream
    `out`), deleting it from the map; return the row count."""
    nr_bpf, nr_pidfd_open, nr_getfd = SYSCALLS[platform.machine()]
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    key_size, value_size = 8 * key_words, 8 * value_words
    remote = find_map(pid, key_size, value_size)
    if remote is None:
        print(f"mapdump: bpftrace {pid} has no single hash map of {key_size}-byte keys and {value_size}-byte "
              "values", file=sys.stderr)
        return -1
    pidfd = libc.syscall(nr_pidfd_open, pid, 0)
    fd = libc.syscall(nr_getfd, pidfd, remote, 0) if pidfd >= 0 else -1
    if fd < 0:
        raise OSError(ctypes.get_errno(), f"pidfd_getfd of bpftrace {pid}'s map: {os.strerror(ctypes.get_errno())}")
    keys = ctypes.create_string_buffer(key_size * BATCH_ROWS)
    values = ctypes.create_string_buffer(value_size * BATCH_ROWS)
    token_in = ctypes.create_string_buffer(64)
    token_out = ctypes.create_string_buffer(64)
    kfmt, vfmt = struct.Struct(f"<{key_words}Q"), struct.Struct(f"<{value_words}Q")
    rows, first = 0, True
    if raw:
        out.write(RAW_HEAD.pack(RAW_MAGIC, key_words, value_words))
    while True:
        attr = BatchAttr(in_batch=0 if first else ctypes.addressof(token_in), out_batch=ctypes.addressof(token_out),
                         keys=ctypes.addressof(keys), values=ctypes.addressof(values), count=BATCH_ROWS,
                         map_fd=fd)
        rc = libc.syscall(nr_bpf, BPF_MAP_LOOKUP_AND_DELETE_BATCH, ctypes.byref(attr), ctypes.sizeof(attr))
        err = ctypes.get_errno() if rc < 0 else 0
        if rc < 0 and err != 2:  # ENOENT: the last batch (attr.count rows, maybe none)
            raise OSError(err, f"BPF_MAP_LOOKUP_AND_DELETE_BATCH: {os.strerror(err)} after {rows} rows")
        n = attr.count
        kb, vb = keys.raw[:n * key_size], values.raw[:n * value_size]
        if raw:
            if n:
                out.write(RAW_COUNT.pack(n) + kb + vb)
        else:
            out.write(print_lines(kb, vb, kfmt, vfmt))
        rows += n
        if rc < 0:
            return rows
        ctypes.memmove(token_in, token_out, 64)
        first = False


def text(path: str, out: Any) -> int:
    """The rows of a --raw file as bpftrace print lines; return the row count. ValueError: not such a file, or
    one cut short."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < RAW_HEAD.size or data[:8] != RAW_MAGIC:
        raise ValueError(f"{path}: not a file of mapdump.py --raw (no {RAW_MAGIC.decode()} header)")
    _, key_words, value_words = RAW_HEAD.unpack_from(data)
    kfmt, vfmt = struct.Struct(f"<{key_words}Q"), struct.Struct(f"<{value_words}Q")
    pos, rows = RAW_HEAD.size, 0
    while pos < len(data):
        if pos + RAW_COUNT.size > len(data):
            raise ValueError(f"{path}: cut short after {rows} rows")
        (n,) = RAW_COUNT.unpack_from(data, pos)
        pos += RAW_COUNT.size
        kb, vb = data[pos:pos + n * kfmt.size], data[pos + n * kfmt.size:pos + n * (kfmt.size + vfmt.size)]
        if len(vb) != n * vfmt.size:
            raise ValueError(f"{path}: cut short after {rows} rows")
        out.write(print_lines(kb, vb, kfmt, vfmt))
        pos += n * (kfmt.size + vfmt.size)
        rows += n
    return rows


def main(argv: list[str]) -> int:
    if len(argv) >= 3 and argv[1] == "--text":
        try:
            rows = sum(text(path, sys.stdout) for path in argv[2:])
        except (OSError, ValueError) as e:
            print(f"mapdump: {e}", file=sys.stderr)
            return 1
        print(f"mapdump: {rows} rows", file=sys.stderr)
        return 0
    raw = len(argv) > 1 and argv[1] == "--raw"
    args = argv[2:] if raw else argv[1:]
    if len(args) not in (1, 3) or not args[0].isdigit():
        print(__doc__, file=sys.stderr)
        return 2
    key_words, value_words = (int(args[1]), int(args[2])) if len(args) == 3 else (4, 8)
    try:
        rows = dump(int(args[0]), key_words, value_words, sys.stdout.buffer if raw else sys.stdout, raw)
    except OSError as e:
        print(f"mapdump: {e}", file=sys.stderr)
        return 1
    finally:
        sys.stdout.flush()
    if rows < 0:
        return NO_MAP
    print(f"mapdump: {rows} rows", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

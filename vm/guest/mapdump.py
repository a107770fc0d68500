#!/usr/bin/env python3
"""mapdump.py - take the row map of probes/nvme_zone.bt out of a running bpftrace, fast.

bpftrace prints a map at exit one key at a time (two system calls and a formatted line per row: ~180 s for a
million rows under QEMU TCG). This reads the same map with BPF_MAP_LOOKUP_AND_DELETE_BATCH, tens of thousands of
rows per system call, and writes them in bpftrace's own print format ("@rows[k1, k2, k3, k4]: (v1, ..., v8)"),
so probes/nvme_zone.awk turns them into CSV exactly as it does bpftrace's dump. The rows it took are deleted from
the map: whatever completes afterwards stays there and bpftrace prints it at exit as before, so no row is lost
or written twice. Standard library only (it runs in the guest and on real machines).

USAGE:  mapdump.py PID [KEY_WORDS VALUE_WORDS] > rows.dump
        PID: the bpftrace process; the map is the hash map whose key and value are KEY_WORDS and VALUE_WORDS
        64-bit words (default 4 and 8: @rows[ts, ctrl, qid, cid] = (done, lat, nsid, opcode, slba, nlb, zsa,
        status) of probes/nvme_zone.bt). Exit status 0 with the row count on stderr; 3 when no such map exists
        (nothing was taken: let bpftrace print it); 1 on an error (rows taken so far are written first).
Needs Linux >= 5.6 (pidfd_getfd, batch operations on hash maps) and CAP_SYS_PTRACE/CAP_BPF (root), x86_64 or
aarch64.
"""

from __future__ import annotations

import ctypes
import os
import platform
import struct
import sys

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


def dump(pid: int, key_words: int, value_words: int, out: object) -> int:
    """Write every row of the map as a bpftrace print line, deleting it from the map; return the row count."""
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
        out.write("".join(f"@rows[{', '.join(map(str, k))}]: ({', '.join(map(str, v))})\n"
                          for k, v in zip(kfmt.iter_unpack(kb), vfmt.iter_unpack(vb), strict=True)))
        rows += n
        if rc < 0:
            return rows
        ctypes.memmove(token_in, token_out, 64)
        first = False


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 4) or not argv[1].isdigit():
        print(__doc__, file=sys.stderr)
        return 2
    key_words, value_words = (int(argv[2]), int(argv[3])) if len(argv) == 4 else (4, 8)
    try:
        rows = dump(int(argv[1]), key_words, value_words, sys.stdout)
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

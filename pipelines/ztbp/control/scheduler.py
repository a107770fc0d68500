"""An existing Dask scheduler for `ztbp batch --scheduler`: its address checked, and the TLS settings to reach it.

A scheduler and its workers run whatever code a client sends them, and the client unpickles what they send back —
unpickling runs code too. So a scheduler is trusted as much as the account running this command: only connect to
one you control. An address is `tcp://HOST:PORT` or `tls://HOST:PORT`; plain tcp:// (no encryption, no
authentication: anyone on the path can read the traces or pose as the scheduler) is accepted only to this machine
(a loopback address or `localhost`) unless `insecure` says the network is trusted; tls:// needs the CA file and this
client's certificate (and key, unless the certificate file holds it), given to dask as
`distributed.security.Security(require_encryption=True, ...)`.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ZtbpError

#: scheme://host:port, the host a name, an IPv4 address or a bracketed IPv6 address
_ADDRESS = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+)"
                      r":(?P<port>[0-9]{1,5})")
SCHEMES = ("tcp", "tls")
WHY = ("a scheduler runs the code a client sends and this client unpickles (runs) what it sends back: only connect "
       "to one you control")


@dataclass(frozen=True)
class Scheduler:
    """What `--scheduler` and its TLS options say; `insecure`: plain tcp:// to another machine is accepted."""

    address: str
    tls_ca_file: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    insecure: bool = False

    @property
    def tls_files(self) -> dict[str, str]:
        """The TLS options given, by their option name."""
        named = {"--tls-ca-file": self.tls_ca_file, "--tls-cert": self.tls_cert, "--tls-key": self.tls_key}
        return {k: v for k, v in named.items() if v}


def parse_address(address: str) -> tuple[str, str, int]:
    """(scheme, host, port) of `tcp://HOST:PORT` or `tls://HOST:PORT`; anything else is a ZtbpError."""
    m = _ADDRESS.fullmatch(address.strip())
    if m is None:
        raise ZtbpError(f"--scheduler {address!r} is not an address: give tcp://HOST:PORT or tls://HOST:PORT, "
                        "e.g. tls://10.0.0.5:8786")
    scheme, host, port = m["scheme"].lower(), m["host"], int(m["port"])
    if scheme not in SCHEMES:
        raise ZtbpError(f"--scheduler {address!r}: {scheme}:// is not accepted; give tcp:// (this machine) or tls://")
    if not 0 < port < 65536:
        raise ZtbpError(f"--scheduler {address!r}: port {port} is not between 1 and 65535")
    return scheme, host, port


def is_loopback(host: str) -> bool:
    """`localhost` or a loopback address (a name is not resolved: only `localhost` counts)."""
    if host.lower() in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _check_files(files: dict[str, str]) -> None:
    for option, path in files.items():
        if not Path(path).is_file():
            raise ZtbpError(f"{option} {path}: no such file")


def _security(s: Scheduler) -> Any:
    """dask's Security for a tls:// scheduler: encryption required, this client's certificate checked by the CA."""
    if not (s.tls_ca_file and s.tls_cert):
        raise ZtbpError(f"--scheduler {s.address}: tls:// needs --tls-ca-file (the CA that signed the scheduler's "
                        "certificate) and --tls-cert (this client's certificate; --tls-key when the key is apart)")
    _check_files(s.tls_files)
    from distributed.security import Security

    return Security(require_encryption=True, tls_ca_file=s.tls_ca_file, tls_client_cert=s.tls_cert,
                    tls_client_key=s.tls_key)


def connect_args(s: Scheduler) -> tuple[str, Any]:
    """The address and the dask Security (None: plain tcp) to connect to `s`, once it passes every check."""
    scheme, host, _ = parse_address(s.address)
    if scheme == "tls":
        return s.address.strip(), _security(s)
    if s.tls_files:
        raise ZtbpError(f"{', '.join(s.tls_files)} need a tls:// scheduler address, not {s.address}")
    if not (is_loopback(host) or s.insecure):
        raise ZtbpError(f"--scheduler {s.address}: plain tcp:// to another machine is neither encrypted nor "
                        "authenticated (anyone on the way can read the traces or pose as the scheduler), and "
                        f"{WHY}. Use tls:// with --tls-ca-file and --tls-cert, or pass --insecure for a scheduler "
                        "of yours on a network you trust")
    return s.address.strip(), None

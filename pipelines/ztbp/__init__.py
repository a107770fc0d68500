"""ZTBP workbench: trace, analyse and cache-tune zoned (ZNS) NVMe SSDs.

Data flows one way: probe CSV (raw/) -> typed Parquet (derived/) -> metrics, clusters, cache model ->
figures and reports -> cache-config.json -> the ztbp-ctl ioctl helper. The run-directory contract is
documented in probes/FORMAT.md.

Importing the package sets two things before any analysis module loads numba: numba's cache of compiled
functions goes to the project's cache folder (paths.CACHE / "numba": ZTBP_CACHE, else ~/.cache/ztbp), never into
the package folder, unless NUMBA_CACHE_DIR is set; and a process run as root under sudo writes no bytecode into
the user's tree.
"""

import os as _os
import sys as _sys

__version__ = "0.1.0"


def _numba_cache() -> None:
    """NUMBA_CACHE_DIR, when the user has not set it: the project's cache folder (read again by numba when it was
    imported first)."""
    if _os.environ.get("NUMBA_CACHE_DIR"):
        return
    from .paths import CACHE

    _os.environ["NUMBA_CACHE_DIR"] = str(CACHE / "numba")
    config = _sys.modules.get("numba.core.config")
    if config is not None:
        config.reload_config()


_numba_cache()
if _os.environ.get("SUDO_UID") and _os.geteuid() == 0:
    _sys.dont_write_bytecode = True  # no root-owned __pycache__ in the user's checkout

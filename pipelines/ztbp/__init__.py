"""ZTBP workbench: trace, analyse and cache-tune zoned (ZNS) NVMe SSDs.

Data flows one way: probe CSV (raw/) -> typed Parquet (derived/) -> metrics, clusters, cache model ->
figures and reports -> cache-config.json -> the ztbp-ctl ioctl helper. The run-directory contract is
documented in probes/FORMAT.md.

Importing the package sets three things before any analysis module loads numba: numba's cache of compiled
functions goes to the project's cache folder (paths.CACHE / "numba": ZTBP_CACHE, else ~/.cache/ztbp), never into
the package folder, unless NUMBA_CACHE_DIR is set; a process run as root under sudo writes no bytecode into the
user's tree; and on a CPU emulated by QEMU's TCG, numpy keeps to its SSE kernels (`_emulated_cpu`).
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


#: the CPU QEMU emulates (TCG) names itself so in /proc/cpuinfo (`-cpu max`: "QEMU TCG CPU version 2.5+")
TCG_CPU = "QEMU TCG CPU"


def _emulated_cpu(cpuinfo: str = "/proc/cpuinfo") -> None:
    """NPY_DISABLE_CPU_FEATURES, when the user has not set it and numpy is not loaded yet, on a CPU QEMU emulates:
    QEMU's TCG (7.2, Debian 12's) runs numpy's AVX2 argsort (x86-simd-sort, numpy >= 2) wrongly. Measured in the
    project's guest: int arrays of 2 to 1,500 elements came back out of order, and `ztbp cluster` died with SIGSEGV
    in np.unique (the host path's analysis, status 139); with the AVX2 kernels off both were right (hot zones
    1, 7, 11, 15, 19)."""
    if "NPY_DISABLE_CPU_FEATURES" in _os.environ or "numpy" in _sys.modules:
        return
    try:
        with open(cpuinfo, errors="replace") as f:
            head = f.read(8192)
    except OSError:
        return
    if TCG_CPU in head:
        _os.environ["NPY_DISABLE_CPU_FEATURES"] = "X86_V3 X86_V4"


_numba_cache()
_emulated_cpu()
if _os.environ.get("SUDO_UID") and _os.geteuid() == 0:
    _sys.dont_write_bytecode = True  # no root-owned __pycache__ in the user's checkout

"""numba's compiled functions made on the host for a guest that runs the same package from another folder: the
README test line's host path installs the wheel in the guest, whose `ztbp watch` compiled the window analysis
(DBSCAN, the cache model) under emulation before its probe attached — 268 s of a 665 s host path in a fresh-clone
run, against about 6 s on the host.

numba keeps a compiled function under a folder named after the absolute folder of its source file, valid while
the source (numba 0.68 checks its bytes' hash), the function's bytecode, numba's version and the target CPU stay the
same. So: the same target on both sides (NUMBA_CPU_NAME=generic: no host-only instructions), and `PackageLocator`
(NUMBA_CACHE_LOCATOR_CLASSES) names the folder after the package path instead (`ztbp.analysis`), so the checkout's
`pipelines/ztbp/analysis` and the guest's `site-packages/ztbp/analysis` share it. An older numba (no such setting,
or a source checked by its time) compiles in the guest as before: slower, nothing else.

The module has no import beyond numba's: the guest imports it from a copy beside the run (`seed`)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from numba.core import caching

#: the class numba 0.68 names so; older ones (the project asks for numba >= 0.59) have it private
UserProvidedCacheLocator = getattr(caching, "UserProvidedCacheLocator", None) or caching._UserProvidedCacheLocator

MODULE = "numba_seed"
#: the environment of both sides: `seed`'s process on the host and the guest's (GUEST_DIR for NUMBA_CACHE_DIR)
ENV = {"NUMBA_CPU_NAME": "generic", "NUMBA_CACHE_LOCATOR_CLASSES": f"{MODULE}.PackageLocator"}


class PackageLocator(UserProvidedCacheLocator):
    """NUMBA_CACHE_DIR/<package path>, e.g. `ztbp.analysis`, wherever the package is installed."""

    @classmethod
    def get_suitable_cache_subpath(cls, py_file: str) -> str:
        folder = Path(py_file).resolve().parent
        parts = [folder.name]
        while (folder.parent / "__init__.py").is_file():
            folder = folder.parent
            parts.insert(0, folder.name)
        return ".".join(parts)


def seed(out: Path, meta: dict[str, int], watch_args: list[str],
         cache: Path | None = None) -> tuple[dict[str, str], str]:
    """The watch's warm-up (`ztbp.control.watch.warm_up`, with the parameters `ztbp watch` makes of `watch_args`)
    compiled on the host into `out/numba`, this module copied to `out/numba-seed`: the guest's environment for it
    (the share is /ztbp/out there) and the folder its venv must find this module in (ZTBP_HOST_DEPS).

    With `cache` (a folder kept between runs): compiled there, then copied to `out/numba`; numba reuses what it
    compiled for the same source, bytecode, version and target (11.6 s on the host to compile, 2.6 s to reuse)."""
    (out / "numba-seed").mkdir(exist_ok=True)
    shutil.copy2(Path(__file__), out / "numba-seed" / f"{MODULE}.py")
    code = ("import json, sys\n"
            "from ztbp.cli import build_parser\n"
            "from ztbp.control.watch import warm_up\n"
            "from ztbp.analysis.watch import WatchParams\n"
            "a = build_parser().parse_args(['watch', '/dev/null', *json.loads(sys.argv[2])])\n"
            "p = WatchParams(k=a.k, threshold=a.threshold, budget_per_day=a.budget_per_day, "
            "min_interval_s=a.min_interval, backoff_s=a.backoff, cache_mib=a.cache_mib, page_kib=a.page_kib)\n"
            "print(round(warm_up(json.loads(sys.argv[1]), p), 3))\n")
    if cache is not None:  # a folder of its own for each source of the analysis and numba version: two runs of
        # different checkouts at once never write the same files
        import hashlib

        import numba

        h = hashlib.sha256(numba.__version__.encode())
        for source in sorted((Path(__file__).resolve().parents[1] / "pipelines" / "ztbp" / "analysis").glob("*.py")):
            h.update(source.name.encode() + source.read_bytes())
        cache = cache / h.hexdigest()[:16]
    env = {**os.environ, **ENV, "NUMBA_CACHE_DIR": str(cache or out / "numba"),
           "PYTHONPATH": os.pathsep.join([str(out / "numba-seed"), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", code, json.dumps(meta), json.dumps(watch_args)], env=env,
                          capture_output=True, text=True, check=False, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"the host's warm-up failed: {done.stderr[-2000:]}")
    if cache is not None and cache.is_dir():
        shutil.copytree(cache, out / "numba", dirs_exist_ok=True, ignore=shutil.ignore_patterns("*.tmp*"))
    return {**ENV, "NUMBA_CACHE_DIR": "/ztbp/out/numba"}, "/ztbp/out/numba-seed"

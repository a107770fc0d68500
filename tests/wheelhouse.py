"""A wheelhouse made from the packages already installed in the test environment, so the wheel test installs the
project into a fresh venv with `pip install --no-index --find-links` and downloads nothing: each installed
distribution the wheel needs is packed back into a wheel from its RECORD (uncompressed, for speed). The wheelhouse
is kept in the user's cache, under a name made from the distributions' names and versions, and reused;
another set of versions replaces it."""

from __future__ import annotations

import hashlib
import importlib.metadata as md
import re
import shutil
import tempfile
import zipfile
from collections.abc import Iterable
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name


def requirements_of(metadata_text: str, extras: Iterable[str] = ()) -> list[Requirement]:
    """The Requires-Dist lines of a METADATA file whose markers hold here, without extras or with one of
    `extras` (nbconvert needs bleach[css])."""
    reqs = [Requirement(line.split(":", 1)[1].strip()) for line in metadata_text.splitlines()
            if line.startswith("Requires-Dist:")]
    return [r for r in reqs
            if r.marker is None or any(r.marker.evaluate({"extra": e}) for e in ("", *extras))]


def installed() -> dict[str, md.Distribution]:
    """Installed distributions by canonical name."""
    return {canonicalize_name(d.metadata["Name"]): d for d in md.distributions()}


def closure(roots: Iterable[Requirement], dists: dict[str, md.Distribution]) -> list[md.Distribution]:
    """The installed distributions `roots` need, with everything they need in turn (and the extras asked for). A
    missing one is an error: the wheelhouse would not install."""
    seen: dict[str, md.Distribution] = {}
    done: set[tuple[str, frozenset[str]]] = set()
    todo = list(roots)
    while todo:
        req = todo.pop()
        name = canonicalize_name(req.name)
        if (name, frozenset(req.extras)) in done:
            continue
        done.add((name, frozenset(req.extras)))
        if name not in dists:
            raise LookupError(f"{req.name} is needed but not installed in this environment")
        seen[name] = dists[name]
        todo.extend(requirements_of(dists[name].read_text("METADATA") or "", req.extras))
    return sorted(seen.values(), key=lambda d: canonicalize_name(d.metadata["Name"]))


def wheel_name(dist: md.Distribution) -> str:
    """The wheel file name of an installed distribution, from its WHEEL file's tags."""
    tags = [line.split(":", 1)[1].strip() for line in (dist.read_text("WHEEL") or "").splitlines()
            if line.startswith("Tag:")]
    name = re.sub(r"[-_.]+", "_", dist.metadata["Name"])
    parts = list(zip(*(t.split("-") for t in tags or ["py3-none-any"]), strict=True))
    tag = "-".join(".".join(dict.fromkeys(p)) for p in parts)  # py2-none-any, py3-none-any: py2.py3-none-any
    return f"{name}-{dist.version}-{tag}.whl"


def pack(dist: md.Distribution, out: Path) -> Path:
    """The installed distribution as a wheel in `out`: the files of its RECORD (byte code left out, pip compiles
    its own), those installed outside site-packages (a kernel spec under share/) as the wheel's data."""
    site = Path(str(dist.locate_file("")))
    data = f"{re.sub(r'[-_.]+', '_', dist.metadata['Name'])}-{dist.version}.data/data/"
    target = out / wheel_name(dist)
    tmp = target.with_suffix(".part")
    record: list[str] = []
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_STORED) as z:
        for f in dist.files or []:
            rel = f.as_posix()
            if rel.endswith(".pyc") or rel.endswith("/RECORD") or rel.startswith("../../../bin/"):
                continue
            arc = data + rel.removeprefix("../../../") if rel.startswith("../../../") else rel
            src = (site / rel).resolve()
            if src.is_file():
                z.write(src, arc)
                record.append(f"{arc},,")
        info = next(p for p in (dist.files or []) if p.name == "RECORD").as_posix()
        z.writestr(info, "\n".join([*record, f"{info},,"]) + "\n")
    tmp.rename(target)
    return target


def wheelhouse(wheel: Path, cache: Path) -> Path:
    """A folder with a wheel of every installed distribution `wheel` needs, made once per set of versions."""
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        roots = requirements_of(z.read(meta).decode())
    dists = closure(roots, installed())
    key = hashlib.sha256(" ".join(f"{d.metadata['Name']}=={d.version}" for d in dists).encode()).hexdigest()[:16]
    house = cache / f"wheelhouse-{key}"
    for old in cache.glob("wheelhouse-*"):  # one wheelhouse is kept: the environment's versions changed
        if old != house:
            shutil.rmtree(old, ignore_errors=True)
    house.mkdir(parents=True, exist_ok=True)
    for d in dists:
        if not (house / wheel_name(d)).is_file():
            pack(d, house)
    return house


def download(requirement: str, cache: Path) -> Path:
    """One wheel from the package index (no dependencies), kept in `cache`: what the test environment does not hold
    itself (polars' runtime for CPUs without AVX2, which the guest needs)."""
    import subprocess
    import sys

    name = canonicalize_name(Requirement(requirement).name).replace("-", "_")
    version = str(Requirement(requirement).specifier).removeprefix("==")
    cache.mkdir(parents=True, exist_ok=True)
    have = sorted(cache.glob(f"{name}-{version}-*.whl"))
    if have:
        return have[0]
    got = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(cache), requirement],
                         capture_output=True, text=True, check=False, timeout=600)
    have = sorted(cache.glob(f"{name}-{version}-*.whl"))
    if got.returncode != 0 or not have:
        raise LookupError(f"pip download {requirement} failed: {(got.stderr or got.stdout).strip()[-300:]}")
    return have[0]


def unpack(wheel: Path, cache: Path) -> Path:
    """A wheel unpacked once into `cache` as a folder of its own, as it would lie in site-packages: for a venv that
    finds it through a .pth file instead of installing it (a 53 MB runtime took most of a minute to install in the
    guest under emulation). Unpacked beside and renamed into place, so a half-unpacked folder is never used."""
    dest = cache / wheel.name.removesuffix(".whl")
    if dest.is_dir():
        return dest
    cache.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".unpack-", dir=cache))
    with zipfile.ZipFile(wheel) as z:
        z.extractall(tmp)
    try:
        tmp.rename(dest)
    except OSError:  # another worker unpacked it first
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def runnable_pip(wheel: Path, out: Path) -> Path:
    """pip's wheel with its byte code, as `out/pip-run.whl`, for a machine without pip to run pip from (`python
    pip-run.whl/pip install ...`; a name ending in .whl, or pip takes its own zip for an egg). Run from the wheel,
    Python compiles every module pip imports from source each time (zipimport writes no byte code), which took
    most of the host path's 93 s install under emulation. Every module gets a byte-code file beside it, made by
    this Python and not checked against its source (unchecked-hash .pyc, where zipimport looks first); another
    Python version (another magic number) ignores them and compiles from source, as from the wheel."""
    import importlib.util
    import marshal

    target = out / "pip-run.whl"
    tmp = target.with_suffix(".part")
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(tmp, "w", zipfile.ZIP_STORED) as z:
        for info in src.infolist():
            data = src.read(info)
            z.writestr(info, data)
            if info.filename.endswith(".py"):
                code = compile(data, info.filename, "exec", dont_inherit=True)
                head = importlib.util.MAGIC_NUMBER + (0b01).to_bytes(4, "little") + importlib.util.source_hash(data)
                z.writestr(info.filename + "c", head + marshal.dumps(code))
    tmp.rename(target)
    return target

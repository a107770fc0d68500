"""The wheel installs on a user's machine: built by the standard build (`pip wheel --no-deps .`), it carries what
the host path needs beside the package (checked here, a few seconds); installed with pip into a fresh venv outside
the checkout (no system site-packages; its dependencies from a wheelhouse packed from this environment,
tests/wheelhouse.py, so nothing is downloaded but the build backend), it runs from a folder outside the checkout:
`ztbp doctor --json`, `ztbp capture-host --help` and `ztbp report` on a copy of the committed sample run.

The install and its commands run with `just test-wheel` only (ZTBP_TEST_WHEEL=1): measured 49-62 s on a quiet
2-core machine (install 15-21 s, the overview notebook's report 21-25 s, removing the 1 GB venv ~20 s), but
102-207 s beside the VM tests `just test` runs at the same time, over the budget of the README's test line.
`just test-wheel` reports every notebook by default (ZTBP_WHEEL_REPORT=all, about 90 s more: numba compiles the
cache model again for the fresh install)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import wheelhouse as house
from wheelhouse import wheelhouse

from ztbp.paths import CACHE, TEST_DATA

CHECKOUT = TEST_DATA.parents[1]
#: what the wheel must carry beside the package, under ztbp/_share/
SHARED = ["probes/nvme_zone.bt", "probes/nvme_zone.awk", "probes/nvme_zone_csv.sh", "probes/FORMAT.md",
          "probes/layers.bt", "notebooks/1-overview.ipynb", "notebooks/9-app.ipynb", "vm/guest/capture.sh",
          "vm/guest/loop.sh", "vm/guest/probe-lib.sh", "vm/guest/mapdump.py", "tools/ztbp-ctl/Makefile",
          "tools/ztbp-ctl/src/main.c", "tools/ztbp-ctl/src/ztbp_ctl.h"]
#: the notebooks `ztbp report` runs in the fresh venv: the overview by default, every one with `just test-wheel`
REPORT_ONLY = os.environ.get("ZTBP_WHEEL_REPORT", "1")


def run(argv: list[str], cwd: Path, env: dict[str, str], timeout: int = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=False, timeout=timeout)


#: the install into a fresh venv and the commands run from it: `just test-wheel` only (see the module's docstring)
needs_venv = pytest.mark.skipif(os.environ.get("ZTBP_TEST_WHEEL") != "1",
                                reason="installs the wheel into a fresh venv: `just test-wheel`")


def clean_env(tmp: Path) -> dict[str, str]:
    """The environment of the fresh venv's commands: none of this one's Python settings, caches under tmp."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env.update(PIP_DISABLE_PIP_VERSION_CHECK="1", ZTBP_CACHE=str(tmp / "cache"), HOME=str(tmp / "home"))
    return env


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, float]:
    """(the wheel built from the checkout with pip wheel --no-deps, the seconds it took)."""
    tmp = tmp_path_factory.mktemp("dist")
    t0 = time.monotonic()
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    build = run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp), str(CHECKOUT)], tmp, env)
    assert build.returncode == 0, build.stderr[-2000:]
    return next(tmp.glob("ztbp-*.whl")), time.monotonic() - t0


def test_the_wheel_carries_the_share(wheel: tuple[Path, float]) -> None:
    with zipfile.ZipFile(wheel[0]) as z:
        names = set(z.namelist())
    assert [f for f in SHARED if f"ztbp/_share/{f}" not in names] == []
    assert "ztbp/report/templates/page.html.j2" in names and "ztbp/doctor/verdicts.py" in names
    templates = sorted((CHECKOUT / "pipelines" / "ztbp" / "report" / "templates").glob("*.html.j2"))
    assert len(templates) > 1 and [t.name for t in templates if f"ztbp/report/templates/{t.name}" not in names] == []
    assert not [n for n in names if "/tests/" in n or "__pycache__" in n or "/build/" in n]
    meta = next(n for n in names if n.endswith(".dist-info/METADATA"))
    with zipfile.ZipFile(wheel[0]) as z:
        requires = [line for line in z.read(meta).decode().splitlines() if line.startswith("Requires-Dist:")]
    # a host install can make reports: the notebook runner is a dependency, not a dev extra
    assert {r.split()[1] for r in requires if "extra ==" not in r} >= {"papermill>=2.5", "nbconvert>=7.10",
                                                                         "ipykernel>=6.25"}


@pytest.fixture(scope="module")
def installed(wheel: tuple[Path, float],
              tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, str], dict[str, float]]]:
    """(the fresh venv's bin folder, the environment to run it in, the seconds each step took); the venv (about
    1 GB) is removed afterwards."""
    tmp = tmp_path_factory.mktemp("wheel")
    env = clean_env(tmp)
    took = {"build": wheel[1]}
    t0 = time.monotonic()
    house = wheelhouse(wheel[0], CACHE / "test-wheelhouse")
    took["wheelhouse"] = time.monotonic() - t0
    t0 = time.monotonic()
    venv = tmp / "venv"
    made = run([sys.executable, "-m", "venv", str(venv)], tmp, env)
    assert made.returncode == 0, made.stderr
    pip = run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-index", "--no-compile",
               "--find-links", str(house), str(wheel[0])], tmp, env)
    assert pip.returncode == 0, pip.stderr[-2000:]
    took["install"] = time.monotonic() - t0
    yield venv / "bin", env, took
    shutil.rmtree(tmp, ignore_errors=True)


@needs_venv
def test_paths_resolve_to_the_installed_share(installed: tuple[Path, dict[str, str], dict[str, float]]) -> None:
    bin_dir, env, _ = installed
    code = "import ztbp.paths as p; print(p.ROOT); print(p.CHECKOUT)"
    out = run([str(bin_dir / "python"), "-c", code], bin_dir.parent, env).stdout.split()
    share = Path(out[0])
    assert out[1] == "False" and share.name == "_share" and bin_dir.parent in share.parents
    assert [f for f in SHARED if not (share / f).is_file()] == []


@needs_venv
def test_doctor_and_capture_host_help_outside_the_checkout(
        installed: tuple[Path, dict[str, str], dict[str, float]], tmp_path: Path) -> None:
    bin_dir, env, _ = installed
    doctor = run([str(bin_dir / "ztbp"), "doctor", "--json"], tmp_path, env, timeout=120)
    doc = json.loads(doctor.stdout)
    assert doctor.returncode == (0 if doc["ready"] else 1), doctor.stderr
    assert doc["facts"]["runs_dir"] == str(tmp_path / "runs")  # runs/ go to the current folder, not the package
    help_ = run([str(bin_dir / "ztbp"), "capture-host", "--help"], tmp_path, env)
    assert help_.returncode == 0 and help_.stdout.startswith("usage: ztbp capture-host")


@needs_venv
def test_report_on_the_sample_run_outside_the_checkout(
        installed: tuple[Path, dict[str, str], dict[str, float]], tmp_path: Path) -> None:
    bin_dir, env, took = installed
    shutil.copytree(TEST_DATA / "runs" / "sample-paper80", tmp_path / "sample-paper80",
                    ignore=shutil.ignore_patterns("derived"))
    t0 = time.monotonic()
    only = [] if REPORT_ONLY == "all" else ["--only", REPORT_ONLY]
    rep = run([str(bin_dir / "ztbp"), "report", "sample-paper80", *only, "--json"], tmp_path, env)
    took["report"] = time.monotonic() - t0
    assert rep.returncode == 0, rep.stderr[-2000:]
    doc = json.loads(rep.stdout[rep.stdout.index("{"):])
    assert doc["ok"] and doc["pages"] and all(p["ok"] for p in doc["pages"])
    assert Path(doc["index"]) == tmp_path / "reports" / "sample-paper80" / "index.html"
    assert Path(doc["index"]).is_file()
    print("wheel test, seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in took.items()))


def test_an_installed_package_says_the_vm_path_needs_a_checkout(monkeypatch: pytest.MonkeyPatch,
                                                                  tmp_path: Path) -> None:
    """Installed, vm/vmtest.sh and vm/image.sh are not there: a VM command stops with one line saying so (before
    anything boots)."""
    from ztbp.acquire import vm
    from ztbp.errors import ZtbpError

    monkeypatch.setattr(vm, "VMTEST", tmp_path / "vmtest.sh")
    monkeypatch.setattr(vm, "IMAGE_SH", tmp_path / "image.sh")
    with pytest.raises(ZtbpError, match="the VM path runs from a checkout of the project"):
        vm.check_host()
    with pytest.raises(ZtbpError, match="guest image is made from a checkout"):
        vm.image_dir()


def test_paths_find_the_checkout_or_the_share(tmp_path: Path) -> None:
    """A package beside the project's pyproject.toml and probes/ reads the checkout's folders; installed (no
    pyproject.toml two levels up), the share the wheel carries."""
    from ztbp.paths import find_root

    checkout, site = tmp_path / "clone", tmp_path / "lib" / "python3.11" / "site-packages"
    (checkout / "pipelines" / "ztbp").mkdir(parents=True)
    (checkout / "probes").mkdir()
    (checkout / "pyproject.toml").write_text("[project]\n")
    (site / "ztbp").mkdir(parents=True)
    assert find_root(checkout / "pipelines" / "ztbp", site / "ztbp" / "_share") == (checkout, True)
    assert find_root(site / "ztbp", site / "ztbp" / "_share") == (site / "ztbp" / "_share", False)


def test_pip_runs_from_its_byte_code(tmp_path: Path) -> None:
    """runnable_pip: pip's wheel with a byte-code file beside each module; pip run from it imports those (zipimport
    names the file it loaded) and works."""
    pip_wheel = house.pack(house.installed()["pip"], tmp_path)
    run = house.runnable_pip(pip_wheel, tmp_path)
    with zipfile.ZipFile(run) as z:
        names = set(z.namelist())
    sources = {n for n in names if n.endswith(".py")}
    assert sources and {n + "c" for n in sources} <= names
    loaded = subprocess.run([sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv[1]); "
                             "import pip._internal.cli.main as m; print(m.__file__)", str(run)],
                            capture_output=True, text=True, check=False)
    assert loaded.returncode == 0 and loaded.stdout.strip().endswith("cli/main.pyc"), loaded
    version = subprocess.run([sys.executable, f"{run}/pip", "--version"], capture_output=True, text=True, check=False)
    assert version.returncode == 0 and version.stdout.startswith("pip "), version

"""The wheel carries what the host path needs beside the package: setuptools' build_py copies the project's probes,
notebooks, guest scripts and ztbp-ctl's source into ztbp/_share/ of the build (never into the checkout, which keeps
them at its root: ztbp.paths finds them there). Everything else is declared in pyproject.toml."""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
#: What goes into ztbp/_share/, as glob patterns from the project's root (MANIFEST.in puts the same into an sdist).
SHARED = ("probes/*", "notebooks/*.ipynb", "notebooks/README.md", "vm/guest/*.sh", "vm/guest/mapdump.py",
          "tools/ztbp-ctl/Makefile", "tools/ztbp-ctl/README.md", "tools/ztbp-ctl/src/*")


def shared_files(root: Path) -> list[Path]:
    """The files of SHARED under root, as paths relative to it."""
    return sorted({f.relative_to(root) for pattern in SHARED for f in root.glob(pattern) if f.is_file()})


class BuildWithShare(build_py):
    """build_py, then the shared files copied into <build>/ztbp/_share/ (a fresh copy each build: a file removed
    from the project leaves no stale copy in the next wheel). An editable install reads them from the checkout."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        share = Path(self.build_lib) / "ztbp" / "_share"
        shutil.rmtree(share, ignore_errors=True)
        for rel in shared_files(HERE):
            target = share / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(HERE / rel, target)


setup(cmdclass={"build_py": BuildWithShare})

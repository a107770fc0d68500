"""The report's warm kernels (report/kernels.py): a page runs in the kernel of the page before it, with nothing of
that page left in its namespace; a dead kernel is replaced; every kernel is shut down at the end."""

from __future__ import annotations

from pathlib import Path

import nbformat
import papermill
import pytest

from ztbp.report.kernels import ENGINE, Kernels, register_engine


def notebook(path: Path, *sources: str) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(s) for s in sources]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, str(path))
    return path


def run(kernels: Kernels, nb: Path, out: Path) -> list[str]:
    """The notebook executed in the calling thread's kernel; its stream outputs."""
    done = papermill.execute_notebook(str(nb), str(out), kernel_name="python3", engine_name=ENGINE,
                                      km=kernels.get(), progress_bar=False, log_output=False)
    return [o.get("text", "") for c in done.cells for o in c.get("outputs", [])]


@pytest.fixture
def kernels(tmp_path: Path):
    register_engine()
    with Kernels(tmp_path, []) as k:
        yield k


def test_the_next_page_reuses_the_kernel_with_an_empty_namespace(kernels: Kernels, tmp_path: Path) -> None:
    first = notebook(tmp_path / "a.ipynb", "import os\nleft = 41\nprint(os.getpid())")
    second = notebook(tmp_path / "b.ipynb", "import os\nprint(os.getpid(), 'left' in globals())")
    pid = run(kernels, first, tmp_path / "a-out.ipynb")[0].strip()
    assert run(kernels, second, tmp_path / "b-out.ipynb")[0].split() == [pid, "False"]
    assert kernels.started == 1
    # prompt numbers start at 1 on every page, and the kernel keeps no history that would collide
    done = nbformat.read(str(tmp_path / "b-out.ipynb"), as_version=4)
    assert [c.execution_count for c in done.cells] == [1]
    assert "not unique" not in "".join(run(kernels, first, tmp_path / "c-out.ipynb"))


def test_a_dead_kernel_is_replaced(kernels: Kernels, tmp_path: Path) -> None:
    nb = notebook(tmp_path / "a.ipynb", "import os\nprint(os.getpid())")
    pid = run(kernels, nb, tmp_path / "a-out.ipynb")[0].strip()
    kernels.get().shutdown_kernel(now=True)  # as if it had crashed (reset first: it was alive)
    assert run(kernels, nb, tmp_path / "b-out.ipynb")[0].strip() != pid
    assert kernels.started == 2


def test_close_shuts_every_kernel_down(tmp_path: Path) -> None:
    register_engine()
    with Kernels(tmp_path, []) as k:
        km = k.get()
        assert km.is_alive()
    assert not km.is_alive()

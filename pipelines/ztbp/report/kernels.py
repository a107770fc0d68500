"""Warm kernels for the report's notebooks: each worker thread of a report keeps one Jupyter kernel and runs its
notebooks in it one after the other, the namespace reset in between (`%reset -f`), instead of starting a kernel
per notebook. A page then pays its own cells only: starting a kernel and importing polars, plotly and the
package took ~2.5 s of every page (`ztbp report` on the sample run: 7 pages, 22.7 s before).

A kernel that died, timed out or could not be reset is shut down and the next page gets a new one, so a failing
notebook never leaves its state to the next; a page still runs exactly the cells of its executed notebook.
"""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path
from typing import Any

#: papermill's name of the engine below
ENGINE = "ztbp-warm"
#: Run in a kept kernel before its next notebook: the user namespace emptied, the cycle collector run, and the
#: prompt numbers starting at 1 again (store_history off, so this does not count as a cell).
RESET = ("get_ipython().run_line_magic('reset', '-f')\n"
         "__import__('gc').collect()\n"
         "get_ipython().execution_count = 1\n")
#: The kernel keeps no input history: a report's kernels share IPython's history database, and a prompt number
#: started again at 1 collides with the lines it already holds ("Session/line number was not unique").
NO_HISTORY = "--HistoryManager.enabled=False"
#: seconds to wait for a kept kernel's reset (a kernel that takes longer is replaced)
RESET_TIMEOUT_S = 60


def register_engine() -> None:
    """Register ENGINE with papermill: its nbclient engine, with the kernel client's channels closed after each
    notebook (a kernel given to papermill stays up, and so would its client's heartbeat thread)."""
    from papermill.clientwrap import PapermillNotebookClient
    from papermill.engines import NBClientEngine, papermill_engines
    from papermill.utils import merge_kwargs, remove_args

    class WarmEngine(NBClientEngine):
        @classmethod
        def execute_managed_notebook(cls, nb_man: Any, kernel_name: str, log_output: bool = False,
                                     stdout_file: Any = None, stderr_file: Any = None, start_timeout: int = 60,
                                     execution_timeout: int | None = None, **kwargs: Any) -> Any:
            from papermill.engines import logger

            kwargs = remove_args(["input_path", "timeout", "startup_timeout"], **kwargs)
            client = PapermillNotebookClient(nb_man, **merge_kwargs(
                kwargs, timeout=execution_timeout, startup_timeout=start_timeout, kernel_name=kernel_name,
                log=logger, log_output=log_output, stdout_file=stdout_file, stderr_file=stderr_file))
            try:
                return client.execute()
            finally:
                if client.kc is not None:
                    client.kc.stop_channels()

    if ENGINE not in papermill_engines._engines:
        papermill_engines.register(ENGINE, WarmEngine)


def _reset(km: Any) -> bool:
    """Empty a kept kernel's namespace; False when it does not answer (then it is replaced)."""
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=RESET_TIMEOUT_S)
        reply = kc.execute_interactive(RESET, store_history=False, timeout=RESET_TIMEOUT_S,
                                       output_hook=lambda msg: None)
        return reply["content"]["status"] == "ok"
    except Exception:  # noqa: BLE001 - timeout, dead kernel, ...: the kernel is replaced
        return False
    finally:
        kc.stop_channels()


class Kernels:
    """One warm kernel per thread: `get()` gives the calling thread its kernel, reset, or a new one; `discard()`
    shuts down the calling thread's kernel (after a notebook failed in a way that may leave it busy or broken);
    `close()` shuts down every kernel. Kernels start in `cwd` with `arguments`, and inherit the environment of the
    moment they start."""

    def __init__(self, cwd: Path, arguments: list[str], kernel_name: str = "python3") -> None:
        self.cwd, self.arguments, self.kernel_name = cwd, arguments, kernel_name
        self._local = threading.local()
        self._all: list[Any] = []
        self._lock = threading.Lock()
        self.started = 0

    def get(self) -> Any:
        km = getattr(self._local, "km", None)
        if km is not None and km.is_alive() and _reset(km):
            return km
        self.discard()
        from jupyter_client.manager import KernelManager

        km = KernelManager(kernel_name=self.kernel_name)
        km.start_kernel(cwd=str(self.cwd), extra_arguments=[*self.arguments, NO_HISTORY])
        with self._lock:
            self._all.append(km)
            self.started += 1
        self._local.km = km
        return km

    def discard(self) -> None:
        km = getattr(self._local, "km", None)
        self._local.km = None
        if km is not None:
            _shutdown(km)
            with self._lock:
                self._all = [k for k in self._all if k is not km]

    def close(self) -> None:
        with self._lock:
            kms, self._all = self._all, []
        for km in kms:
            _shutdown(km)

    def __enter__(self) -> Kernels:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _shutdown(km: Any) -> None:
    with contextlib.suppress(Exception):  # already gone
        km.shutdown_kernel(now=True)

"""The report driver: papermill runs the notebooks of notebooks/ on a run, nbconvert renders an offline HTML report.

`render(RUN)` writes `reports/<run-id>/`: one executed notebook and one HTML page per notebook (code hidden, a
button shows it), `index.html` linking them with each notebook's summary, and `plotly.min.js` — the only copy of
plotly's JavaScript, loaded by every page from the same folder, so a report opens offline and never asks a CDN.
Parameters for the notebooks' parameters cells come from a flat mapping (`-f params.yaml`, `-p NAME VALUE`); each
notebook receives the keys its parameters cell declares (report/notebooks.py). The pages' templates are package
data (`report/templates/`): nbconvert's page (`page.html.j2`) here, the front page in report/index.py.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..errors import ZtbpError
from ..files import check_target, hand_over_tree, make_dir, write_atomic
from ..io.run import load
from ..io.stamp import digest_bytes
from ..paths import REPORTS, RUNS, WORK
from ..present.figures import REPORT_ENV
from ..present.tables import run_headline
from ..units import MIB
from .index import Page, index_html, loop_index_html
from .kernels import ENGINE, Kernels, register_engine
from .notebooks import (
    INPUT_APP_RUN,
    INPUT_LOOP,
    INPUT_RUN,
    check_parameters,
    error_of,
    notebooks,
    only_for,
    summary_text,
    title_of,
)
from .pages import TEMPLATES, write_plotlyjs, writing


@contextmanager
def _env_all(values: dict[str, str]) -> Iterator[None]:
    old = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in old.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def exporter() -> Any:
    """nbconvert's HTML exporter with the report's page template (templates/page.html.j2: lab, code hidden)."""
    import jinja2
    from nbconvert import HTMLExporter

    exp = HTMLExporter(template_name="lab", extra_loaders=[jinja2.FileSystemLoader(str(TEMPLATES))])
    exp.template_file = "page.html.j2"
    return exp


#: Arguments of every notebook's kernel: its own log at CRITICAL, so the terminal keeps one progress line per page
#: (ipykernel warns "Kernel is running over TCP without encryption" at every start otherwise).
KERNEL_ARGUMENTS = ["--IPKernelApp.log_level=CRITICAL"]
#: What the kernels are told through the environment: figures as HTML without plotly.js, and no debugger notice.
KERNEL_ENV = {REPORT_ENV: "1", "PYDEVD_DISABLE_FILE_VALIDATION": "1"}
#: The report folder's record of what each page was made from (input_stamp), to reuse the pages that did not change.
STAMPS = ".stamps.json"


def default_jobs() -> int:
    """Notebooks run at once: one kernel per core, at most 2 (each kernel holds its run's frames)."""
    return max(1, min(2, os.cpu_count() or 1))


def _files_stamp(paths: list[Path]) -> list[tuple[str, int, int]]:
    """(path, size, mtime) of every file under `paths` (folders walked; derived/ and hidden files left out: they
    are made from the rest)."""
    out = []
    for p in paths:
        found = [p] if p.is_file() else sorted(
            f for f in p.rglob("*") if f.is_file() and "derived" not in f.relative_to(p).parts
            and not any(part.startswith(".") for part in f.relative_to(p).parts)) if p.is_dir() else []
        for f in found:
            st = f.stat()
            out.append((str(f), st.st_size, st.st_mtime_ns))
    return out


def package_stamp() -> list[tuple[str, int, int]]:
    """The package's own source as (path, size, mtime): a changed analysis changes every page."""
    package = Path(__file__).resolve().parents[1]
    return _files_stamp([f for f in sorted(package.rglob("*")) if f.suffix in (".py", ".j2")])


def input_stamp(notebook: Path, params: dict[str, Any], inputs: list[Path],
                package: list[tuple[str, int, int]] | None = None) -> str:
    """What a page is made from, as one digest (io/stamp.py's): the notebook, its parameters, the input files (size
    and time) and the package's source (`package`: package_stamp(), made once per report)."""
    import json

    doc = {"notebook": digest_bytes(notebook.read_bytes()), "params": params, "inputs": _files_stamp(inputs),
           "package": package_stamp() if package is None else package}
    return digest_bytes(json.dumps(doc, sort_keys=True, default=str).encode())


def _read_stamps(out: Path) -> dict[str, str]:
    import json

    try:
        doc = json.loads((out / STAMPS).read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in doc.items()} if isinstance(doc, dict) else {}


def _page_inputs(nb_params: dict[str, Any]) -> list[Path]:
    """The files a page reads: the run or loop directory and the profile of its parameters."""
    return [Path(str(v)) if Path(str(v)).is_absolute() else WORK / str(v)
            for k, v in nb_params.items() if k in ("run_dir", "loop_dir", "profile_dir") and v]


def _run_one(path: Path, nb_params: dict[str, Any], out: Path, label: str, source: str, timeout: int,
             exporter: Any, stamp: str, old_stamp: str | None, log: Callable[[str], None], kernels: Kernels) -> Page:
    """One notebook: executed with papermill into `out` (in the calling thread's warm kernel) and rendered to its
    HTML page, or reused when its stamp did not change since the page was made; a failing notebook is reported on
    its page, never raised."""
    import nbformat
    import papermill
    from papermill.exceptions import PapermillExecutionError

    executed = check_target(out / path.name)
    page_file = check_target(out / f"{path.stem}.html")
    t0 = time.monotonic()
    if stamp == old_stamp and executed.is_file() and page_file.is_file():
        nb = nbformat.read(str(executed), as_version=4)
        title, desc = title_of(nb, path.stem)
        page = Page(path.stem, title, desc, error=error_of(nb), summary=summary_text(nb), reused=True)
        page.ok = not page.error
        log(f"report: {label}: {path.stem}.html unchanged (reused)")
        return page
    err = ""
    try:
        papermill.execute_notebook(str(path), str(executed), parameters=nb_params, kernel_name="python3",
                                   engine_name=ENGINE, km=kernels.get(), progress_bar=False, log_output=False,
                                   execution_timeout=timeout)
    except PapermillExecutionError as e:  # a cell raised: the kernel is well and is reset for the next page
        err = f"{e.ename}: {e.evalue}"
    except Exception as e:  # noqa: BLE001 - kernel died, timeout, ...: report it on the page, get a new kernel
        err = f"{type(e).__name__}: {e}"
        kernels.discard()
    nb = nbformat.read(str(executed), as_version=4) if executed.is_file() else nbformat.read(
        str(path), as_version=4)
    title, desc = title_of(nb, path.stem)
    page = Page(path.stem, title, desc, ok=not err, error=err or error_of(nb),
                seconds=time.monotonic() - t0, summary=summary_text(nb))
    page.ok = not page.error
    body, _ = exporter.from_notebook_node(nb, resources={"metadata": {"name": f"{title} — {label}"},
                                                         "ztbp_title": f"{title} — {label}",
                                                         "ztbp_source": source})
    write_atomic(page_file, body)
    log(f"report: {label}: {path.stem}.html {'ok' if page.ok else 'FAILED: ' + page.error} "
        f"({page.seconds:.1f} s)")
    return page


def _run_pages(nbs: list[Path], declared: dict[Path, set[str]], parameters: dict[str, Any], first: dict[str, str],
               out: Path, label: str, timeout: int, log: Callable[[str], None], source: str = "",
               jobs: int = 1) -> list[Page]:
    """Execute each notebook with papermill into `out` and render its HTML page, `jobs` at once (each thread with
    its warm kernel, report/kernels.py); a page whose inputs did not change since it was made (input_stamp) is
    reused."""
    from concurrent.futures import ThreadPoolExecutor

    make_dir(out)
    write_plotlyjs(out)
    old = _read_stamps(out)
    stamps = {}
    work = []
    package = package_stamp()
    for path in nbs:
        nb_params = {k: v for k, v in parameters.items() if k in declared[path]}
        nb_params.update({k: v for k, v in first.items() if k in declared[path]})
        stamps[path.stem] = input_stamp(path, {**nb_params, "source": source}, _page_inputs(nb_params), package)
        work.append((path, nb_params))
    reuse = sum(old.get(p.stem) == stamps[p.stem] for p in nbs)
    log(f"report: {label}: {len(nbs)} notebook(s), {max(1, jobs)} at a time"
        + (f"; {reuse} unchanged since the last report" if reuse else ""))
    register_engine()
    with _env_all(KERNEL_ENV), Kernels(WORK, KERNEL_ARGUMENTS) as kernels, \
            ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        pages = list(pool.map(lambda w: _run_one(w[0], w[1], out, label, source, timeout, exporter(),
                                                 stamps[w[0].stem], old.get(w[0].stem), log, kernels), work))
    import json

    write_atomic(out / STAMPS, json.dumps({p.stem: stamps[p.stem] for p in pages if p.ok}, indent=1))
    hand_over_tree(out)  # papermill's executed notebooks, made as root under sudo, go to the user too
    return pages


def _pages_json(pages: list[Page]) -> list[dict[str, Any]]:
    return [{"notebook": p.stem, "html": f"{p.stem}.html", "title": p.title, "ok": p.ok, "error": p.error,
             "seconds": round(p.seconds, 2)} for p in pages]


def render(run_dir: str | os.PathLike[str], out_dir: str | os.PathLike[str] | None = None,
           parameters: dict[str, Any] | None = None, only: list[str] | None = None, timeout: int = 900,
           log: Callable[[str], None] = print, allow_send: bool = False, perfetto: bool = True,
           rounds: bool = False, jobs: int | None = None, source_prefix: str = "") -> dict[str, Any]:
    """Run the notebooks on a run with papermill and write the HTML report. Returns what was written.

    A watch session's journal folder (`ztbp watch`: watch.jsonl) gets one page of its own (report/watch.py).
    A loop directory (`ztbp loop`) gets the loop's notebooks (render_loop; with `rounds`, its rounds' run
    reports too). A run gets the run notebooks, and the application notebook when it has raw/appops.csv.
    Nothing is sent to a device unless allow_send: the cache notebook's write-back is a dry run otherwise. With
    perfetto, the run's Perfetto trace (`ztbp perfetto`) is written next to the pages and linked from the
    index."""
    from ..io.loop import is_loop_dir
    from .watch import check_something_to_report, is_watch_dir, render_watch

    if is_watch_dir(run_dir):  # a `ztbp watch` journal: one page, no notebook
        return render_watch(run_dir, out_dir, log)
    check_something_to_report(run_dir)
    if is_loop_dir(run_dir):
        return render_loop(run_dir, out_dir, parameters, only, timeout, log, rounds=rounds, jobs=jobs)
    run = load(run_dir)  # meta.json checked and the trace ingested here: a bad run fails before any kernel starts
    rp, meta = run.paths, run.meta
    parameters = dict(parameters or {})
    inputs = (INPUT_RUN, INPUT_APP_RUN) if rp.probe_csv("appops").is_file() else (INPUT_RUN,)
    nbs = notebooks(only, inputs)
    declared = check_parameters(nbs, parameters, allow_send)
    out = Path(out_dir) if out_dir else REPORTS / rp.run_id
    with writing(out):
        pages = _run_pages(nbs, declared, parameters, {"run_dir": str(rp.root.resolve())}, out, f"run {rp.run_id}",
                           timeout, log, source_prefix + run_source(rp.run_id, meta),
                           default_jobs() if jobs is None else jobs)
        trace = timeline_trace(run, out, log) if perfetto else None
        index = out / "index.html"
        write_atomic(index, index_html(rp, meta, pages, trace, run_headline(run)))
    return {"run": rp.run_id, "out": str(out), "index": str(index), "ok": all(p.ok for p in pages), "trace": trace,
            "pages": _pages_json(pages)}


def render_loop(loop_dir: str | os.PathLike[str], out_dir: str | os.PathLike[str] | None = None,
                parameters: dict[str, Any] | None = None, only: list[str] | None = None, timeout: int = 900,
                log: Callable[[str], None] = print, rounds: bool = False, jobs: int | None = None) -> dict[str, Any]:
    """The report of a loop directory: the loop notebook(s) and an index with the loop's rounds; with `rounds`,
    each round's run report too (the run notebooks, in round-NN/ of the report folder, linked from the index).
    `only` picks among both: its loop notebooks for the loop's pages, its run notebooks for the rounds'."""
    from ..io.loop import read_loop

    doc = read_loop(loop_dir)  # checked before any kernel starts
    root = Path(doc["dir"]).resolve()
    parameters = dict(parameters or {})
    loop_only, round_only = only_for(only, (INPUT_LOOP,)), only_for(only, (INPUT_RUN, INPUT_APP_RUN))
    nbs = [] if loop_only == [] else notebooks(loop_only, (INPUT_LOOP,))
    declared = check_parameters(nbs, parameters, False)
    out = Path(out_dir) if out_dir else REPORTS / root.name
    with writing(out):
        return _loop_pages(doc, root, out, nbs, declared, parameters, timeout, log, rounds, round_only,
                           default_jobs() if jobs is None else max(1, jobs))


def _loop_pages(doc: dict[str, Any], root: Path, out: Path, nbs: list[Path], declared: dict[Path, set[str]],
                parameters: dict[str, Any], timeout: int, log: Callable[[str], None], rounds: bool,
                round_only: list[str] | None, jobs: int) -> dict[str, Any]:
    """render_loop's pages, its rounds' reports and its index, written into `out`."""
    from ..io.loop import round_dir

    round_reports = []
    if rounds:
        from concurrent.futures import ThreadPoolExecutor

        runs = [round_dir(root, e["run"]) for e in doc["rounds"]]  # every one checked before any kernel starts
        # rounds side by side, each one notebook at a time: no kernel waits for the slowest page of a round
        at_once = min(jobs, len(runs)) or 1
        with ThreadPoolExecutor(max_workers=at_once) as pool:
            round_reports = list(pool.map(lambda run_dir: render(
                run_dir, out / run_dir.name, only=round_only, log=log, perfetto=False, jobs=max(1, jobs // at_once),
                source_prefix=f"loop {root.name}, "), runs))
    source = (f"loop {root.name} · {len(doc['rounds'])} round(s) on {doc.get('backend') or 'an unknown device'} · "
              f"workload {(doc.get('workload') or {}).get('name') or 'unnamed'}")
    pages = _run_pages(nbs, declared, parameters, {"loop_dir": str(root)}, out, f"loop {root.name}", timeout, log,
                       source, jobs)
    index = out / "index.html"
    write_atomic(index, loop_index_html(root.name, doc, pages, {r["run"] for r in round_reports if r["ok"]}))
    ok = all(p.ok for p in pages) and all(r["ok"] for r in round_reports)
    return {"run": root.name, "out": str(out), "index": str(index), "ok": ok, "trace": None,
            "pages": _pages_json(pages), "rounds": [{"run": r["run"], "index": r["index"], "ok": r["ok"]}
                                                    for r in round_reports]}


def timeline_trace(run: Any, out: Path, log: Callable[[str], None] = print) -> dict[str, Any]:
    """The run as a Perfetto trace in the report folder (present/perfetto.py); the error text when it fails."""
    from ..present.perfetto import export

    path = out / f"{run.run_id}.pftrace"
    try:
        res = export(run, path)
    except ZtbpError as e:
        log(f"report: {run.run_id}: no Perfetto trace: {e}")
        return {"file": None, "error": str(e)}
    log(f"report: {run.run_id}: {path.name} ({res.bytes / MIB:.1f} MiB, {res.seconds:.1f} s)")
    return {"file": path.name, "more": [Path(f).name for f in res.files[1:]], "mib": res.bytes / MIB,
            "commands": res.commands, "requests": res.requests}


def run_source(run_id: str, meta: dict[str, Any]) -> str:
    """What every page of a run's report names: the run, its device and workload (text; the template escapes it)."""
    zone_mib = meta["zone_size_lba"] * meta["lba_bytes"] / MIB
    kind = "synthetic run" if meta.get("synthetic") else "run"
    return (f"{kind} {run_id} · device {meta.get('device') or 'unknown'} ({meta.get('backend') or 'unknown'}), "
            f"{meta['nr_zones']} zones of {zone_mib:g} MiB · workload "
            f"{(meta.get('workload') or {}).get('name') or 'unnamed'}")


def report_runs(all_runs: bool, runs: list[str]) -> list[str]:
    if all_runs:
        found = sorted(str(p.parent) for p in RUNS.glob("*/meta.json"))
        if not found:
            raise ZtbpError(f"no run in {RUNS}: capture one with `just capture` or make one with `just synth`")
        return found
    if not runs:
        raise ZtbpError("give a run directory, or --all for every run in runs/")
    return runs



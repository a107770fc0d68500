"""The report driver: papermill runs the notebooks of notebooks/ on a run, nbconvert renders an offline HTML report.

`render(RUN)` writes `reports/<run-id>/`: one executed notebook and one HTML page per notebook (code hidden, a
button shows it), `index.html` linking them with each notebook's summary, and `plotly.min.js` — the only copy of
plotly's JavaScript, loaded by every page from the same folder, so a report opens offline and never asks a CDN.
Parameters for the notebooks' parameters cells come from a flat mapping (`-f params.yaml`, `-p NAME VALUE`); each
notebook receives the keys its parameters cell declares. The page template is package data
(`report/templates/page.html.j2`).
"""

from __future__ import annotations

import html
import os
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ZtbpError
from ..files import check_target, hand_over_tree, make_dir, write_atomic
from ..io.run import load
from ..io.stamp import digest_bytes
from ..paths import NOTEBOOKS, REPORTS, RUNS, WORK, RunPaths
from ..present.figures import REPORT_ENV
from ..present.loop import headline as loop_headline
from ..present.tables import run_headline
from ..units import MIB
from .kernels import ENGINE, Kernels, register_engine

#: Default run of every notebook's parameters cell: the small real capture committed as test data.
SAMPLE_RUN = "tests/data/runs/sample-paper80"
#: Default of the application notebook: a small db_bench capture on btrfs zoned (`ztbp capture-app`).
SAMPLE_APP_RUN = "tests/data/runs/sample-rocksdb-btrfs"
#: Default of the loop notebook: loop.json of a closed loop on NVMeVirt (`ztbp loop`).
SAMPLE_LOOP = "tests/data/loops/sample-nvmevirt"
#: A notebook's cells tagged with this hold its summary; the report index shows their text output.
SUMMARY_TAG = "summary"
PLOTLY_JS = "plotly.min.js"
TEMPLATES = Path(__file__).resolve().parent / "templates"


@dataclass
class Page:
    stem: str
    title: str
    description: str
    ok: bool = False
    error: str = ""
    seconds: float = 0.0
    summary: list[str] = field(default_factory=list)
    reused: bool = False


#: What a notebook reads, from its metadata `ztbp.input`: a run (the default), an application run (only for runs
#: with raw/appops.csv) or a loop directory (`ztbp loop`).
INPUT_RUN, INPUT_APP_RUN, INPUT_LOOP = "run", "app-run", "loop"
#: The first parameter of a notebook of each input.
FIRST_PARAMETER = {INPUT_RUN: "run_dir", INPUT_APP_RUN: "run_dir", INPUT_LOOP: "loop_dir"}


def notebook_input(path: Path) -> str:
    """What the notebook reads (INPUT_RUN, INPUT_APP_RUN or INPUT_LOOP), from its metadata."""
    import nbformat

    kind = nbformat.read(str(path), as_version=4).metadata.get("ztbp", {}).get("input", INPUT_RUN)
    if kind not in FIRST_PARAMETER:
        raise ZtbpError(f"{path.name}: metadata ztbp.input is {kind!r}; use one of {', '.join(FIRST_PARAMETER)}")
    return str(kind)


def notebooks(only: list[str] | None = None, inputs: tuple[str, ...] | None = None) -> list[Path]:
    """The report's notebooks, in order; `only` selects by number or stem (e.g. "1", "6-cache"), `inputs` by what
    they read (default: every notebook)."""
    found = sorted(NOTEBOOKS.glob("[0-9]*.ipynb"))
    if not found:
        raise ZtbpError(f"no notebook found in {NOTEBOOKS}")
    if inputs is not None:
        found = [p for p in found if notebook_input(p) in inputs]
    if not only:
        return found
    out = []
    for sel in only:
        hit = [p for p in found if p.stem == sel or p.stem.split("-", 1)[0] == sel]
        if not hit:
            raise ZtbpError(f"no notebook {sel!r} for this input; choose from {', '.join(p.stem for p in found)}")
        out += [p for p in hit if p not in out]
    return out


def _title(nb: Any, stem: str) -> tuple[str, str]:
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            lines = [ln.strip() for ln in cell.source.splitlines()]
            title = lines[0].lstrip("# ").strip() if lines and lines[0] else stem
            para = []
            for ln in lines[1:]:
                if not ln or ln.startswith("#"):
                    if para:
                        break
                    continue
                para.append(ln)
            return title, " ".join(para)
    return stem, ""


def _summary_text(nb: Any) -> list[str]:
    out = []
    for cell in nb.cells:
        if cell.cell_type == "code" and SUMMARY_TAG in cell.get("metadata", {}).get("tags", []):
            for o in cell.get("outputs", []):
                if o.get("output_type") == "stream" and o.get("name") == "stdout":
                    out.append(o.get("text", "").rstrip())
    return out


def _error_of(nb: Any) -> str:
    for cell in nb.cells:
        for o in cell.get("outputs", []):
            if o.get("output_type") == "error":
                return f"{o.get('ename')}: {o.get('evalue')}"
    return ""


def declared_parameters(path: Path) -> dict[str, Any]:
    import papermill

    return dict(papermill.inspect_notebook(str(path)))


def load_parameters(path: str | None, pairs: list[list[str]] | None) -> dict[str, Any]:
    """Parameters from a YAML mapping (-f) overridden by -p NAME VALUE pairs (values parsed as YAML)."""
    import yaml

    params: dict[str, Any] = {}
    if path:
        try:
            data = yaml.safe_load(Path(path).read_text())
        except FileNotFoundError:
            raise ZtbpError(f"parameters file {path} does not exist") from None
        except yaml.YAMLError as e:
            raise ZtbpError(f"parameters file {path} is not valid YAML: {e}") from None
        if data is None:
            data = {}
        if not isinstance(data, dict) or not all(isinstance(k, str) for k in data):
            raise ZtbpError(f"parameters file {path} must hold a mapping of parameter names to values")
        params.update(data)
    for name, value in pairs or []:
        try:
            params[name] = yaml.safe_load(value)
        except yaml.YAMLError:
            params[name] = value
    return params


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


def _exporter() -> Any:
    import jinja2
    from nbconvert import HTMLExporter

    exp = HTMLExporter(template_name="lab", extra_loaders=[jinja2.FileSystemLoader(str(TEMPLATES))])
    exp.template_file = "page.html.j2"
    return exp


def write_plotlyjs(out: Path) -> Path:
    """plotly.js once per report folder (rewritten only when the installed plotly changes)."""
    from plotly.offline import get_plotlyjs

    js = get_plotlyjs()
    path = out / PLOTLY_JS
    if path.is_symlink() or not path.is_file() or path.stat().st_size != len(js.encode()):
        write_atomic(path, js)
    return path


def _check_parameters(nbs: list[Path], parameters: dict[str, Any], allow_send: bool) -> dict[Path, set[str]]:
    if not allow_send and parameters.get("send"):
        raise ZtbpError("the parameter send=true would send the cache configuration to a device while rendering "
                        "a report; add --send to `ztbp report` if that is what you want")
    declared = {p: set(declared_parameters(p)) for p in nbs}
    known = set().union(*declared.values())
    unknown = sorted(set(parameters) - known)
    if unknown:
        raise ZtbpError(f"unknown notebook parameter(s) {', '.join(unknown)}; the notebooks take "
                        f"{', '.join(sorted(known))}")
    return declared


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
        title, desc = _title(nb, path.stem)
        page = Page(path.stem, title, desc, error=_error_of(nb), summary=_summary_text(nb), reused=True)
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
    title, desc = _title(nb, path.stem)
    page = Page(path.stem, title, desc, ok=not err, error=err or _error_of(nb),
                seconds=time.monotonic() - t0, summary=_summary_text(nb))
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
        pages = list(pool.map(lambda w: _run_one(w[0], w[1], out, label, source, timeout, _exporter(),
                                                 stamps[w[0].stem], old.get(w[0].stem), log, kernels), work))
    import json

    write_atomic(out / STAMPS, json.dumps({p.stem: stamps[p.stem] for p in pages if p.ok}, indent=1))
    hand_over_tree(out)  # papermill's executed notebooks, made as root under sudo, go to the user too
    return pages


def _pages_json(pages: list[Page]) -> list[dict[str, Any]]:
    return [{"notebook": p.stem, "html": f"{p.stem}.html", "title": p.title, "ok": p.ok, "error": p.error,
             "seconds": round(p.seconds, 2)} for p in pages]


def only_for(only: list[str] | None, inputs: tuple[str, ...]) -> list[str] | None:
    """The selections of `only` that name a notebook reading one of `inputs` (None: no selection, every notebook);
    a selection that names no notebook at all is an error, as in `notebooks`."""
    if not only:
        return None
    every = notebooks()
    kept = []
    for sel in only:
        hit = [p for p in every if p.stem == sel or p.stem.split("-", 1)[0] == sel]
        if not hit:
            raise ZtbpError(f"no notebook {sel!r}; choose from {', '.join(p.stem for p in every)}")
        if any(notebook_input(p) in inputs for p in hit):
            kept.append(sel)
    return kept


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
    declared = _check_parameters(nbs, parameters, allow_send)
    out = Path(out_dir) if out_dir else REPORTS / rp.run_id
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
    from ..io.loop import read_loop, round_dir

    doc = read_loop(loop_dir)  # checked before any kernel starts
    root = Path(doc["dir"]).resolve()
    parameters = dict(parameters or {})
    loop_only, round_only = only_for(only, (INPUT_LOOP,)), only_for(only, (INPUT_RUN, INPUT_APP_RUN))
    nbs = [] if loop_only == [] else notebooks(loop_only, (INPUT_LOOP,))
    declared = _check_parameters(nbs, parameters, False)
    out = Path(out_dir) if out_dir else REPORTS / root.name
    round_reports = []
    jobs = default_jobs() if jobs is None else max(1, jobs)
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
    return {"file": path.name, "mib": res.bytes / MIB, "commands": res.commands, "requests": res.requests}


def _trace_card(trace: dict[str, Any] | None) -> str:
    if trace is None:
        return ""
    if not trace["file"]:
        why = _esc(trace["error"])
        return f'<li class="card"><h2>Timeline <span class="fail">not written: {why}</span></h2></li>'
    name = _esc(trace["file"])
    layers = f", {_esc(trace['requests'])} layer-probe requests" if trace["requests"] else ""
    return (f'<li class="card"><h2><a href="{name}" download>Timeline: {name}</a> <span class="ok">ok</span></h2>'
            f"<p>The run as a Perfetto trace ({_esc(format(trace['mib'], '.1f'))} MiB, {_esc(trace['commands'])} "
            f"commands{layers}): one "
            "track per zone, every NVMe command a slice, write-pointer and queue-depth counters. Open it at "
            '<a href="https://ui.perfetto.dev">ui.perfetto.dev</a> ("Open trace file"; the trace stays in the '
            f"browser), or offline with Perfetto's trace processor: <code>trace_processor {name}</code>. "
            "Made by <code>ztbp perfetto</code>.</p></li>")


def _cards(pages: list[Page]) -> str:
    cards = []
    for p in pages:
        status = ('<span class="ok">ok</span>' if p.ok
                  else f'<span class="fail">failed: {html.escape(p.error)}</span>')
        summary = "".join(f"<pre>{html.escape(s)}</pre>" for s in p.summary)
        desc = re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(p.description))
        cards.append(f'<li class="card"><h2><a href="{html.escape(p.stem)}.html">{html.escape(p.title)}</a> '
                     f'{status}</h2><p>{desc}</p>{summary}</li>')
    return "\n".join(cards)


def run_source(run_id: str, meta: dict[str, Any]) -> str:
    """What every page of a run's report names: the run, its device and workload (text; the template escapes it)."""
    zone_mib = meta["zone_size_lba"] * meta["lba_bytes"] / MIB
    kind = "synthetic run" if meta.get("synthetic") else "run"
    return (f"{kind} {run_id} · device {meta.get('device') or 'unknown'} ({meta.get('backend') or 'unknown'}), "
            f"{meta['nr_zones']} zones of {zone_mib:g} MiB · workload "
            f"{(meta.get('workload') or {}).get('name') or 'unnamed'}")


def headline_html(items: list[dict[str, str]]) -> str:
    """The front page's answer: one box per figure (label, value, detail), every text escaped."""
    boxes = "".join(f'<div class="figure" id="headline-{_esc(i["key"])}"><div class="label">{_esc(i["label"])}</div>'
                    f'<div class="value">{_esc(i["value"])}</div><div class="detail">{_esc(i["detail"])}</div></div>'
                    for i in items)
    return f'<section class="headline">{boxes}</section>'


def _index_page(name: str, meta_line: str, items: str, headline: str = "") -> str:
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>ZTBP report — {html.escape(name)}</title>
<style>
body {{ font-family: sans-serif; margin: 24px auto; max-width: 1100px; color: #222; }}
h1 {{ margin-bottom: 4px; }} .meta {{ color: #555; margin-top: 0; }}
ul.pages {{ list-style: none; padding: 0; }}
.card {{ border: 1px solid #ddd; border-radius: 6px; padding: 8px 16px; margin: 12px 0; }}
.card h2 {{ font-size: 18px; margin: 6px 0; }}
.card pre {{ background: #f7f7f7; padding: 6px 10px; font-size: 12px; white-space: pre-wrap;
             overflow-wrap: anywhere; }}
.headline {{ display: grid; grid-template-columns: repeat(auto-fit, minmax(320px, 1fr)); gap: 12px; margin: 16px 0; }}
.figure {{ border: 1px solid #cfd8dc; border-radius: 6px; padding: 10px 14px; background: #fafcfd; }}
.figure .label {{ font-size: 13px; color: #555; text-transform: uppercase; letter-spacing: .03em; }}
.figure .value {{ font-size: 22px; font-weight: 600; margin: 4px 0; }}
.figure .detail {{ font-size: 13px; color: #444; }}
.ok {{ color: #2e7d32; font-size: 13px; }} .fail {{ color: #c62828; font-size: 13px; }}
</style></head>
<body>
<h1>ZTBP report — {html.escape(name)}</h1>
<p class="meta">{meta_line}</p>
{headline}
<h2>Pages</h2>
<ul class="pages">
{items}
</ul>
<p class="meta">Made by <code>ztbp report</code> (papermill + nbconvert); plotly.js is loaded from
<code>{PLOTLY_JS}</code> in this folder, so the report opens offline.</p>
</body></html>
"""


def _esc(value: Any) -> str:
    """Any value read from a run or a loop, as HTML text (quotes escaped too, so it may stand in an attribute)."""
    return html.escape(str(value))


def index_html(rp: RunPaths, meta: dict[str, Any], pages: list[Page], trace: dict[str, Any] | None = None,
               headline: list[dict[str, str]] | None = None) -> str:
    wl = meta.get("workload", {})
    kind = "synthetic" if meta.get("synthetic") else f"traced ({meta.get('backend', '?')})"
    zone_mib = meta["zone_size_lba"] * meta["lba_bytes"] / MIB
    meta_line = (f"{_esc(kind)} run · workload {_esc(wl.get('name', '?'))} ·\n"
                 f"{_esc(meta['nr_zones'])} zones of {_esc(format(zone_mib, 'g'))} MiB · "
                 f"{_esc(meta['lba_bytes'])}-byte LBAs ·\n"
                 f"device {_esc(meta.get('device', '?'))}")
    return _index_page(rp.run_id, meta_line, _cards(pages) + "\n" + _trace_card(trace), headline_html(headline or []))


def loop_index_html(name: str, doc: dict[str, Any], pages: list[Page], round_pages: set[str] | None = None) -> str:
    wl = doc.get("workload") or {}
    meta_line = (f"closed loop on {_esc(doc.get('backend') or 'an unknown device')} · workload "
                 f"{_esc(wl.get('name') or 'unnamed')} · {len(doc['rounds'])} of "
                 f"{_esc(doc.get('rounds_asked') or len(doc['rounds']))} rounds · stopped: "
                 f"{_esc(doc.get('stopped') or 'not by its rule')}")
    items = []
    for e in doc["rounds"]:
        run = _esc(e["run"])
        cfg = e.get("config") or {}
        hot = cfg.get("hot_zones")
        zones = ", ".join(map(str, hot)) if isinstance(hot, list) and hot else "none"
        what = (f"round {e['round']}: {_count(e['read_rows'])} read rows for {_count(e['fio_reads'])} fio reads, "
                f"lost {_count(e['lost'])}; config [{zones}] "
                f"{'recommended' if cfg.get('recommend') else 'not recommended'}")
        link = (f'<a href="{run}/index.html">{run}</a>' if round_pages and e["run"] in round_pages
                else f"<code>{run}/</code> (<code>ztbp report LOOP/{run}</code>)")
        items.append(f"<li>{link}: {_esc(what)}</li>")
    rounds_card = f'<li class="card"><h2>Rounds</h2><ul>{"".join(items)}</ul></li>'
    return _index_page(name, meta_line, _cards(pages) + "\n" + rounds_card, headline_html(loop_headline(doc)))


def _count(value: Any) -> str:
    """A count with thousands separators; a value that is not a number (a hand-edited file) as it is."""
    return f"{value:,}" if isinstance(value, int) else "not measured" if value is None else str(value)


CHECK_MARK = "# NBVAL_CHECK_OUTPUT"


def update_notebook_outputs(only: list[str] | None = None, log: Callable[[str], None] = print) -> list[Path]:
    """Run each notebook on its default parameters (the sample run) and store the outputs of its checked cells.

    nbval (`pytest --nbval-lax notebooks/`) compares the cells marked `# NBVAL_CHECK_OUTPUT` with the outputs
    stored in the notebook; every other cell is stored without output. Run this after changing a notebook's
    summary cells or the sample run: `ztbp report --update-notebooks`.
    """
    import tempfile

    import nbformat
    import papermill

    written = []
    for path in notebooks(only):
        log(f"report: executing {path.name} on its defaults ...")
        with tempfile.TemporaryDirectory() as td:
            executed = papermill.execute_notebook(str(path), str(Path(td) / path.name), kernel_name="python3",
                                                  cwd=str(NOTEBOOKS), progress_bar=False, log_output=False,
                                                  extra_arguments=KERNEL_ARGUMENTS)
        by_id = {c.get("id"): c for c in executed.cells}
        nb = nbformat.read(str(path), as_version=4)
        code_cells = [c for c in nb.cells if c.cell_type == "code"]
        for n, cell in enumerate(code_cells, start=1):
            ran = by_id.get(cell.get("id"))
            keep = CHECK_MARK in cell.source and ran is not None
            cell.outputs = [nbformat.from_dict(dict(o)) for o in ran.outputs] if keep else []
            cell.execution_count = n if keep else None  # nbval refuses stored outputs of an "unrun" cell
            for o in cell.outputs:
                if "execution_count" in o:
                    o["execution_count"] = n
            cell.metadata.pop("papermill", None)
            cell.metadata.pop("execution", None)
        nb.metadata.pop("papermill", None)
        nbformat.write(nb, str(path))
        written.append(path)
    return written


def report_runs(all_runs: bool, runs: list[str]) -> list[str]:
    if all_runs:
        found = sorted(str(p.parent) for p in RUNS.glob("*/meta.json"))
        if not found:
            raise ZtbpError(f"no run in {RUNS}: capture one with `just capture` or make one with `just synth`")
        return found
    if not runs:
        raise ZtbpError("give a run directory, or --all for every run in runs/")
    return runs



"""The notebooks of a report and their parameters: which notebooks read what (a run, an application run, a loop:
their metadata `ztbp.input`), the selection `--only` makes, the parameters from `-f params.yaml` and `-p NAME VALUE`
checked against what the notebooks' parameters cells declare, and what an executed notebook says about itself
(title, summary, first error)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import ZtbpError
from ..paths import NOTEBOOKS

#: A notebook's cells tagged with this hold its summary; the report index shows their text output.
SUMMARY_TAG = "summary"
#: The first line of a summary cell whose output nbval checks against the output stored in the notebook.
CHECK_MARK = "# NBVAL_CHECK_OUTPUT"

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


def title_of(nb: Any, stem: str) -> tuple[str, str]:
    """A notebook's title (its first markdown cell's first line) and description (the paragraph after it)."""
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


def summary_text(nb: Any) -> list[str]:
    """What the cells tagged SUMMARY_TAG printed: the front page shows it under the page's link."""
    out = []
    for cell in nb.cells:
        if cell.cell_type == "code" and SUMMARY_TAG in cell.get("metadata", {}).get("tags", []):
            for o in cell.get("outputs", []):
                if o.get("output_type") == "stream" and o.get("name") == "stdout":
                    out.append(o.get("text", "").rstrip())
    return out


def error_of(nb: Any) -> str:
    """The first error an executed notebook holds, as `Name: message` ("" when none)."""
    for cell in nb.cells:
        for o in cell.get("outputs", []):
            if o.get("output_type") == "error":
                return f"{o.get('ename')}: {o.get('evalue')}"
    return ""


def declared_parameters(path: Path) -> dict[str, Any]:
    """The parameters a notebook's parameters cell declares (papermill reads them)."""
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


def check_parameters(nbs: list[Path], parameters: dict[str, Any], allow_send: bool) -> dict[Path, set[str]]:
    """The parameters each notebook declares; one error for a parameter none declares, or for send=true
    without --send."""
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

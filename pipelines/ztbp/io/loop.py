"""Read a loop directory's loop.json (`ztbp loop`; probes/FORMAT.md, "loop directory and loop.json").

The one reader of loop.json for the notebook, the report and the CLI: a folder that is not a loop, a loop.json of
another format or one without rounds is a clear error that says what to do."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ..contract import LOOP_FORMAT
from ..errors import ZtbpError
from ..paths import resolve_run

LOOP_FILE = "loop.json"


class LoopFileError(ZtbpError):
    """A loop directory that cannot be read."""


def is_loop_dir(path: str | os.PathLike[str]) -> bool:
    """True when `path` (a path or a run id under runs/) holds a loop.json of the loop's format at its top."""
    f = resolve_run(path).root / LOOP_FILE
    if not f.is_file():
        return False
    try:
        return json.loads(f.read_text()).get("format") == LOOP_FORMAT
    except (OSError, ValueError, AttributeError):
        return False


def read_loop(path: str | os.PathLike[str]) -> dict[str, Any]:
    """loop.json of a loop directory (a path or an id under runs/), checked; `dir` is added."""
    root = resolve_run(path).root
    f = root / LOOP_FILE
    if not f.is_file():
        hint = (" (it is one round of a loop: give its parent folder)" if (root.parent / LOOP_FILE).is_file()
                else " (make one with `ztbp loop` / `just loop`)")
        raise LoopFileError(f"{root} is not a loop directory: no {LOOP_FILE}{hint}")
    try:
        doc = json.loads(f.read_text())
    except ValueError as e:
        raise LoopFileError(f"{f} is not valid JSON ({e}); a loop writes it whole after each round: "
                            "rerun the loop") from None
    if not isinstance(doc, dict) or doc.get("format") != LOOP_FORMAT:
        got = doc.get("format") if isinstance(doc, dict) else type(doc).__name__
        raise LoopFileError(f"{f} has format {got!r}, not {LOOP_FORMAT!r}: it was not written by this "
                            "version's `ztbp loop`")
    rounds = doc.get("rounds")
    if not isinstance(rounds, list) or not rounds:
        raise LoopFileError(f"{f} holds no finished round (stopped: {doc.get('stopped')!r}); see console.log "
                            "in that folder for what the guest did")
    for i, e in enumerate(rounds, start=1):
        if not isinstance(e, dict) or e.get("round") != i:
            raise LoopFileError(f"{f}: entry {i} of `rounds` is not round {i}; the file was edited by hand?")
    doc = dict(doc)
    doc["dir"] = str(Path(root))
    return doc

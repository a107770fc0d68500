"""What every HTML page of a report shares: the Jinja2 environment of `templates/` (autoescape on), the folder's one
copy of plotly.js, and the headline block of a front page.

index.py (a run's or a loop's front page, written by render.py) and watch.py (a watch session's page) build their
pages here, so render.py and watch.py never import each other. Every value a template prints is escaped unless it
is already markup (a rendered macro, a plotly figure): the environment's `finalize` escapes with `html.escape`
(quotes as `&quot;` and `&#x27;`), so a value stands safely in an attribute too, and autoescape catches anything
`finalize` does not see.
"""

from __future__ import annotations

import html
import re
from contextlib import AbstractContextManager
from functools import cache
from pathlib import Path
from typing import Any

from ..files import exclusive, make_dir, write_atomic

PLOTLY_JS = "plotly.min.js"
#: The report's templates: package data (pyproject.toml's package-data), beside this module.
TEMPLATES = Path(__file__).resolve().parent / "templates"


def escape(value: Any) -> Any:
    """A value as HTML text, unless it is markup already (it has `__html__`)."""
    from markupsafe import Markup

    return value if hasattr(value, "__html__") else Markup(html.escape(str(value)))


def code_spans(text: Any) -> Any:
    """Text escaped, its `backquoted` words set as <code> (a notebook's description)."""
    from markupsafe import Markup

    return Markup(re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(str(text))))


@cache
def environment() -> Any:
    """The templates' environment: autoescape on, every printed value through `escape`, files as they are written
    (a template's last newline kept)."""
    import jinja2

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), autoescape=True, finalize=escape,
                             keep_trailing_newline=True, undefined=jinja2.StrictUndefined)
    env.filters["code_spans"] = code_spans
    env.globals["plotly_js"] = PLOTLY_JS
    return env


def render_page(template: str, **context: Any) -> str:
    """One template of templates/ filled with `context`."""
    return str(environment().get_template(template).render(**context))


def headline_html(items: list[dict[str, str]]) -> str:
    """The front page's answer: one box per figure (key, label, value, detail), every text escaped."""
    return str(environment().get_template("parts.html.j2").module.headline(items))  # type: ignore[attr-defined]


def write_plotlyjs(out: Path) -> Path:
    """plotly.js once per report folder (rewritten only when the installed plotly changes)."""
    from plotly.offline import get_plotlyjs

    js = get_plotlyjs()
    path = out / PLOTLY_JS
    if path.is_symlink() or not path.is_file() or path.stat().st_size != len(js.encode()):
        write_atomic(path, js)
    return path


def writing(out: Path) -> AbstractContextManager[None]:
    """The report folder `out` (made when missing) held by this command while it writes there: a second report into
    the same folder at the same time says so (a ClaimError) and writes nothing."""
    return exclusive(make_dir(out) / ".lock", f"the report folder {out}")

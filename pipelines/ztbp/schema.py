"""One check of every file the workbench writes and later reads back: meta.json, loop.json (its rounds and its A/B
section), regime.json, the watch journal's records and state, cache-config.json and the profile's files.

Each file's shape is declared once as a Spec (a Record of fields, each a Number with its Bound, an Integer, a Text,
a Flag, a ListOf, a MapOf or Maybe of one) and checked where the file is read, before any value reaches an analysis:
wrong types (`true` is no number), NaN and ±inf (JSON's NaN and Infinity, 1e400), numbers outside their bounds
(1e300 IOPS, a window of -5, zones outside the geometry) and contradictions between fields (a Record's rules, e.g.
a zone's capacity beyond its size) raise Invalid with the field's path. The reader turns it into one line naming the
file, the line and the field (`refusal`), or skips and counts the record where the file can go on (a journal).
Fields a Record does not declare are kept as they are and never checked: a writer may add optional fields (new
figures of a round, a record's new counters) without breaking an older reader. A verdict is never read back: the
readers recompute it from the checked numbers.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import FormatError, ZtbpError
from .units import MAX_ZONES, Bound

#: The path of a value inside a document: keys and list indices from its top.
Where = tuple[str | int, ...]
#: A contradiction between fields of one Record: the checked record in, (its field, why) out, None when none.
Rule = Callable[[dict[str, Any]], tuple[str, str] | None]
#: The largest JSON document a reader takes whole (a loop.json of 100 rounds is a few MiB).
MAX_JSON_BYTES = 64 << 20


class Invalid(Exception):
    """A value a Spec refuses: where it is in the document, and why."""

    def __init__(self, where: Where, reason: str) -> None:
        super().__init__(reason)
        self.where, self.reason = where, reason

    @property
    def field(self) -> str:
        return field_name(self.where)


def field_name(where: Where) -> str:
    """("ab", "blocks", 3, "fio") -> "ab.blocks[3].fio"."""
    out = ""
    for k in where:
        out += f"[{k}]" if isinstance(k, int) else (f".{k}" if out else str(k))
    return out or "(the whole document)"


def shown(value: Any) -> str:
    """A value as a message shows it: short, its JSON type named when cut."""
    text = json.dumps(value) if isinstance(value, bool) or value is None else repr(value)
    return text if len(text) <= 40 else f"{type(value).__name__} {text[:40]}…"


class Spec:
    """What one value must be; `check` returns it (integers as int) or raises Invalid."""

    def check(self, value: Any, where: Where = ()) -> Any:
        raise NotImplementedError


@dataclass(frozen=True)
class Number(Spec):
    """A finite JSON number (never true or false) inside `bound`; `or_zero`: exactly 0 is also taken (a latency
    or a rate that measured nothing, where the bound keeps the measured ones away from 0)."""

    bound: Bound | None = None
    or_zero: bool = False

    def check(self, value: Any, where: Where = ()) -> Any:
        integer = self.bound is not None and self.bound.integer
        kind = "an integer" if integer else "a number"
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise Invalid(where, f"must be {kind}, found {shown(value)}")
        if not math.isfinite(value):
            raise Invalid(where, f"is {value!r}, not a finite number")
        if self.or_zero and value == 0:
            return 0
        if self.bound is not None and not self.bound.contains(value):
            what = "not a whole number" if integer and not float(value).is_integer() else f"outside {self.bound}"
            raise Invalid(where, f"is {shown(value)}, {what}")
        return int(value) if integer else value


def Integer(lo: float, hi: float) -> Number:  # noqa: N802 - reads as a type, as Number does
    """A whole number in [lo, hi]."""
    return Number(Bound(lo, hi, integer=True))


@dataclass(frozen=True)
class Text(Spec):
    """A string (at most `max_len` characters), one of `choices` when given."""

    choices: tuple[str, ...] | None = None
    max_len: int = 4096

    def check(self, value: Any, where: Where = ()) -> Any:
        if not isinstance(value, str):
            raise Invalid(where, f"must be a string, found {shown(value)}")
        if self.choices is not None and value not in self.choices:
            raise Invalid(where, f"is {shown(value)}, not one of {', '.join(map(repr, self.choices))}")
        if len(value) > self.max_len:
            raise Invalid(where, f"is a string of {len(value)} characters, more than {self.max_len}")
        return value


@dataclass(frozen=True)
class Flag(Spec):
    """true or false."""

    def check(self, value: Any, where: Where = ()) -> Any:
        if not isinstance(value, bool):
            raise Invalid(where, f"must be true or false, found {shown(value)}")
        return value


@dataclass(frozen=True)
class Anything(Spec):
    """Any JSON value: a field the readers never trust (a stored verdict, recomputed) or only show."""

    def check(self, value: Any, where: Where = ()) -> Any:
        return value


@dataclass(frozen=True)
class Maybe(Spec):
    """null, or what `spec` takes."""

    spec: Spec

    def check(self, value: Any, where: Where = ()) -> Any:
        return None if value is None else self.spec.check(value, where)


@dataclass(frozen=True)
class ListOf(Spec):
    """A list of at most `max_len` items, each what `item` takes; `unique`: no item twice."""

    item: Spec
    max_len: int = 1 << 20
    unique: bool = False

    def check(self, value: Any, where: Where = ()) -> Any:
        if not isinstance(value, list):
            raise Invalid(where, f"must be a list, found {shown(value)}")
        if len(value) > self.max_len:
            raise Invalid(where, f"holds {len(value)} items, more than {self.max_len}")
        out = [self.item.check(v, (*where, i)) for i, v in enumerate(value)]
        if self.unique and len(set(map(json.dumps, out))) != len(out):
            raise Invalid(where, "holds an item twice")
        return out


@dataclass(frozen=True)
class Tuple(Spec):
    """A list of exactly len(items) values, each what its spec takes (a pair: [zones, until])."""

    items: tuple[Spec, ...]

    def check(self, value: Any, where: Where = ()) -> Any:
        if not isinstance(value, list) or len(value) != len(self.items):
            raise Invalid(where, f"must be a list of {len(self.items)} items, found {shown(value)}")
        return [spec.check(v, (*where, i)) for i, (spec, v) in enumerate(zip(self.items, value, strict=True))]


@dataclass(frozen=True)
class MapOf(Spec):
    """An object of at most `max_len` keys, each value what `value` takes; `zone_keys`: each key a zone id (a
    profile's zone-to-group table, its solo bandwidths)."""

    value: Spec
    max_len: int = 1 << 16
    zone_keys: bool = False

    def check(self, value: Any, where: Where = ()) -> Any:
        if not isinstance(value, dict):
            raise Invalid(where, f"must be an object, found {shown(value)}")
        if len(value) > self.max_len:
            raise Invalid(where, f"holds {len(value)} keys, more than {self.max_len}")
        if self.zone_keys:
            bad = next((k for k in value if not (k.isascii() and k.isdigit() and int(k) < MAX_ZONES)), None)
            if bad is not None:
                raise Invalid(where, f"has the key {shown(bad)}, not a zone id in [0, {MAX_ZONES - 1}]")
        return {k: self.value.check(v, (*where, k)) for k, v in value.items()}


@dataclass(frozen=True)
class Record(Spec):
    """An object with `required` and `optional` fields (an optional one may be missing), then its `rules`; fields
    it does not name are kept unchecked (a newer writer's additions)."""

    required: Mapping[str, Spec] = field(default_factory=dict)
    optional: Mapping[str, Spec] = field(default_factory=dict)
    rules: tuple[Rule, ...] = ()

    def check(self, value: Any, where: Where = ()) -> Any:
        if not isinstance(value, dict):
            raise Invalid(where, f"must be an object, found {shown(value)}")
        out = dict(value)
        for key, spec in self.required.items():
            if key not in value:
                raise Invalid((*where, key), "is missing")
            out[key] = spec.check(value[key], (*where, key))
        for key, spec in self.optional.items():
            if key in value:
                out[key] = spec.check(value[key], (*where, key))
        for rule in self.rules:
            bad = rule(out)
            if bad is not None:
                raise Invalid((*where, bad[0]), bad[1])
        return out

    def extended(self, required: Mapping[str, Spec] | None = None, optional: Mapping[str, Spec] | None = None,
                 rules: tuple[Rule, ...] = ()) -> Record:
        """This record with more fields and rules (a record kind that adds to a common one)."""
        return Record({**self.required, **(required or {})}, {**self.optional, **(optional or {})},
                      self.rules + rules)


#: Bounds of the measures the workbench writes: a count, a rate of I/O per second (a block of 1,000 reads within
#: the week a loop may run is above 1e-3; no device passes 1e9), a latency in µs (from 1 ns to 1,000 s), a ratio.
COUNT = Number(Bound(0, 2**63 - 1, integer=True))
IOPS = Bound(1e-3, 1e9)
LATENCY_US = Bound(1e-3, 1e9)
RATIO = Bound(0, 1)


def zone_ids(nr_zones: int = MAX_ZONES) -> ListOf:
    """A set of zones as a list: each a zone id of a geometry of `nr_zones` zones, none twice."""
    return ListOf(Integer(0, nr_zones - 1), max_len=nr_zones, unique=True)


def zones_within(nr_key: str, *lists: str) -> Rule:
    """A rule: every zone id of the lists at `lists` (dotted paths) is below the record's own `nr_key`."""

    def rule(rec: dict[str, Any]) -> tuple[str, str] | None:
        nr = rec.get(nr_key)
        for path in lists:
            got: Any = rec
            for k in path.split("."):
                got = got.get(k) if isinstance(got, dict) else None
            beyond = [z for z in got or [] if isinstance(nr, int) and z >= nr]
            if beyond:
                return path, f"zone {beyond[0]} is beyond the geometry's {nr} zones ({nr_key})"
        return None

    return rule


def at_most(part: str, whole: str) -> Rule:
    """A rule: the record's count `part` is not above its count `whole` where both are given (a device's hits
    never exceed its reads)."""

    def rule(rec: dict[str, Any]) -> tuple[str, str] | None:
        a, b = rec.get(part), rec.get(whole)
        if isinstance(a, int) and isinstance(b, int) and a > b:
            return part, f"is {a}, more than {whole} ({b})"
        return None

    return rule


# ---- reading a file through its spec ----------------------------------------------------------------------------
def line_of(text: str, where: Where) -> int | None:
    """The line of `text` (a JSON document) where the value at `where` starts; None when it cannot be found."""
    dec = json.JSONDecoder()
    pos = 0

    def skip(i: int) -> int:
        while i < len(text) and text[i] in " \t\r\n":
            i += 1
        return i

    try:
        for key in where:
            pos = skip(pos)
            opener = text[pos]
            pos = skip(pos + 1)
            i = 0
            while text[pos] not in "}]":
                if opener == "{":
                    name, pos = dec.raw_decode(text, pos)
                    pos = skip(skip(pos) + 1)  # past the colon
                else:
                    name = i
                if name == key:
                    break
                _, pos = dec.raw_decode(text, pos)
                pos = skip(pos)
                pos = skip(pos + 1) if text[pos] == "," else pos
                i += 1
            else:
                return None
        return text.count("\n", 0, skip(pos)) + 1
    except (IndexError, ValueError, RecursionError):
        return None


def refusal(path: Path | str, err: Invalid, text: str | None = None, line: int | None = None,
            what: str = "") -> str:
    """The one line that refuses a file: FILE:LINE: FIELD REASON, and what to do (`what`)."""
    n = line
    if n is None and text is not None:  # a missing field: the line of the object that lacks it
        n = next((got for k in range(len(err.where), -1, -1) if (got := line_of(text, err.where[:k])) is not None),
                 None)
    at = f"{path}:{n}" if n is not None else str(path)
    return f"{at}: '{err.field}' {err.reason}" + (f"; {what}" if what else "")


def parse_json(path: Path, error: type[ZtbpError] = FormatError, what: str = "",
               max_bytes: int = MAX_JSON_BYTES) -> tuple[Any, str]:
    """A JSON file's value and its text; one `error` line when it is larger than `max_bytes`, cannot be read, is not
    UTF-8 or not JSON. `what`: what to do about it, appended to the line."""
    tail = f"; {what}" if what else ""
    try:
        size = path.stat().st_size
        if size > max_bytes:
            raise error(f"{path} is {size:,} bytes, more than the {max_bytes >> 20} MiB any such file holds{tail}")
        text = path.read_bytes().decode("utf-8")
        return json.loads(text), text
    except UnicodeDecodeError:
        raise error(f"{path} is not valid JSON (not UTF-8 text){tail}") from None
    except RecursionError:
        raise error(f"{path}: nested too deep to be JSON the workbench wrote{tail}") from None
    except ValueError as e:
        raise error(f"{path} is not valid JSON ({str(e)[:80]}){tail}") from None
    except OSError as e:
        raise error(f"cannot read {path}: {e.strerror or e}{tail}") from None


def checked(value: Any, spec: Spec, path: Path, text: str | None = None, error: type[ZtbpError] = FormatError,
            what: str = "") -> Any:
    """`value` (read from `path`, whose text is `text`) through `spec`; one `error` line naming the file, the line
    and the field otherwise."""
    try:
        return spec.check(value)
    except Invalid as e:
        raise error(refusal(path, e, text, what=what)) from None


def read_json(path: Path, spec: Spec, error: type[ZtbpError] = FormatError, what: str = "") -> Any:
    """A JSON file read and checked (parse_json, then checked)."""
    value, text = parse_json(path, error, what)
    return checked(value, spec, path, text, error, what)

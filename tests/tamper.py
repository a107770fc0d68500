"""Tampered copies of the files the workbench writes and reads back, field by field, for tests/test_bad_input.py:
every field a file's spec (ztbp/schema.py) declares, set to a value of the wrong type, NaN, ±inf, 1e300, -5 (out of
range) or removed, and zone lists outside the geometry, with a zone twice or of 10,000 zones.

A tampered number (a string, true, NaN, ±inf, 1e300) must always be refused: every number a file holds is finite
and bounded; whether -5, a removed field or a zone list is refused is the spec's to say (an optional field may be
missing; a status may be -1)."""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ztbp.schema import Anything, Flag, Invalid, ListOf, MapOf, Maybe, Number, Record, Spec, Text, Tuple

#: a removed field
MISSING = object()
#: values no number of a file takes (with -5: out of range where the bound says so)
NUMBERS: dict[str, Any] = {"a-string": "12", "true": True, "nan": math.nan, "+inf": math.inf, "-inf": -math.inf,
                           "1e300": 1e300}


@dataclass(frozen=True)
class Case:
    """One tampering: the field's path, what was done, the value (MISSING: removed) and whether it must be refused
    (None: as the spec says)."""

    where: tuple[str | int, ...]
    what: str
    value: Any
    refused: bool | None

    @property
    def name(self) -> str:
        return ".".join(map(str, self.where)) + f"={self.what}"


def cases(spec: Spec, doc: Any, where: tuple[str | int, ...] = ()) -> Iterator[Case]:
    """Every tampering of the fields of `doc` that `spec` declares (lists and maps through their first item)."""
    if isinstance(spec, Maybe):
        if doc is not None:
            yield from cases(spec.spec, doc, where)
        return
    if isinstance(spec, Anything) or doc is None:
        return
    if where and not isinstance(spec, (Number, Text, Flag)):
        yield Case(where, "wrong-type", "x", True)
    if isinstance(spec, Record):
        fields = {**spec.optional, **spec.required}
        for key, sub in fields.items():
            if key in doc:
                yield Case((*where, key), "missing", MISSING, True if key in spec.required else None)
                yield from cases(sub, doc[key], (*where, key))
    elif isinstance(spec, ListOf):
        if isinstance(spec.item, Number) and spec.unique:  # a set of zones
            yield Case(where, "outside-geometry", [2**24 - 1], None)
            yield Case(where, "a-zone-twice", [doc[0], doc[0]] if doc else [1, 1], True)
            yield Case(where, "10000-zones", list(range(10_000)), None)
        if doc:
            yield from cases(spec.item, doc[0], (*where, 0))
    elif isinstance(spec, MapOf) and doc:
        key = next(iter(doc))
        yield from cases(spec.value, doc[key], (*where, key))
    elif isinstance(spec, Tuple):
        for i, (sub, v) in enumerate(zip(spec.items, doc, strict=False)):
            yield from cases(sub, v, (*where, i))
    elif isinstance(spec, Number):
        for what, value in NUMBERS.items():
            yield Case(where, what, value, True)
        yield Case(where, "-5", -5, None)
    elif isinstance(spec, Text):
        yield Case(where, "a-number", 7, True)
    elif isinstance(spec, Flag):
        yield Case(where, "a-number", 1, True)


def tampered(doc: Any, case: Case) -> Any:
    """A copy of `doc` (no list or object shared between two fields, as in a file) with the case applied."""
    out = json.loads(json.dumps(doc))
    *head, last = case.where
    at = out
    for k in head:
        at = at[k]
    if case.value is MISSING:
        del at[last]
    else:
        at[last] = copy.deepcopy(case.value)
    return out


def refused_by(spec: Spec, doc: Any) -> bool:
    """Whether `spec` refuses `doc` (the expectation where a case leaves it to the spec)."""
    try:
        spec.check(doc)
    except Invalid:
        return True
    return False


def expect_refused(spec: Spec, doc: Any, case: Case) -> bool:
    """Whether the tampered doc must be refused; a case that must be refused is refused by the spec too."""
    by_spec = refused_by(spec, tampered(doc, case))
    assert case.refused is None or by_spec == case.refused, f"the spec lets {case.name} through"
    return by_spec

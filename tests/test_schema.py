"""The one check of the files the workbench reads back (ztbp/schema.py): each kind of spec refuses what it must, a
refusal names the file, the line and the field, and fields a spec does not name pass unchecked."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ztbp.errors import FormatError
from ztbp.schema import (
    IOPS,
    Flag,
    Integer,
    Invalid,
    ListOf,
    Maybe,
    Number,
    Record,
    Text,
    at_most,
    line_of,
    read_json,
    zone_ids,
    zones_within,
)

SPEC = Record({"nr_zones": Integer(1, 64), "iops": Number(IOPS), "name": Text(("a", "b"))},
              {"hot": zone_ids(), "ok": Flag(), "gain": Maybe(Number())},
              (zones_within("nr_zones", "hot"),))
GOOD = {"nr_zones": 8, "iops": 1000.0, "name": "a", "hot": [1, 7], "ok": True, "gain": None, "later": {"x": 1}}


@pytest.mark.parametrize(("change", "field", "words"), [
    ({"iops": True}, "iops", "must be a number, found true"),
    ({"iops": math.nan}, "iops", "not a finite number"),
    ({"iops": math.inf}, "iops", "not a finite number"),
    ({"iops": -math.inf}, "iops", "not a finite number"),
    ({"iops": 1e300}, "iops", "outside [0.001, 1000000000]"),
    ({"iops": 1e-300}, "iops", "outside"),
    ({"iops": "1000"}, "iops", "must be a number"),
    ({"nr_zones": 8.5}, "nr_zones", "not a whole number"),
    ({"nr_zones": -5}, "nr_zones", "outside [1, 64]"),
    ({"name": "c"}, "name", "not one of"),
    ({"name": 3}, "name", "must be a string"),
    ({"hot": [1, 1]}, "hot", "holds an item twice"),
    ({"hot": [9]}, "hot", "beyond the geometry's 8 zones"),
    ({"hot": [-1]}, "hot[0]", "outside"),
    ({"hot": "1,2"}, "hot", "must be a list"),
    ({"ok": 1}, "ok", "must be true or false"),
    ({"gain": math.nan}, "gain", "not a finite number"),
])
def test_a_spec_refuses_and_names_the_field(change: dict, field: str, words: str) -> None:
    with pytest.raises(Invalid) as e:
        SPEC.check({**GOOD, **change})
    assert e.value.field == field and words in e.value.reason, (e.value.field, e.value.reason)


def test_a_missing_field_is_named_and_extra_fields_pass_unchecked() -> None:
    with pytest.raises(Invalid) as e:
        SPEC.check({k: v for k, v in GOOD.items() if k != "iops"})
    assert (e.value.field, e.value.reason) == ("iops", "is missing")
    assert SPEC.check(GOOD)["later"] == {"x": 1}


def test_a_device_never_hits_more_than_it_reads() -> None:
    """STATUS's hits above its reads (loop.json's blocks and rounds, the watch journal's windows) are refused;
    hits unknown (the 32-bit ioctl) or equal to the reads pass."""
    from ztbp.io.journal import WINDOW, record_spec
    from ztbp.io.loop import BLOCK

    spec = Record(optional={"hits": Maybe(Integer(0, 10)), "reads": Maybe(Integer(0, 10))},
                  rules=(at_most("hits", "reads"),))
    assert spec.check({"hits": 5, "reads": 5}) and spec.check({"hits": None, "reads": 3})
    with pytest.raises(Invalid) as e:
        spec.check({"hits": 6, "reads": 5})
    assert (e.value.field, e.value.reason) == ("hits", "is 6, more than reads (5)")
    block = {"pair": 1, "arm": "on", "device": {"status_reads": 100, "status_hits": 101, "hit_ratio": 0.5}}
    with pytest.raises(Invalid) as e:
        BLOCK.check(block)
    assert e.value.field == "device.status_hits"
    with pytest.raises(Invalid) as e:
        BLOCK.check({**block, "device": {"status_reads": 100, "status_hits": 50, "hit_ratio": 1.5}})
    assert e.value.field == "device.hit_ratio"
    window = {"kind": WINDOW, "wall": 1.0, "window": 3, "device": {"reads": 10, "hits": 11}}
    with pytest.raises(Invalid) as e:
        record_spec(WINDOW).check(window)
    assert e.value.field == "device.hits"


def test_a_list_longer_than_its_bound_is_refused_before_its_items_are_read() -> None:
    with pytest.raises(Invalid, match="more than 8"):
        zone_ids(8).check(list(range(10_000)))


def test_a_refusal_names_the_file_the_line_and_the_field(tmp_path: Path) -> None:
    doc = {"a": 1, "ab": {"blocks": [{"fio": {"read_iops": 1.0}}, {"fio": {"read_iops": True}}]}}
    f = tmp_path / "loop.json"
    f.write_text(json.dumps(doc, indent=2))
    spec = Record({"ab": Record({"blocks": ListOf(Record({"fio": Record({"read_iops": Number(IOPS)})}))})})
    with pytest.raises(FormatError) as e:
        read_json(f, spec)
    line = f.read_text().splitlines().index('          "read_iops": true') + 1
    assert str(e.value).startswith(f"{f}:{line}: 'ab.blocks[1].fio.read_iops' must be a number, found true")


@pytest.mark.parametrize("data", [b"{", b'{"a": "\xff"}', b"[" * 100_000])
def test_a_file_that_is_not_json_is_one_line(tmp_path: Path, data: bytes) -> None:
    f = tmp_path / "x.json"
    f.write_bytes(data)
    with pytest.raises(FormatError) as e:
        read_json(f, SPEC)
    assert "\n" not in str(e.value) and str(f) in str(e.value)


@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
                    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=3), c, max_size=3),
                    max_leaves=12))
def test_any_json_value_is_taken_or_refused_with_a_field(value: object) -> None:
    try:
        SPEC.check(value)
    except Invalid as e:
        assert e.reason
    doc = {"nr_zones": 8, "iops": 1.0, "name": "a", "gain": value}
    text = json.dumps(doc, indent=1)
    assert line_of(text, ("gain",)) == text.splitlines().index(next(ln for ln in text.splitlines()
                                                                      if ln.startswith(' "gain"'))) + 1

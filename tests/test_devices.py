"""Devices are plug-ins: the registry answers a name with its `Device` (or one clear error), each device says what it
can do, and nothing outside pipelines/ztbp/devices/ (nor a VM script) tells devices apart by comparing their names."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import ztbp
from ztbp import devices
from ztbp.devices import DEVICES, DRIVE, NVMEVIRT, QEMU, Device, DeviceError
from ztbp.errors import ZtbpError

PKG = Path(ztbp.__file__).resolve().parent
REPO = PKG.parents[1]
NAMES = frozenset(DEVICES)  # qemu, nvmevirt, host


# ---- the registry ---------------------------------------------------------------------------------------------
def test_the_registry_holds_the_three_devices_under_their_cli_names() -> None:
    assert list(DEVICES) == ["qemu", "nvmevirt", "host"]
    assert devices.get("qemu") is QEMU and devices.get("nvmevirt") is NVMEVIRT and devices.get("host") is DRIVE
    assert all(isinstance(d, Device) and d.name == n for n, d in DEVICES.items())


def test_an_unknown_name_is_one_clear_error() -> None:
    with pytest.raises(DeviceError) as e:
        devices.get("floppy")
    assert isinstance(e.value, ZtbpError) and e.value.code == 2
    assert str(e.value) == "unknown device 'floppy'; choose one of: qemu, nvmevirt, host"
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("name", ["synth", "import", "", None, 3])
def test_find_answers_none_for_a_run_of_no_device(name: object) -> None:
    assert devices.find(name) is None


def test_the_vm_devices_are_the_backend_choices() -> None:
    assert devices.vm_names() == ("qemu", "nvmevirt")


def test_a_device_is_frozen() -> None:
    with pytest.raises(AttributeError):
        QEMU.name = "other"  # type: ignore[misc]


# ---- what each device can do ----------------------------------------------------------------------------------
def test_qemu_refuses_set_counts_nothing_and_is_checked_before_a_boot() -> None:
    assert not QEMU.acts_on_set and not QEMU.answers_status_hits and not QEMU.has_read_model
    assert QEMU.in_vm and QEMU.needs_qemu_version and QEMU.checks_geometry_early
    assert not QEMU.probe_before_appears


def test_nvmevirt_acts_counts_is_modelled_and_appears_after_the_probe() -> None:
    assert NVMEVIRT.acts_on_set and NVMEVIRT.answers_status_hits and NVMEVIRT.has_read_model
    assert NVMEVIRT.probe_before_appears and NVMEVIRT.in_vm and NVMEVIRT.needs_qemu_version
    assert not NVMEVIRT.checks_geometry_early  # its geometry is the module's storage, known once it is planned


def test_a_drive_of_this_machine_is_not_in_the_vm() -> None:
    assert not DRIVE.in_vm and not DRIVE.needs_qemu_version and not DRIVE.has_read_model
    assert DRIVE.acts_on_set and not DRIVE.answers_status_hits and not DRIVE.probe_before_appears


def test_each_device_has_its_texts() -> None:
    for d in DEVICES.values():
        for text in (d.title, d.loop_title, d.not_modelled, d.reset_note, d.geometry_from):
            assert text and "\n" not in text
    assert QEMU.profile_hint() == "make one with `ztbp profile --backend qemu`"
    assert DRIVE.profile_hint() == "make one with `ztbp profile --device DEV` on the drive"


# ---- no name compared outside devices/ ------------------------------------------------------------------------
def _names_in(node: ast.AST) -> set[str]:
    """The device names a constant, or a tuple/list/set of constants, holds."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value} & NAMES
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return set().union(*(_names_in(e) for e in node.elts)) if node.elts else set()
    return set()


def name_tests(source: str) -> list[str]:
    """Where a source tells devices apart by name: a comparison (==, !=, in, not in) with a device name, or a
    per-device table (a dict with two or more device names as keys). A single key is not a table: a versions dict's
    "qemu" names the harness's program, not a device."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare) and any(isinstance(op, ast.Eq | ast.NotEq | ast.In | ast.NotIn)
                                                 for op in node.ops):
            found = set().union(*(_names_in(n) for n in (node.left, *node.comparators)))
            if found:
                out.append(f"line {node.lineno}: compares {sorted(found)}")
        elif isinstance(node, ast.Dict):
            keys = set().union(*(_names_in(k) for k in node.keys if k is not None)) if node.keys else set()
            if len(keys) >= 2:
                out.append(f"line {node.lineno}: a table keyed by {sorted(keys)}")
    return out


def test_the_checker_sees_a_name_test() -> None:
    assert name_tests('if backend == "nvmevirt": pass') == ["line 1: compares ['nvmevirt']"]
    assert name_tests('x = b in ("qemu", "nvmevirt")') == ["line 1: compares ['nvmevirt', 'qemu']"]
    assert name_tests('t = {"qemu": 1, "host": 2}') == ["line 1: a table keyed by ['host', 'qemu']"]
    assert name_tests('v = {"qemu": version()}') == []
    assert name_tests('if dev.in_vm: pass') == []


@pytest.mark.parametrize("path", sorted(p for p in PKG.rglob("*.py") if "devices" not in p.relative_to(PKG).parts),
                         ids=lambda p: p.relative_to(PKG).as_posix())
def test_no_module_outside_devices_compares_a_device_name(path: Path) -> None:
    assert name_tests(path.read_text()) == [], f"{path.relative_to(PKG)}: ask the Device (devices.get), not its name"


#: A shell test of a device name: `[ "$X" = qemu ]`, `== "host"`, `!= nvmevirt`, or a `case` pattern `qemu)`.
SHELL_NAME_TEST = re.compile(r"""(!=|==|\s=)\s*["']?(qemu|nvmevirt|host)["']?\s*(\]|;|&&|\|\||$)"""
                             r"""|^\s*["']?(qemu|nvmevirt|host)["']?\s*(\||\))""", re.M)


def test_the_shell_checker_sees_a_name_test() -> None:
    assert SHELL_NAME_TEST.search('[ "$BACKEND" = nvmevirt ] && x')
    assert SHELL_NAME_TEST.search('[[ $b == "qemu" ]]')
    assert SHELL_NAME_TEST.search('case "$d" in\n\thost) y ;;\nesac')
    assert not SHELL_NAME_TEST.search('[ "$zoned" = "host-managed" ]')
    assert not SHELL_NAME_TEST.search('[ "$d" = nvmev ] && rmmod nvmev')


@pytest.mark.parametrize("path", sorted((REPO / "vm").glob("*.sh")) + sorted((REPO / "vm" / "guest").glob("*.sh")),
                         ids=lambda p: p.relative_to(REPO).as_posix())
def test_no_vm_script_compares_a_device_name(path: Path) -> None:
    """The VM scripts act on what the host passes (a module to load, --no-zns), never on a device's name."""
    hits = [m.group(0).strip() for m in SHELL_NAME_TEST.finditer(path.read_text())]
    assert hits == [], f"{path.relative_to(REPO)} tests a device name: {hits}"

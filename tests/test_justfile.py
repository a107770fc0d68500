"""The justfile never puts a recipe parameter into a command line unquoted (`just analyse 'x$(cmd)'` must not run
cmd): every parameter inside `{{ }}` is wrapped in quote() or only tested in an `if` condition, and a variadic
parameter reaches the command as "$@" of a [positional-arguments] recipe, never through `{{ }}`."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

JUSTFILE = Path(__file__).resolve().parents[1] / "justfile"
HEADER = re.compile(r"^@?([a-z][\w-]*)((?:\s+[*+$]?[A-Z_][A-Z0-9_]*(?:=(?:\"[^\"]*\"|'[^']*'|\S+))?)*)\s*:(?!=)")
PARAM = re.compile(r"[*+$]?([A-Z_][A-Z0-9_]*)")


def recipes() -> list[tuple[str, list[str], list[str], list[str]]]:
    """(name, parameters, attribute lines, body lines) of every recipe."""
    out: list[tuple[str, list[str], list[str], list[str]]] = []
    attrs: list[str] = []
    for line in JUSTFILE.read_text().splitlines():
        if line.startswith("["):
            attrs.append(line)
            continue
        m = HEADER.match(line)
        if m:
            params = [PARAM.match(p.split("=", 1)[0]).group(1) for p in m.group(2).split()]  # type: ignore[union-attr]
            out.append((m.group(1), params, attrs, []))
        elif line.startswith((" ", "\t")) and out:
            out[-1][3].append(line)
        if not line.startswith("#"):
            attrs = []
    return out


def interpolations(line: str) -> list[str]:
    """The expressions inside {{ }} of one line (braces of `if` blocks balanced)."""
    found, i = [], line.find("{{")
    while i >= 0:
        depth, j = 0, i
        while j < len(line):
            if line.startswith("{{", j) and depth == 0:
                depth, j = 2, j + 2
                continue
            if line[j] == "{":
                depth += 1
            elif line[j] == "}":
                depth -= 1
                if depth == 0:
                    break
            j += 1
        found.append(line[i + 2:j - 1])
        i = line.find("{{", j + 1)
    return found


def unquoted_names(expr: str) -> set[str]:
    """Identifiers of `expr` outside string literals, quote(...) calls and `if` conditions."""
    expr = re.sub(r"'[^']*'|\"(?:[^\"\\]|\\.)*\"", '""', expr)
    while "quote(" in expr:
        start = expr.index("quote(")
        depth, j = 0, start + len("quote")
        for j in range(start + len("quote"), len(expr)):
            depth += {"(": 1, ")": -1}.get(expr[j], 0)
            if depth == 0:
                break
        expr = expr[:start] + '""' + expr[j + 1:]
    expr = re.sub(r"\bif\b[^{]*\{", "{", expr)
    return set(re.findall(r"\b[A-Za-z_]\w*\b", expr))


def test_the_parser_sees_every_recipe() -> None:
    names = {r[0] for r in recipes()}
    assert {"synth", "analyse", "apply", "report", "perfetto", "loop", "run", "capture-layers", "fuzz"} <= names


def test_every_parameter_in_a_command_line_is_quoted() -> None:
    bad = []
    for name, params, _attrs, body in recipes():
        for line in body:
            for expr in interpolations(line):
                leaked = unquoted_names(expr) & set(params)
                if leaked:
                    bad.append(f"{name}: {sorted(leaked)} unquoted in {line.strip()!r}")
    assert not bad, "\n".join(bad)


def test_variadic_parameters_reach_commands_as_positional_arguments() -> None:
    for name, params, attrs, body in recipes():
        header_variadic = [p for p in params if p == "ARGS"]
        if not header_variadic:
            continue
        assert "[positional-arguments]" in attrs, name
        n = params.index("ARGS") + 1
        want = '"$@"' if n == 1 else f'"${{@:{n}}}"'
        assert any(want in line for line in body), (name, want)


def test_unquoted_parameter_is_caught() -> None:
    assert unquoted_names("RUN") == {"RUN"}
    assert unquoted_names('quote(RUN / "derived")') == set()
    assert unquoted_names('if DEV == "" { "" } else { " --device " + quote(DEV) }') == {"else"}
    assert "SECONDS" in unquoted_names("if SECONDS =~ '^[0-9]+$' { SECONDS } else { error(\"x\") }")


@pytest.mark.skipif(shutil.which("just") is None, reason="just is not installed")
@pytest.mark.parametrize("recipe", ["synth", "analyse", "report", "capture-layers"])
def test_shell_syntax_in_a_parameter_stays_text(recipe: str, tmp_path: Path) -> None:
    """`just -n` prints the command lines: the payload appears only inside single quotes (a variadic one only
    as "$@")."""
    payload = "x$(touch " + str(tmp_path / "pwned") + ")"
    args = [payload, payload] if recipe == "report" else [payload]
    proc = subprocess.run(["just", "--justfile", str(JUSTFILE), "-n", recipe, *args], capture_output=True,
                          text=True, timeout=30, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "'x$(touch" in proc.stderr
    assert "$(touch" not in proc.stderr.replace("'x$(touch", "")


def test_fuzz_seconds_must_be_a_number() -> None:
    if shutil.which("just") is None:
        pytest.skip("just is not installed")
    proc = subprocess.run(["just", "--justfile", str(JUSTFILE), "-n", "fuzz", "1; id"], capture_output=True,
                          text=True, timeout=30, check=False)
    assert proc.returncode != 0 and "whole number" in proc.stderr

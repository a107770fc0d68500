"""environment.yml (conda) and pyproject.toml (pip, `just setup`) must declare the same dependencies."""

from __future__ import annotations

import re
import tomllib

import yaml

from ztbp.paths import ROOT


def _name(spec: str) -> str:
    return re.split(r"[<>=!~ \[]", spec.strip(), maxsplit=1)[0].lower().replace("_", "-")


def test_environment_yml_matches_pyproject() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pip_deps = {_name(d): d.replace(" ", "") for d in project["dependencies"] + project["optional-dependencies"]["dev"]}
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    # packages taken from PyPI (perfetto) sit in its pip: list, next to the project itself
    pip_list = [d for dep in env["dependencies"] if isinstance(dep, dict) for d in dep.get("pip", [])]
    conda = {_name(d): d.replace(" ", "") for d in env["dependencies"] + pip_list
             if isinstance(d, str) and not d.startswith("-e")}
    conda.pop("python")
    conda.pop("pip")
    assert set(pip_deps) == set(conda), f"only in pyproject: {set(pip_deps) - set(conda)}; " \
                                        f"only in environment.yml: {set(conda) - set(pip_deps)}"
    for name, spec in pip_deps.items():
        assert conda[name] == spec, f"{name}: pyproject says {spec}, environment.yml says {conda[name]}"

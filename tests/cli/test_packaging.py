"""`pip install .` gives a working `gpuctl` (#17: it failed at once with "No module named
'yaml'", pyproject.toml declared no dependencies): every third-party module the client
imports is a declared dependency, and the client imports nothing of the portal."""

from __future__ import annotations

import ast
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# import name -> distribution name, where they differ
DISTRIBUTIONS = {"yaml": "pyyaml"}


def imported_top_level_modules() -> set[str]:
    names: set[str] = set()
    for path in (ROOT / "gpuctl").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return names


def test_every_third_party_import_of_gpuctl_is_a_declared_dependency():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = {
        dep.split(">")[0].split("=")[0].split("<")[0].strip().lower()
        for dep in project.get("dependencies", [])
    }
    third_party = imported_top_level_modules() - set(sys.stdlib_module_names) - {"gpuctl"}
    assert third_party, "the scan found the client's imports"
    needed = {DISTRIBUTIONS.get(name, name).lower() for name in third_party}
    assert needed <= declared, needed - declared

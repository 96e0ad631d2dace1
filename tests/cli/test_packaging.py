"""`pip install .` gives a working `gpuctl` (#17: it failed at once with "No module named
'yaml'", pyproject.toml declared no dependencies): every third-party module the client
imports is a declared dependency, the client imports nothing of the portal, and a clean
venv's `pip install .` runs `gpuctl --help` (CI runs this through `make test`)."""

from __future__ import annotations

import ast
import os
import subprocess
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


def test_pip_install_in_a_clean_venv_gives_a_working_gpuctl(tmp_path):
    """What a user does: a fresh venv, `pip install .` from the checkout (dependencies from
    the package index), then `gpuctl --help`. Nothing of the portal's venv is visible."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path),
           "PIP_DISABLE_PIP_VERSION_CHECK": "1"}  # fmt: skip
    for name, value in os.environ.items():  # how this machine reaches the package index
        if name.startswith("PIP_") or name in ("SSL_CERT_FILE", "HTTPS_PROXY", "NO_PROXY"):
            env.setdefault(name, value)
    install = subprocess.run([str(venv / "bin/pip"), "install", "--quiet", str(ROOT)], env=env,
                             capture_output=True, text=True, timeout=600)  # fmt: skip
    assert install.returncode == 0, install.stderr[-3000:]
    check = subprocess.run([str(venv / "bin/pip"), "check"], env=env, capture_output=True,
                           text=True, timeout=120)  # fmt: skip
    assert check.returncode == 0, check.stdout
    installed = subprocess.run([str(venv / "bin/pip"), "list", "--format=freeze"], env=env,
                               capture_output=True, text=True, timeout=120).stdout.lower()  # fmt: skip
    assert "django" not in installed and "pyyaml==" in installed  # the client only
    gpuctl = subprocess.run([str(venv / "bin/gpuctl"), "--help"], env=env, cwd=tmp_path,
                            capture_output=True, text=True, timeout=60)  # fmt: skip
    assert gpuctl.returncode == 0, gpuctl.stderr
    assert gpuctl.stdout.startswith("usage: gpuctl") and "jobs" in gpuctl.stdout

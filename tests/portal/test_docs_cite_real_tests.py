"""Every test the documentation cites as proof exists.

docs/security.md, docs/reliability.md and the others answer "what proves it?" with test
names (``tests/security/test_rate_limits.py::test_...``, and ``::test_...`` after a file
in the same line). Tests get renamed as the promise changes; three rows of security.md
went on citing tests that no longer existed, for promises the code no longer kept
(session 41). Names are read from the files' syntax trees, so nothing is imported.
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# A test file, optionally with ::name; or ::name alone, naming a test of the last file cited
# on that line. Parameters (``[chromium]``) are not part of the name.
REFERENCE = re.compile(r"(tests/[\w/]+\.py)(?:::(\w+))?|(?<![\w/.])::(\w+)")


@cache
def defined_in(path: str) -> frozenset[str] | None:
    """The functions and classes defined in ``path`` (None: no such file)."""
    file = ROOT / path
    if not file.is_file():
        return None
    tree = ast.parse(file.read_text(encoding="utf-8"))
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return frozenset(node.name for node in ast.walk(tree) if isinstance(node, kinds))


def broken_references(text: str) -> list[str]:
    """The references in ``text`` to a file or a name that does not exist."""
    broken = []
    for line in text.splitlines():
        last_file = None
        for match in REFERENCE.finditer(line):
            path, name, continued = match.groups()
            if path:
                last_file = path
            elif last_file is None:
                continue  # "::name" with no file before it on the line: not a reference
            names = defined_in(last_file)
            wanted = name or continued
            if names is None:
                broken.append(last_file)
            elif wanted and wanted not in names:
                broken.append(f"{last_file}::{wanted}")
    return broken


def test_every_test_the_docs_cite_exists():
    documents = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
    broken = {
        doc.relative_to(ROOT).as_posix(): refs
        for doc in documents
        if (refs := broken_references(doc.read_text(encoding="utf-8")))
    }
    assert broken == {}


def test_the_checker_finds_a_renamed_test_and_a_missing_file():
    this = "tests/portal/test_docs_cite_real_tests.py"
    assert broken_references(f"`{this}::test_every_test_the_docs_cite_exists`") == []
    assert broken_references(f"`{this}::test_gone`, `::test_also_gone`") == [
        f"{this}::test_gone",
        f"{this}::test_also_gone",
    ]
    assert broken_references("`tests/nowhere/test_x.py::test_y`") == ["tests/nowhere/test_x.py"]

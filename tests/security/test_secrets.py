"""Secrets come only from the environment: none is written in the repository, and the
settings and the deployment files take every one from the environment."""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

from django.conf import settings

ROOT = Path(settings.BASE_DIR)
SECRET_PATTERNS = {
    "private key": re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----"),
    "AWS access key": re.compile(r"\bAKIA[0-9A-Z]{16}\b"),
    "GitHub token": re.compile(r"\bgh[pousr]_[A-Za-z0-9]{36}\b"),
    "Slack token": re.compile(r"\bxox[abprs]-[A-Za-z0-9-]{10,}"),
    "password in a URL": re.compile(
        r"(postgres|postgresql|redis|rediss)://[^:/\s]+:(?!\$\{)[^@\s]{6,}@"
    ),
}
# Test fixtures that spell made-up credentials (no real system takes them).
ALLOWED_FILES = {"tests/portal/test_settings_env.py", "tests/security/test_web_roles.py",
                 "tests/security/test_secrets.py"}  # fmt: skip


def tracked_files() -> list[Path]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True)
    return [ROOT / name for name in out.stdout.decode().split("\0") if name]


def test_no_credentials_are_committed():
    found = []
    for path in tracked_files():
        rel = str(path.relative_to(ROOT))
        if rel in ALLOWED_FILES or not path.is_file() or path.stat().st_size > 2_000_000:
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        found += [f"{rel}: {kind}" for kind, rx in SECRET_PATTERNS.items() if rx.search(text)]
    assert found == []
    assert not any(p.name == ".env" for p in tracked_files())


def test_the_settings_take_every_secret_from_the_environment():
    """No secret-looking setting is assigned a literal, except the development key that
    only DEBUG may use (production refuses it: tests/portal/test_settings_env.py)."""
    tree = ast.parse((ROOT / "portal" / "settings.py").read_text())
    literals = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            for target in node.targets:
                name = getattr(target, "id", "")
                if re.search(r"SECRET|PASSWORD|TOKEN|API_KEY", name) and node.value.value:
                    literals.append((name, node.value.value))
    assert literals == [("SECRET_KEY", "dev-only-insecure-key-do-not-use-in-production")]


def test_the_compose_file_requires_its_secrets_from_the_environment():
    compose = (ROOT / "docker-compose.yml").read_text()
    assert "${SECRET_KEY:?" in compose and "${POSTGRES_PASSWORD:?" in compose
    assert not re.search(r"SECRET_KEY:\s*['\"]?[A-Za-z0-9]", compose)

"""Run ``python -m <module>`` in a fresh interpreter and fail if it imported Django.

For the entry points that must work without the portal's settings: ``python -m replay``,
``python -m bench.engine``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

_PROGRAM = """
import runpy, sys
sys.argv = {argv!r}
try:
    runpy.run_module({module!r}, run_name="__main__")
except SystemExit as exc:
    assert exc.code in (0, None), exc.code
assert not [m for m in sys.modules if m.split(".")[0] == "django"], "django imported"
"""


def run_without_django(module: str, *argv: str, timeout: float = 120) -> str:
    """The module's standard output; asserts it exited 0 and never imported Django."""
    code = _PROGRAM.format(module=module, argv=[module, *argv])
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=timeout
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout

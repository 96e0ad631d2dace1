"""A stand-in for ``gpuctl.client.Portal`` and a runner of ``gpuctl.main.main`` around it.

The unit tests of gpuctl feed canned API answers to the commands and read back what they
printed and which calls they made, without a portal or a network.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gpuctl import main as gpuctl_main


@dataclass
class Run:
    code: int
    out: str
    err: str


@dataclass
class FakePortal:
    """Answers by ``(method, path)``: a value, a ``CliError`` to raise, or a callable of the call.

    ``method`` is ``get``, ``post`` or ``list`` (``fetch_list``); list answers are the rows,
    or ``(rows, total)``. Every call is recorded in ``calls`` as ``(method, path, args)``.
    """

    answers: dict[tuple[str, str], Any] = field(default_factory=dict)
    calls: list[tuple[str, str, dict]] = field(default_factory=list)

    def _answer(self, method: str, path: str, args: dict) -> Any:
        self.calls.append((method, path, args))
        try:
            answer = self.answers[(method, path)]
        except KeyError:
            raise AssertionError(f"unexpected {method} {path} {args}") from None
        if isinstance(answer, BaseException):
            raise answer
        return answer(args) if callable(answer) else answer

    def get(self, path: str, **params: Any) -> Any:
        return self._answer("get", path, params)

    def post(self, path: str, body: dict | None = None) -> Any:
        return self._answer("post", path, {"body": body})

    def fetch_list(self, path: str, limit: int | None = None, **params: Any):
        rows = self._answer("list", path, {"limit": limit, **params})
        return rows if isinstance(rows, tuple) else (rows, len(rows))


def run_main(portal: FakePortal, monkeypatch, tmp_path, capsys) -> Callable[..., Run]:
    """A runner of ``gpuctl.main.main(argv)`` -> Run(code, out, err), answered by ``portal``."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))  # never the real config
    monkeypatch.delenv("GPUCTL_CONFIG", raising=False)
    monkeypatch.setenv("GPUCTL_URL", "http://portal.test")
    monkeypatch.setenv("GPUCTL_TOKEN", "t0ken")
    monkeypatch.setattr(gpuctl_main, "Portal", lambda config: portal)

    def run(*argv: str) -> Run:
        capsys.readouterr()
        code = gpuctl_main.main(list(argv))
        out, err = capsys.readouterr()
        return Run(code, out, err)

    return run

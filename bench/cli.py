"""What the bench commands share: their common options, the API token, how a result prints.

Two families: the scale benchmarks (``bench_cycle``, ``bench_pages``) load the benchmark
cluster here and take its size; the client benchmarks (``bench_api``, ``bench_burst``,
``bench_live``) drive a running portal at ``--url``. All print one JSON object with
``--json``, else a few human lines.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

DEFAULT_URL = "http://127.0.0.1:8000"


def add_scale_arguments(parser: CommandParser) -> None:
    """The benchmark cluster's size (``bench.engine.build_snapshot``) and the runs to time."""
    parser.add_argument("--gpus", type=int, default=10_000)
    parser.add_argument("--pending", type=int, default=5_000)
    parser.add_argument("--running", type=int, default=2_000)
    parser.add_argument("--runs", type=int, default=7)


def add_output_arguments(parser: CommandParser, url: bool = False) -> None:
    """``--json`` (one JSON object), and with ``url`` the running portal's ``--url``."""
    if url:
        parser.add_argument("--url", default=DEFAULT_URL, help="portal base URL")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def write_result(
    command: BaseCommand,
    result: dict[str, Any],
    as_json: bool,
    human: Callable[[dict[str, Any]], Iterable[str]],
    **json_options: Any,
) -> None:
    """Print ``result`` as one JSON object, or as the lines ``human(result)`` gives."""
    if as_json:
        command.stdout.write(json.dumps(result, **json_options))
        return
    for line in human(result):
        command.stdout.write(line)


def api_token(username: str) -> str:
    """An API token of the active user ``username`` (created if needed) to submit with."""
    from django.contrib.auth import get_user_model
    from rest_framework.authtoken.models import Token

    user = get_user_model().objects.filter(username=username, is_active=True).first()
    if user is None:
        raise CommandError(f"no active user {username!r} here (seed_demo first?)")
    return Token.objects.get_or_create(user=user)[0].key

"""The concurrency drill through the web server (#16): ``test_drill.py`` drives the
services; here people act through the real portal (``portal.web``: uvicorn, its HTTP
threads, PostgreSQL, Redis) while cycles run back to back in this process, as the loop's
worker runs them.

Researchers submit and cancel, the lead asks for quota, withdraws and cancels, an admin
approves, rejects and asks for cycles, on-call cordons, drains and uncordons, all at once
for ``DRILL_SECONDS`` (default 20), through ``manage.py drill --http`` (``bench.drill``),
the command that runs it longer. Then: no 500 and no other unexpected answer, no deadlock
anywhere (answers, the server's log), every accepted action applied exactly once, and
``check_cluster`` clean.
"""

from __future__ import annotations

import contextlib
import io
import json
import os

import pytest
from django.core.management import CommandError, call_command

from tests.drills import make_quotas_roomy
from tests.reliability.conftest import child_env, in_a_thread, web_server

pytestmark = pytest.mark.django_db(transaction=True)

SECONDS = float(os.environ.get("DRILL_SECONDS", "20"))


def drill(base: str, seconds: float) -> dict:
    """``manage.py drill --http --json`` against ``base``; its result, problems or not."""
    out = io.StringIO()
    with contextlib.suppress(CommandError):  # the result printed says what failed
        call_command("drill", "--http", "--json", seconds=seconds, url=base, stdout=out)
    return json.loads(out.getvalue())


def test_everyone_acts_through_the_api_while_cycles_run_and_nothing_fails(demo, tmp_path):
    make_quotas_roomy()  # placement, not quota, is what the cycles decide here
    log = tmp_path / "web.log"
    with web_server(child_env(WEB_THREADS="8"), log) as base:
        result = in_a_thread(drill, base, SECONDS)
    print("http drill:", result)

    assert result["problems"] == [] and result["errors"] == 0
    accepted = result["accepted"]
    assert accepted["cycle"] >= 2 and accepted["submit"] >= 5 and accepted["cancel"] >= 1, accepted
    assert accepted["ask"] >= 1 and accepted.get("cordon", 0) + accepted.get("drain", 0) >= 1
    assert sum(accepted.get(d, 0) for d in ("approve", "reject", "withdraw")) >= 1, accepted
    # The server's own account: no 500 logged, no deadlock (the quota mails it cannot send
    # here are logged with their stack, as warnings, by design).
    served = log.read_text(errors="replace")
    assert "Internal Server Error" not in served and '" 500 ' not in served, served[-3000:]
    assert "deadlock" not in served.lower(), served[-3000:]


def test_the_command_needs_http_and_says_where_the_other_drill_is(demo):
    with pytest.raises(CommandError, match="tests/concurrency/test_drill.py"):
        call_command("drill", seconds=1)

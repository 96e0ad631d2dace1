"""gpuctl prints what other people named, never what their names would make a terminal do
(#16 finding 5): control and invisible format characters are written out as escapes."""

from __future__ import annotations

import io

import pytest

from gpuctl.output import TerminalSafe, escape_controls, fmt_cell

HOSTILE = "\x1b]0;pwned\x07job"


@pytest.mark.parametrize(
    "text,shown",
    [
        ("plain name", "plain name"),
        ("naïve-日本語-ß", "naïve-日本語-ß"),  # printable Unicode is left alone
        (HOSTILE, "\\x1b]0;pwned\\x07job"),
        ("back\bspace", "back\\x08space"),
        ("c1\x9bcsi", "c1\\x9bcsi"),
        ("del\x7f", "del\\x7f"),
        ("rlo\u202eexe.txt", "rlo\\u202eexe.txt"),  # a bidi override hides the real name
        ("zero\u200bwidth", "zero\\u200bwidth"),
        ("line\u2028sep", "line\\u2028sep"),
        ("nul\x00", "nul\\x00"),
        ("two\nlines\tand tab", "two\nlines\tand tab"),
    ],
)
def test_escape_controls(text, shown):
    assert escape_controls(text) == shown


def test_the_stream_escapes_everything_written_through_it():
    raw = io.StringIO()
    out = TerminalSafe(raw)
    assert out.write(HOSTILE + "\n") == len(HOSTILE) + 1
    out.flush()
    assert raw.getvalue() == "\\x1b]0;pwned\\x07job\n"


def test_cells_are_escaped_before_the_table_is_aligned():
    assert fmt_cell(HOSTILE) == "\\x1b]0;pwned\\x07job"


def test_a_hostile_job_name_reaches_the_table_escaped_and_aligned(cli, portal):
    rows = [
        {"id": 1, "name": HOSTILE, "owner": "eve", "queue": "q", "tier": "core", "gpus": 1,
         "state": "running", "pending_reason": None, "submitted_at": None,
         "estimated_start": None},
        {"id": 22, "name": "ok", "owner": "ann", "queue": "q", "tier": "core", "gpus": 8,
         "state": "running", "pending_reason": None, "submitted_at": None,
         "estimated_start": None},
    ]  # fmt: skip
    portal.answers[("list", "jobs/")] = rows
    run = cli("jobs")
    assert run.code == 0
    assert "\x1b" not in run.out and "\x07" not in run.out
    lines = run.out.splitlines()
    assert "\\x1b]0;pwned\\x07job" in lines[1]
    assert lines[1].index("eve") == lines[2].index("ann"), "columns still line up"


def test_error_messages_from_the_server_are_escaped_too(cli, portal):
    from gpuctl.client import CliError

    portal.answers[("list", "jobs/")] = CliError("queue 'x\x1b[2J' does not exist", 2)
    run = cli("jobs")
    assert run.code == 2
    assert run.err == "gpuctl: error: queue 'x\\x1b[2J' does not exist\n"

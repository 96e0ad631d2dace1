"""Rendering: aligned tables for people, JSON for scripts, and short human times."""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import unicodedata
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from operator import itemgetter
from typing import Any, TextIO

Column = tuple[str, Callable[[dict], Any]]

# How lists print, set once from the command line (``-o``, ``--no-headers``): ``table``
# (aligned, for people), ``wide`` (the table with every column a command offers), ``json``,
# ``yaml`` (the API's objects), ``name`` (the first column only, one per line).
MODES = ("table", "wide", "json", "yaml", "name")
_mode = {"output": "table", "headers": True}


def set_mode(output: str = "table", headers: bool = True) -> None:
    """Choose how ``table`` and ``print_json`` print (``-o`` and ``--no-headers``)."""
    _mode["output"] = output if output in MODES else "table"
    _mode["headers"] = headers


def mode() -> str:
    """The chosen ``-o`` mode."""
    return _mode["output"]


# Colour, on a terminal only: the values people scan a table for, in the columns that hold
# them. Green: working or healthy; yellow: waiting or on the way out; red: broken or needs
# someone. Anything else (finished, cancelled, resolved) stays plain.
COLOURED_COLUMNS = frozenset({"STATE", "STATUS", "HEALTH", "SEVERITY"})
GREEN, YELLOW, RED = "32", "33", "31"
COLOURS = {
    **dict.fromkeys(("running", "ready", "ok", "approved", "info"), GREEN),
    **dict.fromkeys(("pending", "preempting", "checkpointing", "cordoned", "draining",
                     "acknowledged", "warning"), YELLOW),
    **dict.fromkeys(("failed", "down", "unhealthy", "gpu_failure", "rdma_degraded", "open",
                     "critical", "rejected"), RED),
}  # fmt: skip


def wants_colour(stream: TextIO, environ: dict[str, str] | None = None) -> bool:
    """Colour only on a terminal: not when ``stream`` is piped or redirected, not when
    ``NO_COLOR`` is set to anything (https://no-color.org), not on ``TERM=dumb``."""
    env = os.environ if environ is None else environ
    if env.get("NO_COLOR") or env.get("TERM") == "dumb":
        return False
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or unusual stream
        return False


def _paint(cell: str, padded: str) -> str:
    """``padded`` (``cell`` with its alignment spaces) with ``cell`` in its colour, if any."""
    code = COLOURS.get(cell)
    if code is None:
        return padded
    return padded.replace(cell, f"\x1b[{code}m{cell}\x1b[0m", 1)


def display_width(text: str) -> int:
    """Terminal columns ``text`` takes: East Asian wide and full-width characters take two,
    combining marks none (so CJK names line up)."""
    width = 0
    for ch in text:
        if unicodedata.combining(ch):
            continue
        width += 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1
    return width


def _pad(text: str, width: int, right: bool) -> str:
    room = " " * max(0, width - display_width(text))
    return room + text if right else text + room


def columns(*specs: tuple[str, str | Callable[[dict], Any]], lenient: bool = False) -> list[Column]:
    """Table columns from ``(HEADER, key)`` pairs, the cell being ``row[key]``, or from
    ``(HEADER, function of the row)``. ``lenient``: a missing key is an empty cell (for
    answers of older portals that lack a field) rather than an error."""
    out: list[Column] = []
    for header, get in specs:
        if not callable(get):
            get = (lambda row, key=get: row.get(key)) if lenient else itemgetter(get)
        out.append((header, get))
    return out


def count(n: int, word: str) -> str:
    """``1 GPU``, ``256 GPUs``, ``2 times``: as the portal's pages say it (not ``GPU(s)``)."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def fmt_indices(indices: Sequence[int]) -> str:
    """GPU indices with runs shortened, as Slurm writes them: ``0-7``, ``0-3,6``."""
    spans: list[list[int]] = []
    for i in sorted(indices):
        if spans and i == spans[-1][1] + 1:
            spans[-1][1] = i
        else:
            spans.append([i, i])
    return ",".join(f"{a}-{b}" if b > a else str(a) for a, b in spans)


def fmt_time(value: str | None) -> str:
    """ISO 8601 from the API -> ``2026-11-29 10:12`` (UTC); ``-`` when absent."""
    if not value:
        return "-"
    try:
        dt = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return str(value)
    return dt.astimezone(UTC).strftime("%Y-%m-%d %H:%M")


def fmt_when(value: str | None) -> str:
    """A time in a sentence, its zone named: ``2026-11-29 10:12 UTC`` (``-`` when absent).
    Tables name the zone in their headers (``SUBMITTED(UTC)``) and use ``fmt_time``."""
    shown = fmt_time(value)
    return f"{shown} UTC" if value and shown != value else shown


def fmt_duration(seconds: float) -> str:
    """Seconds -> ``45 s``, ``20 min``, ``2 h 10 min`` (up to 47 h), ``3 d 4 h`` (as the
    portal says them)."""
    s = max(0, int(seconds))
    if s < 60:
        return f"{s} s"
    minutes = s // 60
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h" if hours else f"{days} d"


def fmt_detail(key: str, value: Any) -> Any:
    """One number of a verdict's ``details`` for people: ``..._at`` times as dates (UTC),
    ``..._seconds`` as durations; anything else as it is."""
    if key.endswith("_at") and isinstance(value, str) and value:
        return fmt_when(value)
    if key.endswith("_seconds") and isinstance(value, int | float) and not isinstance(value, bool):
        return fmt_duration(value)
    return value


def fmt_cell(value: Any) -> str:
    if value is None or value == "":
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.2f}"
    return escape_controls(" ".join(str(value).split()))  # escaped before aligning


def table(rows: Sequence[dict], columns: Sequence[Column], out: TextIO | None = None) -> None:
    """An aligned table: upper-case headers, two spaces between columns, numbers right-aligned."""
    out = out or sys.stdout
    cells = [[fmt_cell(get(row)) for _, get in columns] for row in rows]
    numeric = [
        all(isinstance(get(row), int | float) and not isinstance(get(row), bool) for row in rows)
        and bool(rows)
        for _, get in columns
    ]
    headers = [name for name, _ in columns]
    if _mode["output"] == "name":
        for row in cells:
            print(row[0], file=out)
        return
    widths = [
        max([display_width(h)] + [display_width(r[i]) for r in cells])
        for i, h in enumerate(headers)
    ]

    def line(values: Sequence[str]) -> str:
        parts = [_pad(v, widths[i], numeric[i]) for i, v in enumerate(values)]
        return "  ".join(parts).rstrip()

    if _mode["headers"]:
        print(line(headers), file=out)
    # Colour goes around cells already escaped (fmt_cell) and aligned, straight to the
    # terminal under TerminalSafe (which would print our escapes, as it does anyone's).
    raw = getattr(out, "raw", out)
    painted = [i for i, h in enumerate(headers) if h in COLOURED_COLUMNS]
    colour = bool(painted) and wants_colour(raw)
    for row in cells:
        if not colour:
            print(line(row), file=out)
            continue
        parts = [_pad(v, widths[i], numeric[i]) for i, v in enumerate(row)]
        parts = [_paint(row[i], part) if i in painted else part for i, part in enumerate(parts)]
        raw.write("  ".join(parts).rstrip() + "\n")


def print_json(data: Any, out: TextIO | None = None) -> None:
    """The API's objects as JSON, or as YAML with ``-o yaml``."""
    if _mode["output"] == "yaml":
        import yaml

        text = yaml.safe_dump(
            json.loads(json.dumps(data, default=str)), sort_keys=True, allow_unicode=True
        )
        print(text, end="", file=out or sys.stdout)
        return
    print(json.dumps(data, indent=2, sort_keys=True, default=str), file=out or sys.stdout)


def fields(pairs: Sequence[tuple[str, Any]], out: TextIO | None = None) -> None:
    """``label  value`` lines with the labels aligned (for single objects)."""
    out = out or sys.stdout
    width = max((len(label) for label, _ in pairs), default=0)
    for label, value in pairs:
        print(f"{label.ljust(width)}  {fmt_cell(value) if not isinstance(value, str) else value}",
              file=out)  # fmt: skip


def escape_controls(text: str) -> str:
    """``text`` with every character a terminal would act on or hide written out as an
    escape (``\\x1b``, ``\\u202e``): control characters (C0, DEL, C1) and invisible
    format characters (bidi overrides, zero-width spaces). Newlines and tabs stay."""
    if text.isprintable():
        return text
    out = []
    for ch in text:
        if ch in "\n\t" or unicodedata.category(ch) not in ("Cc", "Cf", "Zl", "Zp"):
            out.append(ch)
        else:
            out.append(ascii(ch)[1:-1])
    return "".join(out)


class TerminalSafe(io.TextIOBase):
    """A text stream that escapes what ``escape_controls`` escapes before passing it on:
    a job name such as ``"\\x1b]0;pwned\\x07"`` is printed, not obeyed."""

    def __init__(self, raw: TextIO) -> None:
        self.raw = raw

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self.raw.write(escape_controls(text))
        return len(text)

    def flush(self) -> None:
        self.raw.flush()


@contextlib.contextmanager
def terminal_safe_output() -> Iterator[None]:
    """Everything printed to stdout and stderr inside is passed through ``TerminalSafe``."""
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = TerminalSafe(saved[0]), TerminalSafe(saved[1])
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved

"""``gpuctl logs JOB``: the end of a job's output (stdout and stderr), as ``kubectl logs``.

One call, ``GET /api/v1/jobs/{id}/output/``. The text goes to stdout as the portal sends
it (escape sequences removed there, control characters written out; the terminal-safe
stdout of ``gpuctl.main`` escapes anything left), the notes about it to stderr, so
``gpuctl logs 42 | grep loss`` reads only the output. ``-f`` asks again every few
seconds and prints what is new, until the job has ended (or Ctrl-C).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections.abc import Callable
from typing import Any

from gpuctl.client import EXIT_OK, Portal, whole_number
from gpuctl.output import print_json

LOGS_HELP = """\
Print the end of a job's output (stdout and stderr of its latest run, or of run N with
--attempt). Who may: the job's owner, a team lead of its line, on-call engineers and
admins. Where the output comes from depends on the cluster: a Slurm output file on shared
storage, a Kubernetes pod's log (only while the pod exists), or the simulator.

examples:
  gpuctl logs 42                            # the last 64 KiB
  gpuctl logs 42 --bytes 1048576            # the last MiB (at most)
  gpuctl logs 42 --attempt 1                # its first run (before a preemption, a retry)
  gpuctl logs 42 -f                         # follow until the job ends (Ctrl-C to stop)
  gpuctl logs 42 | grep -i error
"""

ENDED = frozenset({"succeeded", "failed", "cancelled"})
ANCHOR = 200  # characters of the text already printed that locate it in the next answer


def new_part(seen: str, text: str) -> tuple[str, bool]:
    """What of ``text`` (the latest tail) follows ``seen`` (the tail printed last), and
    whether some output was missed in between (``seen``'s end is no longer in ``text``)."""
    if not seen:
        return text, False
    if text.startswith(seen):
        return text[len(seen) :], False
    anchor = seen[-ANCHOR:]
    at = text.rfind(anchor)
    if at < 0:
        return text, True
    return text[at + len(anchor) :], False


def _about(out: dict[str, Any]) -> str:
    where = f", from {out['source']}" if out.get("source") else ""
    cut = "; only the end" if out.get("truncated") else ""
    return f"==> job {out['job']}, run {out['attempt']} of {out['attempts']}{where}{cut} <=="


def cmd_logs(portal: Portal, args: argparse.Namespace) -> int:
    def read() -> dict[str, Any]:
        return portal.get(f"jobs/{args.job}/output/", attempt=args.attempt, bytes=args.bytes)

    out = read()
    if args.json:
        print_json(out)
        return EXIT_OK
    if not args.follow:
        show(out)
        return EXIT_OK
    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C ends a follow: exit 0, as -w
        follow(out, read, args.interval, time.sleep)
    return EXIT_OK


def show(out: dict[str, Any]) -> None:
    """One answer: the note on stderr, the text on stdout."""
    if out.get("reason"):
        print(f"gpuctl: no output: {out['reason']}", file=sys.stderr)
        return
    print(_about(out), file=sys.stderr)
    sys.stdout.write(out["text"])
    sys.stdout.flush()


def follow(out: dict[str, Any], read: Callable[[], dict[str, Any]], every: float,
           sleep: Callable[[float], None]) -> None:  # fmt: skip
    """Print ``out``, then what each later answer adds, until the job has ended."""
    show(out)
    seen, run = out.get("text") or "", out.get("attempt")
    while out.get("state") not in ENDED:
        sleep(every)
        out = read()
        if out.get("attempt") != run:  # a new run (a retry, after a preemption)
            run = out.get("attempt")
            show(out)
            seen = out.get("text") or ""
            continue
        added, missed = new_part(seen, out.get("text") or "")
        if missed:
            print("gpuctl: (output skipped: more was written than --bytes holds)", file=sys.stderr)
        sys.stdout.write(added)
        sys.stdout.flush()
        seen = out.get("text") or ""


HELP = "the end of a job's output (stdout and stderr); -f follows it"


def add_arguments(p: argparse.ArgumentParser, seconds: Callable[[str], float]) -> None:
    """The arguments of ``logs`` (``seconds``: the parser of ``--interval`` of ``gpuctl.main``)."""
    p.add_argument("job", type=whole_number, help="job id")
    p.add_argument("--attempt", type=whole_number, help="run N (default: the latest)")
    p.add_argument("--bytes", type=whole_number, help="how much of the end (default 65536, "
                   "at most 1048576)")  # fmt: skip
    p.add_argument("-f", "--follow", action="store_true",
                   help="keep printing new output until the job ends")  # fmt: skip
    p.add_argument("--interval", type=seconds, default=3.0, help="seconds between looks (3)")

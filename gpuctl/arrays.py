"""gpuctl and job arrays (Slurm's ``sbatch --array``): ``submit --array``, ``array ID``,
``array-limit ID N|none`` and ``cancel --array ID``; a task's name as squeue shows it.

One REST call each (``/api/v1/arrays/``, docs/api.md "Job arrays"); ``gpuctl.main`` wires
them into its parser and its ``cancel``.
"""

from __future__ import annotations

import argparse
from typing import Any

from gpuctl.client import EXIT_OK, Portal, whole_number
from gpuctl.output import count, fields, fmt_indices, fmt_when, print_json

ARRAY_HELP = """\
Show a job array: its spec, its bound (the most tasks running at once), how many tasks
are in each state (and how many the bound holds back: reason ARRAY_LIMIT), the GPUs its
tasks hold, and its tasks' job ids. Each task is a job: gpuctl jobs --array ID lists them,
gpuctl explain JOB explains one.

examples:
  gpuctl submit sweep -q llm-experiment -g 1 --array 0-99%10
  gpuctl array 42
  gpuctl array 42 --json | jq .progress
  gpuctl jobs --array 42 --state pending
"""

LIMIT_HELP = """\
Change how many of an array's tasks may hold GPUs at once (Slurm's scontrol update
ArrayTaskThrottle): the next scheduling cycle starts or holds back tasks by it; a lower
bound stops no running task. N from 1 to the array's size, or none for no bound. The
array's owner, their team lead or an admin.

examples:
  gpuctl array-limit 42 20
  gpuctl array-limit 42 none
"""

# the order ``gpuctl array`` names the states in
STATES = ("pending", "running", "preempting", "succeeded", "failed", "cancelled")


def task_name(job: dict) -> str:
    """A job's name, with its index when it is a task of an array: ``sweep[7]`` (squeue's
    ``%i`` shows ``ARRAYID_INDEX``; the id column here is the task's own job id)."""
    index = job.get("array_index")
    return str(job["name"]) if index is None else f"{job['name']}[{index}]"


def bound_text(max_running: int | None) -> str:
    return "no bound" if max_running is None else f"at most {max_running} at once"


def submitted_text(array: dict) -> str:
    """``array 42: 100 tasks, jobs 1001-1100, at most 10 at once. Next: ...``"""
    return (
        f"array {array['id']}: {count(array['size'], 'task')}, "
        f"jobs {fmt_indices(array['tasks'])}, {bound_text(array['max_running'])}. "
        f"Next: gpuctl array {array['id']}"
    )


def progress_text(progress: dict) -> str:
    """``10 running, 90 pending (80 held back by the bound)``: the states with tasks."""
    parts = []
    for state in STATES:
        n = progress.get(state) or 0
        if not n:
            continue
        held = progress.get("held_back") or 0
        parts.append(f"{n:,} {state}" + (f" ({held:,} held back by the bound)"
                                        if state == "pending" and held else ""))  # fmt: skip
    return ", ".join(parts) or "none"


def cmd_array(portal: Portal, args: argparse.Namespace) -> int:
    array = portal.get(f"arrays/{args.array_id}/")
    if args.json:
        print_json(array)
        return EXIT_OK
    fields([
        ("array", f"{array['id']} {array['name']!r} by {array['owner']}"),
        ("queue", array["queue"]),
        ("spec", f"{array['spec']} ({count(array['size'], 'task')})"),
        ("bound", bound_text(array["max_running"])),
        ("tasks", progress_text(array["progress"])),
        ("GPUs held", f"{array['progress'].get('gpus_held', 0):,}"),
        ("jobs", fmt_indices(array["tasks"]) or "-"),
        ("submitted", fmt_when(array["created_at"])),
    ])  # fmt: skip
    return EXIT_OK


def limit_value(text: str) -> int | None:
    """``array-limit``'s N: a whole number (digits 0-9), or ``none``: no bound."""
    return None if text.strip().lower() == "none" else whole_number(text)


def cmd_array_limit(portal: Portal, args: argparse.Namespace) -> int:
    array = portal.patch(f"arrays/{args.array_id}/", {"max_running": args.limit})
    if args.json:
        print_json(array)
    else:
        print(f"array {array['id']} ({array['name']}): {bound_text(array['max_running'])}")
    return EXIT_OK


def cancel_array(portal: Portal, args: argparse.Namespace) -> int:
    """``cancel --array ID``: every active task, in one call."""
    answer: dict[str, Any] = portal.post(f"arrays/{args.array}/cancel/")
    if args.json:
        print_json(answer)
        return EXIT_OK
    ids = answer["cancelled"]
    if not ids:
        print(f"array {args.array}: no active task to cancel")
    else:
        print(f"array {args.array}: cancelled {count(len(ids), 'task')} (jobs {fmt_indices(ids)})")
    return EXIT_OK


def begin_array(portal: Portal, args: argparse.Namespace, body: dict[str, Any]) -> int:
    """``begin --array ID TIME``: every waiting task's earliest start, in one call."""
    answer: dict[str, Any] = portal.post(f"arrays/{args.job}/begin-time/", body)
    if args.json:
        print_json(answer)
        return EXIT_OK
    ids = answer["changed"]
    begin = answer["begin_at"]
    said = f"not before {fmt_when(begin)}" if begin else "no earliest start, queued from now"
    print(f"array {args.job}: {count(len(ids), 'waiting task')} changed: {said} "
          f"(jobs {fmt_indices(ids)})")  # fmt: skip
    return EXIT_OK


def add_parsers(add: Any) -> None:
    """``array`` and ``array-limit`` (``add``: ``gpuctl.main``'s subcommand maker)."""
    p = add("array", cmd_array, "a job array: spec, bound, tasks by state, GPUs held", ARRAY_HELP)
    p.add_argument("array_id", type=whole_number, metavar="ARRAY", help="array id")
    p = add("array-limit", cmd_array_limit, "change the most tasks of an array running at once",
            LIMIT_HELP)  # fmt: skip
    p.add_argument("array_id", type=whole_number, metavar="ARRAY", help="array id")
    p.add_argument("limit", type=limit_value, metavar="N|none",
                   help="1 to the array's size, or none: no bound")  # fmt: skip

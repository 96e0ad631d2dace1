"""gpuctl: submit, list, explain, cancel, hold and release jobs and job arrays; watch queues, nodes and alerts; request quota.

Every command is one or a few REST calls (API.md); nothing here knows the
portal's internals. ``main(argv)`` returns the exit code, so tests and scripts
can run it in-process.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from gpuctl import __version__, arrays, completion, login, logs
from gpuctl.client import (
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_SERVER,
    EXIT_USAGE,
    YAML_READ_ERRORS,
    CliError,
    Config,
    Portal,
    array_ids,
    config_path,
    job_ids,
    slurm_begin,
    slurm_minutes,
    whole_number,
)
from gpuctl.output import (
    MODES,
    columns,
    count,
    fields,
    fmt_cell,
    fmt_detail,
    fmt_duration,
    fmt_indices,
    fmt_time,
    fmt_when,
    mode,
    print_json,
    set_mode,
    table,
    terminal_safe_output,
)

TOP_HELP = """\
Command-line client of the GPU portal. It speaks only the portal's REST API.

configuration (first found wins):
  --url, then GPUCTL_URL and GPUCTL_TOKEN in the environment,
  then ~/.config/gpuctl.yaml (or $GPUCTL_CONFIG) with `url:` and `token:`.
  Get a token with: gpuctl --url URL login (saves url: and token: there), or make one
  on the portal's "API tokens" page.

examples:
  export GPUCTL_URL=http://127.0.0.1:8000 GPUCTL_TOKEN=<key>
  gpuctl submit llama-ft --queue llm-finetune --gpus 8 --checkpoint-path nfs://ckpt/llama
  gpuctl submit -f job.yaml                 # fields as in API.md, flags override the file
  gpuctl jobs --mine --state pending        # what am I waiting for?
  gpuctl explain 42                         # why job 42 waits, and what would start it
  gpuctl cancel 42
  gpuctl submit sweep -q llm-experiment -g 1 --array 0-99%10   # a job array, 10 at once
  gpuctl logs 42 -f                         # the end of its output, followed until it ends
  gpuctl queues                             # quota, guarantee, used, pending, eviction
  gpuctl nodes --state cordoned
  gpuctl nodes drain r001-n03 --reason "XID 79 on GPU 3"
  gpuctl alerts                             # open and acknowledged alerts
  gpuctl quota request --line llm --quota 600 --guarantee 240 --reason "Q3 pretraining"
  gpuctl jobs --json | jq '.[].id'          # --json on any command, for scripts

exit codes:
  0 ok   1 refused by the portal (bad input, not allowed, not found, busy)
  2 bad command line or job file   3 no or rejected token   4 portal unreachable or no URL
  5 portal error
"""

SUBMIT_HELP = """\
Submit a training job. Give the fields as flags, or in a YAML file (-f) whose keys are
the API fields (name, queue, gpus, tier, gpus_per_node, rdma, checkpoint_path, ...);
flags given on the command line override the file.

examples:
  gpuctl submit llama-ft -q llm-finetune -g 8
  gpuctl submit pretrain -q llm-core -g 64 --checkpoint-path s3://ckpt/pretrain \\
      --checkpoint-interval-minutes 30 --estimated-runtime-minutes 720 --model-name llama-70b
  gpuctl submit -f job.yaml --gpus 16       # the file, with 16 GPUs instead
  gpuctl submit eval -q llm-core -g 8 --after 12,13   # once jobs 12 and 13 succeeded
  gpuctl submit merge -q llm-core -g 8 --after-array 42   # once every task of array 42 did
  gpuctl submit cleanup -q llm-core -g 8 --after 12 --after-condition ended   # once job 12 ended, however
  gpuctl submit fallback -q llm-core -g 8 --after 12 --after-condition failed   # only if job 12 failed
  gpuctl submit pretrain -q llm-core -g 64 --singleton   # after your older "pretrain" jobs end
  gpuctl submit eval -q llm-core -g 1 --array 0-9 --after-corr 42   # task i after task i of 42
  gpuctl submit sweep -q llm-experiment -g 1 --array 0-99%10   # 100 tasks, 10 at once
  cat job.yaml | gpuctl submit -f -

  job.yaml:
    name: llama-ft
    queue: llm-finetune
    gpus: 8
    checkpoint_path: nfs://ckpt/llama
    preemptible: true
"""

EXPLAIN_HELP = """\
Show one job: its state, and when pending the verdict of the last scheduling cycle
(the reason code, its numbers, what would make it start, the estimated start), then
its timeline. Reason codes: NEVER_FITS, HELD (on hold until gpuctl release),
QUEUE_TIME_LIMIT (its time limit is above its queue's now: gpuctl time-limit), DEPENDENCY
(it waits for the jobs it was submitted --after, or every task of the arrays it was
submitted --after-array, to succeed; with --after-condition ended to end, whatever the
outcome; with failed to end without succeeding), ARRAY_LIMIT (a task of an
array past its bound: --array 0-99%10), QUOTA_EXCEEDED,
NODES_UNAVAILABLE, PRIORITY, PREEMPTING,
TOPOLOGY, INSUFFICIENT_GPUS, DEMOTED (see API.md), and LAUNCH_RETRY: its turn came but
the cluster could not start it yet; the portal retries on its own.

examples:
  gpuctl explain 42
  gpuctl explain 42 --events 0              # the whole timeline
  gpuctl explain 42 --json | jq .pending_reason.details
"""

NODES_HELP = """\
List nodes, or take them out of service and back (on-call engineers and admins).
cordon: no new work lands there, running jobs stay. drain: cordon, and move its jobs
off gracefully (checkpoint, requeue). uncordon: back into the pool. A reason is
required: it is shown to users and kept in the audit log.

examples:
  gpuctl nodes                              # every node, with free GPUs and health
  gpuctl nodes --state ready --gpu-model H100
  gpuctl nodes cordon r001-n03 --reason "fan alarm, waiting for DC ops"
  gpuctl nodes drain r001-n03 r001-n04 --reason "rack maintenance 14:00"
  gpuctl nodes uncordon r001-n03 --reason "fan replaced"
"""

ALERTS_HELP = """\
List alerts (open and acknowledged by default), acknowledge or resolve them
(on-call engineers and admins).

examples:
  gpuctl alerts
  gpuctl alerts --all --kind residual_process
  gpuctl alerts ack 17
  gpuctl alerts resolve 17 18
"""

MAINTENANCE_HELP = """\
Scheduled maintenance (as Slurm's maintenance reservations): until a window starts, only
work predicted to end before its start lands on its nodes; at the start the portal drains
them (jobs checkpoint and move), at the end it returns them. Times are ISO 8601 with a
zone (Z for UTC); no end: open-ended, until cancelled. Scheduling and cancelling are for
on-call engineers and admins; everyone may list.

examples:
  gpuctl maintenance                        # scheduled and active windows
  gpuctl maintenance list --all --node r001-n03
  gpuctl maintenance create r001-n03 r001-n04 --starts-at 2026-12-01T14:00:00Z \\
      --ends-at 2026-12-01T18:00:00Z --reason "firmware"
  gpuctl maintenance create --rack r001 --starts-at 2026-12-02T08:00:00Z --reason "PDU swap"
  gpuctl maintenance cancel 12
"""

QUOTA_HELP = """\
Quota requests: a team lead asks for a new quota/guarantee for their line (or one of
its queues), an admin looks at the impact and approves or rejects; the requester may
withdraw a request still open.

examples:
  gpuctl quota list --state pending
  gpuctl quota request --line llm --queue llm-core --quota 400 --guarantee 200 \\
      --reason "pretraining run in October" --starts-at 2026-10-01 --ends-at 2026-11-01
  gpuctl quota impact 7                     # does it fit? whose headroom shrinks?
  gpuctl quota approve 7
  gpuctl quota approve 7 --note "ok for Q4" --override-reserve
  gpuctl quota reject 7 --note "no capacity until the new racks arrive"
  gpuctl quota withdraw 7
"""

JOB_FIELDS_INT = (
    "gpus", "gpus_per_node", "gpu_memory_gb", "max_retries", "checkpoint_interval_minutes",
    "estimated_runtime_minutes", "time_limit_minutes", "sim_duration_minutes",
)  # fmt: skip
JOB_FIELDS_STR = ("name", "queue", "tier", "checkpoint_path", "model_name", "begin_at")
JOB_FIELDS_BOOL = ("rdma", "exclusive_node", "avoid_inference", "preemptible", "singleton")
# job ids, array ids (--after, --after-array, --after-corr)
JOB_FIELDS_AFTER = ("after", "after_arrays", "after_corresponding")
# what they must have done first (--after-condition; the portal's default: succeeded)
AFTER_CONDITIONS = ("succeeded", "ended", "failed")


# -- commands -----------------------------------------------------------------------------


def _job_body(args: argparse.Namespace) -> dict[str, Any]:
    body: dict[str, Any] = {}
    if args.file:
        try:
            text = sys.stdin.read() if args.file == "-" else Path(args.file).read_text()
            loaded = yaml.safe_load(text)
        except YAML_READ_ERRORS as exc:
            message = f"cannot read job file {args.file}: {exc}".splitlines()[0]
            raise CliError(message, EXIT_USAGE) from exc
        if not isinstance(loaded, dict):
            raise CliError(f"job file {args.file} must be a mapping of API fields", EXIT_USAGE)
        try:  # YAML reads 2026-01-01 as a date, !!binary as bytes, .nan as a float: not JSON
            json.dumps(loaded, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise CliError(
                f"job file {args.file} holds a value JSON cannot carry ({exc}): quote it as text",
                EXIT_USAGE,
            ) from exc
        body.update(loaded)
    for name in (*JOB_FIELDS_STR, *JOB_FIELDS_INT, *JOB_FIELDS_BOOL, *JOB_FIELDS_AFTER,
                 "after_condition", "array"):  # fmt: skip
        value = getattr(args, name, None)
        if value is not None:
            body[name] = value
    missing = [f for f in ("name", "queue", "gpus") if f not in body]
    if missing:
        flags = ", ".join("NAME" if f == "name" else f"--{f}" for f in missing)
        raise CliError(f"missing {flags} (give them as flags or in -f job.yaml)", EXIT_USAGE)
    if "after_corresponding" in body and "array" not in body:
        raise CliError("--after-corr needs --array: each task waits for the task of the same "
                       "index", EXIT_USAGE)  # fmt: skip
    return body


def cmd_submit(portal: Portal, args: argparse.Namespace) -> int:
    body = _job_body(args)
    if "array" in body:  # --array, or array: in the job file
        array = portal.post("arrays/", body)
        if args.json:
            print_json(array)
        else:
            print(arrays.submitted_text(array))
        return EXIT_OK
    job = portal.post("jobs/", body)
    if args.json:
        print_json(job)
    else:
        print(
            f"submitted job {job['id']} ({job['name']}) to {job['queue']}: "
            f"{count(job['gpus'], 'GPU')}, "
            f"tier {job['tier']}, {job['state']}. Next: gpuctl explain {job['id']}"
        )
    return EXIT_OK


def _reason_code(job: dict) -> str:
    reason = job.get("pending_reason") or {}
    if job.get("state") != "pending":
        return ""
    return reason.get("code") or "NEW"


JOB_COLUMNS = columns(
    ("ID", "id"), ("NAME", arrays.task_name), ("OWNER", "owner"), ("QUEUE", "queue"), ("TIER", "tier"),
    ("GPUS", "gpus"), ("STATE", "state"), ("REASON", _reason_code),
    ("SUBMITTED(UTC)", lambda j: fmt_time(j.get("submitted_at"))),
    ("EST.START(UTC)", lambda j: fmt_time(j.get("estimated_start")) if j["state"] == "pending" else ""),
)  # fmt: skip


def _time_limit_cell(job: dict) -> str:
    """A job's time limit a run (``4 h``), or ``-`` (none, or an older portal)."""
    minutes = job.get("time_limit_minutes")
    return fmt_duration(minutes * 60) if minutes else "-"


# -o wide: the table's columns and more of the job
JOB_WIDE_COLUMNS = [
    *JOB_COLUMNS[:4],
    *columns(("LINE", "business_line"), lenient=True),
    *JOB_COLUMNS[4:6],
    *columns(("PER.NODE", "gpus_per_node"), ("PREEMPTED", "preemption_count"), lenient=True),
    *JOB_COLUMNS[6:],
    *columns(
        ("STARTED(UTC)", lambda j: fmt_time(j.get("started_at"))), ("TIME.LIMIT", _time_limit_cell)
    ),
]


def nothing(words: str) -> int:
    """An empty list, said on stderr (as kubectl says "No resources found"): stdout, where
    the rows go, stays empty for scripts (``gpuctl jobs -o name | xargs ...``)."""
    print(words, file=sys.stderr)
    return EXIT_OK


def cmd_jobs(portal: Portal, args: argparse.Namespace) -> int:
    limit = None if args.all else args.limit
    params = {"state": args.state, "queue": args.queue, "owner": args.owner, "name": args.name}
    if args.mine:
        params["mine"] = 1
    if args.array is not None:
        params["array"] = args.array
    rows, total = portal.fetch_list("jobs/", limit=limit, **params)
    if args.json:
        print_json(rows)
        return EXIT_OK
    if not rows:
        return nothing("no jobs match")
    table(rows, JOB_WIDE_COLUMNS if mode() == "wide" else JOB_COLUMNS)
    if total > len(rows):
        print(f"({len(rows)} of {total} jobs shown, newest first; --limit N or --all for more)",
              file=sys.stderr)  # fmt: skip
    return EXIT_OK


def _details_text(details: dict) -> str:
    parts = []
    for key, value in details.items():
        if isinstance(value, dict | list):
            value = (
                ",".join(f"{k}:{v}" for k, v in value.items())
                if isinstance(value, dict)
                else (",".join(map(str, value)))
            )
        parts.append(f"{key}={value}")
    return "  ".join(parts) or "-"


NO_ESTIMATE = "no_estimate_reason"


def _verdict_numbers(reason: dict) -> str:
    """A verdict's numbers for people: the portal's ``facts`` (each with its label and unit,
    as the job page shows them), else its ``details`` with times and durations formatted."""
    facts = reason.get("facts")
    if isinstance(facts, list):
        shown = [f"{f.get('label')}: {f.get('text')}" for f in facts if isinstance(f, dict)]
        return "; ".join(shown) or "-"
    details = reason.get("details") or {}
    return _details_text({k: fmt_detail(k, v) for k, v in details.items() if k != NO_ESTIMATE})


def _estimate_text(job: dict, reason: dict | None) -> str:
    """The one estimated start, as the portal words it (``2026-12-01 00:30 UTC`` or
    ``unknown: <why>``)."""
    if reason and reason.get("estimated_start_text"):
        return str(reason["estimated_start_text"])
    if job.get("estimated_start"):
        return fmt_when(job["estimated_start"])
    why = ((reason or {}).get("details") or {}).get(NO_ESTIMATE)
    return f"unknown: {why}" if why else "- (no estimate yet)"


# By ``after_condition``: how ``explain`` marks a dependency that has not met it yet, and
# its ``starts once they have`` row (none for the default, succeeded).
_NOT_YET = {"succeeded": " (not succeeded yet)", "ended": " (not ended yet)",
            "failed": " (not failed yet)"}  # fmt: skip
_ONCE_THEY_HAVE = {
    "ended": "ended, whatever the outcome",
    "failed": "ended without succeeding (failed or cancelled)",
}


def _dependency_rows(job: dict) -> list[tuple[str, str]]:
    """``explain``'s rows of what a job waits for: its jobs (``starts after``) and arrays
    (``starts after arrays``), each marked while it has not done what the job's
    ``after_condition`` asks (``(not succeeded yet)``, ``(not ended yet)`` or ``(not failed
    yet)``); a job after their ends or failures has a ``starts once they have`` row too. A
    portal that does not say ``after_condition`` (an older one) knows only ``succeeded``. A
    ``singleton`` job says so (the jobs of its name it waits for are among ``after``)."""
    condition = job.get("after_condition") or "succeeded"
    mark = _NOT_YET.get(condition, f" (not {condition} yet)")
    rows = []
    for label, ids, waiting in (
        ("starts after", job.get("after"), job.get("waiting_for")),
        ("starts after arrays", job.get("after_arrays"), job.get("waiting_for_arrays")),
    ):
        if ids:
            waiting = waiting or []
            rows.append((label, ", ".join(f"{i}{mark}" if i in waiting else str(i) for i in ids)))
    if rows and condition in _ONCE_THEY_HAVE:
        rows.append(("starts once they have", _ONCE_THEY_HAVE[condition]))
    if job.get("singleton"):
        rows.append(("one at a time by name", f"yes: after your older {job['name']!r} jobs"))
    return rows


def cmd_explain(portal: Portal, args: argparse.Namespace) -> int:
    job = portal.get(f"jobs/{args.job}/")
    if args.json:
        print_json(job)
        return EXIT_OK
    shape = count(job["gpus"], "GPU")
    if job.get("gpus_per_node") and job["gpus_per_node"] != job["gpus"]:
        shape += f" ({job['gpus_per_node']} per node)"
    needs = [
        f"rdma {fmt_cell(job.get('rdma'))}",
        f"preemptible {fmt_cell(job.get('preemptible'))}",
    ]
    if job.get("gpu_memory_gb"):
        needs.insert(0, f">= {job['gpu_memory_gb']} GB/GPU")
    if job.get("exclusive_node"):
        needs.append("exclusive nodes")
    rows: list[tuple[str, Any]] = [
        ("job", f"{job['id']} {job['name']!r} by {job['owner']}"),
        ("queue", f"{job['queue']} (line {job['business_line']}, tier {job['tier']})"),
        ("asks", f"{shape}; " + ", ".join(needs)),
    ]
    if job.get("array") is not None:
        rows.append(("array", f"task {job['array_index']} of array {job['array']} "
                              f"(gpuctl array {job['array']})"))  # fmt: skip
    state = job["state"]
    if job.get("preemption_count"):
        state += f" (preempted {count(job['preemption_count'], 'time')})"
    if job.get("retry_count"):
        state += f" (retried {count(job['retry_count'], 'time')})"
    rows.append(("state", state))
    rows.extend(_dependency_rows(job))
    if job["state"] == "pending":
        reason = job.get("pending_reason")
        if not reason:
            rows.append(("verdict", "NEW: not seen by a scheduling cycle yet; ask again in a few "
                         "seconds"))  # fmt: skip
        else:
            rows.append(("verdict", f"{reason['code']}: {reason.get('message') or ''}".strip()))
            rows.append(("numbers", _verdict_numbers(reason)))
            rows.append(("remedy", reason.get("remedy") or "-"))
        if job.get("queue_position"):
            rows.append(("position", f"{job['queue_position']} in the pending order"))
        rows.append(("estimated start", _estimate_text(job, reason)))
    if job.get("placement"):
        rows.append(("placement", ", ".join(
            f"{p['node']}[{fmt_indices(p['gpus'])}]" for p in job["placement"]
        )))  # fmt: skip
    if job.get("started_at"):
        rows.append(("started", fmt_when(job["started_at"])))
    if job.get("begin_at"):
        rows.append(("not before", f"{fmt_when(job['begin_at'])} (Slurm's --begin)"))
    if job.get("time_limit_minutes"):
        limit = f"{fmt_duration(job['time_limit_minutes'] * 60)} a run"
        if job.get("time_limit_at"):
            limit += f"; this run is asked to stop at {fmt_when(job['time_limit_at'])}"
        rows.append(("time limit", limit))
    if job.get("finished_at"):
        rows.append(("finished", fmt_when(job["finished_at"])))
    if job.get("failure_reason"):
        rows.append(("failure", job["failure_reason"]))
    fields(rows)
    events = job.get("events") or []
    shown = events if args.events == 0 else events[-args.events :]
    if shown:
        title = (
            "events"
            if len(shown) == len(events)
            else f"events (last {len(shown)} of {len(events)})"
        )
        print(f"{title}:")
        width = max(len(e["kind"]) for e in shown)
        for e in shown:
            print(f"  {fmt_when(e['at'])}  {e['kind'].ljust(width)}  {e['message']}")
    return EXIT_OK


def _each(ids: Sequence[str], act, args: argparse.Namespace, describe) -> int:
    """Run ``act`` on every id; report each; the exit code of the worst failure."""
    results, code = [], EXIT_OK
    for ident in ids:
        try:
            result = act(ident)
        except CliError as err:
            print(f"gpuctl: error: {ident}: {err}", file=sys.stderr)
            code = max(code, err.code)
            continue
        results.append(result)
        if not args.json:
            print(describe(result))
    if args.json:
        print_json(results if len(ids) > 1 else (results[0] if results else None))
    return code


# the states a job can be cancelled in (``--state`` narrows them)
ACTIVE_STATES = ("pending", "running", "preempting")


def choice_problem(args: argparse.Namespace) -> str | None:
    """What is wrong with how a command chooses its jobs (``chosen_jobs``), for the usage
    error: ids and filters together, or neither (never "every job")."""
    narrowed = args.queue or args.owner or args.mine or args.state or args.name
    if getattr(args, "array", None) is not None:
        if args.jobs or narrowed:
            return (
                "give --array alone: not with job ids or other filters (--me, -u, -q, -n, --state)"
            )
        return None
    if args.jobs and narrowed:
        return "give job ids or filters (--me, -u, -q, -n, --state), not both"
    if not args.jobs and not narrowed:
        return "name the jobs, or choose them with --me, -u USER, -q QUEUE, -n NAME or --state"
    return None


def chosen_jobs(portal: Portal, args: argparse.Namespace, **only: Any) -> list[dict]:
    """The jobs a command acts on: those named (``{"id": N}``), or those the filters match
    among the active ones (``scancel -u USER -p QUEUE -n NAME -t STATE``; ``--me``; ``only``:
    the command's own, e.g. ``held=1``), oldest first (``choice_problem`` has refused
    anything else)."""
    if args.jobs:
        return [{"id": job_id} for job_id in dict.fromkeys(args.jobs)]
    filters = {"queue": args.queue, "owner": args.owner, "name": args.name, **only}
    if args.mine:
        filters["mine"] = 1
    rows: dict[int, dict] = {}
    for state in (args.state,) if args.state else ACTIVE_STATES:
        for row in portal.fetch_list("jobs/", limit=None, state=state, **filters)[0]:
            rows[row["id"]] = row
    return [rows[job_id] for job_id in sorted(rows)]


def act_on_chosen(
    portal: Portal, args: argparse.Namespace, verb: str, act, describe, **only: Any
) -> int:
    """``act`` (job id -> the API's answer) on each job ``chosen_jobs`` chooses, or with
    ``--dry-run`` the list of them, acted on by none."""
    jobs = chosen_jobs(portal, args, **only)
    if not jobs:
        return nothing("no jobs match")
    if args.dry_run and args.json:
        print_json(jobs)
        return EXIT_OK
    if args.dry_run:
        for job in jobs:
            print(f"would {verb} job {job['id']} ({arrays.task_name(job)}): {job['state']}, "
                  f"{job['owner']}")  # fmt: skip
        return EXIT_OK
    return _each([job["id"] for job in jobs], act, args, describe)


def add_job_choice(p: argparse.ArgumentParser, verb: str) -> None:
    """The ways a command on jobs chooses them: ids, or filters (``chosen_jobs``)."""
    p.add_argument("jobs", nargs="*", type=whole_number, metavar="JOB")
    p.add_argument("--state", choices=ACTIVE_STATES, help="only jobs in this state")
    p.add_argument("-q", "--queue", help="only jobs of this queue (name or id)")
    p.add_argument("-u", "--owner", "--user", dest="owner", help="only this user's jobs")
    p.add_argument("--mine", "--me", action="store_true", help="only my jobs")
    p.add_argument("-n", "--name", help="only jobs of exactly this name")
    p.add_argument("--dry-run", action="store_true", help=f"list the jobs chosen, {verb} none")
    p.set_defaults(check=choice_problem, parser=p)


def cmd_cancel(portal: Portal, args: argparse.Namespace) -> int:
    if args.array is not None:
        if not args.dry_run:
            return arrays.cancel_array(portal, args)
        portal.get(f"arrays/{args.array}/")  # one the caller may not see: "not found"
        return act_on_chosen(portal, args, "cancel", None, None, array=args.array)
    return act_on_chosen(
        portal, args, "cancel", lambda j: portal.post(f"jobs/{j}/cancel/"),
        lambda job: f"job {job['id']} ({job['name']}): {job['state']}",
    )  # fmt: skip


def _hold_text(job: dict) -> str:
    """A job after a hold or release: its state and its hold, in one line."""
    hold = job.get("hold")
    if not hold:
        return f"job {job['id']} ({job['name']}): {job['state']}, not held"
    doing = "suspending: it checkpoints and stops" if job["state"] == "running" else "held"
    return f"job {job['id']} ({job['name']}): {job['state']}, {doing} ({hold['kind']} hold)"


def cmd_hold(portal: Portal, args: argparse.Namespace) -> int:
    body = {"reason": args.reason} if args.reason is not None else {}
    return act_on_chosen(portal, args, "hold", lambda j: portal.post(f"jobs/{j}/hold/", body),
                         _hold_text, held=0)  # fmt: skip


def cmd_release(portal: Portal, args: argparse.Namespace) -> int:
    return act_on_chosen(portal, args, "release", lambda j: portal.post(f"jobs/{j}/release/"),
                         _hold_text, held=1)  # fmt: skip


def cmd_time_limit(portal: Portal, args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"time_limit_minutes": args.limit}
    if args.reason is not None:
        body["reason"] = args.reason
    job = portal.post(f"jobs/{args.job}/time-limit/", body)
    if args.json:
        print_json(job)
        return EXIT_OK
    limit = f"{fmt_duration(job['time_limit_minutes'] * 60)} a run"
    if job.get("time_limit_at"):
        limit += f"; this run is asked to stop at {fmt_when(job['time_limit_at'])}"
    print(f"job {job['id']} ({job['name']}): time limit {limit}")
    return EXIT_OK


def begin_or_none(text: str) -> str | None:
    """``gpuctl begin``'s TIME: ``now`` or ``none`` clears the earliest start (None), else
    one of ``--begin``'s forms (``slurm_begin``)."""
    return None if text.strip().lower() in ("now", "none") else slurm_begin(text)


def cmd_begin(portal: Portal, args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"begin_at": args.begin_at}
    if args.reason is not None:
        body["reason"] = args.reason
    if args.array:
        return arrays.begin_array(portal, args, body)
    job = portal.post(f"jobs/{args.job}/begin-time/", body)
    if args.json:
        print_json(job)
        return EXIT_OK
    if job.get("begin_at"):
        print(f"job {job['id']} ({job['name']}): not before {fmt_when(job['begin_at'])}")
    else:
        print(f"job {job['id']} ({job['name']}): no earliest start, it queues from now")
    return EXIT_OK


def cmd_move(portal: Portal, args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"queue": args.queue}
    if args.reason is not None:
        body["reason"] = args.reason
    job = portal.post(f"jobs/{args.job}/move/", body)
    if args.json:
        print_json(job)
        return EXIT_OK
    print(f"job {job['id']} ({job['name']}): now in queue {job['queue']} "
          f"({job['business_line']}); it waits there from the next cycle")  # fmt: skip
    return EXIT_OK


def cmd_top(portal: Portal, args: argparse.Namespace) -> int:
    job = portal.post(f"jobs/{args.job}/top/")
    if args.json:
        print_json(job)
        return EXIT_OK
    print(f"job {job['id']} ({job['name']}): first among {job['owner']}'s waiting jobs of "
          f"{job['business_line']}, tier {job['tier']}; the next cycle places it")  # fmt: skip
    return EXIT_OK


def _eviction_cell(queue: dict) -> str:
    """A queue's eviction ratio over the portal's window; "-" before there is any data."""
    ratio = queue.get("eviction_ratio")
    return "-" if ratio is None else f"{ratio:.1%}"


def cmd_queues(portal: Portal, args: argparse.Namespace) -> int:
    rows, _ = portal.fetch_list("queues/", business_line__name=args.line, tier=args.tier)
    if args.json:
        print_json(rows)
        return EXIT_OK
    table(rows, columns(
        ("QUEUE", "name"), ("LINE", "business_line"), ("TIER", "tier"),
        ("QUOTA", lambda q: q["quota_gpus"] if q["quota_gpus"] is not None else "line"),
        ("GUARANTEE", "guarantee_gpus"), ("USED", "used_gpus"), ("RUNNING", "running_jobs"),
        ("PENDING", "pending_jobs"), ("EVICTION", _eviction_cell),
    ))  # fmt: skip
    return EXIT_OK


def cmd_lines(portal: Portal, args: argparse.Namespace) -> int:
    rows, _ = portal.fetch_list("business-lines/")
    if args.json:
        print_json(rows)
        return EXIT_OK
    table(rows, columns(
        ("LINE", "name"), ("QUOTA", "quota_gpus"), ("GUARANTEE", "guarantee_gpus"),
        ("USED", "used_gpus"), ("BORROWED", "borrowed_gpus"), ("PENDING.GPUS", "pending_gpus"),
    ))  # fmt: skip
    return EXIT_OK


def _hours(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"


def cmd_usage(portal: Portal, args: argparse.Namespace) -> int:
    report = portal.get("usage-report/", month=args.month)
    if args.json:
        print_json(report)
        return EXIT_OK
    key = {"line": "lines", "queue": "queues", "person": "people"}[args.by]
    of_quota = (
        ("OF.QUOTA", lambda r: _share(r["gpu_hours"] / r["quota_gpu_hours"])
         if r.get("quota_gpu_hours") else "-"),
    ) if args.by != "person" else ()  # fmt: skip
    table(report[key], columns(
        (args.by.upper(), "name"), ("GPU.HOURS", lambda r: _hours(r["gpu_hours"])),
        ("SHARE", lambda r: _share(r["share"])), *of_quota, ("RUNS", "runs_ended"),
        ("RUNNING", "running"), ("FAILED.GPU.HOURS", lambda r: _hours(r["failed_gpu_hours"])),
        ("STOPPED.GPU.HOURS", lambda r: _hours(r["stopped_gpu_hours"])),
    ))  # fmt: skip
    return EXIT_OK


NODE_COLUMNS = columns(
    ("NODE", "name"), ("RACK", "rack"), ("MODEL", "gpu_model"), ("GPUS", "gpus_total"),
    ("FREE", "gpus_free"), ("RDMA", "rdma"), ("STATE", "state"), ("HEALTH", "health"),
    ("REASON", lambda n: n.get("state_reason") or n.get("health_detail") or ""),
)  # fmt: skip


def cmd_nodes(portal: Portal, args: argparse.Namespace) -> int:
    if args.action:
        return _each(
            args.names,
            lambda name: portal.post(f"nodes/{name}/{args.action}/", {"reason": args.reason}),
            args, lambda n: f"{n['name']}: {n['state']} ({n.get('state_reason') or args.reason})",
        )  # fmt: skip
    rows, _ = portal.fetch_list(
        "nodes/", state=args.state, rack=args.rack, health=args.health, gpu_model=args.gpu_model
    )
    if args.json:
        print_json(rows)
        return EXIT_OK
    if not rows:
        return nothing("no nodes match")
    table(rows, NODE_COLUMNS)
    return EXIT_OK


def cmd_alerts(portal: Portal, args: argparse.Namespace) -> int:
    if args.action:
        return _each(
            args.ids, lambda i: portal.post(f"alerts/{i}/{args.action}/"), args,
            lambda a: f"alert {a['id']} ({a['kind']} {a['subject']}): {a['status']}",
        )  # fmt: skip
    filters = {"kind": args.kind, "severity": args.severity}
    if args.status or args.all:
        rows, _ = portal.fetch_list("alerts/", status=args.status, **filters)
    else:
        open_rows, _ = portal.fetch_list("alerts/", status="open", **filters)
        acked, _ = portal.fetch_list("alerts/", status="acknowledged", **filters)
        rows = sorted(open_rows + acked, key=lambda a: (a["created_at"], a["id"]), reverse=True)
    if args.json:
        print_json(rows)
        return EXIT_OK
    if not rows:
        return nothing("no alerts" if args.all else "no open alerts")
    table(rows, columns(
        ("ID", "id"), ("SEVERITY", "severity"), ("STATUS", "status"), ("KIND", "kind"),
        ("SUBJECT", "subject"), ("COUNT", lambda a: a.get("count", 1)),
        ("CREATED(UTC)", lambda a: fmt_time(a["created_at"])),
        ("MESSAGE", lambda a: _clip(a["message"], 70)),
    ))  # fmt: skip
    return EXIT_OK


MAINTENANCE_COLUMNS = columns(
    ("ID", "id"), ("STATE", "state"), ("STARTS(UTC)", lambda w: fmt_time(w["starts_at"])),
    ("ENDS(UTC)", lambda w: fmt_time(w["ends_at"]) if w["ends_at"] else "open-ended"),
    ("NODES", lambda w: _clip(",".join(w["nodes"]), 40)), ("BY", "created_by"),
    ("REASON", lambda w: _clip(w["reason"], 50)),
)  # fmt: skip


def _describe_window(w: dict) -> str:
    ends = fmt_time(w["ends_at"]) if w["ends_at"] else "open-ended"
    return (f"maintenance {w['id']} ({len(w['nodes'])} node{'s' if len(w['nodes']) != 1 else ''}, "
            f"{fmt_time(w['starts_at'])} to {ends} UTC): {w['state']}")  # fmt: skip


def cmd_maintenance(portal: Portal, args: argparse.Namespace) -> int:
    action = args.action or "list"
    if action == "cancel":
        return _each(args.ids, lambda i: portal.post(f"maintenance/{i}/cancel/"), args,
                     _describe_window)  # fmt: skip
    if action == "create":
        body: dict[str, Any] = {"starts_at": args.starts_at, "reason": args.reason}
        if args.names:
            body["nodes"] = args.names
        if args.rack:
            body["rack"] = args.rack
        if args.ends_at:
            body["ends_at"] = args.ends_at
        created = portal.post("maintenance/", body)
        if args.json:
            print_json(created)
        else:
            print(f"scheduled {_describe_window(created)}. Cancel: gpuctl maintenance cancel "
                  f"{created['id']}")  # fmt: skip
        return EXIT_OK
    all_ = getattr(args, "all", False)
    state = getattr(args, "state", None)
    node = getattr(args, "node", None)
    if state or all_:
        rows, _ = portal.fetch_list("maintenance/", state=state, node=node)
    else:
        rows = []
        for open_state in ("active", "scheduled"):
            got, _ = portal.fetch_list("maintenance/", state=open_state, node=node)
            rows += got
    if args.json:
        print_json(rows)
        return EXIT_OK
    if not rows:
        return nothing("no maintenance" if all_ or state else "no maintenance scheduled")
    table(rows, MAINTENANCE_COLUMNS)
    return EXIT_OK


def _clip(text: str, width: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _id_or_name(value: str | None) -> int | str | None:
    return int(value) if value is not None and value.isascii() and value.isdigit() else value


def cmd_quota(portal: Portal, args: argparse.Namespace) -> int:
    action = args.quota_action
    if action == "list":
        rows, _ = portal.fetch_list(
            "quota-requests/", state=args.state, business_line=args.line, mine=args.mine or None
        )
        if args.json:
            print_json(rows)
            return EXIT_OK
        if not rows:
            return nothing("no quota requests")
        table(rows, columns(
            ("ID", "id"), ("LINE", "business_line"), ("QUEUE", "queue"), ("QUOTA", "quota_gpus"),
            ("GUARANTEE", "guarantee_gpus"), ("STATUS", lambda r: r.get("status") or r.get("state")),
            ("BY", "requester"), ("CREATED(UTC)", lambda r: fmt_time(r.get("created_at"))),
            ("REASON", lambda r: _clip(r.get("reason") or "", 50)), lenient=True,
        ))  # fmt: skip
        return EXIT_OK
    if action == "request":
        body: dict[str, Any] = {
            "business_line": _id_or_name(args.line),
            "quota_gpus": args.quota,
            "guarantee_gpus": args.guarantee,
            "reason": args.reason,
        }
        for key in ("queue", "starts_at", "ends_at"):
            value = getattr(args, key)
            if value is not None:
                body[key] = _id_or_name(value) if key == "queue" else value
        created = portal.post("quota-requests/", body)
        if args.json:
            print_json(created)
        else:
            print(f"quota request {created.get('id')} for {args.line}"
                  f"{'/' + args.queue if args.queue else ''}: quota {args.quota}, guarantee "
                  f"{args.guarantee} GPUs, {created.get('status') or created.get('state') or 'sent'}"
                  f". An admin reviews it: gpuctl quota impact {created.get('id')}")  # fmt: skip
        return EXIT_OK
    if action == "impact":
        impact = portal.get(f"quota-requests/{args.id}/impact/")
        if args.json or not isinstance(impact, dict):
            print_json(impact)
        else:
            print_impact(impact)
        return EXIT_OK
    body: dict[str, Any] = {"note": args.note} if getattr(args, "note", None) else {}
    if getattr(args, "override_reserve", False):
        body["override_reserve"] = True
    return _each(
        args.ids, lambda i: portal.post(f"quota-requests/{i}/{action}/", body), args,
        lambda r: f"quota request {r.get('id')} ({r.get('business_line')}"
                  f"{'/' + r['queue'] if r.get('queue') else ''}): "
                  f"{r.get('status') or r.get('state') or action}",
    )  # fmt: skip


def _impact_value(value: Any) -> str:
    if isinstance(value, dict):
        return _details_text(value)
    if isinstance(value, list):
        if not value:
            return "none"
        if all(isinstance(v, dict) for v in value):
            names = [str(v.get("name") or v.get("line") or v.get("id")) for v in value]
            return f"{len(value)}: " + ", ".join(names)
        return " | ".join(map(str, value))
    return fmt_cell(value)


def print_impact(impact: dict) -> None:
    """What approving would change: fit first, then before/after, then who is affected."""
    order = ["fits", "target", "guarantees", "before", "after", "line_before", "line_after",
             "demand_gpus", "free_gpus", "likely_preempted", "newly_reclaimable",
             "no_longer_reclaimable", "borrowing_shrinks", "recent_use", "takes_effect"]  # fmt: skip
    keys = [k for k in order if k in impact] + [
        k for k in impact if k not in order and k != "notes"
    ]
    fields([(k.replace("_", " "), _impact_value(impact[k])) for k in keys])
    for note in impact.get("notes") or []:
        print(f"note: {note}")


def cmd_version(portal: Portal, args: argparse.Namespace) -> int:
    """The client's version and the portal's (``GET /api/v1/version/``)."""
    server = portal.get("version/")
    if args.json:
        print_json({"client": {"version": __version__}, "server": server})
        return EXIT_OK
    fields([
        ("client", f"gpuctl {__version__}"),
        ("server", f"gpu-portal {server.get('version', 'unknown')}"
                   + (f" ({server['revision']})" if server.get("revision") else "")),
        ("api", server.get("api", "-")),
        ("url", portal.config.url),
    ])  # fmt: skip
    return EXIT_OK


def cmd_summary(portal: Portal, args: argparse.Namespace) -> int:
    s = portal.get("metrics/summary/")
    if args.json:
        print_json(s)
        return EXIT_OK
    ratios = s.get("eviction_ratio_by_queue", {})
    high = sorted(((v, k) for k, v in ratios.items() if v), reverse=True)[:5]
    known = any(v is not None for v in ratios.values())
    window = s.get("eviction_window") or "last 24 h"  # servers before the window was named
    fields([
        ("GPUs", f"{s['gpus_total']} total, {s['gpus_healthy']} healthy, "
                 f"{s.get('gpus_allocated_healthy', s['gpus_allocated'])} allocated on healthy"
                 + (f", {s['gpus_inference_healthy']} serving inference"
                    if s.get("gpus_inference_healthy") else "")),
        ("utilization", f"{s['utilization']:.1%} of healthy GPUs"),
        ("pending jobs", ", ".join(f"{k} {v}" for k, v in sorted(s["pending_by_reason"].items()))
         or "none"),
        ("nodes", ", ".join(f"{k} {v}" for k, v in sorted(s.get("nodes_by_state", {}).items()))),
        (f"eviction ({window})",
         ", ".join(f"{k} {v:.1%}" for v, k in high) or ("none" if known else "no data yet")),
    ])  # fmt: skip
    return EXIT_OK


# -- parser ---------------------------------------------------------------------------------


class _Formatter(argparse.RawDescriptionHelpFormatter):
    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=32)


def _common(json_default: Any = argparse.SUPPRESS) -> argparse.ArgumentParser:
    """--json accepted before or after the subcommand."""
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument("--json", action="store_true", default=json_default,
                        help="print JSON (the API's objects) instead of a table")  # fmt: skip
    parent.add_argument("-o", "--output", choices=MODES, default=argparse.SUPPRESS,
                        help="table (default), wide, json, yaml, or name (first column)")  # fmt: skip
    parent.add_argument("--no-headers", action="store_true", default=argparse.SUPPRESS,
                        help="tables without their header line")  # fmt: skip
    return parent


# Commands that read (not act): ``-w`` re-runs them, as ``kubectl get -w`` / ``watch squeue``.
WATCHABLE = frozenset({"jobs", "explain", "array", "queues", "lines", "nodes", "alerts", "summary"})


def watch(portal: Portal, args: argparse.Namespace) -> int:
    """Run the command again every ``args.interval`` seconds until Ctrl-C (exit 0).

    On a terminal each round clears the screen and says when it was taken; piped, rounds
    follow each other (one JSON document each with ``-o json``)."""
    raw = getattr(sys.stdout, "raw", sys.stdout)  # under TerminalSafe: the real stream
    tty = raw.isatty()
    interval = min(max(args.interval, 0.5), 3600.0)
    try:
        while True:
            if tty:
                raw.write("\x1b[H\x1b[2J")  # our own escape: clear the screen
                print(
                    f"every {interval:g}s: gpuctl {args.command}    {time.strftime('%H:%M:%S')}\n"
                )
            code = args.func(portal, args)
            if code != EXIT_OK:
                return code
            sys.stdout.flush()
            time.sleep(interval)
    except KeyboardInterrupt:
        return EXIT_OK


def _seconds(text: str) -> float:
    """``--timeout`` / ``--interval``: a finite number of seconds above 0 (requests and
    ``time.sleep`` raise on NaN, 0, negatives and infinities)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (0 < value < 1e9):
        raise argparse.ArgumentTypeError(f"seconds above 0, not {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    common = _common()
    parser = argparse.ArgumentParser(
        prog="gpuctl", description=TOP_HELP, formatter_class=_Formatter, parents=[_common(False)]
    )
    parser.add_argument("--url", help="portal base URL (default: GPUCTL_URL or the config file)")
    parser.add_argument("--timeout", type=_seconds, default=30.0, help="seconds per request (30)")
    parser.add_argument("--version", action="version", version=f"gpuctl {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def add(name: str, func, help_: str, description: str | None = None, **kw):
        p = sub.add_parser(name, help=help_, description=description or help_, parents=[common],
                           formatter_class=_Formatter, **kw)  # fmt: skip
        p.set_defaults(func=func)
        if name in WATCHABLE:
            p.add_argument("-w", "--watch", action="store_true",
                           help="print again every --interval seconds until Ctrl-C")  # fmt: skip
            p.add_argument("--interval", type=_seconds, default=2.0, help="seconds (2)")
        return p

    p = add("submit", cmd_submit, "submit a job (flags or -f job.yaml)", SUBMIT_HELP)
    p.add_argument("name", nargs="?", help="job name (1-100 characters)")
    p.add_argument("-f", "--file", help="YAML job file with API fields ('-' for stdin)")
    p.add_argument("-q", "--queue", help="queue name or id (one of your lines')")
    p.add_argument("-g", "--gpus", type=whole_number, help="whole GPUs in total")
    p.add_argument("--tier", choices=["urgent", "core", "finetune", "experiment"],
                   help="default: the queue's; never above it")  # fmt: skip
    p.add_argument(
        "--gpus-per-node", type=whole_number, help="1-8; default: whole nodes when multi-node"
    )
    p.add_argument("--gpu-memory-gb", type=whole_number, help="minimum memory per GPU")
    p.add_argument("--rdma", action=argparse.BooleanOptionalAction, default=None,
                   help="needs RDMA between its nodes (default: when multi-node)")  # fmt: skip
    p.add_argument("--exclusive-node", action=argparse.BooleanOptionalAction, default=None,
                   help="nothing else may share its nodes")  # fmt: skip
    p.add_argument("--avoid-inference", action=argparse.BooleanOptionalAction, default=None,
                   help="no co-location with online inference")  # fmt: skip
    p.add_argument("--preemptible", action=argparse.BooleanOptionalAction, default=None,
                   help="may borrow idle capacity and be preempted (default: below core)")  # fmt: skip
    p.add_argument(
        "--max-retries", type=whole_number, help="automatic restarts on failure, 0-10 (3)"
    )
    p.add_argument("--checkpoint-path", help="shared storage URI: nfs://, s3://, ...")
    p.add_argument("--checkpoint-interval-minutes", type=whole_number, help="(60)")
    p.add_argument("--estimated-runtime-minutes", "--runtime", type=whole_number,
                   dest="estimated_runtime_minutes", help="your estimate")  # fmt: skip
    p.add_argument("--begin", "-b", type=slurm_begin, dest="begin_at", metavar="TIME",
                   help="do not start before this time (Slurm's --begin): now+90minutes, "
                   "now+2hours, 16:00 (today, else tomorrow), 2026-12-08T09:00 (this "
                   "machine's zone unless one is given)")  # fmt: skip
    p.add_argument("--time", "-t", type=slurm_minutes, dest="time_limit_minutes",
                   metavar="LIMIT",
                   help="time limit, as Slurm's --time (minutes, 4:00:00, 2-12): the longest "
                   "one run may last; a run that reaches it is stopped and the job fails "
                   "(no retry)")  # fmt: skip
    p.add_argument("--model-name", "--model", dest="model_name",
                   help="for node affinity and runtime prediction")  # fmt: skip
    p.add_argument(
        "--sim-duration-minutes", type=whole_number, help="simulator only: true run time"
    )
    p.add_argument("--after", type=job_ids, action="extend", metavar="ID,ID",
                   help="start only once these jobs have all succeeded (or ended, or failed: "
                   "--after-condition; repeatable; at most 20)")  # fmt: skip
    p.add_argument("--after-array", type=array_ids, action="extend",
                   dest="after_arrays", metavar="ID,ID",
                   help="start only once every task of these job arrays has succeeded "
                   "(or ended, or failed: --after-condition; repeatable; at most 20 "
                   "arrays)")  # fmt: skip
    p.add_argument("--after-condition", choices=AFTER_CONDITIONS,
                   help="what the jobs of --after and tasks of --after-array must have done "
                   "first: succeeded (default, Slurm's afterok), ended, whatever the outcome "
                   "(afterany), or failed: ended without succeeding (afternotok; an array: all "
                   "its tasks ended, not all succeeded)")  # fmt: skip
    p.add_argument("--after-corr", type=array_ids, action="extend",
                   dest="after_corresponding", metavar="ID,ID",
                   help="with --array: each task starts only once the task of the same index "
                   "of these arrays has succeeded (or ended, or failed: --after-condition; Slurm's "
                   "aftercorr)")  # fmt: skip
    p.add_argument("--singleton", action=argparse.BooleanOptionalAction, default=None,
                   help="one at a time by name (Slurm's --dependency=singleton): also wait "
                   "for your older jobs of this name still waiting or running to end")  # fmt: skip
    p.add_argument("--array", metavar="SPEC",
                   help="a job array: one task per index, Slurm's spec (0-99, 1,3,5-11:2; "
                   "%%N: at most N at once; at most 1,000 tasks)")  # fmt: skip

    p = add(
        "jobs",
        cmd_jobs,
        "list jobs (newest first)",
        epilog="""\
examples:
  gpuctl jobs --mine
  gpuctl jobs --state pending --queue llm-core
  gpuctl jobs --owner alice --all --json
  gpuctl jobs --array 42                    # the tasks of array 42: NAME[INDEX]""",
    )
    p.add_argument("--state", choices=["pending", "running", "preempting", "succeeded",
                                        "failed", "cancelled"])  # fmt: skip
    p.add_argument("-q", "--queue", help="queue name or id")
    p.add_argument("-u", "--owner", "--user", dest="owner", help="username (as squeue -u)")
    p.add_argument("-n", "--name", help="only jobs of exactly this name (as squeue -n)")
    p.add_argument("--mine", "--me", action="store_true", help="only my jobs")
    p.add_argument("--array", type=whole_number, metavar="ARRAY",
                   help="only the tasks of this job array (NAME[INDEX])")  # fmt: skip
    p.add_argument("--limit", type=whole_number, default=100, help="at most N jobs (100)")
    p.add_argument("--all", action="store_true", help="every matching job")

    p = add("explain", cmd_explain, "why a job waits, what would start it, its timeline",
            EXPLAIN_HELP)  # fmt: skip
    p.add_argument("job", type=whole_number, help="job id")
    p.add_argument("--events", type=whole_number, default=10, help="last N events (10; 0: all)")

    p = add(
        "cancel",
        cmd_cancel,
        "cancel jobs (owner, their team lead, admin)",
        epilog="""\
examples:
  gpuctl cancel 42
  gpuctl cancel 42 43 44
  gpuctl cancel --me --state pending --dry-run   # what it would cancel
  gpuctl cancel --me -q llm-experiment           # scancel -u $USER -p llm-experiment
  gpuctl cancel --array 42                       # every active task of array 42
  gpuctl cancel --array 42 --dry-run             # the tasks it would cancel""",
    )
    add_job_choice(p, "cancel")
    p.add_argument("--array", type=whole_number, metavar="ARRAY",
                   help="every active task of this job array (alone: no ids or filters)")  # fmt: skip

    p = add(
        "hold",
        cmd_hold,
        "hold jobs: a pending one waits, a running one is suspended (owner, lead, admin)",
        epilog="""\
A held job stays pending and is not scheduled until released. A running job is
suspended: the next cycle checkpoints and stops it (progress kept; without a
checkpoint path it restarts from the beginning), and it waits, held. An admin's
hold of someone else's job needs --reason, and only an admin may release it.

examples:
  gpuctl hold 42
  gpuctl hold 42 43 --reason 'waiting for the new dataset'
  gpuctl hold --me --state pending               # every job of mine not started yet""",
    )
    add_job_choice(p, "hold")
    p.add_argument("--reason", help="why (shown on the job; required for an admin hold)")

    p = add(
        "release",
        cmd_release,
        "release held or suspended jobs: they queue again from now",
        epilog="""\
examples:
  gpuctl release 42
  gpuctl release 42 43 44
  gpuctl release --me                            # every held job of mine""",
    )
    add_job_choice(p, "release")

    p = add(
        "time-limit",
        cmd_time_limit,
        "change a job's time limit (lower: owner, lead, admin; raise: admin)",
        epilog="""\
As Slurm's scontrol update TimeLimit=. LIMIT in --time's forms (minutes, 4:00:00, 2-12).
The owner, their team lead or an admin may lower it (or give one to a job without);
only an admin may raise it. A run on now counts from its start: lowered below what it
has run, it is stopped at the next cycle and the job fails.

examples:
  gpuctl time-limit 42 2:00:00
  gpuctl time-limit 42 1-00:00:00 --reason 'the loss is still falling'   # an admin""",
    )
    p.add_argument("job", type=whole_number, help="job id")
    p.add_argument("limit", type=slurm_minutes, metavar="LIMIT", help="the new time limit")
    p.add_argument("--reason", help="why (shown on the job)")

    p = add(
        "move",
        cmd_move,
        "move a waiting job to another queue (owner, lead, admin)",
        epilog="""\
As Slurm's scontrol update Partition=. QUEUE: a queue the job's owner may submit to, by
name or id. The job keeps what it asked for and its wait so far, and must meet the
queue's rules as a submission would (its tier, its time limit). Not a task of an array,
and only a job that has not started.

examples:
  gpuctl move 42 llm-finetune
  gpuctl move 42 llm-finetune --reason 'experiment quota is full'""",
    )
    p.add_argument("job", type=whole_number, help="job id")
    p.add_argument("queue", help="the queue to move it to (name or id)")
    p.add_argument("--reason", help="why (shown on the job)")

    p = add(
        "top",
        cmd_top,
        "put a waiting job first among its owner's waiting jobs (owner, lead, admin)",
        epilog="""\
As Slurm's scontrol top. The job takes the first of the places its owner's waiting jobs
of its line and tier hold in the queue (the latest put first goes first); nobody else's
job moves. Only a job that has not started.

examples:
  gpuctl top 42""",
    )
    p.add_argument("job", type=whole_number, help="job id")

    p = add(
        "begin",
        cmd_begin,
        "change a waiting job's earliest start (owner, lead, admin)",
        epilog="""\
As Slurm's scontrol update StartTime=. TIME in --begin's forms (now+2hours, 16:00,
2026-12-08T09:00), or now (or none) to clear it. Put later, the job leaves the queue
until then and its wait counts from then; cleared, it queues from now. Only a job that
has not started; with --array, every waiting task of the array (those that started are
left).

examples:
  gpuctl begin 42 now+2hours
  gpuctl begin 42 2026-12-08T09:00 --reason 'after the maintenance'
  gpuctl begin 42 now                       # start as soon as it may
  gpuctl begin --array 7 22:00              # every waiting task of array 7""",
    )
    p.add_argument("job", type=whole_number, metavar="ID", help="job id (with --array: array id)")
    p.add_argument("--array", action="store_true",
                   help="ID is an array's: change every waiting task")  # fmt: skip
    p.add_argument("begin_at", type=begin_or_none, metavar="TIME", help="the new earliest start")
    p.add_argument("--reason", help="why (shown on the job)")

    arrays.add_parsers(add)

    p = add("logs", logs.cmd_logs, logs.HELP, logs.LOGS_HELP)
    logs.add_arguments(p, _seconds)

    p = add("queues", cmd_queues, "queues: quota, guarantee, used, running, pending, eviction",
            epilog="examples:\n  gpuctl queues\n  gpuctl queues --line llm")  # fmt: skip
    p.add_argument("--line", help="only this business line's queues")
    p.add_argument("--tier", choices=["urgent", "core", "finetune", "experiment"])

    add("lines", cmd_lines, "business lines: quota, guarantee, used, borrowed, pending GPUs")

    p = add("usage", cmd_usage, "GPU-hours of a UTC month per line, queue or person",
            epilog="examples:\n  gpuctl usage\n  gpuctl usage --month 2026-11 --by person")  # fmt: skip
    p.add_argument("--month", help="YYYY-MM (default: the current month, counted to now)")
    p.add_argument("--by", choices=["line", "queue", "person"], default="line")

    p = add("nodes", cmd_nodes, "list nodes; cordon, drain or uncordon them", NODES_HELP)
    p.set_defaults(action=None)
    p.add_argument("--state", choices=["ready", "cordoned", "draining", "down", "unhealthy"])
    p.add_argument("--rack")
    p.add_argument("--health", choices=["ok", "gpu_failure", "rdma_degraded", "down"])
    p.add_argument("--gpu-model")
    actions = p.add_subparsers(dest="action", metavar="ACTION")
    for action, text in (("cordon", "no new work lands on the nodes; running jobs stay"),
                         ("drain", "cordon and move the jobs off (checkpoint, requeue)"),
                         ("uncordon", "return the nodes to the pool")):  # fmt: skip
        a = actions.add_parser(action, help=text, description=text, parents=[common])
        a.add_argument("names", nargs="+", metavar="NODE")
        a.add_argument("--reason", required=True, help="why (shown to users, audited)")

    p = add("alerts", cmd_alerts, "list, acknowledge or resolve alerts", ALERTS_HELP)
    p.set_defaults(action=None)
    p.add_argument("--status", choices=["open", "acknowledged", "resolved"])
    p.add_argument("--all", action="store_true", help="resolved ones too")
    p.add_argument("--kind")
    p.add_argument("--severity", choices=["info", "warning", "critical"])
    actions = p.add_subparsers(dest="action", metavar="ACTION")
    for action, text in (("ack", "acknowledge: someone is on it"), ("resolve", "close it")):
        a = actions.add_parser(action, help=text, description=text, parents=[common])
        a.add_argument("ids", nargs="+", type=whole_number, metavar="ALERT")

    p = add("maintenance", cmd_maintenance, "scheduled maintenance: list, create, cancel",
            MAINTENANCE_HELP)  # fmt: skip
    p.set_defaults(action=None)
    maint = p.add_subparsers(dest="action", metavar="ACTION")
    m = maint.add_parser("list", help="maintenance windows (default: scheduled and active)",
                         parents=[common])  # fmt: skip
    m.add_argument("--state", choices=["scheduled", "active", "done", "cancelled"])
    m.add_argument("--node", help="only windows of this node")
    m.add_argument("--all", action="store_true", help="done and cancelled ones too")
    m = maint.add_parser("create", help="schedule maintenance (on-call, admins)",
                         parents=[common])  # fmt: skip
    m.add_argument("names", nargs="*", metavar="NODE")
    m.add_argument("--rack", help="every node of this rack (with or without NODEs)")
    m.add_argument("--starts-at", required=True, help="ISO 8601 with a zone: 2026-12-01T14:00:00Z")
    m.add_argument("--ends-at", help="ISO 8601 with a zone (default: open-ended)")
    m.add_argument("--reason", required=True, help="why (shown to users, audited)")
    m = maint.add_parser("cancel", help="cancel windows (a started one returns its nodes)",
                         parents=[common])  # fmt: skip
    m.add_argument("ids", nargs="+", type=whole_number, metavar="ID")

    p = add("quota", cmd_quota, "quota requests: list, request, impact, approve, reject, withdraw",
            QUOTA_HELP)  # fmt: skip
    qsub = p.add_subparsers(dest="quota_action", metavar="ACTION", required=True)
    q = qsub.add_parser("list", help="quota requests you may see", parents=[common])
    q.add_argument("--state", help="e.g. pending, approved, rejected, withdrawn")
    q.add_argument("--line", help="only this business line's requests")
    q.add_argument("--mine", action="store_true", help="only the ones I made")
    q = qsub.add_parser("request", help="ask for a new quota/guarantee (team leads)",
                        parents=[common])  # fmt: skip
    q.add_argument("--line", required=True, help="business line name or id")
    q.add_argument("--queue", help="one queue of the line (default: the line itself)")
    q.add_argument("--quota", type=whole_number, required=True, help="quota asked, in GPUs")
    q.add_argument("--guarantee", type=whole_number, required=True, help="guarantee asked, in GPUs")
    q.add_argument("--reason", required=True)
    q.add_argument("--starts-at", help="ISO date/time (default: on approval)")
    q.add_argument("--ends-at", help="ISO date/time (default: open-ended)")
    q = qsub.add_parser("impact", help="what approval would change, and whether it fits",
                        parents=[common])  # fmt: skip
    q.add_argument("id", type=whole_number)
    for action, text in (("approve", "approve (admins)"), ("reject", "reject (admins)"),
                         ("withdraw", "withdraw a pending request (requester, line lead)")):  # fmt: skip
        q = qsub.add_parser(action, help=text, parents=[common])
        q.add_argument("ids", nargs="+", type=whole_number, metavar="ID")
        q.add_argument("--note", "--reason", dest="note", help="why (recorded with the decision)")
        if action == "approve":
            q.add_argument("--override-reserve", action="store_true",
                           help="approve even if guarantees eat into the admins' reserve")  # fmt: skip

    add("summary", cmd_summary, "cluster at a glance: GPUs, utilization, pending, eviction")
    add("version", cmd_version, "this client's version and the portal's")
    login.add_parser(sub, _Formatter)
    completion.add_parser(sub, _Formatter)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, usage errors
        return int(exc.code or 0)
    problem = getattr(args, "check", lambda _args: None)(args)
    if problem:  # a rule across arguments argparse cannot say: a usage error all the same
        try:
            args.parser.error(problem)
        except SystemExit as exc:
            return int(exc.code or 0)
    output = getattr(args, "output", None) or ("json" if args.json else "table")
    args.json = output in ("json", "yaml")  # the commands print the API's objects
    set_mode(output, headers=not getattr(args, "no_headers", False))
    with terminal_safe_output():  # names and messages come from other people
        try:
            if getattr(args, "needs_token", True) is False:  # login makes the token
                return args.func(args)
            portal = Portal(Config.load(url=args.url, timeout=args.timeout))
            if getattr(args, "watch", False):
                return watch(portal, args)
            return args.func(portal, args)
        except CliError as err:
            print(f"gpuctl: error: {err}", file=sys.stderr)
            return err.code
        except KeyboardInterrupt:
            return 130
        except BrokenPipeError:  # `gpuctl jobs | head`
            return EXIT_OK
        except (KeyError, IndexError, TypeError, AttributeError, ValueError) as exc:
            # The portal's JSON was not the shape the command reads (another version, a
            # proxy or a stand-in answering): one line and exit 5, not a traceback.
            print(
                f"gpuctl: error: the portal's answer is not what gpuctl {args.command} "
                f"expects ({type(exc).__name__}: {exc}): is it a portal of this version?",
                file=sys.stderr,
            )
            return EXIT_SERVER


__all__ = ["main", "build_parser", "config_path", "EXIT_REFUSED"]

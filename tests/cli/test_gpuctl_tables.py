"""gpuctl's tables, byte for byte: every list command against canned API rows.

These pin the exact output people and their scripts read (column order, alignment,
the ``-`` of empty cells, percentages, clipped messages, UTC times), so a refactoring of
how columns are declared cannot change a byte.
"""

from __future__ import annotations

import json

import pytest

from gpuctl.output import fmt_indices

JOBS = [
    {
        "id": 7, "name": "llama-ft", "owner": "ann", "queue": "llm-finetune", "tier": "finetune",
        "gpus": 8, "state": "pending", "pending_reason": {"code": "QUOTA_EXCEEDED"},
        "submitted_at": "2026-03-01T09:05:59Z", "estimated_start": "2026-03-01T12:00:00+02:00",
    },
    {
        "id": 12, "name": "tiny", "owner": "bob", "queue": "cv", "tier": "experiment",
        "gpus": 1, "state": "pending", "pending_reason": None,
        "submitted_at": "2026-03-01T10:00:00Z", "estimated_start": None,
    },
    {
        "id": 103, "name": "pretrain  70b", "owner": "ann", "queue": "llm-core", "tier": "core",
        "gpus": 64, "state": "running", "pending_reason": {"code": "PRIORITY"},
        "submitted_at": None, "estimated_start": "2026-03-02T00:00:00Z",
    },
]  # fmt: skip


def test_jobs_table_is_exactly_aligned_with_reason_and_estimate_only_when_pending(cli, portal):
    portal.answers[("list", "jobs/")] = JOBS
    run = cli("jobs")
    assert run.code == 0 and run.err == ""
    assert run.out == (
        " ID  NAME          OWNER  QUEUE         TIER        GPUS  STATE    REASON          SUBMITTED(UTC)    EST.START(UTC)\n"
        "  7  llama-ft      ann    llm-finetune  finetune       8  pending  QUOTA_EXCEEDED  2026-03-01 09:05  2026-03-01 10:00\n"
        " 12  tiny          bob    cv            experiment     1  pending  NEW             2026-03-01 10:00  -\n"
        "103  pretrain 70b  ann    llm-core      core          64  running  -               -                 -\n"
    )  # fmt: skip


def test_jobs_says_when_the_list_was_cut_on_stderr_only(cli, portal):
    portal.answers[("list", "jobs/")] = (JOBS[:2], 250)
    run = cli("jobs", "--limit", "2")
    assert run.code == 0
    assert len(run.out.splitlines()) == 3
    assert run.err == "(2 of 250 jobs shown, newest first; --limit N or --all for more)\n"


def test_queues_table_shows_line_for_an_unbounded_queue_and_eviction_as_percent(cli, portal):
    portal.answers[("list", "queues/")] = [
        {"name": "llm-core", "business_line": "llm", "tier": "core", "quota_gpus": None,
         "guarantee_gpus": 16, "used_gpus": 40, "running_jobs": 3, "pending_jobs": 0,
         "eviction_ratio": 0.0},
        {"name": "llm-experiment", "business_line": "llm", "tier": "experiment", "quota_gpus": 8,
         "guarantee_gpus": 0, "used_gpus": 12, "running_jobs": 5, "pending_jobs": 17,
         "eviction_ratio": 0.12345},
        {"name": "new", "business_line": "llm", "tier": "experiment", "quota_gpus": 8,
         "guarantee_gpus": 0, "used_gpus": 0, "running_jobs": 0, "pending_jobs": 0,
         "eviction_ratio": None},
    ]  # fmt: skip
    run = cli("queues")
    assert run.out == (
        "QUEUE           LINE  TIER        QUOTA  GUARANTEE  USED  RUNNING  PENDING  EVICTION\n"
        "llm-core        llm   core        line          16    40        3        0  0.0%\n"
        "llm-experiment  llm   experiment  8              0    12        5       17  12.3%\n"
        "new             llm   experiment  8              0     0        0        0  -\n"
    )  # fmt: skip


def test_lines_table(cli, portal):
    portal.answers[("list", "business-lines/")] = [
        {"name": "llm", "quota_gpus": 480, "guarantee_gpus": 160, "used_gpus": 500,
         "borrowed_gpus": 20, "pending_gpus": 0},
        {"name": "vision", "quota_gpus": 64, "guarantee_gpus": 0, "used_gpus": 3,
         "borrowed_gpus": 0, "pending_gpus": 1024},
    ]  # fmt: skip
    assert cli("lines").out == (
        "LINE    QUOTA  GUARANTEE  USED  BORROWED  PENDING.GPUS\n"
        "llm       480        160   500        20             0\n"
        "vision     64          0     3         0          1024\n"
    )


NODES = [
    {"name": "r000-n00", "rack": "r000", "gpu_model": "H100", "gpus_total": 8, "gpus_free": 8,
     "rdma": True, "state": "ready", "health": "ok", "state_reason": "", "health_detail": ""},
    {"name": "r000-n01", "rack": "r000", "gpu_model": "L40S", "gpus_total": 8, "gpus_free": 0,
     "rdma": False, "state": "cordoned", "health": "ok", "state_reason": "fan alarm",
     "health_detail": "ignored while a state reason is set"},
    {"name": "r001-n00", "rack": "r001", "gpu_model": "H100", "gpus_total": 8, "gpus_free": 0,
     "rdma": True, "state": "unhealthy", "health": "gpu_failure", "state_reason": None,
     "health_detail": "XID 79 on GPU 3"},
]  # fmt: skip


def test_nodes_table_says_yes_no_for_rdma_and_the_state_reason_before_the_health_detail(
    cli, portal
):
    portal.answers[("list", "nodes/")] = NODES
    assert cli("nodes").out == (
        "NODE      RACK  MODEL  GPUS  FREE  RDMA  STATE      HEALTH       REASON\n"
        "r000-n00  r000  H100      8     8  yes   ready      ok           -\n"
        "r000-n01  r000  L40S      8     0  no    cordoned   ok           fan alarm\n"
        "r001-n00  r001  H100      8     0  yes   unhealthy  gpu_failure  XID 79 on GPU 3\n"
    )


ALERTS_OPEN = [
    {"id": 3, "severity": "critical", "status": "open", "kind": "node_unhealthy",
     "subject": "r001-n00", "count": 2, "created_at": "2026-03-01T08:00:00Z",
     "message": "GPU 3 fell off the bus"},
    {"id": 9, "severity": "warning", "status": "open", "kind": "residual_process",
     "subject": "r000-n02", "created_at": "2026-03-01T11:30:00Z",
     "message": "stale\tpython   processes on GPUs 2, 3 and 5 were killed and the GPUs returned to the pool"},
]  # fmt: skip
ALERTS_ACKED = [
    {"id": 5, "severity": "info", "status": "acknowledged", "kind": "quota_near_limit",
     "subject": "llm", "count": 1, "created_at": "2026-03-01T09:00:00Z",
     "message": "llm holds 96% of its quota"},
]  # fmt: skip


def test_alerts_default_to_open_and_acknowledged_newest_first_with_long_messages_clipped(
    cli, portal
):
    portal.answers[("list", "alerts/")] = lambda args: {
        "open": ALERTS_OPEN,
        "acknowledged": ALERTS_ACKED,
    }[args["status"]]
    run = cli("alerts")
    assert run.out == (
        "ID  SEVERITY  STATUS        KIND              SUBJECT   COUNT  CREATED(UTC)      MESSAGE\n"
        " 9  warning   open          residual_process  r000-n02      1  2026-03-01 11:30  stale python processes on GPUs 2, 3 and 5 were killed and the GPUs re…\n"
        " 5  info      acknowledged  quota_near_limit  llm           1  2026-03-01 09:00  llm holds 96% of its quota\n"
        " 3  critical  open          node_unhealthy    r001-n00      2  2026-03-01 08:00  GPU 3 fell off the bus\n"
    )  # fmt: skip
    assert [(c[0], c[2]["status"]) for c in portal.calls] == [
        ("list", "open"),
        ("list", "acknowledged"),
    ]
    clipped = run.out.splitlines()[1].split("  ")[-1]
    assert len(clipped) == 70 and clipped.endswith("…")


QUOTA_REQUESTS = [
    {"id": 4, "business_line": "llm", "queue": None, "quota_gpus": 600, "guarantee_gpus": 240,
     "status": "pending", "requester": "lead", "created_at": "2026-02-27T16:45:00Z",
     "reason": "Q3 pretraining of the 70B model on the new racks, as discussed with finance"},
    {"id": 11, "business_line": "vision", "queue": "vision-core", "quota_gpus": 32,
     "guarantee_gpus": 8, "state": "approved", "requester": "lead2",
     "created_at": "2026-02-28T08:00:00Z", "reason": ""},
]  # fmt: skip


def test_quota_list_table_reads_status_or_state_and_clips_the_reason(cli, portal):
    portal.answers[("list", "quota-requests/")] = QUOTA_REQUESTS
    assert cli("quota", "list").out == (
        "ID  LINE    QUEUE        QUOTA  GUARANTEE  STATUS    BY     CREATED(UTC)      REASON\n"
        " 4  llm     -              600        240  pending   lead   2026-02-27 16:45  Q3 pretraining of the 70B model on the new racks,…\n"
        "11  vision  vision-core     32          8  approved  lead2  2026-02-28 08:00  -\n"
    )  # fmt: skip


def test_a_list_with_missing_fields_still_prints_a_quota_table(cli, portal):
    """The quota list reads rows leniently (older portals omit fields): a dash, no crash."""
    portal.answers[("list", "quota-requests/")] = [{"id": 1}]
    assert cli("quota", "list").out == (
        "ID  LINE  QUEUE  QUOTA  GUARANTEE  STATUS  BY  CREATED(UTC)  REASON\n"
        " 1  -     -      -      -          -       -   -             -\n"
    )


def test_summary_lists_the_five_highest_eviction_ratios_and_sorts_the_rest(cli, portal):
    portal.answers[("get", "metrics/summary/")] = {
        "gpus_total": 10000, "gpus_healthy": 9984, "gpus_allocated": 7000,
        "utilization": 0.70112,
        "pending_by_reason": {"PRIORITY": 12, "NEVER_FITS": 1, "QUOTA_EXCEEDED": 40},
        "nodes_by_state": {"ready": 1240, "cordoned": 8, "down": 2},
        "gpus_allocated_healthy": 6990, "eviction_window": "last 72 h",
        "eviction_ratio_by_queue": {"a": 0.01, "b": 0.3, "c": 0.0, "d": 0.05, "e": 0.2,
                                    "f": 0.02, "g": 0.15, "h": None},
    }  # fmt: skip
    assert cli("summary").out == (
        "GPUs                  10000 total, 9984 healthy, 6990 allocated on healthy\n"
        "utilization           70.1% of healthy GPUs\n"
        "pending jobs          NEVER_FITS 1, PRIORITY 12, QUOTA_EXCEEDED 40\n"
        "nodes                 cordoned 8, down 2, ready 1240\n"
        "eviction (last 72 h)  b 30.0%, e 20.0%, g 15.0%, d 5.0%, f 2.0%\n"
    )


def test_summary_says_no_data_yet_before_the_first_eviction_figures(cli, portal):
    portal.answers[("get", "metrics/summary/")] = {
        "gpus_total": 8, "gpus_healthy": 8, "gpus_allocated": 0, "gpus_allocated_healthy": 0,
        "utilization": 0.0, "pending_by_reason": {}, "nodes_by_state": {"ready": 1},
        "eviction_window": "last 72 h", "eviction_ratio_by_queue": {"a": None, "b": None},
    }  # fmt: skip
    assert cli("summary").out.splitlines()[-1] == "eviction (last 72 h)  no data yet"


def test_every_list_answers_an_empty_result_in_words_not_a_bare_header(cli, portal):
    for method, path in (("list", "jobs/"), ("list", "nodes/"), ("list", "quota-requests/")):
        portal.answers[(method, path)] = []
    portal.answers[("list", "alerts/")] = []
    # said on stderr: stdout, the rows, stays empty for scripts (`-o name | xargs`)
    for args, words in (
        (("jobs",), "no jobs match"),
        (("jobs", "-o", "name"), "no jobs match"),
        (("nodes",), "no nodes match"),
        (("quota", "list"), "no quota requests"),
        (("alerts",), "no open alerts"),
        (("alerts", "--all"), "no alerts"),
    ):
        answer = cli(*args)
        assert (answer.out, answer.err) == ("", words + "\n"), args


def test_empty_queue_and_line_lists_print_the_header_alone(cli, portal):
    portal.answers[("list", "queues/")] = []
    portal.answers[("list", "business-lines/")] = []
    assert cli("queues").out == (
        "QUEUE  LINE  TIER  QUOTA  GUARANTEE  USED  RUNNING  PENDING  EVICTION\n"
    )
    assert cli("lines").out == "LINE  QUOTA  GUARANTEE  USED  BORROWED  PENDING.GPUS\n"


def test_json_prints_the_api_rows_unchanged_for_every_list(cli, portal):
    portal.answers[("list", "jobs/")] = JOBS
    portal.answers[("list", "nodes/")] = NODES
    portal.answers[("list", "quota-requests/")] = QUOTA_REQUESTS
    portal.answers[("list", "alerts/")] = ALERTS_OPEN
    for argv, rows in (
        (["jobs", "--json"], JOBS),
        (["--json", "nodes"], NODES),
        (["quota", "list", "--json"], QUOTA_REQUESTS),
        (["alerts", "--status", "open", "--json"], ALERTS_OPEN),
    ):
        run = cli(*argv)
        assert run.code == 0 and json.loads(run.out) == rows, argv
        assert run.out == json.dumps(rows, indent=2, sort_keys=True) + "\n"


@pytest.mark.parametrize(
    ("indices", "written"),
    [([0, 1, 2, 3, 4, 5, 6, 7], "0-7"), ([7], "7"), ([6, 0, 1, 2, 3], "0-3,6"), ([1, 3], "1,3"),
     ([4, 5], "4-5")],
)  # fmt: skip
def test_gpu_indices_are_written_in_runs_as_slurm_writes_them(indices, written):
    """Walk of gpuctl on the demo: a 256-GPU job's placement wrote every index of 32 nodes."""
    assert fmt_indices(indices) == written

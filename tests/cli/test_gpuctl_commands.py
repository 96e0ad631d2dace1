"""gpuctl's commands without a portal: which API calls each makes with which body, what it
prints, and its exit code (canned answers from ``tests.cli.fakes.FakePortal``)."""

from __future__ import annotations

import io
import json

import pytest

from gpuctl import __version__
from gpuctl.client import EXIT_AUTH, EXIT_REFUSED, EXIT_SERVER, EXIT_USAGE, CliError
from gpuctl.main import build_parser

JOB = {
    "id": 42, "name": "llama-ft", "owner": "ann", "queue": "llm-finetune", "tier": "finetune",
    "business_line": "llm", "gpus": 16, "gpus_per_node": 8, "state": "pending",
    "rdma": True, "preemptible": False,
}  # fmt: skip


def posted(portal, path: str) -> dict:
    """The body of the one POST to ``path``."""
    (body,) = [args["body"] for method, p, args in portal.calls if (method, p) == ("post", path)]
    return body


# -- submit -----------------------------------------------------------------------------------


def test_submit_sends_only_the_fields_given_with_their_api_names(cli, portal):
    portal.answers[("post", "jobs/")] = JOB
    run = cli("submit", "llama-ft", "-q", "llm-finetune", "-g", "16", "--gpus-per-node", "8",
              "--no-rdma", "--preemptible", "--runtime", "90", "--model", "llama-7b",
              "--checkpoint-path", "nfs://ckpt/llama", "--max-retries", "0")  # fmt: skip
    assert run.code == 0, run.err
    assert posted(portal, "jobs/") == {
        "name": "llama-ft", "queue": "llm-finetune", "gpus": 16, "gpus_per_node": 8,
        "rdma": False, "preemptible": True, "estimated_runtime_minutes": 90,
        "model_name": "llama-7b", "checkpoint_path": "nfs://ckpt/llama", "max_retries": 0,
    }  # fmt: skip
    assert run.out == (
        "submitted job 42 (llama-ft) to llm-finetune: 16 GPUs, tier finetune, pending. "
        "Next: gpuctl explain 42\n"
    )
    portal.answers[("post", "jobs/")] = {**JOB, "gpus": 1}
    one = cli("submit", "llama-ft", "-q", "llm-finetune", "-g", "1")
    assert "to llm-finetune: 1 GPU, tier finetune" in one.out, one.out


def test_submit_file_fields_are_overridden_by_flags_and_unknown_keys_pass_through(
    cli, portal, tmp_path
):
    portal.answers[("post", "jobs/")] = JOB
    spec = tmp_path / "job.yaml"
    spec.write_text("name: from-file\nqueue: q1\ngpus: 4\nrdma: true\ncolour: blue\n")
    assert cli("submit", "-f", str(spec), "--gpus", "8", "--no-rdma", "-q", "q2").code == 0
    assert posted(portal, "jobs/") == {
        "name": "from-file", "queue": "q2", "gpus": 8, "rdma": False, "colour": "blue",
    }  # fmt: skip


def test_submit_reads_the_job_file_from_stdin(cli, portal, monkeypatch):
    portal.answers[("post", "jobs/")] = JOB
    monkeypatch.setattr("sys.stdin", io.StringIO("name: piped\nqueue: q\ngpus: 2\n"))
    run = cli("submit", "-f", "-", "--json")
    assert run.code == 0 and json.loads(run.out) == JOB
    assert posted(portal, "jobs/") == {"name": "piped", "queue": "q", "gpus": 2}


@pytest.mark.parametrize(
    "text,message",
    [
        ("- a\n- b\n", "gpuctl: error: job file {path} must be a mapping of API fields\n"),
        ("just words\n", "gpuctl: error: job file {path} must be a mapping of API fields\n"),
        ("", "gpuctl: error: job file {path} must be a mapping of API fields\n"),
        ("name: [open\n", "gpuctl: error: cannot read job file {path}: while parsing a flow "
                          "sequence\n"),
    ],
)  # fmt: skip
def test_a_job_file_that_is_not_a_mapping_is_a_usage_error_and_sends_nothing(
    cli, portal, tmp_path, text, message
):
    spec = tmp_path / "job.yaml"
    spec.write_text(text)
    run = cli("submit", "-f", str(spec))
    assert (run.code, run.err) == (EXIT_USAGE, message.format(path=spec))
    assert portal.calls == []


def test_a_missing_job_file_is_a_usage_error_on_one_line(cli, portal, tmp_path):
    run = cli("submit", "-f", str(tmp_path / "nope.yaml"))
    assert run.code == EXIT_USAGE
    assert run.err.startswith(f"gpuctl: error: cannot read job file {tmp_path / 'nope.yaml'}: ")
    assert run.err.count("\n") == 1 and portal.calls == []


@pytest.mark.parametrize(
    "content,fragment",
    [
        (b"name: caf\xe9\nqueue: q\ngpus: 1\n", "cannot read job file {path}: 'utf-8' codec"),
        (b"name: x\nqueue: q\ngpus: 1\nx: " + b"[" * 5000, "cannot read job file {path}: "),
        (b"name: 2026-01-01\nqueue: q\ngpus: 1\n", "holds a value JSON cannot carry"),
        (b"name: !!binary aGk=\nqueue: q\ngpus: 1\n", "holds a value JSON cannot carry"),
        (b"name: x\nqueue: q\ngpus: .nan\n", "holds a value JSON cannot carry"),
    ],
)  # fmt: skip
def test_a_job_file_gpuctl_cannot_read_or_send_is_a_usage_error_and_sends_nothing(
    cli, portal, tmp_path, content, fragment
):
    # Latin-1 bytes, YAML nested past Python's recursion limit, and values YAML reads as a
    # date, bytes or NaN (which JSON cannot carry): a usage error, not a traceback.
    spec = tmp_path / "job.yaml"
    spec.write_bytes(content)
    run = cli("submit", "-f", str(spec))
    assert run.code == EXIT_USAGE, run
    assert run.err.startswith("gpuctl: error: ") and fragment.format(path=spec) in run.err
    assert run.err.count("\n") == 1 and portal.calls == []


@pytest.mark.parametrize(
    "argv,missing",
    [
        ([], "NAME, --queue, --gpus"),
        (["x"], "--queue, --gpus"),
        (["x", "-g", "1"], "--queue"),
        (["-q", "q", "-g", "1"], "NAME"),
    ],
)
def test_submit_names_every_missing_field_in_its_flag_form(cli, portal, argv, missing):
    run = cli("submit", *argv)
    assert run.code == EXIT_USAGE
    assert run.err == f"gpuctl: error: missing {missing} (give them as flags or in -f job.yaml)\n"
    assert portal.calls == []


# -- jobs -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv,params",
    [
        ([], {"limit": 100, "state": None, "queue": None, "owner": None, "name": None}),
        (["--mine", "--state", "pending"],
         {"limit": 100, "state": "pending", "queue": None, "owner": None, "name": None, "mine": 1}),
        (["--all", "--limit", "5", "--owner", "bob"],
         {"limit": None, "state": None, "queue": None, "owner": "bob", "name": None}),
        (["--queue", "7", "--limit", "3"],
         {"limit": 3, "state": None, "queue": "7", "owner": None, "name": None}),
        (["--array", "42"],
         {"limit": 100, "state": None, "queue": None, "owner": None, "name": None, "array": 42}),
        (["-n", "pretrain"],
         {"limit": 100, "state": None, "queue": None, "owner": None, "name": "pretrain"}),
    ],
)  # fmt: skip
def test_jobs_filters_become_query_parameters(cli, portal, argv, params):
    portal.answers[("list", "jobs/")] = []
    assert cli("jobs", *argv).code == 0
    assert portal.calls == [("list", "jobs/", params)]


def test_jobs_refuses_an_unknown_state_before_calling_the_portal(cli, portal):
    run = cli("jobs", "--state", "sleeping")
    assert run.code == EXIT_USAGE and "invalid choice: 'sleeping'" in run.err
    assert portal.calls == []


# -- explain ----------------------------------------------------------------------------------


def explained(cli, portal, **job) -> list[str]:
    portal.answers[("get", "jobs/42/")] = {**JOB, **job}
    run = cli("explain", "42", *job.pop("_argv", ()))
    assert run.code == 0, run.err
    return run.out.splitlines()


def test_explain_a_waiting_job_gives_verdict_numbers_remedy_position_and_estimate(cli, portal):
    lines = explained(
        cli, portal, gpu_memory_gb=80, exclusive_node=True, preemption_count=2, retry_count=1,
        queue_position=3, estimated_start="2026-03-01T12:30:00+01:00",
        pending_reason={
            "code": "QUOTA_EXCEEDED", "message": "Queue llm-finetune holds 8 of its 16 GPU quota.",
            "details": {"quota_gpus": 16, "held": {"llm": 8, "cv": 0}, "nodes": ["n1", "n2"]},
            "remedy": "Wait for your own jobs to finish.",
        },
    )  # fmt: skip
    assert lines == [
        "job              42 'llama-ft' by ann",
        "queue            llm-finetune (line llm, tier finetune)",
        "asks             16 GPUs (8 per node); >= 80 GB/GPU, rdma yes, preemptible no, exclusive nodes",
        "state            pending (preempted 2 times) (retried 1 time)",
        "verdict          QUOTA_EXCEEDED: Queue llm-finetune holds 8 of its 16 GPU quota.",
        "numbers          quota_gpus=16  held=llm:8,cv:0  nodes=n1,n2",
        "remedy           Wait for your own jobs to finish.",
        "position         3 in the pending order",
        "estimated start  2026-03-01 11:30 UTC",
    ]  # fmt: skip


def test_explain_a_job_no_cycle_has_seen_says_so_and_has_no_estimate(cli, portal):
    lines = explained(cli, portal, gpus_per_node=16, rdma=None, pending_reason=None)
    assert lines[2] == "asks             16 GPUs; rdma -, preemptible no"
    assert lines[4:] == [
        "verdict          NEW: not seen by a scheduling cycle yet; ask again in a few seconds",
        "estimated start  - (no estimate yet)",
    ]


def test_explain_a_verdict_without_message_details_or_remedy_prints_dashes(cli, portal):
    lines = explained(cli, portal, pending_reason={"code": "PRIORITY"})
    assert lines[4:7] == ["verdict          PRIORITY:", "numbers          -", "remedy           -"]


def test_explain_a_finished_job_shows_placement_times_and_failure_but_no_verdict(cli, portal):
    lines = explained(
        cli, portal, state="failed", pending_reason={"code": "PRIORITY"},
        placement=[{"node": "r000-n00", "gpus": [0, 1, 2, 3]}, {"node": "r000-n01", "gpus": [7]}],
        started_at="2026-03-01T10:00:00Z", finished_at="2026-03-01T11:15:30Z",
        failure_reason="node r000-n01 lost its GPU 7",
    )  # fmt: skip
    assert lines[3:] == [
        "state      failed",
        "placement  r000-n00[0-3], r000-n01[7]",
        "started    2026-03-01 10:00 UTC",
        "finished   2026-03-01 11:15 UTC",
        "failure    node r000-n01 lost its GPU 7",
    ]


EVENTS = [
    {"at": f"2026-03-01T10:0{i}:00Z", "kind": kind, "message": f"m{i}"}
    for i, kind in enumerate(["submitted", "started", "preempted", "requeued", "started"])
]


@pytest.mark.parametrize(
    "argv,title,last",
    [
        ([], "events:", ["  2026-03-01 10:00 UTC  submitted  m0", "  2026-03-01 10:04 UTC  started    m4"]),
        (["--events", "2"], "events (last 2 of 5):",
         ["  2026-03-01 10:03 UTC  requeued  m3", "  2026-03-01 10:04 UTC  started   m4"]),
        (["--events", "0"], "events:",
         ["  2026-03-01 10:00 UTC  submitted  m0", "  2026-03-01 10:04 UTC  started    m4"]),
        (["--events", "9"], "events:",
         ["  2026-03-01 10:00 UTC  submitted  m0", "  2026-03-01 10:04 UTC  started    m4"]),
    ],
)  # fmt: skip
def test_explain_prints_the_last_events_with_the_shown_kinds_aligned(
    cli, portal, argv, title, last
):
    lines = explained(cli, portal, state="running", events=EVENTS, _argv=argv)
    shown = lines[lines.index(title) + 1 :]
    assert len(shown) == (2 if "last 2" in title else 5)
    assert shown[0] == last[0] and shown[-1] == last[-1]


def test_explain_json_is_the_api_object(cli, portal):
    portal.answers[("get", "jobs/42/")] = JOB
    run = cli("explain", "42", "--json")
    assert json.loads(run.out) == JOB


def test_explain_needs_a_numeric_job_id(cli, portal):
    run = cli("explain", "forty-two")
    assert run.code == EXIT_USAGE and "invalid int value: 'forty-two'" in run.err
    assert portal.calls == []


# -- actions on several ids -------------------------------------------------------------------


def test_cancel_reports_each_job_and_exits_with_the_worst_failure(cli, portal):
    portal.answers[("post", "jobs/1/cancel/")] = {"id": 1, "name": "a", "state": "cancelled"}
    portal.answers[("post", "jobs/2/cancel/")] = CliError("not found: No Job matches.", 1)
    portal.answers[("post", "jobs/3/cancel/")] = CliError("not authenticated: x", EXIT_AUTH)
    portal.answers[("post", "jobs/4/cancel/")] = {"id": 4, "name": "d", "state": "cancelled"}
    run = cli("cancel", "1", "2", "3", "4")
    assert run.code == EXIT_AUTH
    assert run.out == "job 1 (a): cancelled\njob 4 (d): cancelled\n"
    assert run.err == (
        "gpuctl: error: 2: not found: No Job matches.\ngpuctl: error: 3: not authenticated: x\n"
    )
    assert [c[1] for c in portal.calls] == [f"jobs/{i}/cancel/" for i in (1, 2, 3, 4)]


def test_json_of_one_id_is_the_object_and_of_several_a_list_of_the_successes(cli, portal):
    portal.answers[("post", "jobs/1/cancel/")] = {"id": 1, "state": "cancelled"}
    portal.answers[("post", "jobs/2/cancel/")] = CliError("busy: try again", 1)
    assert json.loads(cli("cancel", "1", "--json").out) == {"id": 1, "state": "cancelled"}
    run = cli("cancel", "1", "2", "--json")
    assert run.code == EXIT_REFUSED and json.loads(run.out) == [{"id": 1, "state": "cancelled"}]
    alone = cli("cancel", "2", "--json")
    assert alone.code == EXIT_REFUSED and alone.out == "null\n"


@pytest.mark.parametrize("action", ["cordon", "drain", "uncordon"])
def test_node_actions_post_the_reason_to_each_node(cli, portal, action):
    for name in ("n1", "n2"):
        portal.answers[("post", f"nodes/{name}/{action}/")] = {"name": name, "state": "x"}
    run = cli("nodes", action, "n1", "n2", "--reason", "fan alarm")
    assert run.code == 0
    assert run.out == "n1: x (fan alarm)\nn2: x (fan alarm)\n", (
        "the reason given when none is echoed"
    )
    assert posted(portal, f"nodes/n2/{action}/") == {"reason": "fan alarm"}


def test_node_actions_need_a_reason_and_a_node(cli, portal):
    assert cli("nodes", "cordon", "n1").code == EXIT_USAGE
    assert cli("nodes", "drain", "--reason", "x").code == EXIT_USAGE
    assert portal.calls == []


def test_nodes_filters_become_query_parameters(cli, portal):
    portal.answers[("list", "nodes/")] = []
    cli("nodes", "--state", "cordoned", "--rack", "r001", "--health", "ok", "--gpu-model", "H100")
    assert portal.calls == [
        ("list", "nodes/",
         {"limit": None, "state": "cordoned", "rack": "r001", "health": "ok", "gpu_model": "H100"}),
    ]  # fmt: skip


@pytest.mark.parametrize("action", ["ack", "resolve"])
def test_alert_actions_post_to_each_alert_and_print_its_new_status(cli, portal, action):
    portal.answers[("post", f"alerts/17/{action}/")] = {
        "id": 17, "kind": "node_unhealthy", "subject": "r1", "status": "done",
    }  # fmt: skip
    run = cli("alerts", action, "17")
    assert (run.code, run.out) == (0, "alert 17 (node_unhealthy r1): done\n")
    assert posted(portal, f"alerts/17/{action}/") is None, "no body: the API takes none"


def test_alerts_with_a_status_or_all_make_one_call_with_the_filters(cli, portal):
    portal.answers[("list", "alerts/")] = []
    cli("alerts", "--status", "resolved", "--kind", "residual_process", "--severity", "warning")
    cli("alerts", "--all")
    assert portal.calls == [
        ("list", "alerts/",
         {"limit": None, "status": "resolved", "kind": "residual_process", "severity": "warning"}),
        ("list", "alerts/", {"limit": None, "status": None, "kind": None, "severity": None}),
    ]  # fmt: skip


# -- quota requests ---------------------------------------------------------------------------


def test_quota_request_sends_ids_as_numbers_and_names_as_text(cli, portal):
    portal.answers[("post", "quota-requests/")] = {"id": 9, "status": "pending"}
    run = cli("quota", "request", "--line", "3", "--queue", "llm-core", "--quota", "400",
              "--guarantee", "200", "--reason", "October run", "--starts-at", "2026-10-01")  # fmt: skip
    assert run.code == 0
    assert posted(portal, "quota-requests/") == {
        "business_line": 3, "queue": "llm-core", "quota_gpus": 400, "guarantee_gpus": 200,
        "reason": "October run", "starts_at": "2026-10-01",
    }  # fmt: skip
    assert run.out == (
        "quota request 9 for 3/llm-core: quota 400, guarantee 200 GPUs, pending. "
        "An admin reviews it: gpuctl quota impact 9\n"
    )


def test_a_line_named_in_other_digits_is_sent_as_text_for_the_portal_to_refuse(cli, portal):
    # "٣".isdigit() is true: it went as line id 3
    portal.answers[("post", "quota-requests/")] = {"id": 9, "status": "pending"}
    run = cli("quota", "request", "--line", "٣", "--quota", "4", "--guarantee", "2",
              "--reason", "x")  # fmt: skip
    assert run.code == 0 and posted(portal, "quota-requests/")["business_line"] == "٣"


def test_quota_request_for_a_whole_line_names_no_queue_and_says_sent_without_a_status(cli, portal):
    portal.answers[("post", "quota-requests/")] = {"id": 10}
    run = cli("quota", "request", "--line", "llm", "--quota", "1", "--guarantee", "0",
              "--reason", "r", "--queue", "12")  # fmt: skip
    assert posted(portal, "quota-requests/")["queue"] == 12
    portal.calls.clear()
    run = cli("quota", "request", "--line", "llm", "--quota", "1", "--guarantee", "0",
              "--reason", "r")  # fmt: skip
    assert posted(portal, "quota-requests/") == {
        "business_line": "llm", "quota_gpus": 1, "guarantee_gpus": 0, "reason": "r",
    }  # fmt: skip
    assert "for llm: quota 1, guarantee 0 GPUs, sent." in run.out


@pytest.mark.parametrize(
    "argv,body",
    [
        (["approve", "7"], {}),
        (["approve", "7", "--note", "ok for Q4", "--override-reserve"],
         {"note": "ok for Q4", "override_reserve": True}),
        (["reject", "7", "--reason", "no capacity"], {"note": "no capacity"}),
        (["withdraw", "7"], {}),
    ],
)  # fmt: skip
def test_quota_decisions_post_the_note_and_the_reserve_override(cli, portal, argv, body):
    action = argv[0]
    portal.answers[("post", f"quota-requests/7/{action}/")] = {
        "id": 7, "business_line": "llm", "queue": "llm-core", "state": "done",
    }  # fmt: skip
    run = cli("quota", *argv)
    assert run.code == 0
    assert posted(portal, f"quota-requests/7/{action}/") == body
    assert run.out == "quota request 7 (llm/llm-core): done\n"


def test_only_approve_takes_the_reserve_override(cli, portal):
    assert cli("quota", "reject", "7", "--override-reserve").code == EXIT_USAGE
    assert portal.calls == []


def test_quota_impact_prints_fit_first_then_numbers_then_the_rest_and_notes_last(cli, portal):
    portal.answers[("get", "quota-requests/7/impact/")] = {
        "notes": ["Fits: guarantees would total 10 GPUs.", "second note"],
        "zeta": 1.5,
        "likely_preempted": [{"id": 3, "name": "k2"}, {"id": 4, "name": None, "line": "cv"}],
        "newly_reclaimable": [],
        "recent_use": ["peak 6", "average 4.0"],
        "before": {"quota_gpus": 10, "used_gpus": 4},
        "fits": True,
        "target": {"line": "llm", "queue": None},
    }
    run = cli("quota", "impact", "7")
    assert run.out.splitlines() == [
        "fits               yes",
        "target             line=llm  queue=None",
        "before             quota_gpus=10  used_gpus=4",
        "likely preempted   2: k2, cv",
        "newly reclaimable  none",
        "recent use         peak 6 | average 4.0",
        "zeta               1.50",
        "note: Fits: guarantees would total 10 GPUs.",
        "note: second note",
    ]


def test_quota_impact_that_is_not_an_object_is_printed_as_json(cli, portal):
    portal.answers[("get", "quota-requests/7/impact/")] = ["unexpected"]
    assert cli("quota", "impact", "7").out == '[\n  "unexpected"\n]\n'


def test_quota_list_filters(cli, portal):
    portal.answers[("list", "quota-requests/")] = []
    cli("quota", "list", "--state", "pending", "--line", "llm", "--mine")
    cli("quota", "list")
    assert [c[2] for c in portal.calls] == [
        {"limit": None, "state": "pending", "business_line": "llm", "mine": True},
        {"limit": None, "state": None, "business_line": None, "mine": None},
    ]


# -- the command line itself ------------------------------------------------------------------


def test_version_and_help_exit_0_without_a_configuration(cli, monkeypatch, capsys):
    monkeypatch.delenv("GPUCTL_URL")
    assert cli("--version").out == f"gpuctl {__version__}\n"
    for argv in (["--help"], ["jobs", "--help"], ["quota", "approve", "--help"]):
        run = cli(*argv)
        assert run.code == 0 and run.out.startswith("usage: gpuctl"), argv


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["frobnicate"],
        ["quota"],
        ["cancel"],
        ["cancel", "x"],
        ["submit", "x", "-g", "many"],
        ["submit", "x", "--tier", "vip"],
        ["nodes", "--health", "sick"],
        ["alerts", "ack"],
        ["--timeout", "soon", "jobs"],
        ["--timeout", "nan", "jobs"],
        ["--timeout", "-1", "jobs"],
        ["--timeout", "0", "jobs"],
        ["--timeout", "1e309", "jobs"],
        ["jobs", "-w", "--interval", "nan"],
        # ids and counts in digits 0-9, as the portal takes them: int() read "٧" as 7,
        # "１" as 1 and "1_0" as 10 (`gpuctl cancel ٧` cancelled job 7)
        ["cancel", "٧"],
        ["explain", "１"],
        ["alerts", "ack", "1_0"],
        ["quota", "approve", "٣", "--note", "ok"],
        ["submit", "x", "-q", "q", "-g", "４"],
        ["jobs", "--limit", " 5"],
        ["login", "--days", "٣٠"],
    ],
)
def test_bad_command_lines_exit_2_with_usage_and_call_nothing(cli, portal, argv):
    run = cli(*argv)
    assert run.code == EXIT_USAGE and run.out == ""
    assert "usage: gpuctl" in run.err and "error:" in run.err
    assert portal.calls == []


def test_json_is_accepted_before_and_after_the_command(cli, portal):
    portal.answers[("list", "business-lines/")] = [{"name": "llm"}]
    assert json.loads(cli("--json", "lines").out) == [{"name": "llm"}]
    assert json.loads(cli("lines", "--json").out) == [{"name": "llm"}]
    args = build_parser().parse_args(["nodes", "cordon", "n1", "--reason", "r", "--json"])
    assert args.json is True and args.action == "cordon" and args.names == ["n1"]


@pytest.mark.parametrize(
    "error,code",
    [
        (CliError("refused: gpus: too many"), EXIT_REFUSED),
        (CliError("the portal failed: HTTP 502 on GET x", EXIT_SERVER), EXIT_SERVER),
        (KeyboardInterrupt(), 130),
        (BrokenPipeError(), 0),
    ],
)
def test_failures_become_exit_codes_with_one_line_on_stderr(cli, portal, error, code):
    portal.answers[("get", "metrics/summary/")] = error
    run = cli("summary")
    assert run.code == code and run.out == ""
    assert run.err == (f"gpuctl: error: {error}\n" if isinstance(error, CliError) else "")


def test_the_url_flag_wins_over_the_environment_and_the_timeout_is_passed_on(
    monkeypatch, tmp_path, capsys
):
    from gpuctl import main as gpuctl_main
    from tests.cli.fakes import FakePortal

    seen = []
    fake = FakePortal({("list", "business-lines/"): []})
    monkeypatch.setattr(gpuctl_main, "Portal", lambda config: seen.append(config) or fake)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.setenv("GPUCTL_URL", "http://from-env")
    monkeypatch.setenv("GPUCTL_TOKEN", "tok")
    assert gpuctl_main.main(["--url", "https://flag.example/", "--timeout", "2.5", "lines"]) == 0
    (config,) = seen
    assert (config.url, config.token, config.timeout) == ("https://flag.example", "tok", 2.5)


def test_explain_a_one_gpu_job_asks_1_gpu(cli, portal):
    """Walk of gpuctl on the demo: ``asks 1 GPUs``."""
    lines = explained(cli, portal, gpus=1, gpus_per_node=1, preemption_count=1)
    assert lines[2] == "asks             1 GPU; rdma yes, preemptible no"
    assert lines[3] == "state            pending (preempted 1 time)"

"""The live event schema (``core.events``): one builder per kind, payloads as API.md has them."""

from __future__ import annotations

import json
import types
import typing
from dataclasses import dataclass, field
from datetime import UTC, datetime

import pytest

from core import events as ev


def keys_and_types(payload: typing.Mapping) -> dict[str, type]:
    return {k: type(v) for k, v in payload.items()}


def assert_matches_schema(kind: str, payload: typing.Mapping) -> None:
    """The payload's keys are the TypedDict's (all required ones, no others) with its types."""
    assert_typed_dict(ev.PAYLOADS[kind], payload, kind)
    json.dumps(payload)  # what the channel layer and the socket carry


def assert_typed_dict(schema: type, payload: typing.Mapping, where: str) -> None:
    hints = typing.get_type_hints(schema)
    assert set(payload) <= set(hints), f"{where}: unknown keys {set(payload) - set(hints)}"
    assert schema.__required_keys__ <= set(payload), f"{where}: missing required keys"
    for key, value in payload.items():
        expected = hints[key]
        if hasattr(expected, "__required_keys__"):  # a nested TypedDict
            assert_typed_dict(expected, value, f"{where}.{key}")
            continue
        options = typing.get_args(expected) if isinstance(expected, types.UnionType) else ()
        allowed = tuple(typing.get_origin(a) or a for a in options or (expected,))
        assert isinstance(value, allowed), f"{where}.{key}: {value!r} is not {expected}"


# -- job.updated ------------------------------------------------------------------------------


def test_job_updated_with_a_timeline_line():
    event = ev.job_updated(7, "running", event=("started", "started on n1[0,1]"))
    assert event == ("job.7", "job.updated",
                     {"id": 7, "state": "running",
                      "event": {"kind": "started", "message": "started on n1[0,1]"}})  # fmt: skip
    assert_matches_schema(ev.JOB_UPDATED, event.data)
    assert keys_and_types(event.data["event"]) == {"kind": str, "message": str}


def test_job_updated_with_a_new_pending_reason():
    event = ev.job_updated(8, "pending", pending_code="LAUNCH_RETRY")
    assert event == ("job.8", "job.updated",
                     {"id": 8, "state": "pending", "pending_code": "LAUNCH_RETRY"})  # fmt: skip
    assert_matches_schema(ev.JOB_UPDATED, event.data)


@pytest.mark.parametrize(
    "extra", [{}, {"event": ("k", "m"), "pending_code": "PRIORITY"}], ids=["neither", "both"]
)
def test_job_updated_says_one_thing(extra):
    with pytest.raises(ValueError, match="one of them"):
        ev.job_updated(1, "pending", **extra)


def test_job_updated_sends_a_plain_string_state():
    class State(str):
        def __str__(self) -> str:
            return "running"

    data = ev.job_updated(1, State("running"), event=("k", "m")).data
    assert type(data["state"]) is str and data["state"] == "running"


# -- pending.updated, queues.updated, eviction.updated ------------------------------------------


def test_pending_updated_carries_the_counts_per_reason():
    counts = {"PRIORITY": 3, "LAUNCH_RETRY": 1}
    event = ev.pending_updated(counts)
    assert event == ("pending", "pending.updated", {"by_reason": counts})
    assert event.data["by_reason"] is not counts, "a copy: later changes do not leak in"
    assert_matches_schema(ev.PENDING_UPDATED, event.data)


def test_queues_updated_after_a_cycle():
    event = ev.queues_updated(cycle=41)
    assert event == ("queues", "queues.updated", {"cycle": 41})
    assert_matches_schema(ev.QUEUES_UPDATED, event.data)


def test_queues_updated_after_a_submission_or_cancellation():
    event = ev.queues_updated(queue="llm-core")
    assert event == ("queues", "queues.updated", {"queue": "llm-core"})
    assert_matches_schema(ev.QUEUES_UPDATED, event.data)


@pytest.mark.parametrize("queue", ["llm-core", None])
def test_queues_updated_after_a_quota_change(queue):
    figures = ev.QuotaFigures(line="llm", quota_gpus=20, guarantee_gpus=7, request=3,
                              change="quota.applied")  # fmt: skip
    event = ev.queues_updated(queue=queue, quota=figures)
    assert event.topic == "queues" and event.kind == "queues.updated"
    assert event.data == {"line": "llm", "queue": queue, "quota_gpus": 20, "guarantee_gpus": 7,
                          "request": 3, "change": "quota.applied"}  # fmt: skip
    assert_matches_schema(ev.QUEUES_UPDATED, event.data)


@pytest.mark.parametrize(
    "kwargs", [{}, {"cycle": 1, "queue": "q"}, {"cycle": 1, "quota": {"line": "x"}}],
    ids=["nothing", "cycle-and-queue", "cycle-and-quota"],
)  # fmt: skip
def test_queues_updated_says_one_thing(kwargs):
    with pytest.raises(ValueError, match="one thing"):
        ev.queues_updated(**kwargs)


def test_eviction_updated_is_the_ratio_per_queue():
    event = ev.eviction_updated({"llm-core": 0.0, "llm-experiment": 0.25})
    assert event == ("eviction", "eviction.updated", {"llm-core": 0.0, "llm-experiment": 0.25})
    assert all(isinstance(k, str) and isinstance(v, float) for k, v in event.data.items())


# -- node.updated, alert.raised, alert.updated ---------------------------------------------------


def test_node_updated_from_a_node_action_has_no_health():
    event = ev.node_updated("r0-n1", "cordoned", "firmware update")
    assert event == ("nodes", "node.updated",
                     {"name": "r0-n1", "state": "cordoned", "state_reason": "firmware update"})  # fmt: skip
    assert "residual_gpus" not in event.data, "the node page shows only what it is sent"
    assert_matches_schema(ev.NODE_UPDATED, event.data)


def test_node_updated_from_the_loop_has_health_and_residue():
    event = ev.node_updated("r0-n1", "ready", "", health="ok", residual_gpus=0)
    assert event.data == {"name": "r0-n1", "state": "ready", "state_reason": "",
                          "health": "ok", "residual_gpus": 0}  # fmt: skip
    assert_matches_schema(ev.NODE_UPDATED, event.data)


def test_alert_raised():
    event = ev.alert_raised(5, "node_unhealthy", "critical", "r0-n1", "isolated")
    assert event == ("alerts", "alert.raised",
                     {"id": 5, "kind": "node_unhealthy", "severity": "critical",
                      "subject": "r0-n1", "message": "isolated"})  # fmt: skip
    assert_matches_schema(ev.ALERT_RAISED, event.data)


def test_alert_updated():
    event = ev.alert_updated(5, "resolved")
    assert event == ("alerts", "alert.updated", {"id": 5, "status": "resolved"})
    assert_matches_schema(ev.ALERT_UPDATED, event.data)


# -- cycle.completed -------------------------------------------------------------------------------


@dataclass
class Record:
    pk: int = 12
    kind: str = "cycle"
    cluster_time: datetime = datetime(2025, 3, 1, 12, 0, 5, tzinfo=UTC)
    duration_ms: float = 123.456
    starts: int = 2
    preemptions: int = 1
    finished: int = 3
    failed: int = 0
    requeued: int = 1
    pending: int = 4
    pending_by_reason: dict = field(default_factory=lambda: {"PRIORITY": 4})
    errors: list = field(default_factory=lambda: [f"e{i}" for i in range(9)])
    violations: list = field(default_factory=list)
    drift: list = field(default_factory=lambda: ["run x adopted"])


def test_cycle_completed_is_the_summary():
    event = ev.cycle_completed(Record())
    assert (event.topic, event.kind) == ("cycles", "cycle.completed")
    assert event.data == {
        "id": 12, "kind": "cycle", "cluster_time": "2025-03-01T12:00:05+00:00",
        "duration_ms": 123.5, "starts": 2, "preemptions": 1, "finished": 3, "failed": 0,
        "requeued": 1, "pending": 4, "pending_by_reason": {"PRIORITY": 4},
        "errors": ["e0", "e1", "e2", "e3", "e4"], "violations": [], "drift": ["run x adopted"],
    }  # fmt: skip
    assert event.data == ev.cycle_summary(Record()), "the API answer is the event's payload"
    assert_matches_schema(ev.CYCLE_COMPLETED, event.data)


# -- the registry and the frames ---------------------------------------------------------------------


def test_every_kind_has_one_builder_and_one_payload_type():
    kinds = {v for k, v in vars(ev).items() if k.isupper() and isinstance(v, str) and "." in v}
    assert kinds == set(ev.BUILDERS) == set(ev.PAYLOADS)
    assert len(set(ev.BUILDERS.values())) == len(ev.BUILDERS), "no builder serves two kinds"


def test_every_kind_api_md_names_has_a_builder():
    for kind in ("queues.updated", "pending.updated", "eviction.updated", "node.updated",
                 "alert.raised", "cycle.completed", "job.updated"):  # fmt: skip
        assert kind in ev.BUILDERS


def test_every_builder_sends_to_a_topic_a_client_may_subscribe_to():
    samples = {
        ev.JOB_UPDATED: ev.job_updated(3, "pending", pending_code="PRIORITY"),
        ev.PENDING_UPDATED: ev.pending_updated({}),
        ev.QUEUES_UPDATED: ev.queues_updated(cycle=1),
        ev.EVICTION_UPDATED: ev.eviction_updated({}),
        ev.NODE_UPDATED: ev.node_updated("n", "ready", ""),
        ev.ALERT_RAISED: ev.alert_raised(1, "k", "warning", "s", "m"),
        ev.ALERT_UPDATED: ev.alert_updated(1, "acknowledged"),
        ev.CYCLE_COMPLETED: ev.cycle_completed(Record()),
    }
    assert set(samples) == set(ev.BUILDERS)
    for kind, event in samples.items():
        assert event.kind == kind
        assert event.topic in ev.TOPICS or event.topic == ev.job_topic(3)


def test_the_frames_carry_kind_topic_and_data_as_api_md_says():
    message = ev.channel_message("nodes", "node.updated", {"name": "n"})
    assert message == {"type": "live.event", "kind": "node.updated", "topic": "nodes",
                       "data": {"name": "n"}}  # fmt: skip
    assert ev.client_frame(message) == {"type": "node.updated", "topic": "nodes",
                                        "data": {"name": "n"}}  # fmt: skip

"""Live events: one typed payload and one builder per kind, and the frames that carry them.

The websocket contract of API.md ("Live updates"): a client subscribed to a topic
receives ``{"type": <kind>, "topic": <topic>, "data": <payload>}``. Each kind below has
a ``TypedDict`` naming its payload's keys and one builder that returns the whole event
(``LiveEvent``: topic, kind, payload), so the topic a kind goes to is written once, here.
Publish it with ``core.realtime.publish_on_commit(*event)`` (or ``publish_coalesced`` for
refetch hints). ``BUILDERS`` maps every kind to its builder; a test checks that every
publish call in the code base passes a builder's event.

Payloads are deliberately small: most tell a page *that* something changed and it
refetches; keys a page reads directly are the ones the builders document.
"""

# No ``from __future__ import annotations``: TypedDict reads ``NotRequired`` only from
# evaluated annotations (Python 3.11), and the required keys are part of the schema.
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple, NotRequired, TypedDict

# -- kinds and topics ------------------------------------------------------------------

JOB_UPDATED = "job.updated"
PENDING_UPDATED = "pending.updated"
QUEUES_UPDATED = "queues.updated"
EVICTION_UPDATED = "eviction.updated"
NODE_UPDATED = "node.updated"
ALERT_RAISED = "alert.raised"
ALERT_UPDATED = "alert.updated"
CYCLE_COMPLETED = "cycle.completed"

# Topics a client may subscribe to (API.md), besides one ``job.<id>`` per job.
TOPICS: tuple[str, ...] = ("queues", "pending", "eviction", "nodes", "alerts", "cycles")


def job_topic(job_id: int) -> str:
    """The topic of one job's watchers."""
    return f"job.{job_id}"


class LiveEvent(NamedTuple):
    """One event to publish: ``publish_on_commit(*event)``."""

    topic: str
    kind: str
    data: Mapping[str, Any]


# -- payloads ----------------------------------------------------------------------------


class TimelineLine(TypedDict):
    kind: str
    message: str


class JobUpdated(TypedDict):
    """A job changed: a new timeline line (``event``) or a new pending reason code."""

    id: int
    state: str
    event: NotRequired[TimelineLine]
    pending_code: NotRequired[str]


class PendingUpdated(TypedDict):
    """Waiting jobs per pending reason code, after each cycle."""

    by_reason: dict[str, int]


class QueuesUpdated(TypedDict, total=False):
    """Queue figures changed: refetch. Says why: a cycle ran, a job came or went in a
    queue, or a quota changed (then ``queue`` is None for a line-wide contract)."""

    cycle: int
    line: str
    queue: str | None
    quota_gpus: int
    guarantee_gpus: int
    request: int
    change: str


class QuotaFigures(TypedDict):
    """The contract after an applied, ended or corrected quota change."""

    line: str
    quota_gpus: int
    guarantee_gpus: int
    request: int
    change: str


# eviction.updated: the eviction ratio per queue name (R4), after each metrics rollup.
EvictionUpdated = dict[str, float]


class NodeUpdated(TypedDict):
    """A node's scheduling state changed (the loop also sends its health and residue)."""

    name: str
    state: str
    state_reason: str
    health: NotRequired[str]
    residual_gpus: NotRequired[int]


class AlertRaised(TypedDict):
    id: int
    kind: str
    severity: str
    subject: str
    message: str


class AlertUpdated(TypedDict):
    id: int
    status: str


class CycleCompleted(TypedDict):
    """One loop iteration's summary: also the answer of ``POST scheduler/cycle/``."""

    id: int
    kind: str
    cluster_time: str
    duration_ms: float
    starts: int
    preemptions: int
    finished: int
    failed: int
    requeued: int
    pending: int
    pending_by_reason: dict[str, int]
    errors: list[str]
    violations: list[str]
    drift: list[str]


# -- builders ------------------------------------------------------------------------------


def job_updated(
    job_id: int, state: str, *, event: tuple[str, str] | None = None,
    pending_code: str | None = None,
) -> LiveEvent:  # fmt: skip
    """To the job's watchers: a timeline line ``event=(kind, message)`` was added, or
    its pending reason code became ``pending_code`` (exactly one of the two)."""
    if (event is None) == (pending_code is None):
        raise ValueError("job.updated carries a timeline line or a pending code, one of them")
    data: JobUpdated = {"id": job_id, "state": str(state)}
    if event is not None:
        data["event"] = {"kind": event[0], "message": event[1]}
    else:
        data["pending_code"] = str(pending_code)
    return LiveEvent(job_topic(job_id), JOB_UPDATED, data)


def pending_updated(by_reason: Mapping[str, int]) -> LiveEvent:
    """To the pending page: how many jobs wait for each reason."""
    return LiveEvent("pending", PENDING_UPDATED, PendingUpdated(by_reason=dict(by_reason)))


def queues_updated(
    *, cycle: int | None = None, queue: str | None = None, quota: QuotaFigures | None = None
) -> LiveEvent:
    """To the queue pages: refetch, because a ``cycle`` ran, a job came or went in
    ``queue``, or a ``quota`` changed (with the ``queue`` it applies to, None line-wide)."""
    data: QueuesUpdated
    if cycle is not None and queue is None and quota is None:
        data = {"cycle": cycle}
    elif quota is not None and cycle is None:
        data = {
            "line": quota["line"], "queue": queue, "quota_gpus": quota["quota_gpus"],
            "guarantee_gpus": quota["guarantee_gpus"], "request": quota["request"],
            "change": quota["change"],
        }  # fmt: skip
    elif queue is not None and cycle is None:
        data = {"queue": queue}
    else:
        raise ValueError("queues.updated says one thing: a cycle, a queue, or a quota change")
    return LiveEvent("queues", QUEUES_UPDATED, data)


def eviction_updated(ratios: Mapping[str, float]) -> LiveEvent:
    """To the eviction chart: each queue's eviction ratio over the window."""
    return LiveEvent("eviction", EVICTION_UPDATED, dict(ratios))


def node_updated(
    name: str, state: str, state_reason: str, *, health: str | None = None,
    residual_gpus: int | None = None,
) -> LiveEvent:  # fmt: skip
    """To the node pages: the node's state (and, from the loop, its health and residue)."""
    data: NodeUpdated = {"name": name, "state": str(state), "state_reason": state_reason}
    if health is not None:
        data["health"] = str(health)
    if residual_gpus is not None:
        data["residual_gpus"] = residual_gpus
    return LiveEvent("nodes", NODE_UPDATED, data)


def alert_raised(alert_id: int, kind: str, severity: str, subject: str, message: str) -> LiveEvent:
    """To the on-call console: an alert was raised or bumped."""
    data: AlertRaised = {"id": alert_id, "kind": str(kind), "severity": str(severity),
                         "subject": subject, "message": message}  # fmt: skip
    return LiveEvent("alerts", ALERT_RAISED, data)


def alert_updated(alert_id: int, status: str) -> LiveEvent:
    """To the on-call console: an alert was acknowledged or resolved."""
    return LiveEvent("alerts", ALERT_UPDATED, AlertUpdated(id=alert_id, status=str(status)))


def cycle_summary(record: Any) -> CycleCompleted:
    """An iteration's summary (the first five errors, violations and drift lines) from its
    ``scheduling.models.SchedulingCycle`` row (this layer names no model)."""
    return {
        "id": record.pk, "kind": record.kind, "cluster_time": record.cluster_time.isoformat(),
        "duration_ms": round(record.duration_ms, 1), "starts": record.starts,
        "preemptions": record.preemptions, "finished": record.finished, "failed": record.failed,
        "requeued": record.requeued, "pending": record.pending,
        "pending_by_reason": record.pending_by_reason, "errors": record.errors[:5],
        "violations": record.violations[:5], "drift": record.drift[:5],
    }  # fmt: skip


def cycle_completed(record: Any) -> LiveEvent:
    """To the dashboards: a loop iteration finished (its summary)."""
    return LiveEvent("cycles", CYCLE_COMPLETED, cycle_summary(record))


# Every live event kind and its one builder.
BUILDERS: dict[str, Callable[..., LiveEvent]] = {
    JOB_UPDATED: job_updated,
    PENDING_UPDATED: pending_updated,
    QUEUES_UPDATED: queues_updated,
    EVICTION_UPDATED: eviction_updated,
    NODE_UPDATED: node_updated,
    ALERT_RAISED: alert_raised,
    ALERT_UPDATED: alert_updated,
    CYCLE_COMPLETED: cycle_completed,
}

# The payload type of every kind (for tests and readers).
PAYLOADS: dict[str, Any] = {
    JOB_UPDATED: JobUpdated,
    PENDING_UPDATED: PendingUpdated,
    QUEUES_UPDATED: QueuesUpdated,
    EVICTION_UPDATED: EvictionUpdated,
    NODE_UPDATED: NodeUpdated,
    ALERT_RAISED: AlertRaised,
    ALERT_UPDATED: AlertUpdated,
    CYCLE_COMPLETED: CycleCompleted,
}


# -- frames --------------------------------------------------------------------------------


class ChannelMessage(TypedDict):
    """What ``core.realtime`` sends to a topic's Channels group (handled by ``live_event``)."""

    type: str
    kind: str
    topic: str
    data: Mapping[str, Any]


class ClientFrame(TypedDict):
    """What a websocket client receives (API.md)."""

    type: str
    topic: str
    data: Mapping[str, Any]


def channel_message(topic: str, kind: str, data: Mapping[str, Any]) -> ChannelMessage:
    """The group message for one event (``type`` routes it to the consumer's ``live_event``)."""
    return {"type": "live.event", "kind": kind, "topic": topic, "data": data}


def client_frame(message: Mapping[str, Any]) -> ClientFrame:
    """The frame a subscriber receives for one group message."""
    return {"type": message["kind"], "topic": message["topic"], "data": message["data"]}

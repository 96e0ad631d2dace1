"""Mail to researchers about their own jobs (as Slurm's ``--mail-type``): the service.

A person chooses on ``/account/`` which of their jobs' events are mailed to them
(``JobMailPreference``: started, succeeded, failed, preempted/requeued/moved, cancelled by
someone else; nothing by default). A Celery beat entry (``job-mail``, every minute) runs
``send_job_digests``: each opted-in, active person with an address gets ONE mail per run
listing their new events (at most ``MAX_LISTED``), and their watermark advances in the
transaction that queues it (``core.mail.mail_on_commit``: sent after commit by the retrying
task). The scheduling cycle does no work for it: the digest reads the timeline the cycle
writes anyway.

Nothing lost, nothing mailed twice, while cycles and cancels write events concurrently:

- An event id is taken when its row is inserted, but becomes visible when its transaction
  commits: ids commit out of order (a cycle's transaction holds id 100 for seconds while a
  cancel commits 101). A watermark moved to the highest id *seen* would skip 100 for good.
  So a run reads only up to a *settled horizon* (``settled_horizon``): the id sequence's
  last value, once every session that may have taken an id by then has ended that
  transaction. An event below it is committed (or rolled back) by then.
- Each person's digest is read and their watermark moved in one transaction holding their
  preference row (``select_for_update``): two runs at once (a duplicated beat) mail each
  event once; the account page's changes wait for it too.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from django.contrib.auth import get_user_model
from django.contrib.postgres.aggregates import ArrayAgg
from django.core.exceptions import ValidationError
from django.db import connection, transaction
from django.db.models import Count, Max, Q, QuerySet

from core.env import portal_url
from core.mail import mail_on_commit
from core.timezones import written, zone_of_recipient
from scheduling.arrays import ArraySpec
from scheduling.models import JOB_MAIL_EVENTS, Job, JobEvent, JobMail, JobMailPreference

log = logging.getLogger(__name__)

MAX_LISTED = 50  # events listed in one mail; the rest are counted, with a link to the list
SETTLE_WAIT_S = 30.0  # how long a run waits for the writers in progress (cycles: seconds)

# What each event kind reads as in a mail ("Job 12 (llama-7b) succeeded").
_SAYS = {
    "started": "started",
    "succeeded": "succeeded",
    "failed": "failed",
    "preempted": "was preempted",
    "requeued": "was requeued",
    "moved": "was moved",
    "retried": "failed a run and was requeued for a retry",
    "cancelled": "was cancelled",
}


# -- the preference (the account page) ------------------------------------------------------


def set_job_mail_preference(user: object, kinds: Iterable[str]) -> JobMailPreference:
    """Mail ``user`` about ``kinds`` (``JobMail`` values; empty: stop) of their jobs' events.

    ``ValidationError`` (field ``kinds``), nothing written, for an unknown kind or a user
    without an email address asking for mail. Turning mail on (from none) sets the
    watermark to the newest event id, so nothing that happened before is mailed; changing
    the kinds while on keeps it (what the next digest lists may then include an event of a
    newly chosen kind from since the last run, a minute at most). Waits for a digest
    running for this person (their row's lock).
    """
    chosen = list(dict.fromkeys(kinds))
    unknown = [k for k in chosen if k not in JobMail.values]
    if unknown:
        raise ValidationError({"kinds": [f"unknown kind of job mail: {', '.join(unknown)}"]})
    chosen = [k for k in JobMail.values if k in chosen]
    if chosen and not getattr(user, "email", ""):
        raise ValidationError({"kinds": ["your account has no email address to mail to"]})
    with transaction.atomic():
        pref, _ = JobMailPreference.objects.get_or_create(user=user)
        pref = JobMailPreference.objects.select_for_update().get(pk=pref.pk)
        if chosen and not pref.kinds:
            pref.last_event_id = max(pref.last_event_id, newest_event_id())
        pref.kinds = chosen
        pref.save(update_fields=["kinds", "last_event_id", "updated_at"])
    return pref


# -- the horizon ----------------------------------------------------------------------------


def newest_event_id() -> int:
    """The last id the ``JobEvent`` sequence gave out (committed or not; 0 if none)."""
    table = JobEvent._meta.db_table
    with connection.cursor() as cur:
        cur.execute("SELECT pg_get_serial_sequence(%s, 'id')", [table])
        (sequence,) = cur.fetchone()
        cur.execute(f"SELECT last_value, is_called FROM {sequence}")  # quoted by PostgreSQL
        last, called = cur.fetchone()
    return int(last) if called else 0


def settled_horizon(wait_s: float = SETTLE_WAIT_S, poll_s: float = 0.05) -> int | None:
    """An event id at or below which every ``JobEvent`` is committed or rolled back; None
    if the writers in progress did not end within ``wait_s`` (the next run tries again).

    The sequence's last value, read first; then the moment after (``t0``); then a wait for
    every other session of this database whose transaction began before ``t0`` and may
    hold an event id: one that has written (it has a transaction id) or is running a
    statement (an INSERT takes its ids before it writes). Any event id up to the value
    read was taken by such a transaction, and once each has ended, its events are
    visible (or gone). Read-only sessions idle in a transaction are not waited for.

    ``pg_stat_activity`` shows the sessions of the role we connect as (the portal's
    processes share the one of ``DATABASE_URL``); another role's writers of the timeline
    would need ``pg_read_all_stats``. Transaction ids are no shortcut: a snapshot leaves
    out the newest running transaction (its id is not below the snapshot's ``xmax``).
    """
    horizon = newest_event_id()
    with connection.cursor() as cur:
        cur.execute("SELECT clock_timestamp()")
        (t0,) = cur.fetchone()
        deadline = time.monotonic() + wait_s
        while True:
            cur.execute("SELECT pg_stat_clear_snapshot()")  # a fresh view in a transaction too
            cur.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
                " AND xact_start < %s AND (backend_xid IS NOT NULL OR state = 'active')",
                [t0],
            )
            (running,) = cur.fetchone()
            if running == 0:
                return horizon
            if time.monotonic() >= deadline:
                log.warning("job mail: %s writer(s) still running after %.0f s", running, wait_s)
                return None
            time.sleep(poll_s)


# -- the digest -----------------------------------------------------------------------------


@dataclass(frozen=True)
class DigestReport:
    """What one run did: the horizon it read to, people mailed, events listed in all."""

    horizon: int | None
    mailed: int = 0
    events: int = 0


def _events_for(pref: JobMailPreference, horizon: int) -> QuerySet[JobEvent]:
    """The person's events past their watermark up to ``horizon``, of the kinds they chose
    (a cancel only when someone else did it), oldest first."""
    user = pref.user
    kinds = sorted({kind for k in pref.kinds for kind in JOB_MAIL_EVENTS.get(k, ())})
    rows = JobEvent.objects.filter(
        job__owner=user, pk__gt=pref.last_event_id, pk__lte=horizon, kind__in=kinds
    )
    # ``cancel_job`` writes "cancelled by <username>": the owner's own cancel is not news,
    # nor their own suspension (the loop writes "suspended by <username>: ...")
    return rows.exclude(
        Q(kind="cancelled") & Q(message=f"cancelled by {user.username}")
        | Q(kind="suspended") & Q(message__startswith=f"suspended by {user.username}:")
    )


def _says(event: JobEvent) -> str:
    """What happened, in words: the timeline's message, after what it means when the
    message does not say it first ("was requeued: back in the queue ...", but "started on
    r007-n31[0]", not "started: started on ...", and "cancelled: job 12 it waited for
    failed", the loop's cancel of a job whose dependency ended so)."""
    if event.message.split(" ", 1)[0].removesuffix(":") == event.kind:
        return event.message
    return f"{_SAYS.get(event.kind, event.kind)}: {event.message}"


@dataclass(frozen=True)
class _Line:
    """One line of a digest: when (the latest event it tells), and what; ``last``: said
    after the other lines of that time (an array's end, after its tasks' lines)."""

    at: datetime
    text: str
    last: bool = False


def _job_lines(
    events: QuerySet[JobEvent], zone, base: str
) -> tuple[list[_Line], int, dict[int, str]]:
    """The lines of the events of jobs that are no array's task: one an event, at most
    ``MAX_LISTED``; with how many there are in all and the jobs they are of (their names:
    those of the jobs listed, "" for the others)."""
    listed = list(events.select_related("job").order_by("pk")[:MAX_LISTED])
    total = len(listed) if len(listed) < MAX_LISTED else events.count()
    jobs: dict[int, str] = {}
    if total > len(listed):
        jobs = dict.fromkeys(events.order_by().values_list("job_id", flat=True).distinct(), "")
    jobs.update((e.job_id, e.job.name) for e in listed)
    lines = [
        _Line(
            e.at,
            f"{written(e.at, zone)}  job {e.job_id} ({e.job.name}) {_says(e)}  "
            f"{base}/jobs/{e.job_id}/",
        )  # fmt: skip
        for e in listed
    ]
    return lines, total, jobs


def _array_lines(
    events: QuerySet[JobEvent], zone, base: str
) -> tuple[list[_Line], int, dict[int, str]]:
    """The lines of the events of array tasks: one an array and kind of event, its tasks'
    indices written as a spec ("array 42 (sweep): 4 tasks succeeded (0-3)"), and for an
    array whose last task ended in them, what all its tasks came to (Slurm mails an array
    as a whole, not task by task). Two queries, however many tasks; with the number of
    events they tell and the arrays (their names)."""
    groups = list(
        events.order_by()
        .values("job__array_id", "job__array__name", "kind")
        .annotate(n=Count("id"), last=Max("at"),
                  indices=ArrayAgg("job__array_index", distinct=True, order_by="job__array_index"))
    )  # fmt: skip
    if not groups:
        return [], 0, {}
    arrays = {g["job__array_id"]: g["job__array__name"] for g in groups}
    states: dict[int, dict[str, int]] = {}
    for array_id, state, n in (
        Job.objects.filter(array_id__in=arrays).order_by()
        .values_list("array_id", "state").annotate(n=Count("id"))
    ):  # fmt: skip
        states.setdefault(array_id, {})[state] = n
    lines, last_at = [], {}
    for g in sorted(groups, key=lambda g: (g["last"], g["job__array_id"], g["kind"])):
        array_id, name = g["job__array_id"], g["job__array__name"]
        tasks = f"{g['n']:,} tasks" if g["n"] != 1 else "task"
        indices = ArraySpec(tuple(g["indices"]), None).text
        what = _SAYS.get(g["kind"], g["kind"])
        if g["n"] != 1:  # "3 tasks were preempted"
            what = re.sub(r"\bwas\b", "were", what)
        text = f"{written(g['last'], zone)}  array {array_id} ({name}): {tasks} {what} ({indices})"
        lines.append(_Line(g["last"], f"{text}  {base}/arrays/{array_id}/"))
        if g["kind"] in _ENDS:
            last_at[array_id, name] = g["last"]  # the latest: groups go in time order
    for (array_id, name), at in last_at.items():
        by_state = states.get(array_id, {})
        if any(by_state.get(state) for state in Job.ACTIVE_STATES):
            continue  # not ended
        text = f"{written(at, zone)}  array {array_id} ({name}) has ended: {_came_to(by_state)}"
        lines.append(_Line(at, f"{text}  {base}/arrays/{array_id}/", last=True))
    return lines, sum(g["n"] for g in groups), arrays


# An array has ended when an event of one of these kinds leaves it no active task.
_ENDS = {"succeeded", "failed", "cancelled"}


def _came_to(by_state: dict[str, int]) -> str:
    """What an ended array's tasks came to: ``14 of its 16 tasks succeeded, 2 failed``."""
    size, ok = sum(by_state.values()), by_state.get(Job.State.SUCCEEDED, 0)
    rest = [f"{by_state[state]:,} {state}" for state in (Job.State.FAILED, Job.State.CANCELLED)
            if by_state.get(state)]  # fmt: skip
    if ok == size:
        return f"all {size:,} tasks succeeded" if size > 1 else "its task succeeded"
    said = (
        f"{ok:,} of its {size:,} tasks succeeded" if ok else f"none of its {size:,} tasks succeeded"
    )
    return f"{said}, {', '.join(rest)}"


def _digest(pref: JobMailPreference, horizon: int) -> tuple[str, str, int] | None:
    """The mail (subject, body, events told) of ``pref``'s new events; None if none. A
    job's events a line each (at most ``MAX_LISTED``, the rest counted); an array's tasks'
    events a line per kind (``_array_lines``)."""
    events = _events_for(pref, horizon)
    zone = zone_of_recipient(pref.user)
    base = portal_url()
    job_lines, job_events, jobs = _job_lines(events.filter(job__array__isnull=True), zone, base)
    array_lines, array_events, arrays = _array_lines(
        events.filter(job__array__isnull=False), zone, base
    )
    if not job_lines and not array_lines:
        return None
    told = sorted(job_lines + array_lines, key=lambda line: (line.at, line.last))
    lines = [line.text for line in told]
    if job_events > len(job_lines):
        lines.append(f"and {job_events - len(job_lines)} more: {base}/jobs/?mine=1")
    if len(jobs) + len(arrays) == 1:
        noun, ((pk, name),) = ("job", jobs.items()) if jobs else ("array", arrays.items())
        subject = f"Your {noun} {pk} ({name}) changed"
    elif arrays:
        parts = [f"{len(jobs):,} of your jobs"] if jobs else []
        parts.append(f"{len(arrays):,} of your arrays" if len(arrays) > 1 else "1 of your arrays")
        subject = f"{' and '.join(parts)} changed"
    else:
        subject = f"{len(jobs):,} of your jobs changed"
    body = "\n".join(
        [
            f"Hello {pref.user.get_username()},",
            "",
            *lines,
            "",
            f"You get this mail because you asked for it on {base}/account/ (turn it off there).",
        ]
    )
    return subject, body, len(job_lines) + array_events


def send_job_digests(horizon: int | None = None) -> DigestReport:
    """Queue one mail per opted-in, active person with an address, listing their jobs' new
    events up to the settled horizon (``settled_horizon``; ``horizon`` overrides it, for
    tests), and advance each one's watermark to it in the transaction that queues their
    mail. People with nothing new only have their watermark advanced (one statement), as
    have opted-in people who may not be mailed now (deactivated, no address): what happens
    meanwhile is never mailed.

    Nobody opted in: nothing is read, not even the horizon (a deployment without job
    mail never waits on its writers). Idempotent: a second run at the same horizon mails
    nothing; two at once mail each
    event once (the preference row is locked per person). Writes only
    ``JobMailPreference.last_event_id``; sends mail through ``core.mail`` after commit.
    """
    if not JobMailPreference.objects.exclude(kinds=[]).exists():
        return DigestReport(horizon=None)  # nobody asked: no wait for the writers either
    if horizon is None:
        horizon = settled_horizon()
        if horizon is None:
            return DigestReport(horizon=None)
    users = get_user_model().objects.filter(is_active=True).exclude(email="")
    due = (
        JobMailPreference.objects.filter(user__in=users, last_event_id__lt=horizon)
        .exclude(kinds=[])
        .values_list("pk", "user_id", "last_event_id")
    )
    # Opted in but not to be mailed now (deactivated, address removed): their watermark
    # moves on too, so what happens meanwhile is never mailed, not even once they are back.
    JobMailPreference.objects.filter(last_event_id__lt=horizon).exclude(kinds=[]).exclude(
        user__in=users
    ).update(last_event_id=horizon)
    rows = list(due)
    if not rows:
        return DigestReport(horizon=horizon)
    low = min(w for _, _, w in rows)
    every_kind = sorted({kind for kinds in JOB_MAIL_EVENTS.values() for kind in kinds})
    busy = set(
        JobEvent.objects.filter(
            pk__gt=low, pk__lte=horizon, kind__in=every_kind,
            job__owner_id__in=[u for _, u, _ in rows],
        ).order_by().values_list("job__owner_id", flat=True).distinct()
    )  # fmt: skip
    # nothing of any kind for them: the watermark moves on without a look at the rest
    JobMailPreference.objects.filter(
        pk__in=[pk for pk, user, _ in rows if user not in busy], last_event_id__lt=horizon
    ).update(last_event_id=horizon)
    mailed = listed = 0
    for pk, user_id, _ in rows:
        if user_id not in busy:
            continue
        with transaction.atomic():
            pref = (
                JobMailPreference.objects.select_for_update(of=("self",))
                .select_related("user", "user__profile")
                .filter(pk=pk, user__in=users, last_event_id__lt=horizon)
                .exclude(kinds=[])
                .first()
            )
            if pref is None:  # turned off, deactivated or mailed by another run meanwhile
                continue
            mail = _digest(pref, horizon)
            if mail is not None:
                subject, body, count = mail
                mail_on_commit(subject, body, [pref.user.email])
                mailed, listed = mailed + 1, listed + count
            pref.last_event_id = horizon
            pref.save(update_fields=["last_event_id"])
    return DigestReport(horizon=horizon, mailed=mailed, events=listed)

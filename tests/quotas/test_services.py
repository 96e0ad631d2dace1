"""The quota services: who may ask and decide, what is refused (and stores nothing), what an
approval changes, and contracts starting and ending on their dates."""

from datetime import UTC, datetime, timedelta
from unittest import mock

import pytest
from django.core import mail
from django.core.exceptions import PermissionDenied, ValidationError

from core.models import AuditRecord
from quotas import services
from quotas.models import BusinessLine, Queue, QuotaChange, QuotaPolicy, QuotaRequest, UsageSample
from scheduling.models import Node
from tests.quotas.conftest import HOUR, NOW, ask

pytestmark = pytest.mark.django_db


def line(name="llm") -> BusinessLine:
    return BusinessLine.objects.get(name=name)


def contract(name="llm") -> tuple[int, int]:
    ln = line(name)
    return ln.quota_gpus, ln.guarantee_gpus


# ---------------------------------------------------------------------------
# asking


def test_a_lead_asks_for_their_line_and_the_admins_are_told(
    demo, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        req = ask(demo["lead"], quota_gpus=20, guarantee_gpus=6, ends_at=NOW + 24 * HOUR)
    assert (req.state, req.status, req.quota_gpus, req.guarantee_gpus) == (
        "pending",
        "pending",
        20,
        6,
    )
    assert req.requester == demo["lead"] and req.queue is None
    assert contract() == (14, 5), "asking changes nothing"
    record = AuditRecord.objects.get(action="quota_request.created")
    assert record.actor == demo["lead"] and record.after["quota_gpus"] == 20
    assert [m.to for m in mail.outbox] == [["admin@example.org"]]
    assert "quota 20 and guarantee 6 GPUs for llm" in mail.outbox[0].subject


def test_a_lead_may_ask_for_one_of_their_queues_by_id_or_name(demo):
    core = Queue.objects.get(name="llm-core")
    by_id = ask(demo["lead"], line=str(line().pk), queue=str(core.pk), guarantee_gpus=4)
    by_name = ask(demo["lead"], queue="llm-core", guarantee_gpus=3)
    assert by_id.queue == core and by_name.queue == core


@pytest.mark.parametrize("username", ["researcher", "researcher2", "oncall", "admin"])
def test_nobody_but_a_lead_may_ask(demo, username):
    with pytest.raises(PermissionDenied, match="only a team lead"):
        ask(demo[username], quota_gpus=20)
    assert not QuotaRequest.objects.exists()


def test_a_lead_may_not_ask_for_a_line_they_do_not_lead(demo):
    with pytest.raises(PermissionDenied, match="you do not lead the line search-rec"):
        ask(demo["lead"], line="search-rec", quota_gpus=10)
    assert not QuotaRequest.objects.exists()


BAD = [
    # fields, field named, fragment of the message
    ({"quota_gpus": 10, "guarantee_gpus": 12}, "guarantee_gpus", "cannot be above the quota"),
    ({"guarantee_gpus": 20}, "guarantee_gpus", "above the current quota of 14"),
    ({"quota_gpus": -4}, "quota_gpus", "must not be negative"),
    ({"guarantee_gpus": -1}, "guarantee_gpus", "must not be negative"),
    ({"quota_gpus": 20, "starts_at": NOW + 2 * HOUR, "ends_at": NOW + HOUR}, "ends_at", "after the start"),
    ({"quota_gpus": 20, "starts_at": NOW + HOUR, "ends_at": NOW + HOUR}, "ends_at", "after the start"),
    ({"quota_gpus": 20, "ends_at": NOW - HOUR}, "ends_at", "already past"),
    ({"quota_gpus": 20, "starts_at": NOW + 731 * 24 * HOUR}, "starts_at", "at most 2 years ahead"),
    ({"quota_gpus": 20, "ends_at": datetime(9999, 12, 31, tzinfo=UTC)}, "ends_at", "at most 2 years ahead"),
    ({"quota_gpus": 20, "starts_at": datetime(1, 1, 1, tzinfo=UTC)}, "starts_at", "at most 2 years ago"),
    ({"quota_gpus": 20, "starts_at": NOW - 731 * 24 * HOUR}, "starts_at", "at most 2 years ago"),
    ({"quota_gpus": 33}, "quota_gpus", "more than the cluster holds (32 GPUs)"),
    ({"quota_gpus": 10**9}, "quota_gpus", "more than the cluster holds"),
    ({"line": "no-such-line", "quota_gpus": 20}, "business_line", "unknown business line"),
    ({"line": "999999", "quota_gpus": 20}, "business_line", "unknown business line"),
    ({"queue": "no-such-queue", "quota_gpus": 2}, "queue", "unknown queue"),
    ({"queue": "search-rec-core", "guarantee_gpus": 2}, "queue", "belongs to the line search-rec, not llm"),
    ({"queue": "llm-finetune", "quota_gpus": 15}, "quota_gpus", "above its line's quota (14)"),
    ({"quota_gpus": 20, "reason": "   "}, "reason", "say why"),
    ({"quota_gpus": 20, "reason": "x" * 2001}, "reason", "at most 2000"),
    ({}, "quota_gpus", "give a new quota, a new guarantee, or both"),
    ({"quota_gpus": 14, "guarantee_gpus": 5}, "non_field_errors", "already the contract"),
]  # fmt: skip


@pytest.mark.parametrize("fields,field,fragment", BAD, ids=lambda v: str(v)[:50])
def test_bad_input_is_refused_with_the_field_named_and_nothing_stored(
    demo, fields, field, fragment
):
    with pytest.raises(ValidationError) as exc:
        ask(demo["lead"], **fields)
    errors = exc.value.message_dict
    assert field in errors, errors
    assert any(fragment in m for m in errors[field]), errors
    assert not QuotaRequest.objects.exists()
    assert not AuditRecord.objects.exists()
    assert contract() == (14, 5)


# ---------------------------------------------------------------------------
# deciding


def test_an_approval_without_a_start_applies_at_once_recorded_audited_and_published(
    demo, django_capture_on_commit_callbacks
):
    req = ask(demo["lead"], quota_gpus=20, guarantee_gpus=7, reason="Q3 pretraining")
    with (
        mock.patch("quotas.services.publish_on_commit") as publish,
        django_capture_on_commit_callbacks(execute=True),
    ):
        services.approve_quota_request(demo["admin"], req.pk, "ok for Q3", now=NOW)
    req.refresh_from_db()
    assert (req.state, req.status, req.applied_at) == ("approved", "active", NOW)
    assert (req.decided_by, req.decision_note) == (demo["admin"], "ok for Q3")
    assert req.previous == {"quota_gpus": 14, "guarantee_gpus": 5}
    assert contract() == (20, 7)
    change = QuotaChange.objects.get()
    assert (change.quota_before, change.quota_after) == (14, 20)
    assert (change.guarantee_before, change.guarantee_after) == (5, 7)
    assert change.request == req and "Q3 pretraining" in change.reason
    actions = set(AuditRecord.objects.values_list("action", flat=True))
    assert {"quota_request.approved", "quota.applied"} <= actions
    publish.assert_called_once()
    topic, kind, data = publish.call_args.args
    assert (topic, kind) == ("queues", "queues.updated")
    assert data["line"] == "llm" and data["quota_gpus"] == 20 and data["request"] == req.pk
    assert mail.outbox[-1].to == ["lead@example.org"] and "approved" in mail.outbox[-1].subject


def test_an_approved_queue_request_changes_only_that_queue(demo):
    req = ask(demo["lead"], queue="llm-finetune", quota_gpus=8, guarantee_gpus=3)
    services.approve_quota_request(demo["admin"], req.pk, now=NOW)
    q = Queue.objects.get(name="llm-finetune")
    assert (q.quota_gpus, q.guarantee_gpus) == (8, 3)
    assert contract() == (14, 5)
    assert QuotaChange.objects.get().queue == q


@pytest.mark.parametrize("username", ["lead", "researcher", "researcher2", "oncall"])
def test_only_admins_approve_or_reject(demo, username):
    req = ask(demo["lead"], quota_gpus=20)
    with pytest.raises(PermissionDenied, match="only cluster admins"):
        services.approve_quota_request(demo[username], req.pk, "me", now=NOW)
    with pytest.raises(PermissionDenied, match="only cluster admins"):
        services.reject_quota_request(demo[username], req.pk, "me", now=NOW)
    req.refresh_from_db()
    assert req.state == "pending" and contract() == (14, 5)


def test_a_rejection_needs_a_note_and_is_final(demo, django_capture_on_commit_callbacks):
    req = ask(demo["lead"], quota_gpus=20)
    with pytest.raises(ValidationError) as exc:
        services.reject_quota_request(demo["admin"], req.pk, "  ", now=NOW)
    assert "note" in exc.value.message_dict
    with django_capture_on_commit_callbacks(execute=True):
        services.reject_quota_request(demo["admin"], req.pk, "no capacity this month", now=NOW)
    req.refresh_from_db()
    assert (req.state, req.decision_note) == ("rejected", "no capacity this month")
    assert "rejected" in mail.outbox[-1].subject and "no capacity" in mail.outbox[-1].body
    with pytest.raises(ValidationError, match="already rejected"):
        services.approve_quota_request(demo["admin"], req.pk, now=NOW)
    assert contract() == (14, 5) and not QuotaChange.objects.exists()


def test_a_request_is_decided_once(demo):
    req = ask(demo["lead"], quota_gpus=20)
    services.approve_quota_request(demo["admin"], req.pk, now=NOW)
    for call in (services.approve_quota_request, services.reject_quota_request):
        with pytest.raises(ValidationError, match="already approved"):
            call(demo["admin"], req.pk, "again", now=NOW)
    with pytest.raises(ValidationError, match="already approved"):
        services.withdraw_quota_request(demo["lead"], req.pk, now=NOW)
    assert QuotaChange.objects.count() == 1


def test_the_requester_or_the_lines_lead_withdraws_nobody_else(demo):
    req = ask(demo["lead"], quota_gpus=20)
    for username in ("researcher", "researcher2", "oncall", "admin"):
        with pytest.raises(PermissionDenied, match="requester or the line's lead"):
            services.withdraw_quota_request(demo[username], req.pk, now=NOW)
    services.withdraw_quota_request(demo["lead"], req.pk, "found spare GPUs", now=NOW)
    req.refresh_from_db()
    assert req.state == "withdrawn" and req.decision_note == "found spare GPUs"
    assert AuditRecord.objects.filter(action="quota_request.withdrawn").count() == 1


@pytest.mark.parametrize(
    ("decide", "username", "note", "state"),
    [
        (services.reject_quota_request, "admin", "no capacity", "rejected"),
        (services.withdraw_quota_request, "lead", "", "withdrawn"),
    ],
)
def test_a_decision_is_recorded_once_with_who_when_and_why(demo, decide, username, note, state):
    req = ask(demo["lead"], quota_gpus=20)
    decide(demo[username], req.pk, note, now=NOW, source_ip="10.0.0.9")
    req.refresh_from_db()
    assert (req.state, req.decided_by, req.decided_at, req.decision_note) == (
        state, demo[username], NOW, note,
    )  # fmt: skip
    (record,) = AuditRecord.objects.filter(action__startswith="quota_request.").exclude(
        action="quota_request.created"
    )
    assert record.action == f"quota_request.{state}" and record.actor == demo[username]
    assert (record.before["state"], record.after["state"]) == ("pending", state)
    assert record.reason == note and record.source_ip == "10.0.0.9"


def test_refusals_come_in_the_same_order_as_before_the_request_is_looked_up(demo):
    """Rejecting is refused to a non-admin before anything is read (even a missing request);
    withdrawing reads the note, then the request (a missing one is missing, whoever asks),
    then who asks."""
    with pytest.raises(PermissionDenied):
        services.reject_quota_request(demo["lead"], 999_999, "", now=NOW)
    with pytest.raises(ValidationError, match="note"):
        services.reject_quota_request(demo["admin"], 999_999, "", now=NOW)
    with pytest.raises(QuotaRequest.DoesNotExist):
        services.reject_quota_request(demo["admin"], 999_999, "why", now=NOW)
    with pytest.raises(QuotaRequest.DoesNotExist):
        services.withdraw_quota_request(demo["oncall"], 999_999, now=NOW)
    req = ask(demo["lead"], quota_gpus=20)
    with pytest.raises(ValidationError, match="at most"):  # the note is read first
        services.withdraw_quota_request(demo["oncall"], req.pk, "x" * 10_000, now=NOW)
    with pytest.raises(PermissionDenied):
        services.withdraw_quota_request(demo["oncall"], req.pk, "fine", now=NOW)
    assert not AuditRecord.objects.exclude(action="quota_request.created").exists()


def test_an_approval_that_would_push_guarantees_past_capacity_is_refused(demo):
    req = ask(demo["lead"], quota_gpus=30, guarantee_gpus=30)  # 30 + 3 + 3 > 32 healthy
    with pytest.raises(ValidationError) as exc:
        services.approve_quota_request(demo["admin"], req.pk, now=NOW)
    assert (
        "Does not fit: guarantees would total 36 GPUs"
        in exc.value.message_dict["guarantee_gpus"][0]
    )
    req.refresh_from_db()
    assert req.state == "pending" and contract() == (14, 5) and not QuotaChange.objects.exists()


def test_capacity_is_the_healthy_one(demo):
    req = ask(demo["lead"], quota_gpus=20, guarantee_gpus=12)  # 12 + 6 = 18
    Node.objects.filter(name__in=list(Node.objects.values_list("name", flat=True)[:2])).update(
        state=Node.State.CORDONED
    )  # 16 healthy GPUs left
    with pytest.raises(ValidationError, match="of 16 healthy GPUs"):
        services.approve_quota_request(demo["admin"], req.pk, now=NOW)


def test_eating_into_the_reserve_needs_an_explicit_override(demo):
    QuotaPolicy.objects.update_or_create(singleton=True, defaults={"reserve_gpus": 8})
    req = ask(demo["lead"], quota_gpus=20, guarantee_gpus=19)  # 19 + 6 = 25 > 32 - 8
    with pytest.raises(ValidationError) as exc:
        services.approve_quota_request(demo["admin"], req.pk, now=NOW)
    assert "override_reserve" in exc.value.message_dict
    services.approve_quota_request(demo["admin"], req.pk, "urgent", override_reserve=True, now=NOW)
    assert contract() == (20, 19)
    record = AuditRecord.objects.get(action="quota_request.approved")
    assert record.after["override_reserve"] is True


def test_approved_changes_still_to_start_count_against_capacity(lead_everywhere, demo):
    later = ask(lead_everywhere, quota_gpus=20, guarantee_gpus=20, starts_at=NOW + 24 * HOUR)
    services.approve_quota_request(demo["admin"], later.pk, now=NOW)
    assert contract() == (14, 5), "not in effect before its start"
    now_ok = ask(lead_everywhere, line="search-rec", quota_gpus=10, guarantee_gpus=8)
    services.approve_quota_request(demo["admin"], now_ok.pk, now=NOW)  # 20 + 8 + 3 = 31
    too_much = ask(lead_everywhere, line="multimodal", quota_gpus=8, guarantee_gpus=5)
    with pytest.raises(ValidationError, match="guarantees would total 33 GPUs"):
        services.approve_quota_request(demo["admin"], too_much.pk, now=NOW)


def test_a_contract_that_changed_since_the_request_is_rechecked_at_approval(demo):
    first = ask(demo["lead"], quota_gpus=20, guarantee_gpus=15)
    second = ask(demo["lead"], quota_gpus=10)
    services.approve_quota_request(demo["admin"], first.pk, now=NOW)
    with pytest.raises(ValidationError, match="no longer valid"):
        services.approve_quota_request(demo["admin"], second.pk, now=NOW)  # 15 > 10
    assert contract() == (20, 15)


# ---------------------------------------------------------------------------
# effective dates


def test_a_later_start_is_applied_on_time_and_the_end_restores_the_previous_contract(demo):
    req = ask(
        demo["lead"], quota_gpus=20, guarantee_gpus=8, starts_at=NOW + HOUR, ends_at=NOW + 3 * HOUR
    )
    services.approve_quota_request(demo["admin"], req.pk, "for the sprint", now=NOW)
    req.refresh_from_db()
    assert (req.status, req.applied_at) == ("scheduled", None) and contract() == (14, 5)

    assert services.apply_due_changes(NOW + HOUR - timedelta(seconds=1)).applied == []
    assert contract() == (14, 5)
    report = services.apply_due_changes(NOW + HOUR)
    assert report.applied == [req.pk] and contract() == (20, 8)
    assert services.apply_due_changes(NOW + 2 * HOUR).applied == [], "applied once"
    req.refresh_from_db()
    assert (req.status, req.applied_at, req.previous) == (
        "active",
        NOW + HOUR,
        {"quota_gpus": 14, "guarantee_gpus": 5},
    )

    report = services.apply_due_changes(NOW + 3 * HOUR)
    assert report.expired == [req.pk] and contract() == (14, 5)
    req.refresh_from_db()
    assert (req.status, req.expired_at) == ("ended", NOW + 3 * HOUR)
    history = list(
        QuotaChange.objects.order_by("pk").values_list("quota_before", "quota_after", "changed_by")
    )
    assert history == [(14, 20, None), (20, 14, None)], "both ends recorded, by the schedule"
    assert "ended: previous contract restored" in QuotaChange.objects.order_by("pk").last().reason
    assert set(AuditRecord.objects.values_list("action", flat=True)) >= {
        "quota.applied",
        "quota.restored",
    }
    assert services.apply_due_changes(NOW + 4 * HOUR).expired == [], "ended once"


def test_an_end_does_not_undo_a_later_decision(demo):
    temporary = ask(demo["lead"], quota_gpus=20, ends_at=NOW + 2 * HOUR)
    services.approve_quota_request(demo["admin"], temporary.pk, now=NOW)
    later = ask(demo["lead"], quota_gpus=18, now=NOW + HOUR)
    services.approve_quota_request(demo["admin"], later.pk, now=NOW + HOUR)
    services.apply_due_changes(NOW + 2 * HOUR)
    temporary.refresh_from_db()
    assert contract() == (18, 5), "the later approval stands"
    assert temporary.expired_at == NOW + 2 * HOUR
    assert temporary.activation_note.startswith(
        "quota left at 18 GPUs: changed since by another decision"
    ), temporary.activation_note


def test_a_scheduled_change_that_no_longer_fits_waits_until_it_does(demo):
    req = ask(demo["lead"], quota_gpus=14, guarantee_gpus=14, starts_at=NOW + HOUR)
    services.approve_quota_request(demo["admin"], req.pk, now=NOW)  # 14 + 6 = 20 of 32
    names = list(Node.objects.order_by("name").values_list("name", flat=True))
    Node.objects.filter(name__in=names[:2]).update(state=Node.State.DOWN)  # 16 healthy
    report = services.apply_due_changes(NOW + HOUR)
    req.refresh_from_db()
    assert report.waiting == [req.pk] and req.applied_at is None and contract() == (14, 5)
    assert req.activation_note.startswith("waiting: Does not fit")
    Node.objects.update(state=Node.State.READY)
    assert services.apply_due_changes(NOW + 2 * HOUR).applied == [req.pk]
    assert contract() == (14, 14)


def test_a_period_that_ends_before_it_could_start_closes_without_a_change(demo):
    req = ask(demo["lead"], quota_gpus=20, starts_at=NOW + HOUR, ends_at=NOW + 2 * HOUR)
    services.approve_quota_request(demo["admin"], req.pk, now=NOW)
    report = services.apply_due_changes(NOW + 5 * HOUR)
    req.refresh_from_db()
    assert report.expired == [req.pk] and req.applied_at is None and req.status == "ended"
    assert contract() == (14, 5) and not QuotaChange.objects.exists()


def test_approving_after_the_period_ended_is_refused(demo):
    req = ask(demo["lead"], quota_gpus=20, ends_at=NOW + HOUR)
    with pytest.raises(ValidationError, match="already ended"):
        services.approve_quota_request(demo["admin"], req.pk, now=NOW + 2 * HOUR)


def test_a_past_start_applies_at_approval(demo):
    req = ask(demo["lead"], quota_gpus=20, starts_at=NOW - HOUR)
    services.approve_quota_request(demo["admin"], req.pk, now=NOW)
    req.refresh_from_db()
    assert req.applied_at == NOW and contract() == (20, 5)


def test_usage_samples_cover_every_line_and_queue(demo):
    assert services.record_usage_sample(NOW) == BusinessLine.objects.count() + Queue.objects.count()
    assert UsageSample.objects.filter(queue__isnull=True).count() == 3
    services.record_usage_sample(NOW + 40 * 24 * HOUR)
    assert not UsageSample.objects.filter(at=NOW).exists(), "older than 30 days is dropped"

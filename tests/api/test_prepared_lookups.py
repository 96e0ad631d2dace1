"""``core.prepared`` (#16): the lookups of every API request compiled once, answering exactly as
the querysets they are written as (token → user → role, the queue of a submission, a new
job's INSERT), and refusing querysets they could not run faithfully."""

from __future__ import annotations

import threading

import pytest
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import connection
from django.db.models import F, Value
from django.forms.models import model_to_dict
from django.test.utils import CaptureQueriesContext
from rest_framework.authtoken.models import Token

from core import clock, tokens
from core.models import LineMembership
from core.prepared import Prepared, PreparedInsert
from quotas.models import Queue
from scheduling.models import Job
from scheduling.selectors import list_queues_for_submit
from scheduling.services import resolve_queue

pytestmark = pytest.mark.django_db


def test_a_token_comes_with_its_user_and_role_in_one_query(demo):
    key = Token.objects.create(user=demo["lead"]).key
    role = get_user_model().objects.get(username="lead").profile.role
    with CaptureQueriesContext(connection) as ctx:
        token = tokens.legacy_token(key)
        assert (token.key, token.user.username, token.user.profile.role) == (key, "lead", role)
    assert len(ctx.captured_queries) == 1
    assert tokens.legacy_token("0" * 40) is None


def test_a_portal_token_is_found_by_its_hash(demo):
    token, secret = tokens.create_token(demo["researcher"], "ci")
    found = tokens.authenticate(secret)
    assert found.pk == token.pk and found.user.username == "researcher"
    tokens.revoke_token(demo["researcher"], token.pk)
    with pytest.raises(tokens.TokenError):
        tokens.authenticate(secret)


@pytest.mark.parametrize("username", ["admin", "oncall", "lead", "researcher", "researcher2"])
def test_the_submission_queue_is_exactly_the_selectors(demo, username):
    """Every queue, by name and by id: resolved when the selector lists it for the user,
    refused otherwise (the prepared lookup keeps the selector's rule)."""
    user = demo[username]
    allowed = set(list_queues_for_submit(user).values_list("pk", flat=True))
    for queue in Queue.objects.all():
        for ref in (queue.name, str(queue.pk)):
            if queue.pk in allowed:
                assert resolve_queue(user, ref).pk == queue.pk
                assert resolve_queue(user, ref).business_line.name == queue.business_line.name
            else:
                with pytest.raises(ValidationError, match="may not submit to this queue"):
                    resolve_queue(user, ref)
    with pytest.raises(ValidationError, match="unknown queue"):
        resolve_queue(user, "no-such-queue")


def test_a_new_membership_counts_at_once(demo):
    user = demo["researcher"]
    outside = Queue.objects.exclude(pk__in=list_queues_for_submit(user)).first()
    with pytest.raises(ValidationError):
        resolve_queue(user, outside.name)
    LineMembership.objects.create(user=user, business_line=outside.business_line)
    user = get_user_model().objects.get(pk=user.pk)  # a new request: a fresh user object
    assert resolve_queue(user, outside.name).pk == outside.pk


def test_compiled_once_per_thread_and_one_query_per_call(demo):
    builds = []

    def build(name: str):
        builds.append(threading.get_ident())
        return Queue.objects.select_related("business_line").filter(name=name)

    lookup = Prepared(build, str)
    with CaptureQueriesContext(connection) as ctx:
        for queue in Queue.objects.all():
            assert [q.pk for q in lookup(queue.name)] == [queue.pk]
            assert lookup.first(queue.name).business_line_id == queue.business_line_id
    assert len(builds) == 1
    assert len(ctx.captured_queries) == 1 + 2 * Queue.objects.count()

    other = threading.Thread(target=lambda: lookup("none") and None)
    other.start()
    other.join()
    assert len(builds) == 2 and builds[0] != builds[1]


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda name: Queue.objects.filter(name__icontains=name), "unchanged"),
        (lambda name: Queue.objects.filter(name=name.upper()), "unchanged"),
        (lambda name: Queue.objects.filter(name=name).values("pk"), "model instances"),
        (lambda name: Queue.objects.filter(name=name).prefetch_related("jobs"), "prefetches"),
    ],
)
def test_querysets_it_cannot_run_faithfully_are_refused(demo, build, message):
    with pytest.raises(ValueError, match=message):
        Prepared(build, str)("llm-core")


def test_only_str_and_int_values_and_the_right_number_of_them(demo):
    with pytest.raises(TypeError, match="str and int"):
        Prepared(lambda v: Queue.objects.filter(pk=v), float)
    with pytest.raises(TypeError, match="1 values expected, 2 given"):
        Prepared(lambda v: Queue.objects.filter(pk=v), int)(1, 2)


def _job(demo, **extra) -> Job:
    queue = Queue.objects.get(name="llm-experiment")
    return Job(owner=demo["researcher"], queue=queue, tier="experiment", gpus=1, name="p", **extra)


def test_a_prepared_insert_writes_the_row_save_writes(demo):
    insert = PreparedInsert(Job)
    with clock.pinned():
        saved = _job(demo, pending_details={"why": ["a"]}, checkpoint_path="s3://b/x")
        saved.save()
        rows = []
        for _ in range(2):  # the first compiles, the second reuses the SQL
            job = _job(demo, pending_details={"why": ["a"]}, checkpoint_path="s3://b/x")
            sql, params = insert(job)
            with connection.cursor() as cursor:
                cursor.execute(sql, params)
                rows.append(cursor.fetchone()[0])
    expected = model_to_dict(Job.objects.get(pk=saved.pk), exclude=["id"])
    for pk in rows:
        assert model_to_dict(Job.objects.get(pk=pk), exclude=["id"]) == expected
    assert Job.objects.get(pk=rows[0]).submitted_at == saved.submitted_at  # the cluster clock


def test_a_prepared_insert_compiles_a_row_with_an_expression_in_full(demo):
    insert = PreparedInsert(Job)
    insert(_job(demo))  # compiled, plain placeholders
    job = _job(demo, progress_seconds=Value(1.5) + Value(1.0), max_retries=F("max_retries"))
    job.max_retries = 3
    sql, params = insert(job)
    assert sql.count("%s") != len(insert.fields)  # the expression's own SQL
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        pk = cursor.fetchone()[0]
    assert Job.objects.get(pk=pk).progress_seconds == 2.5


def test_a_prepared_count_answers_as_count_does_in_one_query(demo):
    from scheduling.services import JobRequest, _count_active_jobs, submit_job

    me, other = demo["researcher"], demo["lead"]
    for name in ("a", "b", "c"):
        submit_job(me, JobRequest(name=name, queue="llm-experiment", gpus=1))
    Job.objects.filter(name="c").update(state=Job.State.SUCCEEDED)
    for user in (me, other):
        expected = Job.objects.filter(owner=user, state__in=Job.ACTIVE_STATES).count()
        with CaptureQueriesContext(connection) as ctx:
            assert _count_active_jobs(user.pk) == expected
        assert len(ctx.captured_queries) == 1
        assert "ORDER BY" not in ctx.captured_queries[0]["sql"]
    assert (_count_active_jobs(me.pk), _count_active_jobs(other.pk)) == (2, 0)


def test_a_prepared_count_refuses_what_it_could_not_run_faithfully():
    from core.prepared import PreparedCount

    with pytest.raises(TypeError, match="take str and int values"):
        PreparedCount(lambda x: Job.objects.filter(gpus=x), float)
    transformed = PreparedCount(lambda name: Job.objects.filter(name__contains=name), str)
    with pytest.raises(ValueError, match="not every value reaches the SQL parameters"):
        transformed("x")
    with pytest.raises(TypeError, match="1 values expected, 2 given"):
        transformed("x", "y")

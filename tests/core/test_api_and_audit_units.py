"""The API's one error shape (core.api.exception_handler), the caller's address, roles, and
audit records (core.audit.record), each called directly."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import AnonymousUser
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404
from django.test import RequestFactory
from rest_framework import exceptions

from core.api import client_ip, exception_handler
from core.audit import record
from core.models import AuditRecord, Profile, Role
from core.roles import is_admin, is_oncall_or_admin, role_of

CONTEXT = {"view": None, "request": None}


def handled(exc: Exception) -> tuple[int, object]:
    response = exception_handler(exc, CONTEXT)
    assert response is not None
    return response.status_code, response.data


# -- the error envelope -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "exc,data",
    [
        (DjangoValidationError("gpus must be positive"),
         {"errors": {"non_field_errors": ["gpus must be positive"]}}),
        (DjangoValidationError(["one", "two"]), {"errors": {"non_field_errors": ["one", "two"]}}),
        (DjangoValidationError({"gpus": ["too many"], "queue": "unknown"}),
         {"errors": {"gpus": ["too many"], "queue": ["unknown"]}}),
        (exceptions.ValidationError({"gpus": ["too many"]}), {"errors": {"gpus": ["too many"]}}),
        (exceptions.ValidationError(["whole request"]),
         {"errors": {"non_field_errors": ["whole request"]}}),
        (exceptions.ValidationError("one message"), {"errors": {"non_field_errors": ["one message"]}}),
        (exceptions.ParseError("JSON parse error - nested too deeply"),
         {"errors": {"non_field_errors": ["JSON parse error - nested too deeply"]}}),
        (exceptions.ValidationError({"gpus": "one", "nested": {"0": ["bad"]}}),
         {"errors": {"gpus": ["one"], "nested": ["0: bad"]}}),
    ],
)  # fmt: skip
def test_bad_input_is_a_400_with_field_errors_under_errors(exc, data):
    assert handled(exc) == (400, data)


def test_a_django_permission_refusal_is_a_403_that_keeps_its_words():
    assert handled(DjangoPermissionDenied("only the owner may cancel")) == (
        403,
        {"detail": "only the owner may cancel"},
    )
    status, data = handled(DjangoPermissionDenied())
    assert status == 403 and data == {"detail": exceptions.PermissionDenied.default_detail}


def test_a_django_404_is_the_apis_404():
    assert handled(Http404("No Job matches the given query.")) == (404, {"detail": "Not found."})


@pytest.mark.parametrize(
    "exc,status",
    [
        (exceptions.NotAuthenticated(), 401),
        (exceptions.AuthenticationFailed("Invalid token."), 401),
        (exceptions.Throttled(wait=30), 429),
        (exceptions.MethodNotAllowed("DELETE"), 405),
        (exceptions.NotFound(), 404),
    ],
)
def test_other_api_errors_keep_drfs_status_and_detail_without_an_errors_envelope(exc, status):
    code, data = handled(exc)
    assert code == status and set(data) == {"detail"}


def test_a_throttled_answer_says_when_to_come_back():
    response = exception_handler(exceptions.Throttled(wait=30), CONTEXT)
    assert response["Retry-After"] == "30"


@pytest.mark.parametrize("exc", [ValueError("bug"), KeyError("x"), RuntimeError()])
def test_programming_errors_are_left_to_django_as_500s(exc):
    assert exception_handler(exc, CONTEXT) is None


# -- the caller's address ---------------------------------------------------------------------


def test_the_callers_address_is_remote_addr_and_forwarded_headers_are_not_trusted():
    rf = RequestFactory()
    assert client_ip(rf.get("/", REMOTE_ADDR="10.1.2.3", HTTP_X_FORWARDED_FOR="1.1.1.1")) == (
        "10.1.2.3"
    )
    assert client_ip(rf.get("/", REMOTE_ADDR="")) is None
    request = rf.get("/")
    del request.META["REMOTE_ADDR"]
    assert client_ip(request) is None


@pytest.mark.django_db
@pytest.mark.parametrize("address", ["unknown", "1.2.3.4:5678", "garbage", "unix:"])
def test_an_address_that_is_no_ip_is_recorded_as_none_and_the_action_still_happens(demo, address):
    # uvicorn takes REMOTE_ADDR from a trusted proxy's X-Forwarded-For as it is; a cordon
    # then failed writing its audit record (inet): a 500, the node left as it was
    from rest_framework.test import APIClient

    from core.models import AuditRecord
    from scheduling.models import Node

    assert client_ip(RequestFactory().get("/", REMOTE_ADDR=address)) is None
    client = APIClient(REMOTE_ADDR=address)
    client.force_authenticate(demo["oncall"])
    response = client.post("/api/v1/nodes/r000-n00/cordon/", {"reason": "fan"}, format="json")
    assert response.status_code == 200
    assert Node.objects.get(name="r000-n00").state == "cordoned"
    assert AuditRecord.objects.get(action="node.cordon").source_ip is None


# -- roles ------------------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    "role,admin,oncall",
    [
        (None, False, False),  # no profile: a researcher
        (Role.RESEARCHER, False, False),
        (Role.TEAM_LEAD, False, False),
        (Role.ONCALL, False, True),
        (Role.ADMIN, True, True),
    ],
)
def test_a_users_role_comes_from_the_profile_and_decides_the_base_checks(
    django_user_model, role, admin, oncall
):
    user = django_user_model.objects.create_user(f"u-{role}")
    if role is not None:
        Profile.objects.create(user=user, role=role)
    fresh = django_user_model.objects.get(pk=user.pk)
    assert role_of(fresh) == (role or Role.RESEARCHER)
    assert (is_admin(fresh), is_oncall_or_admin(fresh)) == (admin, oncall)


@pytest.mark.django_db
def test_a_superuser_is_an_admin_whatever_the_profile_says(django_user_model):
    user = django_user_model.objects.create_superuser("root", password="x")
    Profile.objects.create(user=user, role=Role.RESEARCHER)
    assert role_of(django_user_model.objects.get(pk=user.pk)) == Role.ADMIN


def test_anonymous_and_missing_users_have_no_role():
    assert role_of(AnonymousUser()) is None and role_of(None) is None
    assert not is_admin(AnonymousUser()) and not is_oncall_or_admin(AnonymousUser())


@pytest.mark.django_db
def test_the_role_is_read_once_per_user_object(django_user_model, django_assert_num_queries):
    user = django_user_model.objects.create_user("cached")
    Profile.objects.create(user=user, role=Role.ONCALL)
    fresh = django_user_model.objects.get(pk=user.pk)
    with django_assert_num_queries(1):
        assert role_of(fresh) == Role.ONCALL
        assert role_of(fresh) == Role.ONCALL and is_oncall_or_admin(fresh)
    Profile.objects.filter(user=user).update(role=Role.ADMIN)
    assert role_of(fresh) == Role.ONCALL, "cached on the object for its request"
    assert role_of(django_user_model.objects.get(pk=user.pk)) == Role.ADMIN


# -- audit records ----------------------------------------------------------------------------


@pytest.mark.django_db
def test_an_audit_record_names_the_actor_the_model_target_and_the_change(django_user_model):
    actor = django_user_model.objects.create_user("oncall")
    target = django_user_model.objects.create_user("target")
    row = record(
        actor, "user.touch", target, reason="because", before={"a": 1}, after={"a": 2},
        source_ip="10.0.0.7",
    )  # fmt: skip
    stored = AuditRecord.objects.get(pk=row.pk)
    assert (stored.actor, stored.actor_name, stored.action) == (actor, "oncall", "user.touch")
    assert (stored.target_type, stored.target_id) == ("auth.user", str(target.pk))
    assert (stored.reason, stored.before, stored.after) == ("because", {"a": 1}, {"a": 2})
    assert stored.source_ip == "10.0.0.7"


@pytest.mark.django_db
@pytest.mark.parametrize("actor", [None, AnonymousUser()])
def test_actions_without_a_signed_in_actor_are_the_systems(actor):
    row = record(actor, "node.isolate", "r001-n03")
    stored = AuditRecord.objects.get(pk=row.pk)
    assert (stored.actor, stored.actor_name) == (None, "system")
    assert (stored.target_type, stored.target_id) == ("str", "r001-n03")
    assert (stored.before, stored.after, stored.reason, stored.source_ip) == ({}, {}, "", None)


@pytest.mark.django_db
def test_a_target_that_is_not_a_model_is_named_by_its_type_and_its_pk_or_itself():
    class Thing:
        pk = 42

    assert (record(None, "x", Thing()).target_type, record(None, "x", Thing()).target_id) == (
        "Thing", "42",
    )  # fmt: skip
    assert record(None, "x", 7).target_id == "7"


@pytest.mark.django_db
def test_the_actors_name_is_kept_when_the_user_is_deleted(django_user_model):
    actor = django_user_model.objects.create_user("leaver")
    row = record(actor, "job.cancel", "1")
    actor.delete()
    stored = AuditRecord.objects.get(pk=row.pk)
    assert stored.actor is None and stored.actor_name == "leaver"
    assert str(stored).endswith("leaver job.cancel str:1")

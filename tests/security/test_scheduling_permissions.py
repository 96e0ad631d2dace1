"""``scheduling.permissions`` over every persona: one test per (persona, predicate), and a
check that the apps compare roles only in their ``permissions`` modules."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from quotas.models import Queue
from scheduling import permissions
from scheduling.models import Job
from scheduling.permissions import OperatesNodes
from tests.security import people as personas

pytestmark = pytest.mark.django_db

TABLE = {
    "may_submit": personas.EVERYONE_SIGNED_IN,
    "sees_all_jobs": personas.OPERATORS,
    "submits_to_any_queue": personas.ADMINS,
    "may_operate_nodes": personas.OPERATORS,
    "may_drive_simulator": personas.ADMINS,
    "may_raise_time_limit": personas.ADMINS,
}
# may_cancel(user, job): the owner, a lead of the job's line, an admin.
CANCEL = {
    ("researcher", "alpha"): {"researcher", "lead", *personas.ADMINS},
    ("outsider", "beta"): {"outsider", "other_lead", *personas.ADMINS},
    ("lead", "alpha"): {"lead", *personas.ADMINS},
    ("oncall", "beta"): {"oncall", "other_lead", *personas.ADMINS},
}


# may_read_output(user, job): the owner, a lead of the job's line, on-call and admins.
READ_OUTPUT = {
    ("researcher", "alpha"): {"researcher", "lead", *personas.OPERATORS},
    ("outsider", "beta"): {"outsider", "other_lead", *personas.OPERATORS},
    ("lead", "alpha"): {"lead", *personas.OPERATORS},
    ("oncall", "beta"): {"oncall", "other_lead", *personas.OPERATORS},
}


@pytest.mark.parametrize(("predicate", "persona"), personas.table_cases(TABLE))
def test_each_predicate_for_each_persona(people, predicate, persona):
    assert personas.answers_as_table(permissions, TABLE, people, predicate, persona)


@pytest.mark.parametrize("persona", personas.PERSONAS)
@pytest.mark.parametrize(("owner", "line"), sorted(CANCEL))
def test_who_may_cancel_whose_job(people, owner, line, persona):
    job = Job(owner=people[owner], queue=Queue(name="q", business_line=people["lines"][line]))
    assert permissions.may_cancel(people[persona], job) is (persona in CANCEL[owner, line])


@pytest.mark.parametrize("persona", personas.PERSONAS)
@pytest.mark.parametrize(("owner", "line"), sorted(CANCEL))
@pytest.mark.parametrize("kind", ["user", "admin"])
def test_who_may_release_whose_hold(people, owner, line, persona, kind):
    """Whoever may cancel it releases a user hold; an admin hold, only admins."""
    job = Job(owner=people[owner], queue=Queue(name="q", business_line=people["lines"][line]),
              hold_kind=kind)  # fmt: skip
    may = persona in CANCEL[owner, line] and (kind == "user" or persona in personas.ADMINS)
    assert permissions.may_release(people[persona], job) is may
    admin_hold = persona in personas.ADMINS and persona != owner
    assert permissions.holds_as_admin(people[persona], job) is admin_hold


@pytest.mark.parametrize("persona", personas.PERSONAS)
@pytest.mark.parametrize(("owner", "line"), sorted(READ_OUTPUT))
def test_who_may_read_whose_output(people, owner, line, persona):
    job = Job(owner=people[owner], queue=Queue(name="q", business_line=people["lines"][line]))
    expected = persona in READ_OUTPUT[owner, line]
    assert permissions.may_read_output(people[persona], job) is expected


@pytest.mark.parametrize("persona", personas.PERSONAS)
def test_the_api_permission_is_the_predicate(people, persona):
    granted = OperatesNodes().has_permission(personas.FakeRequest(people[persona]), None)
    assert granted is permissions.may_operate_nodes(people[persona])
    assert OperatesNodes.message == "on-call engineers and admins only"


def test_every_predicate_of_the_module_is_in_a_table():
    public = personas.public_predicates(permissions)
    assert public == set(TABLE) | {
        "may_cancel", "may_release", "holds_as_admin", "may_read_output",
    }  # fmt: skip


def test_a_role_change_is_seen_by_a_fresh_user_object(people):
    from core.models import Profile

    Profile.objects.filter(user=people["researcher"]).update(role="oncall")
    assert not permissions.may_operate_nodes(people["researcher"])  # cached on this object
    fresh = type(people["researcher"]).objects.get(pk=people["researcher"].pk)
    assert permissions.may_operate_nodes(fresh)


# -- nothing else decides ---------------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[2]
ROLE_TESTS = re.compile(
    r"from core\.roles import .*\b(is_admin|is_oncall_or_admin)\b"
    r"|role_of\([^)]*\)\s*(==|!=|in\b|not in\b)"
    r"|Role\.(ADMIN|ONCALL|TEAM_LEAD|RESEARCHER)\b"
)
# Known and owned elsewhere: the simulator clock and loop-on-demand services still ask
# core.roles.is_admin (their owner moves them to scheduling.permissions.may_drive_simulator).
ALLOWED: set[str] = set()


def test_the_apps_compare_roles_only_in_their_permissions_modules():
    offenders = []
    for app in ("scheduling", "monitoring", "quotas"):
        for path in sorted((ROOT / app).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if path.name == "permissions.py" or "migrations" in rel or rel in ALLOWED:
                continue
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if ROLE_TESTS.search(line) and "profile__role" not in line:
                    offenders.append(f"{rel}:{number}: {line.strip()}")
    assert offenders == []


# -- the simulator's endpoints check the role before the body (session 41) ------------------


@pytest.mark.parametrize(
    ("path", "role"),
    [("/api/v1/simulator/advance/", "oncall"), ("/api/v1/simulator/advance/", "researcher"),
     ("/api/v1/scheduler/cycle/", "lead"), ("/api/v1/simulator/faults/", "researcher")],
)  # fmt: skip
def test_a_caller_without_the_role_gets_403_whatever_the_body(demo, api, path, role):
    """A researcher's bad body was answered with a 400 naming the fields the endpoint
    takes, before the service's 403."""
    response = api(role).post(path, {"seconds": "lots", "kind": 7}, format="json")
    assert response.status_code == 403, response.data
    assert "only" in str(response.data)
    assert api(None).post(path, {}, format="json").status_code in (401, 403)

"""``quotas.permissions`` over every persona: one test per (persona, predicate)."""

from __future__ import annotations

import pytest
from django.core.exceptions import PermissionDenied

from quotas import permissions
from quotas.models import QuotaRequest
from tests.security import people as personas

pytestmark = pytest.mark.django_db

TABLE = {
    "may_request": personas.LEADS,
    "may_decide": personas.ADMINS,
    "sees_all_requests": personas.ADMINS,
}
# line -> personas who lead it (may ask for it)
REQUEST_FOR_LINE = {"alpha": {"lead"}, "beta": {"other_lead"}}
# line -> personas who see its contract history (its members, admins)
LINE_HISTORY = {
    "alpha": {"researcher", "lead", *personas.ADMINS},
    "beta": {"outsider", "other_lead", *personas.ADMINS},
}
# (requester, line) -> personas who may withdraw it: the requester, a lead of the line
WITHDRAW = {
    ("lead", "alpha"): {"lead"},
    ("other_lead", "beta"): {"other_lead"},
    ("researcher", "alpha"): {"researcher", "lead"},  # the lead who asked has stepped down
    ("admin", "beta"): {"admin", "other_lead"},
}


@pytest.mark.parametrize(("predicate", "persona"), personas.table_cases(TABLE))
def test_each_predicate_for_each_persona(people, predicate, persona):
    assert personas.answers_as_table(permissions, TABLE, people, predicate, persona)


@pytest.mark.parametrize("persona", personas.PERSONAS)
@pytest.mark.parametrize("line", sorted(REQUEST_FOR_LINE))
def test_who_may_request_for_which_line(people, line, persona):
    line_id = people["lines"][line].pk
    assert permissions.may_request_for_line(people[persona], line_id) is (
        persona in REQUEST_FOR_LINE[line]
    )


@pytest.mark.parametrize("persona", personas.PERSONAS)
@pytest.mark.parametrize("line", sorted(LINE_HISTORY))
def test_who_sees_which_lines_history(people, line, persona):
    assert permissions.may_see_line_history(people[persona], people["lines"][line]) is (
        persona in LINE_HISTORY[line]
    )


@pytest.mark.parametrize("persona", personas.PERSONAS)
@pytest.mark.parametrize(("requester", "line"), sorted(WITHDRAW))
def test_who_may_withdraw_whose_request(people, requester, line, persona):
    req = QuotaRequest(requester=people[requester], business_line=people["lines"][line])
    assert permissions.may_withdraw(people[persona], req) is (persona in WITHDRAW[requester, line])


@pytest.mark.parametrize("persona", personas.PERSONAS)
def test_ensure_may_request_raises_exactly_when_may_request_is_false(people, persona):
    if permissions.may_request(people[persona]):
        permissions.ensure_may_request(people[persona])
        return
    with pytest.raises(PermissionDenied, match="only a team lead may request quota"):
        permissions.ensure_may_request(people[persona])


def test_a_lead_may_request_only_for_lines_they_lead_even_as_a_member_elsewhere(people):
    from core.models import LineMembership

    LineMembership.objects.create(user=people["lead"], business_line=people["lines"]["beta"])
    assert permissions.may_request_for_line(people["lead"], people["lines"]["alpha"].pk)
    assert not permissions.may_request_for_line(people["lead"], people["lines"]["beta"].pk)


def test_every_predicate_of_the_module_is_in_a_table():
    public = personas.public_predicates(permissions)
    tables = set(TABLE) | {"may_request_for_line", "may_see_line_history", "may_withdraw"}
    assert public == tables | {"ensure_may_request"}

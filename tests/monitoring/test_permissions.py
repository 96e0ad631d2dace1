"""``monitoring.permissions`` over every persona: one test per (persona, predicate), and the
pages, the API and the live topic asking them."""

from __future__ import annotations

import pytest

from monitoring import permissions
from monitoring.permissions import UsesOncallConsole
from tests.security import people as personas

pytestmark = pytest.mark.django_db

TABLE = {
    "may_see_dashboard": personas.LEADS | personas.ADMINS,
    "may_use_oncall_console": personas.OPERATORS,
}


@pytest.mark.parametrize(("predicate", "persona"), personas.table_cases(TABLE))
def test_each_predicate_for_each_persona(people, predicate, persona):
    assert personas.answers_as_table(permissions, TABLE, people, predicate, persona)


@pytest.mark.parametrize("persona", personas.PERSONAS)
def test_the_alerts_api_permission_is_the_console_predicate(people, persona):
    granted = UsesOncallConsole().has_permission(personas.FakeRequest(people[persona]), None)
    assert granted is (persona in TABLE["may_use_oncall_console"])


def test_every_predicate_of_the_module_is_in_the_table():
    public = personas.public_predicates(permissions)
    assert public == set(TABLE)


# -- who asks them ------------------------------------------------------------------------


@pytest.mark.parametrize("persona", sorted(personas.EVERYONE_SIGNED_IN))
def test_the_dashboard_page_follows_the_predicate(client, people, persona):
    client.force_login(people[persona])
    status = client.get("/dashboard/data/").status_code
    assert status == (200 if persona in TABLE["may_see_dashboard"] else 403)


@pytest.mark.parametrize("persona", sorted(personas.EVERYONE_SIGNED_IN))
def test_the_console_follows_the_predicate(client, people, persona):
    client.force_login(people[persona])
    status = client.get("/oncall/alerts/").status_code
    assert status == (200 if persona in TABLE["may_use_oncall_console"] else 403)


@pytest.mark.parametrize("persona", personas.PERSONAS)
def test_the_alerts_topic_follows_the_predicate(people, persona):
    from monitoring.consumers import _may_subscribe

    # the check itself, without the thread hop (which would close the test's connection)
    error = _may_subscribe.func(people[persona], "alerts")
    if persona in TABLE["may_use_oncall_console"]:
        assert error is None
    else:
        assert error == "no permission for topic 'alerts'"

"""A form is read back in the zone it was written in: the Django admin shows a user's dates
in the admin's zone (a GET page), so its save (a POST) must read them in that zone too, or
every save by an admin east or west of UTC moved ``date_joined`` and ``last_login`` by the
zone's offset (the page walk found the POST pages left in UTC)."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
from django.contrib.auth import get_user_model

from core.models import Profile

pytestmark = pytest.mark.django_db


def field_values(html: str) -> dict[str, str]:
    """The text inputs and checked boxes of a change form, as a browser would post them."""
    values = {}
    for tag in re.findall(r"<input[^>]+>", html):
        name = re.search(r'name="([^"]+)"', tag)
        if not name or 'type="submit"' in tag or 'type="file"' in tag:
            continue
        if 'type="checkbox"' in tag and "checked" not in tag:
            continue
        value = re.search(r'value="([^"]*)"', tag)
        values[name.group(1)] = value.group(1) if value else "on"
    return values


@pytest.mark.parametrize("zone", ["Asia/Tokyo", "America/New_York"])
def test_an_admin_save_of_a_user_keeps_their_dates(signed_in, demo, zone):
    Profile.objects.filter(user__username="admin").update(time_zone=zone)
    client = signed_in("admin")
    person = get_user_model().objects.get(username="researcher2")
    joined = datetime(2026, 11, 2, 9, 30, tzinfo=UTC)
    get_user_model().objects.filter(pk=person.pk).update(date_joined=joined, last_login=joined)
    url = f"/admin/auth/user/{person.pk}/change/"
    page = client.get(url).content.decode()
    form = field_values(page)
    assert form["date_joined_0"] and form["date_joined_1"], "the admin shows the dates"
    form["first_name"] = "Renamed"
    response = client.post(url, form)
    assert response.status_code == 302, response.content.decode()[:2000]
    person.refresh_from_db()
    assert person.first_name == "Renamed"
    assert (person.date_joined, person.last_login) == (joined, joined)

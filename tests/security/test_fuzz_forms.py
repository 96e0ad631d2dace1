"""Bad input through the HTML forms: every ``<form method="post">`` found on the pages (as
each role that sees it, on a world with a running job, alerts, a cordoned node and a
pending quota request) is posted with generated values for its own fields — the offered
choices and defaults, mixed with wrong types, huge and negative numbers, NUL bytes, long
unicode, HTML/JS — plus unknown fields and missing ones.

Asserted: never a 500, and a post that was not accepted (anything but a redirect) stored
nothing. Each example runs in a savepoint rolled back afterwards.
"""

from __future__ import annotations

from html.parser import HTMLParser

import pytest
from django.test import Client
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.security.pages import html_pages
from tests.security.test_fuzz_api import EXAMPLES, FUZZ, NASTY_SCALARS, fingerprint, send

pytestmark = pytest.mark.django_db


class Forms(HTMLParser):
    """Post forms of a page: action -> {field name: [offered values]}."""

    def __init__(self) -> None:
        super().__init__()
        self.forms: dict[str, dict[str, list[str]]] = {}
        self._current: dict[str, list[str]] | None = None
        self._select: str | None = None

    def handle_starttag(self, tag: str, attrs: list) -> None:
        a = dict(attrs)
        if tag == "form":
            if (a.get("method") or "").lower() == "post" and (a.get("action") or "").startswith(
                "/"
            ):
                self._current = self.forms.setdefault(a["action"], {})
            return
        if self._current is None:
            return
        name = a.get("name")
        if tag in ("input", "textarea", "button") and name and name != "csrfmiddlewaretoken":
            self._current.setdefault(name, [])
            if a.get("value") is not None:
                self._current[name].append(a["value"])
        elif tag == "select" and name:
            self._select = name
            self._current.setdefault(name, [])
        elif tag == "option" and self._select and a.get("value") is not None:
            self._current[self._select].append(a["value"])

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self._current = None
        elif tag == "select":
            self._select = None


def post_forms(client: Client, world) -> dict[str, dict[str, list[str]]]:
    found: dict[str, dict[str, list[str]]] = {}
    for html in html_pages(client, world).values():
        parser = Forms()
        parser.feed(html)
        for action, fields in parser.forms.items():
            merged = found.setdefault(action, {})
            for name, values in fields.items():
                merged.setdefault(name, [])
                merged[name] += [v for v in values if v not in merged[name]]
    return found


text = st.one_of(st.sampled_from([str(v) for v in NASTY_SCALARS]), st.text(max_size=80))


def form_bodies(fields: dict[str, list[str]]) -> st.SearchStrategy[dict[str, str]]:
    value = {name: st.one_of(st.sampled_from(offered), st.sampled_from(offered), text)
             if offered else text for name, offered in fields.items()}  # fmt: skip
    return st.builds(
        lambda body, extra: {**extra, **body},
        st.fixed_dictionaries({}, optional=value),
        st.dictionaries(st.sampled_from(["owner", "state", "id", "x" * 200]), text, max_size=2),
    )


ROLES = ("admin", "lead", "oncall", "researcher")


def test_every_post_form_survives_generated_input_and_refusals_store_nothing(demo, world):
    clients, forms = {}, []
    for role in ROLES:
        clients[role] = Client()
        clients[role].force_login(demo[role])
        forms += [(role, action, fields) for action, fields in post_forms(clients[role], world).items()
                  if action != "/accounts/logout/"]  # fmt: skip
    actions = {action for _, action, _ in forms}
    assert {f"/jobs/{world.job}/cancel/", "/jobs/new/", f"/oncall/nodes/{world.node}/action/",
            f"/quotas/requests/{world.quota_request}/approve/"} <= actions, actions  # fmt: skip
    assert fingerprint()  # the world is there

    @settings(FUZZ, max_examples=EXAMPLES * 8)
    @given(index=st.sampled_from(range(len(forms))), data=st.data())
    def fuzz(index, data):
        role, action, fields = forms[index]
        body = data.draw(form_bodies(fields))
        response, before, after = send_form(clients[role], action, body)
        assert response.status_code < 500, (role, action, body)
        if not accepted(action, response):
            assert after == before, f"{role}: {action} answered {response.status_code} but stored"

    fuzz()


def accepted(action: str, response) -> bool:
    """Whether a form post was accepted: a redirect, or for a new API token the page that
    shows its secret (once, so it is rendered, not redirected to: a 200 with the secret)."""
    if response.status_code == 302:
        return True
    return (
        action == "/account/tokens/"
        and response.status_code == 200
        and b'id="token-secret"' in response.content
    )


def send_form(client: Client, action: str, body: dict[str, str]):
    from urllib.parse import urlencode

    return send(client, "POST", action, "application/x-www-form-urlencoded",
                urlencode(body).encode())  # fmt: skip

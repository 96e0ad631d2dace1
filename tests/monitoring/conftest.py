"""Fixtures of the monitoring tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def people(db):
    """The personas of the permission tables (``tests/security/people.py``)."""
    from tests.security.people import make_people

    return make_people()

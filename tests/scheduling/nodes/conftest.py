"""Fixtures of the node tests: the demo's four idle nodes and a way to see live events."""

from __future__ import annotations

from unittest import mock

import pytest


@pytest.fixture
def sent(django_capture_on_commit_callbacks):
    """Events really sent after commit, as ``(topic, kind, data)``; use as a context manager
    around the call and read ``sent.events`` after it."""

    class Sent:
        events: list[tuple[str, str, dict]] = []

        def __enter__(self):
            self.events = []
            self._patch = mock.patch("core.realtime.publish_many", side_effect=self.events.extend)
            self._patch.start()
            self._commit = django_capture_on_commit_callbacks(execute=True)
            self._commit.__enter__()
            return self

        def __exit__(self, *exc):
            try:
                return self._commit.__exit__(*exc)
            finally:
                self._patch.stop()

    return Sent()

"""Websocket frames a page received: to know when its live subscriptions are open, so a
test does not fire an event before the page can hear it."""

from __future__ import annotations

import contextlib
import json
import time


class Frames:
    """Websocket frames the page received, to know when a subscription is live."""

    def __init__(self, page) -> None:
        self.received: list[dict] = []
        page.on("websocket", lambda ws: ws.on("framereceived", self._add))

    def _add(self, payload) -> None:
        with contextlib.suppress(TypeError, ValueError):
            self.received.append(json.loads(payload))

    def wait_subscribed(self, page, topic: str, timeout_s: float = 10) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if any(f.get("subscribed") == topic for f in self.received):
                return
            page.wait_for_timeout(50)
        raise AssertionError(f"the page never subscribed to {topic}: {self.received}")

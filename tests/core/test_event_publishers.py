"""Every live event the code publishes is built by its one builder in ``core.events``.

An AST scan of the production source: each call of ``publish_on_commit``,
``publish_coalesced`` or ``publish`` outside ``core/realtime.py`` must pass exactly
``*events.<builder>(...)``, where the builder is the one ``core.events.BUILDERS`` names
for a kind; nothing else sends to the channel layer. So every kind published has a
builder, every payload of a kind has one shape, and a new kind cannot skip the schema.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from core import events

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("core", "scheduling", "quotas", "monitoring", "portal", "demo", "bench", "replay")
PUBLISHERS = {"publish_on_commit", "publish_coalesced", "publish"}
TRANSPORT = "core/realtime.py"  # the one module that sends (publish_many, group_send)
BUILDER_NAMES = {builder.__name__: kind for kind, builder in events.BUILDERS.items()}


def _name(func: ast.expr) -> str:
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


def publish_calls(source: str) -> list[tuple[int, str, str | None]]:
    """(line, code, builder name or None) of every publish call in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and _name(node.func) in PUBLISHERS:
            found.append((node.lineno, ast.unparse(node), _builder(node)))
    return found


def _builder(call: ast.Call) -> str | None:
    """The builder of ``publish(*events.<builder>(...))``, else None."""
    if call.keywords or len(call.args) != 1 or not isinstance(call.args[0], ast.Starred):
        return None
    inner = call.args[0].value
    if not (isinstance(inner, ast.Call) and isinstance(inner.func, ast.Attribute)):
        return None
    module = inner.func.value
    if not (isinstance(module, ast.Name) and module.id == "events"):
        return None
    return inner.func.attr if inner.func.attr in BUILDER_NAMES else None


def bypasses(source: str) -> list[str]:
    """Sends that go around the publishers: ``publish_many`` or the channel layer itself."""
    return [
        ast.unparse(node)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Attribute | ast.Name)
        and _name(node) in ("publish_many", "group_send")
    ]


def production_sources() -> dict[str, str]:
    return {
        path.relative_to(ROOT).as_posix(): path.read_text()
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        if "/migrations/" not in path.as_posix()
    }


def test_every_publish_call_passes_a_builders_event():
    sources = production_sources()
    calls = {
        (path, line, code): builder
        for path, source in sources.items()
        if path != TRANSPORT
        for line, code, builder in publish_calls(source)
    }
    assert len(calls) >= 15, "the scan sees the publish calls"
    unbuilt = [f"{path}:{line}: {code}" for (path, line, code), b in calls.items() if b is None]
    assert unbuilt == [], "publish live events through a core.events builder:\n" + "\n".join(
        unbuilt
    )


def test_every_builder_is_used_and_every_kind_published_has_one():
    used = {
        builder
        for path, source in production_sources().items()
        for _, _, builder in publish_calls(source)
        if builder
    }
    assert {BUILDER_NAMES[b] for b in used} == set(events.BUILDERS), "no builder left unused"


def test_only_the_transport_sends():
    for path, source in production_sources().items():
        if path != TRANSPORT:
            assert bypasses(source) == [], path


def test_the_job_updated_payload_has_one_builder():
    """It used to be written out in three places (the loop twice, the services once)."""
    sources = production_sources()
    assert not any('"job.updated"' in s for p, s in sources.items() if p != "core/events.py")
    builders = [
        (path, line)
        for path, source in sources.items()
        for line, _, builder in publish_calls(source)
        if builder == "job_updated"
    ]
    assert len(builders) >= 3, builders


@pytest.mark.parametrize(
    "code",
    [
        'publish_on_commit("alerts", "alert.updated", {"id": 1, "status": "resolved"})',
        'publish_coalesced("queues", events.QUEUES_UPDATED, {"queue": "q"})',
        "publish_on_commit(*event)",
        "publish_on_commit(*events.LiveEvent('t', 'k', {}))",
        "realtime.publish_on_commit(*other.job_updated(1, 'running', event=('k', 'm')))",
        "publish(*events.job_updated(1, 'pending', pending_code='X'), extra=1)",
    ],
)
def test_the_scan_refuses_a_publish_without_a_builder(code):
    assert [builder for *_, builder in publish_calls(code)] == [None]


@pytest.mark.parametrize(
    "code",
    [
        "publish_on_commit(*events.job_updated(1, 'running', event=('k', 'm')))",
        "publish_coalesced(*events.queues_updated(queue=name))",
        "realtime.publish_on_commit(*events.cycle_completed(record))",
    ],
)
def test_the_scan_accepts_a_builders_event(code):
    assert [builder for *_, builder in publish_calls(code)] != [None]


def test_the_scan_sees_a_send_around_the_publishers():
    assert bypasses("async_to_sync(layer.group_send)('live.x', {})") != []
    assert bypasses("publish_many([('t', 'k', {})])") != []

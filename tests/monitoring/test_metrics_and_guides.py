"""The cluster's health arithmetic (monitoring.metrics) with exact numbers, and the on-call
guides (monitoring.guides) as data that speaks the portal's own words."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitoring import charts, guides, metrics

# -- utilization ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "allocated,healthy,expected",
    [
        (0, 0, 0.0),  # no healthy GPU: nothing is utilized, not a division by zero
        (5, 0, 0.0),
        (3, -8, 0.0),
        (0, 8, 0.0),
        (6, 8, 0.75),
        (8, 8, 1.0),
        (10, 8, 1.0),  # allocated on nodes that just turned unhealthy: capped at 100%
        (1, 3, 1 / 3),
    ],
)
def test_utilization_is_allocated_over_healthy_within_zero_and_one(allocated, healthy, expected):
    assert metrics.utilization(allocated, healthy) == pytest.approx(expected)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 10_000), st.integers(-10, 10_000))
def test_utilization_is_always_a_fraction(allocated, healthy):
    assert 0.0 <= metrics.utilization(allocated, healthy) <= 1.0


# -- fragmentation ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "free,whole,expected",
    [
        ([], 8, 0),
        ([0, 8, 8], 8, 0),  # busy and wholly free nodes strand nothing
        ([3, 0, 8, 7], 8, 10),
        ([1] * 5, 8, 5),
        ([3, 4], 4, 3),  # a node with a whole 4-GPU slot free strands nothing
        ([10, 12], 8, 0),  # more free than a whole job needs: usable
        ([0, 1, 2], 1, 0),  # single-GPU jobs fit anywhere
    ],
)
def test_fragmentation_counts_free_gpus_on_partly_used_nodes(free, whole, expected):
    assert metrics.fragmentation(free, whole) == expected


def test_fragmentation_takes_any_iterable_once():
    assert metrics.fragmentation(iter([2, 8, 5])) == 7
    assert metrics.WHOLE_NODE == 8


# -- delivered GPU time and eviction ratio ----------------------------------------------------


@pytest.mark.parametrize(
    "samples,until,expected",
    [
        ([(0.0, 4)], 60.0, 240.0),  # one sample holds until the end of the window
        ([(0.0, 4), (30.0, 0), (45.0, 2)], 60.0, 150.0),  # 4x30 + 0x15 + 2x15
        ([(0.0, 4), (30.0, 2)], 10.0, 40.0),  # the window ends before the second sample
        ([(10.0, 4)], 5.0, 0.0),  # a sample after the end counts nothing
        ([(0.0, 4), (0.0, 8)], 10.0, 80.0),  # the later of two samples at one time wins
        ([(0.0, 0)], 1e9, 0.0),
    ],
)
def test_delivered_gpu_seconds_integrates_the_step_series(samples, until, expected):
    assert metrics.delivered_gpu_seconds(samples, until) == pytest.approx(expected)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 64)), min_size=1, max_size=15).map(
        sorted
    ),
    st.integers(0, 2000),
    st.integers(1, 4),
)
def test_delivered_gpu_time_scales_with_the_gpus_and_never_exceeds_the_peak_times_the_window(
    samples, until, factor
):
    got = metrics.delivered_gpu_seconds(samples, until)
    doubled = metrics.delivered_gpu_seconds([(t, u * factor) for t, u in samples], until)
    assert doubled == pytest.approx(got * factor)
    peak = max(u for _, u in samples)
    assert 0 <= got <= peak * max(0, until - samples[0][0])


@pytest.mark.parametrize(
    "evicted,delivered,expected",
    [(0.0, 0.0, 0.0), (100.0, 0.0, 0.0), (100.0, -5.0, 0.0), (30.0, 120.0, 0.25), (0.0, 50.0, 0.0),
     (200.0, 100.0, 2.0)],
)  # fmt: skip
def test_the_eviction_ratio_is_evicted_over_delivered_and_zero_without_delivery(
    evicted, delivered, expected
):
    assert metrics.eviction_ratio(evicted, delivered) == expected


# -- guides -----------------------------------------------------------------------------------


def test_guides_have_unique_slugs_and_each_alert_kind_one_guide():
    slugs = [g.slug for g in guides.GUIDES]
    assert len(slugs) == len(set(slugs)) and all(
        re.fullmatch(r"[a-z]+(-[a-z]+)*", s) for s in slugs
    )
    kinds = [k for g in guides.GUIDES for k in g.alert_kinds]
    assert len(kinds) == len(set(kinds)), "an alert kind explained twice shows only one guide"
    assert {g.slug: g for g in guides.GUIDES} == guides.GUIDE_BY_SLUG
    for kind in kinds:
        assert kind in guides.guide_for_alert(kind).alert_kinds


def test_an_alert_kind_without_a_guide_gets_none():
    assert guides.guide_for_alert("no_such_kind") is None
    assert guides.guide_for_alert("") is None


def test_the_alert_kinds_guides_explain_are_the_monitoring_alert_kinds():
    assert set(guides.GUIDE_BY_ALERT_KIND) == {
        "pending_too_long", "eviction_ratio", "quota_near_limit", "residual_process",
        "node_unhealthy", "backend_error", "directory_sweep", "provider_sweep",
    }  # fmt: skip


def every_text(guide: guides.Guide) -> str:
    return " ".join([guide.title, guide.symptom, *guide.causes, *guide.first_actions])


def environment_variables() -> set[str]:
    """The settings .env.example documents (a guide may name them: LDAP_SWEEP_SECONDS)."""
    text = (Path(__file__).resolve().parents[2] / ".env.example").read_text()
    return set(re.findall(r"^#? ?([A-Z][A-Z0-9_]+)=", text, re.MULTILINE))


def test_guides_speak_only_real_pending_reason_codes():
    known = set(charts.REASON_ORDER) | {"NEW"} | environment_variables()
    for guide in guides.GUIDES:
        codes = set(re.findall(r"\b[A-Z]{3,}(?:_[A-Z]+)+\b|\bPRIORITY\b|\bDEMOTED\b|\bTOPOLOGY\b",
                               every_text(guide)))  # fmt: skip
        assert codes <= known, (guide.slug, codes - known)


def test_the_pending_guide_explains_the_codes_a_long_wait_can_have():
    text = every_text(guides.GUIDE_BY_SLUG["pending-for-hours"])
    for code in ("NEVER_FITS", "QUOTA_EXCEEDED", "NODES_UNAVAILABLE", "PRIORITY", "TOPOLOGY",
                 "DEMOTED", "LAUNCH_RETRY"):  # fmt: skip
        assert f"{code}:" in text, code


def test_rack_map_letters_in_the_guides_are_the_rack_maps_glyphs():
    glyphs = set(charts.STATUS_GLYPH.values())
    named = set()
    for guide in guides.GUIDES:
        for match in re.finditer(r"rack map ([A-Z](?:(?:/| or )[A-Z])*)\b", every_text(guide)):
            letters = set(re.split(r"/| or ", match.group(1)))
            assert letters <= glyphs, (guide.slug, letters)
            named |= letters
    assert named == {"C", "D", "U", "X", "R"}, "the guides name every letter of the map"
    oncall = every_text(guides.GUIDE_BY_SLUG["pending-for-hours"])
    assert "C/D/U/X cells on the rack map" in oncall


def test_guides_are_frozen_data():
    guide = guides.GUIDES[0]
    with pytest.raises(AttributeError):
        guide.title = "changed"  # type: ignore[misc]
    assert isinstance(guide.causes, tuple) and isinstance(guide.first_actions, tuple)

"""The one list of fault kinds: each has a label, the simulator core accepts each, and the
node page, its drill form, the fault API and the fault service all offer exactly it."""

from __future__ import annotations

import pytest
from rest_framework.exceptions import ValidationError as DRFValidationError

from monitoring.views import FaultForm
from scheduling import simcore
from scheduling.api import FaultSerializer
from scheduling.nodes import faults
from scheduling.simcore import PermanentError, simulator
from scheduling.simcore import faults as pure_faults
from tests.simcore.helpers import quiet_sim

KINDS = pure_faults.FAULT_KINDS
# What the simulator shows right after each kind is injected on an idle, healthy node.
HEALTH_AFTER = {
    "residual_process": "ok",
    "gpu_failure": "gpu_failure",
    "rdma_degraded": "rdma_degraded",
    "node_down": "down",
}


# -- the list itself ----------------------------------------------------------------------


def test_the_list_names_four_kinds_in_a_fixed_order():
    assert KINDS == ("residual_process", "gpu_failure", "rdma_degraded", "node_down")


def test_the_list_is_written_once_and_shared_by_identity():
    # The simulator core, its package and the portal side hold the very same objects.
    assert simulator.FAULT_KINDS is pure_faults.FAULT_KINDS
    assert simcore.FAULT_KINDS is pure_faults.FAULT_KINDS
    assert faults.FAULT_KINDS is pure_faults.FAULT_KINDS
    assert faults.FAULT_LABELS is pure_faults.FAULT_LABELS


def test_the_named_constants_are_members_of_the_list():
    named = {pure_faults.FAULT_RESIDUAL, pure_faults.FAULT_GPU, pure_faults.FAULT_RDMA,
             pure_faults.FAULT_DOWN}  # fmt: skip
    assert named == set(KINDS)


def test_kinds_are_unique():
    assert len(set(KINDS)) == len(KINDS)


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_has_a_label_that_is_words_not_the_kind(kind):
    label = faults.fault_label(kind)
    assert label == pure_faults.FAULT_LABELS[kind]
    assert label.strip() and label != kind and label[0].isupper()


def test_labels_are_distinct():
    labels = [faults.fault_label(k) for k in KINDS]
    assert len(set(labels)) == len(labels)


def test_an_unknown_kind_is_labelled_by_itself():
    assert faults.fault_label("meteor") == "meteor"


def test_choices_pair_each_kind_with_its_label_in_order():
    assert faults.fault_choices() == [(k, pure_faults.FAULT_LABELS[k]) for k in KINDS]


def test_the_pure_list_imports_no_django():
    import ast
    from pathlib import Path

    tree = ast.parse(Path(pure_faults.__file__).read_text())
    imported = {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    } | {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    assert imported <= {"annotations", "__future__"}


# -- the simulator core accepts every kind ------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_the_simulator_accepts_every_kind_and_shows_its_effect(kind):
    sim = quiet_sim()
    sim.inject_fault(kind, "r000-n00")
    events = sim.advance(0)
    node = sim.observe().node("r000-n00")
    assert node.health == HEALTH_AFTER[kind]
    if kind == "residual_process":
        assert node.residual_gpus and "residual.left" in [e.kind for e in events]
    else:
        assert "node.fault" in [e.kind for e in events]
    # the neighbour is untouched
    assert sim.observe().node("r000-n01").health == "ok"


@pytest.mark.parametrize("kind", ["meteor", "", "GPU_FAILURE", "node-down"])
def test_the_simulator_refuses_anything_else(kind):
    sim = quiet_sim()
    with pytest.raises(PermanentError) as err:
        sim.inject_fault(kind, "r000-n00")
    assert err.value.code == "invalid_fault"
    assert sim.observe().node("r000-n00").health == "ok"


def test_every_kind_the_simulator_draws_at_random_is_in_the_list():
    drawn = {kind for kind, _ in simulator.SimConfig().fault_kind_weights}
    assert drawn <= set(KINDS)


# -- the portal offers every kind ---------------------------------------------------------


def test_the_drill_form_offers_exactly_the_list_with_labels():
    assert list(FaultForm().fields["kind"].choices) == faults.fault_choices()


@pytest.mark.parametrize("kind", KINDS)
def test_the_drill_form_accepts_every_kind(kind):
    form = FaultForm({"kind": kind})
    assert form.is_valid() and form.cleaned_data["kind"] == kind


def test_the_drill_form_refuses_an_unknown_kind():
    form = FaultForm({"kind": "meteor"})
    assert not form.is_valid() and "kind" in form.errors


@pytest.mark.parametrize("kind", KINDS)
def test_the_fault_api_accepts_every_kind(kind):
    body = FaultSerializer(data={"kind": kind, "node": "r000-n00"})
    assert body.is_valid(), body.errors
    assert body.validated_data == {"kind": kind, "node": "r000-n00"}


def test_the_fault_api_refuses_an_unknown_kind():
    body = FaultSerializer(data={"kind": "meteor", "node": "r000-n00"})
    with pytest.raises(DRFValidationError):
        body.is_valid(raise_exception=True)
    assert set(body.errors) == {"kind"}


def test_the_fault_api_documents_the_list_as_its_choices():
    assert list(FaultSerializer().fields["kind"].choices) == list(KINDS)


@pytest.mark.django_db
def test_the_node_page_offers_every_kind_with_its_label(client, demo):
    client.force_login(demo["oncall"])
    body = client.get("/oncall/nodes/r000-n00/").content.decode()
    for kind in KINDS:
        assert (
            f'<option value="{kind}">{faults.fault_label(kind)}</option>'.replace("'", "&#x27;")
            in body
        ), kind

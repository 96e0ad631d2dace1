"""What ``scheduling.simcore`` exports, and where its vocabulary lives."""

import pytest

import scheduling.simcore as simcore
from scheduling.simcore import cluster, errors, observation, simulator


@pytest.mark.parametrize("name", simcore.__all__)
def test_every_exported_name_is_the_defining_modules_own_object(name):
    homes = [m for m in (cluster, errors, observation, simulator) if hasattr(m, name)]
    assert homes, f"{name} is defined nowhere in the package"
    assert all(getattr(m, name) is getattr(simcore, name) for m in homes)


def test_the_state_and_event_vocabulary_is_imported_from_observation_only():
    vocabulary = [
        "ACTIVE_STATES", "ENDED_STATES", "RUNNING", "STOPPING", "STOPPED", "SUCCEEDED", "FAILED",
        "JOB_LAUNCHED", "JOB_SUCCEEDED", "JOB_FAILED", "JOB_STOPPED", "JOB_CHECKPOINTED",
        "NODE_FAULT", "NODE_REPAIRED", "NODE_CORDONED", "NODE_UNCORDONED",
        "RESIDUAL_LEFT", "RESIDUAL_CLEANED", "INFERENCE_PRESSURE",
    ]  # fmt: skip
    for name in vocabulary:
        assert hasattr(observation, name), name
        assert name not in simcore.__all__, name


def test_the_observation_types_are_exported_for_the_package_s_users():
    assert simcore.NodeObservation is observation.NodeObservation
    assert simcore.ClusterObservation.__module__ == observation.__name__

import dataclasses

import pytest

from scheduling.simcore import (
    JobObservation,
    PermanentError,
    SimError,
    TransientError,
)

from .helpers import kinds, quiet_sim


def test_a_job_succeeds_exactly_after_its_true_duration_and_frees_its_gpus():
    sim = quiet_sim()
    sim.launch(
        "j1", [("r000-n00", (0, 1, 2, 3))], true_duration_s=1000, checkpoint_interval_s=10_000
    )
    assert kinds(sim.advance(0)) == ["job.launched"]
    assert sim.observe().node("r000-n00").free_gpus == (4, 5, 6, 7)

    assert sim.advance(999.5) == []
    job = sim.observe().job("j1")
    assert job.state == "running" and job.progress_s == pytest.approx(999.5)

    events = sim.advance(1)
    assert [(e.kind, e.at, e.job_id) for e in events] == [("job.succeeded", 1000.0, "j1")]
    obs = sim.observe()
    assert obs.job("j1").state == "succeeded" and obs.job("j1").ended_at == 1000.0
    assert obs.node("r000-n00").free_gpus == tuple(range(8))
    assert sim.now == 1000.5


def test_a_resumed_job_only_runs_its_remaining_work():
    sim = quiet_sim()
    sim.launch("j1", [("r000-n00", (0,))], true_duration_s=1000, progress_s=700)
    events = sim.advance(400)
    assert [(e.kind, e.at) for e in events][-1] == ("job.succeeded", 300.0)


def test_observation_never_reveals_the_true_duration():
    sim = quiet_sim()
    sim.launch("j1", [("r000-n00", (0,))], true_duration_s=12_345)
    sim.advance(10)
    job = sim.observe().job("j1")
    assert "true_duration_s" not in {f.name for f in dataclasses.fields(JobObservation)}
    assert 12_345 not in dataclasses.astuple(job)


def test_periodic_checkpoints_complete_after_their_cost_and_save_the_progress_of_their_start():
    sim = quiet_sim()
    sim.launch("j1", [("r000-n00", (0,))], 10_000, checkpoint_interval_s=3600, checkpoint_cost_s=60)
    events = [e for e in sim.advance(8000) if e.kind == "job.checkpointed"]
    assert [(e.at, e.progress_s) for e in events] == [(3660.0, 3600.0), (7260.0, 7200.0)]
    job = sim.observe().job("j1")
    assert job.checkpoint_progress_s == 7200 and job.last_checkpoint_at == 7260


def test_checkpoint_and_stop_within_grace_keeps_the_progress_at_the_request():
    sim = quiet_sim()
    sim.launch(
        "j1", [("r000-n00", (0, 1))], 10_000, checkpoint_interval_s=3600, checkpoint_cost_s=60
    )
    sim.advance(5000)
    sim.request_checkpoint_stop("j1", grace_s=300)
    job = sim.observe().job("j1")
    assert job.state == "stopping" and job.stop_deadline == 5300
    assert sim.observe().node("r000-n00").free_gpus == tuple(range(2, 8))  # still held

    sim.advance(59)
    assert sim.observe().job("j1").progress_s == 5000  # training halted while writing
    events = sim.advance(1)
    assert [(e.kind, e.at, e.reason, e.progress_s) for e in events] == [
        ("job.stopped", 5060.0, "checkpoint", 5000.0)
    ]
    job = sim.observe().job("j1")
    assert job.state == "stopped" and job.progress_s == 5000 and job.checkpoint_progress_s == 5000
    assert job.last_checkpoint_at == 5060
    assert sim.observe().node("r000-n00").free_gpus == tuple(range(8))


def test_checkpoint_and_stop_beyond_grace_is_killed_at_the_deadline_keeping_the_last_checkpoint():
    sim = quiet_sim()
    sim.launch(
        "j1", [("r000-n00", (0,))], 10_000, checkpoint_interval_s=3600, checkpoint_cost_s=600
    )
    sim.advance(5000)  # periodic checkpoint of 3600 completed at 4200
    sim.request_checkpoint_stop("j1", grace_s=120)
    events = sim.advance(1000)
    assert [(e.kind, e.at, e.reason, e.progress_s) for e in events] == [
        ("job.stopped", 5120.0, "deadline", 3600.0)
    ]
    job = sim.observe().job("j1")
    assert job.state == "stopped" and job.progress_s == 3600


def test_a_second_stop_request_keeps_the_first_deadline_and_an_ended_job_is_left_alone():
    sim = quiet_sim()
    sim.launch("j1", [("r000-n00", (0,))], 10_000, checkpoint_cost_s=60)
    sim.advance(100)
    sim.request_checkpoint_stop("j1", grace_s=300)
    sim.advance(10)
    sim.request_checkpoint_stop("j1", grace_s=10)  # would be a cold stop: ignored
    events = sim.advance(100)
    assert [(e.kind, e.reason, e.at) for e in events] == [("job.stopped", "checkpoint", 160.0)]
    sim.request_checkpoint_stop("j1", grace_s=300)
    sim.kill("j1")
    assert sim.advance(1000) == [] and sim.observe().job("j1").state == "stopped"


def test_kill_falls_back_to_the_last_periodic_checkpoint():
    sim = quiet_sim()
    sim.launch(
        "j1", [("r000-n00", (0,))], 100_000, checkpoint_interval_s=3600, checkpoint_cost_s=60
    )
    sim.advance(7000)
    sim.kill("j1")
    job = sim.observe().job("j1")
    assert job.state == "stopped" and job.end_reason == "killed" and job.progress_s == 3600
    assert [(e.kind, e.reason, e.progress_s) for e in sim.advance(0)] == [
        ("job.stopped", "killed", 3600.0)
    ]
    assert sim.observe().node("r000-n00").free_gpus == tuple(range(8))


def test_kill_before_any_checkpoint_keeps_the_progress_it_was_launched_with():
    sim = quiet_sim()
    sim.launch("j1", [("r000-n00", (0,))], 100_000, progress_s=1234)
    sim.advance(3000)
    sim.kill("j1")
    assert sim.observe().job("j1").progress_s == 1234


def test_a_checkpoint_being_written_when_the_job_is_killed_is_lost():
    sim = quiet_sim()
    sim.launch(
        "j1", [("r000-n00", (0,))], 100_000, checkpoint_interval_s=3600, checkpoint_cost_s=60
    )
    sim.advance(3630)  # checkpoint started at 3600, completes at 3660
    sim.kill("j1")
    sim.advance(100)
    assert sim.observe().job("j1").progress_s == 0


def test_an_ended_job_can_be_relaunched_from_its_kept_progress():
    sim = quiet_sim()
    sim.launch("j1", [("r000-n00", (0,))], 5000, checkpoint_cost_s=0)
    sim.advance(1000)
    sim.request_checkpoint_stop("j1", grace_s=60)
    sim.advance(1)
    kept = sim.observe().job("j1").progress_s
    assert kept == 1000
    sim.launch("j1", [("r001-n00", (3,))], 5000, progress_s=kept)
    events = sim.advance(5000)
    assert [(e.kind, e.at) for e in events][-1] == ("job.succeeded", 1001.0 + 4000.0)


def test_launching_on_a_busy_gpu_is_refused_as_permanent_and_changes_nothing():
    sim = quiet_sim()
    sim.launch("a", [("r000-n00", (0, 1))], 1000)
    before = sim.to_dict()
    with pytest.raises(PermanentError) as err:
        sim.launch("b", [("r000-n01", (0,)), ("r000-n00", (1, 2))], 1000)
    assert err.value.code == "gpu_busy" and "job a" in str(err.value)
    assert err.value.permanent and isinstance(err.value, SimError)
    assert sim.to_dict() == before
    assert "b" not in sim.observe().jobs_by_id


@pytest.mark.parametrize(
    ("placement", "code"),
    [
        ([("nope", (0,))], "unknown_node"),
        ([("r000-n00", (8,))], "invalid_placement"),
        ([("r000-n00", (1, 1))], "invalid_placement"),
        ([("r000-n00", (1,)), ("r000-n00", (2,))], "invalid_placement"),
        ([], "invalid_placement"),
    ],
)
def test_bad_placements_are_refused(placement, code):
    sim = quiet_sim()
    with pytest.raises(PermanentError) as err:
        sim.launch("j", placement, 100)
    assert err.value.code == code
    assert sim.jobs == {}


def test_unhealthy_and_cordoned_nodes_refuse_launches():
    sim = quiet_sim()
    sim.inject_fault("gpu_failure", "r000-n00")
    sim.cordon("r000-n01")
    with pytest.raises(PermanentError) as err:
        sim.launch("j", [("r000-n00", (0,))], 100)
    assert err.value.code == "node_unhealthy"
    with pytest.raises(PermanentError) as err:
        sim.launch("j", [("r000-n01", (0,))], 100)
    assert err.value.code == "node_cordoned"
    sim.uncordon("r000-n01")
    sim.launch("j", [("r000-n01", (0,))], 100)
    assert sim.observe().job("j").state == "running"


def test_launch_is_idempotent_for_the_same_placement_and_refuses_another():
    sim = quiet_sim()
    sim.launch("j", [("r000-n00", (0, 1))], 100)
    sim.launch("j", [("r000-n00", [0, 1])], 100)
    assert kinds(sim.advance(0)) == ["job.launched"]
    with pytest.raises(PermanentError) as err:
        sim.launch("j", [("r000-n01", (0, 1))], 100)
    assert err.value.code == "duplicate_job"


def test_injected_outages_raise_transient_errors_without_effect_then_recover():
    sim = quiet_sim()
    sim.inject_api_errors(2)
    for _ in range(2):
        with pytest.raises(TransientError) as err:
            sim.launch("j", [("r000-n00", (0,))], 100)
        assert not err.value.permanent and err.value.code == "backend_unavailable"
    assert sim.jobs == {}
    sim.launch("j", [("r000-n00", (0,))], 100)
    assert sim.observe().job("j").state == "running"


def test_unknown_jobs_are_permanent_errors():
    sim = quiet_sim()
    for call in (lambda: sim.kill("x"), lambda: sim.request_checkpoint_stop("x", 10)):
        with pytest.raises(PermanentError) as err:
            call()
        assert err.value.code == "unknown_job"


def test_drain_cordons_and_stops_every_running_job_on_the_node_gracefully():
    sim = quiet_sim()
    sim.launch("a", [("r000-n00", (0,))], 10_000, checkpoint_cost_s=30)
    sim.launch("b", [("r000-n00", (1,)), ("r000-n01", (1,))], 10_000, checkpoint_cost_s=30)
    sim.launch("c", [("r000-n01", (0,))], 10_000)
    sim.advance(100)
    assert sim.drain("r000-n00", grace_s=60) == ["a", "b"]
    events = sim.advance(60)
    assert [(e.kind, e.job_id, e.reason) for e in events if e.kind == "job.stopped"] == [
        ("job.stopped", "a", "checkpoint"),
        ("job.stopped", "b", "checkpoint"),
    ]
    obs = sim.observe()
    assert obs.node("r000-n00").cordoned and obs.job("c").state == "running"


def test_advance_rejects_negative_time():
    sim = quiet_sim()
    with pytest.raises(ValueError):
        sim.advance(-1)


def test_ended_jobs_are_forgotten_after_the_retention():
    sim = quiet_sim(ended_job_retention_s=100)
    sim.launch("j", [("r000-n00", (0,))], 10)
    sim.advance(100)
    assert "j" in sim.observe().jobs_by_id
    sim.advance(20)
    assert "j" not in sim.observe().jobs_by_id


@pytest.mark.parametrize(
    "kwargs",
    [
        {"true_duration_s": 0},
        {"true_duration_s": float("inf")},
        {"progress_s": -1},
        {"progress_s": float("nan")},
        {"checkpoint_interval_s": 0},
        {"checkpoint_interval_s": float("inf")},
        {"checkpoint_cost_s": -5},
    ],
)
def test_launch_refuses_arguments_that_are_not_finite_sensible_numbers(kwargs):
    sim = quiet_sim()
    with pytest.raises(PermanentError) as err:
        sim.launch("j", [("r000-n00", (0,))], **{"true_duration_s": 100, **kwargs})
    assert err.value.code == "invalid_argument" and sim.jobs == {}


@pytest.mark.parametrize("grace", [-1, float("nan"), float("inf")])
def test_stop_refuses_a_grace_that_is_not_a_finite_non_negative_number(grace):
    sim = quiet_sim()
    sim.launch("j", [("r000-n00", (0,))], 100)
    with pytest.raises(PermanentError):
        sim.request_checkpoint_stop("j", grace)
    assert sim.observe().job("j").state == "running"

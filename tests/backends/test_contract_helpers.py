"""The contract's own helpers (tests/backends/contract.py), on a stand-in backend."""

from __future__ import annotations

import pytest

from scheduling.backends.base import RUNNING, Observation, ObservedJob, ObservedNode
from scheduling.engine.types import Slot
from tests.backends.contract import (
    all_free,
    job_of,
    launch_request,
    polling_settle,
    state_of,
)


class Ticking:
    """Observes a run that is ``running`` from ``starts_at`` on; a clock moved by ``tick``."""

    def __init__(self, starts_at: float) -> None:
        self.now = 0.0
        self.starts_at = starts_at
        self.looks = 0

    def tick(self) -> None:
        self.now += 1.0

    def observe(self) -> Observation:
        self.looks += 1
        jobs = ()
        if self.now >= self.starts_at:
            jobs = (ObservedJob(ref="portal-1-1", job_id=1, state=RUNNING, placement=()),)
        return Observation(now=self.now, nodes=(), jobs=jobs)


def test_settle_returns_the_first_observation_that_satisfies_the_predicate():
    fake = Ticking(starts_at=3.0)
    settle = polling_settle(fake, clock=lambda: fake.now, wait=fake.tick)  # type: ignore[arg-type]
    obs = settle(state_of("portal-1-1", RUNNING), 10.0, "the run")
    assert obs.now == 3.0 and fake.looks == 4
    assert job_of(obs, "portal-1-1").state == RUNNING


def test_settle_does_not_wait_when_the_predicate_already_holds():
    fake = Ticking(starts_at=0.0)
    settle = polling_settle(fake, clock=lambda: fake.now, wait=fake.tick)  # type: ignore[arg-type]
    settle(state_of("portal-1-1", RUNNING), 0.0, "the run")
    assert fake.now == 0.0 and fake.looks == 1


def test_settle_fails_once_the_timeout_has_passed_on_its_clock_naming_what_and_the_unit():
    fake = Ticking(starts_at=100.0)
    settle = polling_settle(
        fake,  # type: ignore[arg-type]
        clock=lambda: fake.now,
        wait=fake.tick,
        unit="virtual s",
    )
    with pytest.raises(pytest.fail.Exception, match="timed out after 5 virtual s waiting for it"):
        settle(state_of("portal-1-1", RUNNING), 5.0, "it")
    assert fake.now == 5.0 and fake.looks == 6


def test_launch_request_names_the_run_after_the_job_and_attempt():
    req = launch_request(7, [Slot("n1", (0, 1))], attempt=2, exclusive=True, duration_s=None)
    assert (req.ref, req.job_id, req.name) == ("portal-7-2", 7, "contract-7")
    assert req.placement == (Slot("n1", (0, 1)),) and req.exclusive_node
    assert req.sim_duration_s is None and req.checkpoint_path == ""


def test_all_free_needs_every_named_node_fully_free():
    def node(name: str, free: tuple[int, ...]) -> ObservedNode:
        return ObservedNode(name, "r", "b", "H100", 80, 8, True, False, "ok", "", False, free)

    obs = Observation(now=0.0, nodes=(node("a", tuple(range(8))), node("b", (0,))), jobs=())
    assert all_free("a")(obs)
    assert not all_free("a", "b")(obs)
    assert all_free("b", gpus=1)(obs)

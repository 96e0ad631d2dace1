"""Threads for the concurrency tests: each on its own database connection, its errors
collected for the test to assert there are none."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from django.db import connection, transaction


def in_thread(errors: list[str], fn: Callable[[], object]) -> threading.Thread:
    """Start ``fn`` in a thread; an exception it raises is appended to ``errors``."""

    def run() -> None:
        try:
            fn()
        except Exception as exc:  # collected: the test asserts there are none
            errors.append(f"{type(exc).__name__}: {exc}")
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


@contextmanager
def cluster_held() -> Iterator[None]:
    """The cluster lock held by another connection (as a cycle under way holds it) for
    the ``with`` block."""
    from scheduling.cluster_lock import try_cluster_lock

    taken, release = threading.Event(), threading.Event()

    def hold() -> None:
        with transaction.atomic():
            assert try_cluster_lock()
            taken.set()
            release.wait(20)
        connection.close()

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert taken.wait(10), "the lock was not taken"
        yield
    finally:
        release.set()
        holder.join(20)


def refused_as_expected(exc: Exception, expected: tuple[str, ...], refused: list[str]) -> None:
    """Note a refusal whose words contain one of ``expected`` (the rules' refusals) in
    ``refused``; anything else is raised again, for the thread's errors."""
    words = "; ".join(exc.messages) if hasattr(exc, "messages") else str(exc)
    if not any(word in words for word in expected):
        raise exc
    refused.append(words)


def drain(admin: object, cycles: int, step_s: float) -> list[tuple]:
    """Run up to ``cycles`` scheduling cycles, ``step_s`` of cluster time apart, until no job
    is active (no one submits now: the backlog drains); returns the jobs still active
    (id, state, held since, pending code), none when every one ended."""
    from scheduling.models import Job
    from scheduling.sim_services import advance_clock, run_cycle_now

    active = Job.objects.filter(state__in=Job.ACTIVE_STATES)
    for _ in range(cycles):
        run_cycle_now(admin)
        if not active.exists():
            return []
        advance_clock(admin, step_s)
    return list(active.values_list("pk", "state", "held_at", "pending_code"))


def cycling(
    admin: object, count: int, step_s: float, cycles: list[int], done: threading.Event
) -> Callable[[], None]:
    """A thread's work for a race: ``count`` scheduling cycles, ``step_s`` of cluster time
    apart (their ids appended to ``cycles``), then ``done`` set for the other threads."""
    from scheduling.sim_services import advance_clock, run_cycle_now

    def loop() -> None:
        for _ in range(count):
            cycles.append(run_cycle_now(admin).pk)
            advance_clock(admin, step_s)
        done.set()

    return loop


def cancelling(
    user: object, pool: list[int], done: threading.Event, seed: int
) -> Callable[[], None]:
    """A thread's work for a race: until ``done``, every 50 ms, a coin toss cancels as
    ``user`` one of the last 8 jobs of ``pool`` still pending or running (one that ended
    meanwhile is refused, and left)."""
    import contextlib
    import random

    from django.core.exceptions import ValidationError

    from scheduling.models import Job
    from scheduling.services import cancel_job

    rng = random.Random(seed)

    def loop() -> None:
        while not done.is_set():
            victim = (Job.objects.filter(pk__in=pool[-8:], state__in=["pending", "running"])
                      .order_by("?").first())  # fmt: skip
            if victim is not None and rng.random() < 0.5:
                with contextlib.suppress(ValidationError):  # it ended meanwhile
                    cancel_job(user, victim.pk)
            done.wait(0.05)

    return loop


def acting_on_waiting(
    pool: list[int],
    act: Callable[[int, int, object], object],
    expected: tuple[str, ...],
    refused: list[str],
    done: threading.Event,
    seed: int,
) -> Callable[[], None]:
    """A thread's work for a race: until ``done``, every 20 ms, ``act(job_id, owner_id,
    rng)`` on one of the last 16 jobs of ``pool`` still pending (an action on a waiting
    job: its earliest start, its queue, its own order); a refusal by the rules (a
    ``ValidationError`` or the loop busy past the wait, its words containing one of
    ``expected``) is noted in ``refused``, anything else raised for the thread's errors."""
    import random

    from django.core.exceptions import ValidationError

    from scheduling.cluster_lock import ClusterBusy
    from scheduling.models import Job

    rng = random.Random(seed)

    def loop() -> None:
        while not done.is_set():
            waiting = list(Job.objects.filter(pk__in=pool[-16:], state="pending")
                           .values_list("pk", "owner_id"))  # fmt: skip
            if waiting:
                try:
                    act(*rng.choice(waiting), rng)
                except (ValidationError, ClusterBusy) as exc:
                    refused_as_expected(exc, expected, refused)
            done.wait(0.02)

    return loop

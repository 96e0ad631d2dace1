"""The live loop's order lets the people of a line take turns (``user_turns``, the ``full``
preset the portal runs): a colleague's job submitted after a burst of someone's jobs starts
in the burst's first cycle, and its place in line says so."""

from __future__ import annotations

import pytest

from tests.drills import cycle, job, make_quotas_roomy, submit

pytestmark = pytest.mark.django_db


def test_a_colleague_s_job_starts_among_a_burst_of_someone_else_s(api, demo):
    make_quotas_roomy()
    admin, me, lead = api("admin"), api("researcher"), api("lead")
    gpus = sum(n["gpus_total"] for n in admin.get("/api/v1/nodes/").json()["results"])
    burst = [submit(me, name=f"sweep-{i}", gpus=8) for i in range(gpus // 8 + 2)]
    mine = submit(lead, name="eval", gpus=8)
    cycle(admin)
    states = [job(me, pk)["state"] for pk in burst]
    assert job(lead, mine)["state"] == "running", job(lead, mine)["pending_reason"]
    assert states.count("running") == gpus // 8 - 1
    # the burst's own jobs keep their order: the first ones started, the last wait
    assert states[: gpus // 8 - 1] == ["running"] * (gpus // 8 - 1)
    waiting = [job(me, pk) for pk in burst if job(me, pk)["state"] == "pending"]
    assert [w["queue_position"] for w in waiting] == list(range(1, len(waiting) + 1))

"""The usage cell of /queues/ reads as English: "1 GPU", not "1 GPUs" (#15, reads well)."""

from __future__ import annotations

import pytest
from django.test import Client

from tests.drills import cycle, make_quotas_roomy, submit

pytestmark = pytest.mark.django_db


def test_a_queue_without_its_own_quota_holding_one_gpu_says_1_gpu(demo, api):
    make_quotas_roomy()
    submit(api("researcher"), name="one", queue="llm-urgent", gpus=1)
    cycle(api("admin"))
    web = Client()
    web.force_login(demo["researcher"])
    page = web.get("/queues/").content.decode()
    assert "1 GPU (no queue quota: the line's applies)" in page
    assert "1 GPUs" not in page
    assert "0 GPUs (no queue quota: the line's applies)" in page  # the other queues

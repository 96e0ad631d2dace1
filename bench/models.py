"""The one table of the bench app: rows of the baseline endpoint (``bench.baseline``)."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class BaselineRow(models.Model):
    """One trivial authenticated insert of ``POST /api/v1/bench/baseline/``: who, and a name.

    ``bench_api`` measures job submissions against these inserts, served by the same stack
    (docs/api.md, "Throughput"). The endpoint exists only on a web server started with
    ``BENCH_ENDPOINTS=1``, so the table stays empty on a normal deployment. No time stamp on
    purpose: the portal stamps in cluster time (one more read); the yardstick stays one
    INSERT.
    """

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    name = models.CharField(max_length=100)

    def __str__(self) -> str:
        return f"baseline row {self.pk} ({self.name})"

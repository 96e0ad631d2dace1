"""What the loop did, for the layers above to watch (``scheduling`` imports none of them).

``plan_applied`` is sent by ``run_cycle`` once a plan's preemptions, starts and verdicts
are written, inside the cycle's transaction, with keyword arguments ``snapshot`` (the
engine's ``Snapshot`` the plan was made from), ``plan`` (the applied ``Plan``) and
``not_launched`` (ids of planned starts the backend could not launch). Receivers run
synchronously and commit or roll back with the cycle; the monitoring app's
(``monitoring.idle_account.record_plan``, connected in ``MonitoringConfig.ready``)
attributes idle GPUs to causes. A plan that breaks an invariant is not applied, and not
sent.
"""

from __future__ import annotations

from django.dispatch import Signal

plan_applied = Signal()

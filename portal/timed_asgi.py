"""The portal's ASGI application with CPU timers on the request path (``bench.request_cpu``).

Loaded instead of ``portal.asgi`` by the workers of ``python -m portal.web --cpu-timers DIR``
(docs/api.md, "Throughput": where a submission's CPU goes). Never in normal operation.
"""

import os
import sys

from bench import request_cpu
from portal.asgi import application

_missing = request_cpu.start(os.environ[request_cpu.ENV_DIR])
if _missing:
    print(f"--cpu-timers: not timed (not found): {', '.join(_missing)}", file=sys.stderr)

__all__ = ["application"]

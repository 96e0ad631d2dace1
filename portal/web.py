"""The web server: ``python -m portal.web [--host H] [--port P] [--workers N]``.

uvicorn serving ``portal.asgi:application``: ``--workers`` processes (default
``WEB_WORKERS``, else one per CPU), each with ``WEB_THREADS`` threads for HTTP and an
event loop for websockets. ``make run``, docker-compose.yml and the tests all start the
web server through this module, so they run what production runs.

``X-Forwarded-For`` and ``X-Forwarded-Proto`` are taken only from the peers listed in
``FORWARDED_ALLOW_IPS`` (the TLS proxy in front: docker-compose.yml, docs/deploy.md),
from no one when it is empty: the client address (rate limits, audit records) is the
peer's own otherwise (docs/security.md).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import uvicorn
from django.core.exceptions import ImproperlyConfigured

from core.env import env_int, env_networks

# A live page sends only small subscribe messages (the consumer refuses more than 4 KiB);
# the server closes a socket whose frame is larger than this (1009) before reading it all.
WS_MAX_BYTES = 64 * 1024


def default_workers() -> int:
    """``WEB_WORKERS`` from the environment, else one process per CPU."""
    try:
        return env_int("WEB_WORKERS", os.cpu_count() or 1, minimum=1, maximum=64)
    except ImproperlyConfigured as exc:
        raise SystemExit(str(exc)) from None


def trusted_proxies() -> list[str]:
    """``FORWARDED_ALLOW_IPS``: the proxy's addresses or networks (empty: trust no one)."""
    try:
        return env_networks("FORWARDED_ALLOW_IPS")
    except ImproperlyConfigured as exc:
        raise SystemExit(str(exc)) from None


APPLICATION = "portal.asgi:application"
TIMED_APPLICATION = "portal.timed_asgi:application"  # --cpu-timers (bench.request_cpu)


def main(argv: list[str] | None = None) -> None:
    """Parse the options and serve the portal until stopped."""
    parser = argparse.ArgumentParser(
        prog="python -m portal.web", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--workers", type=int, default=None, help="processes (WEB_WORKERS)")
    parser.add_argument("--no-access-log", action="store_true", help="do not log each request")
    parser.add_argument(
        "--cpu-timers", metavar="DIR", type=Path,
        help="benchmarks only: time the CPU of each request's steps into DIR "
        "(python -m bench.request_cpu DIR prints the split)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    proxies = trusted_proxies()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    app = APPLICATION
    if args.cpu_timers is not None:
        from bench.request_cpu import ENV_DIR

        args.cpu_timers.mkdir(parents=True, exist_ok=True)
        os.environ[ENV_DIR] = str(args.cpu_timers.resolve())  # the workers inherit it
        app = TIMED_APPLICATION
    uvicorn.run(
        app,
        host=args.host,
        port=args.port,
        workers=args.workers or default_workers(),
        lifespan="off",  # Channels' router has no lifespan handler
        proxy_headers=bool(proxies),
        forwarded_allow_ips=",".join(proxies) or None,
        access_log=not args.no_access_log,
        timeout_graceful_shutdown=5,
        ws_max_size=WS_MAX_BYTES,
    )


if __name__ == "__main__":
    main()

"""Test settings: real PostgreSQL and Redis, started here when not given.

When ``DATABASE_URL`` / ``REDIS_URL`` are unset, throw-away servers are started
in a temporary folder (system binaries when present, else the pip-shipped
ones) and stopped when the test process exits.
"""

import atexit
import os
import shutil
import tempfile
from pathlib import Path

from portal.devservices import Postgres, Redis, free_port


def _scratch_folder() -> Path:
    """A folder for the throw-away servers, removed at exit.

    Made only when a server is started here: the subprocesses the tests start
    (servers, workers, commands) inherit the URLs, and are often stopped by a
    signal, which skips ``atexit``; they would leave empty folders behind.
    """
    folder = Path(tempfile.mkdtemp(prefix="portal-tests-"))
    os.chmod(folder, 0o755)
    atexit.register(shutil.rmtree, folder, True)
    return folder


_GIVEN_REDIS = bool(os.environ.get("REDIS_URL"))
if not os.environ.get("DATABASE_URL") or not os.environ.get("REDIS_URL"):
    _scratch = _scratch_folder()
    if not os.environ.get("DATABASE_URL"):
        _pg = Postgres(_scratch / "pg", free_port()).start()
        atexit.register(_pg.stop)
        os.environ["DATABASE_URL"] = _pg.url
    if not os.environ.get("REDIS_URL"):
        _redis = Redis(_scratch / "redis", free_port()).start()
        atexit.register(_redis.stop)
        os.environ["REDIS_URL"] = _redis.url

# `make test` runs two processes (pytest-xdist): each starts its own servers above. Given
# servers are shared: pytest-django gives each process its own test database, and here each
# gets its own Redis database, so one's cache, locks and channel groups are not the other's.
# Done once, in the test process: the portal processes a test starts inherit the worker's
# name, and must use the Redis URL the test gives them as it is.
_worker = os.environ.get("PYTEST_XDIST_WORKER", "")
if _worker.startswith("gw") and not os.environ.get("PORTAL_TESTS_WORKER_SETTINGS"):
    os.environ["PORTAL_TESTS_WORKER_SETTINGS"] = _worker  # inherited: children skip this
    if _GIVEN_REDIS:
        from urllib.parse import urlsplit, urlunsplit

        _url = urlsplit(os.environ["REDIS_URL"])
        os.environ["REDIS_URL"] = urlunsplit(_url._replace(path=f"/{1 + int(_worker[2:])}"))

os.environ.setdefault("DEBUG", "1")
os.environ.setdefault("SIMULATOR_SPEED", "0")  # virtual time moves only when a test advances it
os.environ.setdefault("SECRET_KEY", "test-secret-key-" + "x" * 50)

from portal.settings import *  # noqa: E402,F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# A web server started by a test may check OpenID Connect sessions sooner than
# OIDC_RECHECK_SECONDS allows (60 s at least): tests/identity/test_session_check_browser.py.
if os.environ.get("TEST_OIDC_RENEW_ID_TOKEN_EXPIRY_SECONDS"):
    OIDC_RENEW_ID_TOKEN_EXPIRY_SECONDS = float(
        os.environ["TEST_OIDC_RENEW_ID_TOKEN_EXPIRY_SECONDS"]
    )

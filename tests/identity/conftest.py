"""Fixtures of the sign-in tests: a real OpenLDAP directory and a real OpenID Connect
provider (``testbeds.py``), each started once per session; the portal configured for them
(in this process with ``override_settings``, or as a web server for Chromium).

The same people and groups exist in both: the portal maps the same group names.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from django.conf import settings
from django.test import override_settings

from tests.identity.testbeds import Directory, OidcProvider, Person, free_port, wait_port

os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # Playwright's loop (TESTBEDS.md)

GROUPS = [
    "portal-admins", "portal-oncall", "llm-team", "llm-leads", "search-rec-team",
    "search-rec-leads", "gpu-users",
]  # fmt: skip
# uid -> (password, groups): the directory and the provider start every test like this.
PEOPLE = {
    "dora": ("dora-directory-pw", {"llm-leads", "gpu-users"}),
    "rick": ("rick-directory-pw", {"search-rec-team", "gpu-users"}),
    "olga": ("olga-directory-pw", {"portal-oncall", "gpu-users"}),
    "boss": ("boss-directory-pw", {"portal-admins", "gpu-users"}),
    "admin": ("admin-directory-pw", {"portal-admins"}),  # same name as the local break-glass admin
    "outsider": ("outsider-directory-pw", set()),
}
# The group mapping, the same for LDAP_* and OIDC_* (docs/deploy.md, "Identity").
MAPPING = {
    "ADMIN_GROUPS": "portal-admins",
    "ONCALL_GROUPS": "portal-oncall",
    "LINE_GROUPS": "llm-team=llm,search-rec-team=search-rec",
    "LEAD_GROUPS": "llm-leads=llm,search-rec-leads=search-rec",
}


def prefixed(prefix: str, **extra: str) -> dict[str, str]:
    return {f"{prefix}_{k}": v for k, v in {**MAPPING, **extra}.items()}


def at_once(actions: list[Callable[[], object]]) -> list[object]:
    """Run ``actions`` in threads released together (each closes its database connection);
    their results in order, or the exception an action raised."""
    from django.db import connection

    start = threading.Barrier(len(actions))
    results: list[object] = [None] * len(actions)

    def run(index: int) -> None:
        start.wait()
        try:
            results[index] = actions[index]()
        except Exception as exc:  # noqa: BLE001 - the caller asserts on it
            results[index] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(actions))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


@pytest.fixture(scope="session")
def scratch() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="identity-tests-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def _directory(scratch: Path) -> Iterator[Directory]:
    people = [Person(uid, pw, set(groups)) for uid, (pw, groups) in PEOPLE.items()]
    directory = Directory(scratch / "ldap", people, GROUPS).start()
    yield directory
    directory.stop()


@pytest.fixture
def directory(_directory: Directory) -> Directory:
    """The running directory, everyone there and in their starting groups."""
    if not _directory.running:
        _directory.start()
    for uid in sorted(_directory.deleted):
        _directory.restore_person(uid)
    for uid, (_, groups) in PEOPLE.items():
        _directory.set_groups(uid, set(groups))
    return _directory


@pytest.fixture(scope="session")
def portal_port() -> int:
    """The port of the portal's web server in the browser tests (the provider must know its
    callback address before it starts)."""
    return free_port()


def _accounts() -> dict[str, dict]:
    return {
        uid: {
            "password": pw.replace("directory", "sso"),
            "email": f"{uid}@example.org",
            "preferred_username": uid,
            "given_name": uid.title(),
            "groups": sorted(groups),
        }
        for uid, (pw, groups) in PEOPLE.items()
    }


@pytest.fixture(scope="session")
def _provider(scratch: Path, portal_port: int) -> Iterator[OidcProvider]:
    callbacks = [
        "http://testserver/oidc/callback/",
        f"http://127.0.0.1:{portal_port}/oidc/callback/",
    ]
    provider = OidcProvider(scratch / "oidc", _accounts(), callbacks).start()
    yield provider
    provider.stop()


@pytest.fixture
def provider(_provider: OidcProvider) -> OidcProvider:
    """The running provider, everyone in their starting groups (password ``<uid>-sso-pw``)."""
    _provider.accounts = _accounts()
    _provider.write_accounts()
    return _provider


def _settings_for(env: dict[str, str]) -> dict:
    from portal.auth.config import ldap_settings, oidc_settings

    values = {**ldap_settings(env), **oidc_settings(env)}
    backends = ["django.contrib.auth.backends.ModelBackend"]
    if values["LDAP_ENABLED"]:
        backends.append("portal.auth.ldap_backend.PortalLDAPBackend")
    if values["OIDC_ENABLED"]:
        backends.append("portal.auth.oidc.PortalOIDCBackend")
    return {**values, "AUTHENTICATION_BACKENDS": backends}


@pytest.fixture
def configure():
    """``configure(env)``: the portal's identity settings as that environment gives them."""
    from portal.auth.oidc import forget_provider

    stack = []

    def apply(env: dict[str, str]) -> None:
        forget_provider()
        override = override_settings(**_settings_for(env))
        override.enable()
        stack.append(override)

    yield apply
    for override in reversed(stack):
        override.disable()
    forget_provider()


@pytest.fixture
def ldap_on(directory, configure) -> Directory:
    configure(directory.portal_env(**prefixed("LDAP")))
    return directory


@pytest.fixture
def oidc_on(provider, configure) -> OidcProvider:
    configure(provider.portal_env(**prefixed("OIDC")))
    return provider


# --- Chromium against the portal's web server (as tests/browser/conftest.py) -------------


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args):
    from tests.browser.conftest import CHROMIUM, CHROMIUM_ARGS

    if not Path(CHROMIUM).exists():
        pytest.fail("Chromium is missing: apt-get install -y chromium (.ci/run does it)")
    return {**browser_type_launch_args, "executable_path": CHROMIUM, "args": CHROMIUM_ARGS}


@pytest.fixture
def identity_env() -> dict[str, str]:
    """More environment for ``identity_server`` (a test module overrides this fixture)."""
    return {}


@pytest.fixture
def identity_server(
    transactional_db, demo, directory, provider, portal_port, scratch, identity_env
) -> Iterator[str]:
    """The portal's web server (portal/web.py) on the test database, with both organization
    sign-ins configured for the test directory and provider, and the demo's local users."""
    db = settings.DATABASES["default"]
    env = dict(os.environ)
    env.update(
        DJANGO_SETTINGS_MODULE="tests.settings",
        DATABASE_URL=f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
        REDIS_URL=settings.REDIS_URL,
        DEBUG="1",
        SIMULATOR_SPEED="0",
        **directory.portal_env(**prefixed("LDAP")),
        **provider.portal_env(**prefixed("OIDC")),
        **identity_env,
    )
    log = (scratch / "portal.log").open("ab")  # kept while the session runs, for a failure
    proc = subprocess.Popen(
        [sys.executable, "-m", "portal.web", "--port", str(portal_port), "--workers", "1"],
        env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        wait_port(portal_port, 60, "the web server", proc)
        yield f"http://127.0.0.1:{portal_port}"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
        time.sleep(0.1)

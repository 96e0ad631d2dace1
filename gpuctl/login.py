"""``gpuctl login``: sign in with your portal password and keep a new API token.

It signs in the way the browser does (``/accounts/login/``, CSRF included), asks
``POST /api/v1/tokens/`` for a named token with an expiry, signs the session out, and
writes ``url:`` and ``token:`` to the config file (``~/.config/gpuctl.yaml``, mode 600;
other keys kept). The portal keeps only a hash of the token; revoke it on the portal's
"API tokens" page. Accounts that sign in only through single sign-on make a token on
that page and put it in the file (or ``GPUCTL_TOKEN``).
"""

from __future__ import annotations

import argparse
import getpass
import os
import socket
import sys
from typing import Any

import requests
import yaml

from gpuctl import __version__
from gpuctl.client import (
    EXIT_AUTH,
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    CliError,
    config_path,
    error_message,
    read_config,
    whole_number,
)


def _write_config(values: dict[str, Any]) -> str:
    """Write the config file, readable by its owner only; its path."""
    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        yaml.safe_dump(values, f, default_flow_style=False, sort_keys=True)
    os.chmod(path, 0o600)  # an existing file keeps its mode on open: narrow it too
    return str(path)


def request_token(
    url: str, username: str, password: str, name: str, days: int, timeout: float = 30.0
) -> dict[str, Any]:
    """Sign in as ``username``, create a token named ``name`` for ``days``, sign out; the
    API's answer (with ``token``, the secret)."""
    session = requests.Session()
    session.headers["User-Agent"] = f"gpuctl/{__version__}"
    login_url = f"{url}/accounts/login/"
    try:
        session.get(login_url, timeout=timeout)
        csrf = session.cookies.get("csrftoken", "")
        answer = session.post(
            login_url,
            data={"username": username, "password": password, "csrfmiddlewaretoken": csrf},
            headers={"Referer": login_url},
            allow_redirects=False,
            timeout=timeout,
        )
        if answer.status_code == 429:
            raise CliError("too many failed sign-ins: wait, then try again", EXIT_REFUSED)
        if answer.status_code not in (301, 302, 303) or "sessionid" not in session.cookies:
            raise CliError("sign-in refused: wrong username or password", EXIT_AUTH)
        headers = {"X-CSRFToken": session.cookies.get("csrftoken", ""), "Referer": login_url}
        made = session.post(
            f"{url}/api/v1/tokens/",
            json={"name": name, "expires_in_days": days},
            headers={**headers, "Accept": "application/json"},
            timeout=timeout,
        )
        session.post(f"{url}/accounts/logout/", headers=headers, timeout=timeout)
    except requests.RequestException as exc:
        raise CliError(
            f"cannot reach the portal at {url}: {type(exc).__name__}", EXIT_UNREACHABLE
        ) from exc
    if made.status_code != 201:
        raise CliError(f"no token: {error_message(made)}", EXIT_REFUSED)
    return made.json()


def cmd_login(args: argparse.Namespace) -> int:
    """``gpuctl login [-u USER] [--name NAME] [--days N] [--password-stdin]``."""
    stored = read_config()
    url = str(args.url or os.environ.get("GPUCTL_URL") or stored.get("url") or "").rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise CliError("give the portal's URL: gpuctl --url https://... login", EXIT_USAGE)
    username = args.username or input(f"Username [{getpass.getuser()}]: ").strip()
    username = username or getpass.getuser()
    if args.password_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    else:
        password = getpass.getpass(f"Password for {username}: ")
    name = args.name or f"gpuctl@{socket.gethostname()}"[:100]
    made = request_token(url, username, password, name, args.days, args.timeout)
    path = _write_config({**stored, "url": url, "token": made["token"]})
    print(
        f"Signed in as {username}: token “{made['name']}” ({made['prefix']}…) "
        f"expires {made['expires_at']}; saved to {path}."
    )
    return EXIT_OK


def add_parser(sub: Any, formatter: Any) -> None:
    """Register ``login`` on gpuctl's subcommands (no token needed to run it)."""
    p = sub.add_parser(
        "login",
        help="sign in with your password and save a new API token",
        description=__doc__,
        formatter_class=formatter,
    )
    p.add_argument("-u", "--username", help="portal username (default: asked)")
    p.add_argument("--name", help="token name (default: gpuctl@HOST)")
    p.add_argument(
        "--days", type=whole_number, default=90, help="days until it expires, 1-365 (90)"
    )
    p.add_argument(
        "--password-stdin", action="store_true", help="read the password from standard input"
    )
    p.set_defaults(func=cmd_login, needs_token=False)

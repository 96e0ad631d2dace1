"""Configuration and the HTTP client: one session, token auth, errors turned into one line.

Configuration, highest precedence first: ``--url`` on the command line, the
environment (``GPUCTL_URL``, ``GPUCTL_TOKEN``), then a YAML file
(``$GPUCTL_CONFIG``, else ``$XDG_CONFIG_HOME/gpuctl.yaml``, else
``~/.config/gpuctl.yaml``) with ``url:`` and ``token:`` keys.
"""

from __future__ import annotations

import argparse
import os
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import requests
import yaml

from gpuctl import __version__

# Exit codes (documented in docs/cli.md and `gpuctl --help`).
EXIT_OK = 0
EXIT_REFUSED = 1  # the portal said no: bad input (400), not allowed (403), unknown (404), a state conflict (409: already cancelled, cordoned, decided)
EXIT_USAGE = 2  # bad command line (argparse) or unreadable job file
EXIT_AUTH = 3  # no token, or the portal did not accept it (401)
EXIT_UNREACHABLE = 4  # no URL configured, or the portal cannot be reached
EXIT_SERVER = 5  # the portal failed (5xx) or answered something that is not its API


PAGE_MAX = 500  # rows per request when listing


class CliError(Exception):
    """A failure to report as one line on stderr, with an exit code."""

    def __init__(self, message: str, code: int = EXIT_REFUSED) -> None:
        super().__init__(message)
        self.code = code


def whole_number(text: str) -> int:
    """An id or count from the command line, in digits 0-9 as the portal takes them:
    ``int`` also reads ``"٧"`` (7), ``"１"`` and ``"1_0"`` (10), so ``gpuctl cancel ٧``
    cancelled job 7. A leading ``-`` is kept for the portal to refuse with its message.
    argparse's ``type`` for ids and counts."""
    digits = text.removeprefix("-")
    if not (digits.isascii() and digits.isdigit()):
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r} (digits 0-9)")
    return int(text)


# Slurm's --time: [days-]hours:minutes:seconds, [days-]hours[:minutes], minutes[:seconds]
_SLURM_TIME = re.compile(
    r"(?:(?P<d>[0-9]+)-(?P<dh>[0-9]+)(?::(?P<dm>[0-9]+)(?::(?P<ds>[0-9]+))?)?"
    r"|(?P<h>[0-9]+):(?P<hm>[0-9]+):(?P<hs>[0-9]+)"
    r"|(?P<m>[0-9]+)(?::(?P<ms>[0-9]+))?)"
)


def slurm_minutes(text: str) -> int:
    """A time limit as Slurm's ``--time`` writes it, in whole minutes (seconds round up, as
    Slurm rounds them): ``90``, ``90:30``, ``4:00:00``, ``2-12``, ``2-12:30``,
    ``2-12:30:00``. Digits 0-9 only. argparse's ``type`` for ``--time``."""
    m = _SLURM_TIME.fullmatch(text.strip()) if text.isascii() else None
    if m is None:
        raise argparse.ArgumentTypeError(
            f"invalid time limit {text!r}: minutes, or Slurm's forms 4:00:00, 2-12, "
            "2-12:30, 2-12:30:00"
        )
    n = {k: int(v) for k, v in m.groupdict().items() if v is not None}
    if "d" in n:
        seconds = ((n["d"] * 24 + n["dh"]) * 60 + n.get("dm", 0)) * 60 + n.get("ds", 0)
    elif "h" in n:
        seconds = (n["h"] * 60 + n["hm"]) * 60 + n["hs"]
    else:
        seconds = n["m"] * 60 + n.get("ms", 0)
    return -(-seconds // 60)


# Slurm's ``--begin`` forms gpuctl reads (``slurm_begin``).
_BEGIN_UNITS = {
    "": 1, "s": 1, "sec": 1, "secs": 1, "second": 1, "seconds": 1,
    "m": 60, "min": 60, "mins": 60, "minute": 60, "minutes": 60,
    "h": 3600, "hour": 3600, "hours": 3600, "d": 86400, "day": 86400, "days": 86400,
    "w": 604800, "week": 604800, "weeks": 604800,
}  # fmt: skip
_BEGIN_NOW = re.compile(r"now(?:\+(?P<n>[0-9]{1,9})(?P<unit>[a-z]*))?")
_BEGIN_CLOCK = re.compile(r"(?P<h>[0-9]{1,2}):(?P<m>[0-9]{2})(?::(?P<s>[0-9]{2}))?")
_BEGIN_DATE = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}(?:T[0-9]{2}:[0-9]{2}(?::[0-9]{2})?)?(?:Z|[+-][0-9]{2}:[0-9]{2})?"
)


def slurm_begin(text: str, now: datetime | None = None) -> str:
    """An earliest start as Slurm's ``--begin`` writes it, as the API's RFC 3339 text:
    ``now+90`` (seconds, as Slurm's default), ``now+90minutes``, ``now+2hours``,
    ``now+1day``; ``16:00`` (today, or tomorrow once that time has passed, as Slurm);
    ``2026-12-08``, ``2026-12-08T09:00[:00]`` (this machine's time zone unless a zone is
    given: ``Z``, ``+09:00``). ``now``: this machine's clock (the portal keeps a time
    already past as no wait). argparse's ``type`` for ``--begin``."""
    clean = text.strip().lower() if text.isascii() else ""
    now = now or datetime.now().astimezone()
    when: datetime | None = None
    if m := _BEGIN_NOW.fullmatch(clean):
        unit = _BEGIN_UNITS.get(m["unit"] or "")
        if unit is not None:
            when = now + timedelta(seconds=int(m["n"] or 0) * unit)
    elif m := _BEGIN_CLOCK.fullmatch(clean):
        h, mi, s = int(m["h"]), int(m["m"]), int(m["s"] or 0)
        if h < 24 and mi < 60 and s < 60:
            when = now.replace(hour=h, minute=mi, second=s, microsecond=0)
            if when <= now:
                when += timedelta(days=1)
    elif _BEGIN_DATE.fullmatch(text.strip()):
        try:
            when = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
        except ValueError:
            when = None
        if when is not None and when.tzinfo is None:
            when = when.astimezone()  # this machine's zone, as a person typed it
    if when is None:
        raise argparse.ArgumentTypeError(
            f"invalid begin time {text!r}: now+90minutes, now+2hours, 16:00, 2026-12-08, "
            "2026-12-08T09:00, or with a zone: 2026-12-08T09:00:00Z"
        )
    return when.replace(microsecond=0).isoformat()


def _ids(text: str, noun: str) -> list[int]:
    """Ids separated by commas or spaces (``12,13`` or ``"12 13"``), each a ``whole_number``."""
    words = text.replace(",", " ").split()
    if not words:
        raise argparse.ArgumentTypeError(f"no {noun} ids (give them as 12,13)")
    return [whole_number(word) for word in words]


def job_ids(text: str) -> list[int]:
    """Job ids separated by commas or spaces (``12,13`` or ``"12 13"``), each a
    ``whole_number``: argparse's ``type`` for ``--after``."""
    return _ids(text, "job")


def array_ids(text: str) -> list[int]:
    """Job-array ids as ``job_ids`` reads job ids: argparse's ``type`` for ``--after-array``."""
    return _ids(text, "array")


def config_path() -> Path:
    if os.environ.get("GPUCTL_CONFIG"):
        return Path(os.environ["GPUCTL_CONFIG"]).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path("~/.config").expanduser())
    return Path(base) / "gpuctl.yaml"


# What reading a YAML file may raise: a file that is not UTF-8, nesting past Python's
# recursion limit, and YAML's own errors, besides the file system's.
YAML_READ_ERRORS = (OSError, UnicodeDecodeError, RecursionError, yaml.YAMLError)


def read_config() -> dict[str, Any]:
    """The config file's mapping (empty when there is none); a usage error if unreadable."""
    path = config_path()
    if not path.exists():
        return {}
    try:
        loaded = yaml.safe_load(path.read_text()) or {}
    except YAML_READ_ERRORS as exc:
        raise CliError(f"cannot read {path}: {exc}", EXIT_USAGE) from exc
    if not isinstance(loaded, dict):
        raise CliError(f"{path} must be a mapping with url: and token:", EXIT_USAGE)
    return loaded


@dataclass(frozen=True)
class Config:
    url: str
    token: str
    timeout: float = 30.0

    @classmethod
    def load(cls, url: str | None = None, timeout: float = 30.0) -> Config:
        path = config_path()
        file_values = read_config()
        url = url or os.environ.get("GPUCTL_URL") or file_values.get("url") or ""
        token = os.environ.get("GPUCTL_TOKEN") or file_values.get("token") or ""
        if not url:
            raise CliError(f"no portal URL: set GPUCTL_URL or put url: in {path}", EXIT_UNREACHABLE)
        if not str(url).startswith(("http://", "https://")):
            raise CliError(
                f"portal URL must start with http:// or https://, not {url!r}", EXIT_USAGE
            )
        if not token:
            raise CliError(
                "no API token: set GPUCTL_TOKEN or put token: in "
                f"{path} (get one with `gpuctl --url URL login`)",
                EXIT_AUTH,
            )
        token = str(token)
        if not (token.isascii() and token.isprintable()) or " " in token:
            # requests would fail on it as a header (a traceback, or "cannot reach the portal")
            raise CliError(
                "the API token has characters no token has (spaces, control or non-ASCII "
                f"characters): copy it again into GPUCTL_TOKEN or {path}",
                EXIT_AUTH,
            )
        return cls(url=str(url).rstrip("/"), token=token, timeout=timeout)


def _flatten_errors(errors: Any, prefix: str = "") -> list[str]:
    """``{"gpus": ["too many"], "x": {"y": ["bad"]}}`` -> ``["gpus: too many", "x.y: bad"]``."""
    if isinstance(errors, dict):
        out: list[str] = []
        for key, value in errors.items():
            # A whole-object error at any depth is the object's own, not a field's.
            whole = str(key) in ("non_field_errors", "detail")
            name = prefix if whole else f"{prefix}.{key}" if prefix else str(key)
            out += _flatten_errors(value, name)
        return out
    if isinstance(errors, list):
        return [m for item in errors for m in _flatten_errors(item, prefix)]
    text = " ".join(str(errors).split())
    return [f"{prefix}: {text}" if prefix else text]


def _json_body(response: requests.Response) -> Any:
    """The body as JSON, or ``{}`` when it is not."""
    try:
        return response.json()
    except ValueError:
        return {}


def error_message(response: requests.Response) -> str:
    """One line out of the portal's error body (``{"errors": ...}`` or ``{"detail": ...}``)."""
    body = _json_body(response)
    if isinstance(body, dict):
        parts = _flatten_errors(body.get("errors", body))
        if parts:
            return "; ".join(parts)
    return f"HTTP {response.status_code} {response.reason}"


class Portal:
    """The REST API of one portal, as the CLI uses it."""

    def __init__(self, config: Config, session: requests.Session | None = None) -> None:
        self.config = config
        self.session = session or requests.Session()
        self.session.headers.update(
            {
                "Authorization": f"Token {config.token}",
                "Accept": "application/json",
                "User-Agent": f"gpuctl/{__version__}",
            }
        )

    def url(self, path: str) -> str:
        return f"{self.config.url}/api/v1/{path.lstrip('/')}"

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        url = path if path.startswith("http") else self.url(path)
        try:
            response = self.session.request(method, url, timeout=self.config.timeout, **kwargs)
        except requests.Timeout as exc:
            raise CliError(
                f"the portal at {self.config.url} did not answer within {self.config.timeout:g}s",
                EXIT_UNREACHABLE,
            ) from exc
        except requests.RequestException as exc:
            raise CliError(
                f"cannot reach the portal at {self.config.url}: {type(exc).__name__}",
                EXIT_UNREACHABLE,
            ) from exc
        return self._decode(response, method, path)

    def _decode(self, response: requests.Response, method: str, path: str) -> Any:
        is_json = response.headers.get("Content-Type", "").startswith("application/json")
        status = response.status_code
        if status == 401:
            raise CliError(f"not authenticated: {error_message(response)} (check GPUCTL_TOKEN)",
                           EXIT_AUTH)  # fmt: skip
        if status == 404 and not is_json:
            # Django's own 404 (an HTML page), not the API's: the path itself is unknown here.
            route = (
                "/api/v1/" + path.split("?")[0].lstrip("/") if not path.startswith("http") else path
            )
            raise CliError(
                f"this portal has no {method.upper()} {route} (an older portal version?)",
                EXIT_REFUSED,
            )
        body = _json_body(response) if status == 503 and is_json else {}
        if isinstance(body, dict) and "errors" in body:
            # the portal answers, the cluster behind it does not (a job's output): say why
            raise CliError(f"the portal cannot answer now (HTTP 503 on {method.upper()} {path}): "
                           f"{error_message(response)}", EXIT_SERVER)  # fmt: skip
        if status >= 500:
            raise CliError(f"the portal failed: HTTP {status} on {method.upper()} {path}",
                           EXIT_SERVER)  # fmt: skip
        if status >= 400:
            what = {403: "not allowed", 404: "not found", 409: "conflict"}.get(status, "refused")
            raise CliError(f"{what}: {error_message(response)}", EXIT_REFUSED)
        if status == 204:
            return None
        if not is_json:
            raise CliError(
                f"unexpected answer from {response.url} (HTTP {status}, not JSON): is GPUCTL_URL "
                "the portal's base URL?",
                EXIT_SERVER,
            )
        try:
            return response.json()
        except ValueError as exc:  # labelled JSON, but not JSON (cut short, a proxy's page)
            raise CliError(
                f"unexpected answer from {response.url} (HTTP {status}): not valid JSON",
                EXIT_SERVER,
            ) from exc

    def get(self, path: str, **params: Any) -> Any:
        clean = {k: v for k, v in params.items() if v is not None and v is not False}
        return self.request("get", path, params=clean)

    def post(self, path: str, body: dict | None = None) -> Any:
        return self.request("post", path, json=body or {})

    def patch(self, path: str, body: dict) -> Any:
        return self.request("patch", path, json=body)

    def fetch_list(
        self, path: str, limit: int | None = None, **params: Any
    ) -> tuple[list[dict], int]:
        """Rows of a paginated list (``limit`` rows at most; None: all) and the total count.

        Pages by ``limit``/``offset`` itself rather than following ``next``, whose host
        may not be the one this client reaches the portal by (proxies).
        """
        rows: list[dict] = []
        total = 0
        while True:
            want = PAGE_MAX if limit is None else max(1, min(limit - len(rows), PAGE_MAX))
            page = self.get(path, limit=want, offset=len(rows) or None, **params)
            if not isinstance(page, dict) or "results" not in page:
                items = page if isinstance(page, list) else []
                return items[:limit] if limit is not None else items, len(items)
            rows += page["results"]
            total = page.get("count", len(rows))
            if not page["results"] or not page.get("next") or len(rows) >= total:
                break
            if limit is not None and len(rows) >= limit:
                break
        return rows, total

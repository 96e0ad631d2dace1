"""Typed, strict parsing of environment variables for settings.

Every parser raises ``ImproperlyConfigured`` with the variable's name and the
offending value, so a bad deployment fails loudly at start-up instead of
running with a silently wrong default.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlparse

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def _raw(name: str, environ: Mapping[str, str] | None) -> str | None:
    env = os.environ if environ is None else environ
    value = env.get(name)
    return None if value is None else value.strip()


def env_bool(name: str, default: bool, environ: Mapping[str, str] | None = None) -> bool:
    """Parse a boolean: 1/true/yes/on or 0/false/no/off (case-insensitive); unset or empty
    is ``default``, as for every other kind here (compose's ``${NAME:-}`` passes an unset
    variable as empty: it must not turn a setting that defaults on off)."""
    raw = _raw(name, environ)
    if raw is None or raw == "":
        return default
    low = raw.lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name} must be a boolean (1/0, true/false, yes/no), got {raw!r}")


def env_str(name: str, default: str, environ: Mapping[str, str] | None = None) -> str:
    raw = _raw(name, environ)
    return default if raw is None or raw == "" else raw


def env_list(name: str, default: list[str], environ: Mapping[str, str] | None = None) -> list[str]:
    """Parse a comma-separated list, dropping empty items; unset or empty is ``default``."""
    raw = _raw(name, environ)
    if raw is None or raw == "":
        return list(default)
    return [item.strip() for item in raw.split(",") if item.strip()]


def _parsed(
    name: str, environ: Mapping[str, str] | None, convert: Callable[[str], Any], what: str
) -> tuple[Any, str | None]:
    """``(convert(raw), raw)``, or ``(None, raw)`` when unset or empty; a value ``convert``
    refuses stops start-up with "``name`` must be ``what``"."""
    raw = _raw(name, environ)
    if raw is None or raw == "":
        return None, raw
    try:
        return convert(raw), raw
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be {what}, got {raw!r}") from None


def env_float(
    name: str,
    default: float,
    environ: Mapping[str, str] | None = None,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
) -> float:
    value, raw = _parsed(name, environ, float, "a number")
    if value is None:
        return default
    if value != value or value in (float("inf"), float("-inf")):
        raise ImproperlyConfigured(f"{name} must be a finite number, got {raw!r}")
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, got {raw!r}")
    if maximum is not None and value > maximum:
        raise ImproperlyConfigured(f"{name} must be at most {maximum}, got {raw!r}")
    return value


def env_int(
    name: str,
    default: int,
    environ: Mapping[str, str] | None = None,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
) -> int:
    """A whole number within [minimum, maximum]; anything else stops start-up naming ``name``."""
    value, raw = _parsed(name, environ, lambda text: int(text.strip()), "a whole number")
    if value is None:
        return default
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise ImproperlyConfigured(f"{name} must be between {minimum} and {maximum}, got {raw!r}")
    return value


def env_choice(
    name: str, default: str, choices: tuple[str, ...], environ: Mapping[str, str] | None = None
) -> str:
    raw = env_str(name, default, environ)
    if raw not in choices:
        raise ImproperlyConfigured(f"{name} must be one of {', '.join(choices)}; got {raw!r}")
    return raw


def env_url(
    name: str, schemes: tuple[str, ...], environ: Mapping[str, str] | None = None
) -> str | None:
    """Parse an optional URL and check its scheme; None when unset."""
    raw = _raw(name, environ)
    if raw is None or raw == "":
        return None
    parsed = urlparse(raw)
    if parsed.scheme not in schemes:
        raise ImproperlyConfigured(
            f"{name} must be a URL with scheme {' or '.join(schemes)}, got {raw!r}"
        )
    if not parsed.hostname and not parsed.path and parsed.scheme != "sqlite":
        raise ImproperlyConfigured(f"{name} has no host: {raw!r}")
    return raw


def env_networks(name: str, environ: Mapping[str, str] | None = None) -> list[str]:
    """A comma-separated list of IP addresses or networks (``10.0.0.5``, ``172.30.0.0/24``);
    empty when unset. ``*`` and host names are refused: trust is given to addresses."""
    items = env_list(name, [], environ)
    for item in items:
        try:
            ipaddress.ip_network(item, strict=False)
        except ValueError:
            raise ImproperlyConfigured(
                f"{name} must list IP addresses or networks (a.b.c.d or a.b.c.d/nn), got {item!r}"
            ) from None
    return items


def env_pairs(name: str, environ: Mapping[str, str] | None = None) -> list[tuple[str, str]]:
    """A comma-separated list of ``key=value`` pairs (``llm-team=llm,llm-leads=llm``); a key
    may repeat. Empty when unset; an item without ``=`` or with an empty side stops start-up.
    The value is what follows the first ``=``."""
    pairs = []
    for item in env_list(name, [], environ):
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise ImproperlyConfigured(f"{name} must list name=value pairs, got {item!r}")
        pairs.append((key.strip(), value.strip()))
    return pairs


def portal_url(environ: Mapping[str, str] | None = None) -> str:
    """``PORTAL_URL``, the portal's address for links in what it sends (alerts, mail),
    without a trailing slash; ``http://localhost:8000`` when unset."""
    return env_str("PORTAL_URL", "http://localhost:8000", environ).rstrip("/")

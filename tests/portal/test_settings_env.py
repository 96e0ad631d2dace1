"""Settings parsing fails loudly on bad values."""

import pytest
from django.core.exceptions import ImproperlyConfigured

from core.env import env_bool, env_choice, env_float, env_list, env_url
from tests.conftest import PRODUCTION_ENV


@pytest.mark.parametrize("raw,expected", [("1", True), ("TRUE", True), ("no", False), ("0", False)])
def test_booleans_parse_common_spellings(raw, expected):
    assert env_bool("DEBUG", not expected, {"DEBUG": raw}) is expected


def test_a_bad_boolean_names_the_variable():
    with pytest.raises(ImproperlyConfigured, match="DEBUG must be a boolean.*'maybe'"):
        env_bool("DEBUG", False, {"DEBUG": "maybe"})


@pytest.mark.parametrize("raw", ["abc", "nan", "inf", "0.1", "99999"])
def test_cycle_period_must_be_a_finite_number_in_range(raw):
    with pytest.raises(ImproperlyConfigured, match="SCHEDULER_CYCLE_SECONDS"):
        env_float("SCHEDULER_CYCLE_SECONDS", 5, {"SCHEDULER_CYCLE_SECONDS": raw},
                  minimum=0.5, maximum=3600)  # fmt: skip


def test_unset_values_take_the_default():
    assert env_float("X", 5.0, {}) == 5.0
    assert env_list("HOSTS", ["a"], {}) == ["a"]
    # Empty is unset too: docker-compose.yml passes an unset variable as "" (${NAME:-}),
    # which turned OIDC_REVOKE (on by default) off and OIDC_SCOPES into no scope at all.
    assert env_bool("OIDC_REVOKE", True, {"OIDC_REVOKE": ""}) is True
    assert env_bool("FLAG", False, {"FLAG": " "}) is False
    assert env_list("OIDC_SCOPES", ["openid"], {"OIDC_SCOPES": ""}) == ["openid"]
    assert env_float("X", 5.0, {"X": ""}) == 5.0
    assert env_list("HOSTS", [], {"HOSTS": "a.example, b.example,"}) == ["a.example", "b.example"]


def test_backend_must_be_a_known_one():
    with pytest.raises(ImproperlyConfigured, match="slurm"):
        env_choice(
            "SCHEDULING_BACKEND",
            "simulator",
            ("simulator", "slurm"),
            {"SCHEDULING_BACKEND": "yarn"},
        )


@pytest.mark.parametrize("raw", ["mysql://x/y", "sqlite:///db", "not a url"])
def test_database_url_must_be_postgres(raw):
    with pytest.raises(ImproperlyConfigured, match="DATABASE_URL"):
        env_url("DATABASE_URL", ("postgres", "postgresql"), {"DATABASE_URL": raw})


def _load_settings(env: dict) -> tuple[int, str]:
    import subprocess
    import sys

    clean = {"PATH": "/usr/bin:/bin", **env}
    proc = subprocess.run(
        [sys.executable, "-c", "import portal.settings"], env=clean, capture_output=True, text=True
    )
    return proc.returncode, proc.stderr


def test_production_without_a_secret_key_refuses_to_start():
    code, err = _load_settings({"DEBUG": "0"})
    assert code != 0 and "SECRET_KEY must be set" in err


def test_production_with_a_weak_secret_key_refuses_to_start():
    code, err = _load_settings({"DEBUG": "0", "SECRET_KEY": "short"})
    assert code != 0 and "at least 50 characters" in err


def test_bad_cycle_period_refuses_to_start():
    code, err = _load_settings({"DEBUG": "1", "SCHEDULER_CYCLE_SECONDS": "-3"})
    assert code != 0 and "SCHEDULER_CYCLE_SECONDS must be at least" in err


def test_check_deploy_is_clean_with_production_settings():
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        env=PRODUCTION_ENV, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr + proc.stdout

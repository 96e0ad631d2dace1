"""The deployment files say what #17 asks (test_compose_runs.py shows they work):
images pinned to exact versions, a healthcheck on every long-running service, `web`
reachable only through the proxy, one beat, `.env.example` documenting every variable,
an image that runs what compose runs from the production requirements only."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest

from tests.deploy.stack import DOT_ENV, ROOT, compose_config

EXACT = {  # image -> its tag must be a full version (x.y or x.y.z), optionally -variant
    "postgres": r"\d+\.\d+(-[a-z0-9.]+)?",
    "redis": r"\d+\.\d+\.\d+(-[a-z0-9.]+)?",
    "caddy": r"\d+\.\d+\.\d+(-[a-z0-9.]+)?",
}


@pytest.fixture(scope="module")
def compose(tmp_path_factory) -> dict:
    return compose_config(DOT_ENV, tmp_path_factory.mktemp("compose"))


def test_external_images_are_pinned_to_exact_versions(compose):
    images = {name: s["image"] for name, s in compose["services"].items() if "build" not in s}
    assert set(images) == {"postgres", "redis", "proxy"}
    for image in images.values():
        repo, _, tag = image.partition(":")
        assert repo in EXACT and re.fullmatch(EXACT[repo], tag), image
    # the pinned PostgreSQL and Redis are the versions the compose check runs (Debian's)
    assert images["postgres"].startswith("postgres:15.")
    assert images["redis"].startswith("redis:7.0.")


def test_the_portal_image_is_built_from_a_pinned_base():
    base = re.search(r"(?m)^FROM (\S+)", (ROOT / "Dockerfile").read_text()).group(1)
    assert re.fullmatch(r"python:3\.11\.\d+-slim-bookworm", base), base


def test_every_long_running_service_has_a_healthcheck(compose):
    for name, service in compose["services"].items():
        if service.get("restart") == "no":
            assert name == "migrate"
            continue
        test = service.get("healthcheck", {}).get("test")
        assert test and test[0] in ("CMD", "CMD-SHELL"), name
    beat = compose["services"]["beat"]
    assert beat["healthcheck"]["test"] == ["CMD", "python", "manage.py", "check_health", "beat"]
    assert beat["deploy"]["replicas"] == 1


def test_web_is_reached_only_through_the_proxy(compose):
    services = compose["services"]
    published = {name for name, s in services.items() if s.get("ports")}
    assert published == {"proxy"}
    assert {str(p["target"]) for p in services["proxy"]["ports"]} == {"80", "443"}
    edge = compose["networks"]["edge"]["ipam"]["config"][0]["subnet"]
    on_edge = {name for name, s in services.items() if "edge" in (s.get("networks") or {})}
    assert on_edge == {"proxy", "web"}
    # X-Forwarded-* are believed from the edge network only (where only the proxy is)
    for name in ("web", "worker", "beat", "migrate"):
        assert services[name]["environment"]["FORWARDED_ALLOW_IPS"] == edge
    proxy = services["proxy"]
    assert proxy["depends_on"] == {"web": {"condition": "service_healthy"}}
    assert (
        proxy["environment"]["REQUEST_MAX_BYTES"]
        == services["web"]["environment"]["REQUEST_MAX_BYTES"]
    )


def test_the_proxy_limit_defaults_to_the_portals(compose):
    from django.conf import settings

    default = compose["services"]["proxy"]["environment"]["REQUEST_MAX_BYTES"]
    assert int(default) == settings.REQUEST_MAX_BYTES == 1024 * 1024
    caddyfile = (ROOT / "deploy/caddy/Caddyfile").read_text()
    assert "max_size {$REQUEST_MAX_BYTES}" in caddyfile


def test_the_image_runs_what_compose_runs_from_the_production_requirements(compose):
    dockerfile = (ROOT / "Dockerfile").read_text()
    cmd = json.loads(re.search(r"(?m)^CMD (\[.*\])$", dockerfile).group(1))
    assert cmd == compose["services"]["web"]["command"]
    installs = re.findall(r"pip install[^\n]*", dockerfile)
    assert installs and all("-r requirements-prod.txt" in line for line in installs)
    assert "requirements.txt" not in dockerfile.replace("requirements-prod.txt", "")


def test_secrets_and_certificates_stay_out_of_the_image():
    ignored = (ROOT / ".dockerignore").read_text().split()
    for path in (".env", "deploy/certs", ".git", ".venv", "tests"):
        assert path in ignored, path


def documented() -> set[str]:
    text = (ROOT / ".env.example").read_text()
    return set(re.findall(r"(?m)^#? ?([A-Z][A-Z0-9_]+)=", text))


# Read from the environment by the portal's code but not settings of a deployment, each
# with where it is explained instead.
NOT_DEPLOYMENT_SETTINGS = {
    "DJANGO_SETTINGS_MODULE": "set by the entry points themselves",
    "PORTAL_HOST": "make run only (portal/devstack.py; README)",
    "PORTAL_PORT": "make run only (portal/devstack.py; README)",
    "REQUEST_CPU_DIR": "set by portal.web --cpu-timers for its own workers (bench)",
    "KUBERNETES_SERVICE_HOST": "set by Kubernetes in a pod (in-cluster detection)",
}
ENV_READS = (
    r'(?:env_[a-z]+|_required)\(\s*"([A-Z][A-Z0-9_]+)"',
    r'os\.environ(?:\.get|\.setdefault)?[\[(]\s*"([A-Z][A-Z0-9_]+)"',
    r'os\.getenv\(\s*"([A-Z][A-Z0-9_]+)"',
    r'"([A-Z][A-Z0-9_]+)" in os\.environ',
    r'(?m)^[A-Z_]*ENV[A-Z_]* = "([A-Z][A-Z0-9_]+)"',  # ENV_VAR = "NAME", read through it
)


def portal_modules() -> list[Path]:
    """The portal's own modules: the packages of the import contracts (pyproject.toml)
    but the gpuctl client, whose variables docs/cli.md lists, and the top-level scripts."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages = set(project["tool"]["importlinter"]["root_packages"]) - {"gpuctl"}
    assert {"portal", "core", "scheduling", "bench"} <= packages
    return [*(p for pkg in sorted(packages) for p in (ROOT / pkg).rglob("*.py")),
            *ROOT.glob("*.py")]  # fmt: skip


def environment_reads() -> dict[str, set[str]]:
    """Every variable the portal's own code reads from the environment -> its files."""
    read: dict[str, set[str]] = {}
    for path in portal_modules():
        relative = path.relative_to(ROOT)
        text = path.read_text()
        names = {name for pattern in ENV_READS for name in re.findall(pattern, text)}
        prefixed = re.findall(r'env_[a-z]+\(\s*f"\{prefix\}(_[A-Z0-9_]+)"', text)
        names |= {f"{kind}{suffix}" for kind in ("LDAP", "OIDC") for suffix in prefixed}
        for name in names:
            read.setdefault(name, set()).add(str(relative))
    return read


def test_env_example_documents_every_variable_the_portal_reads():
    read = environment_reads()
    assert {"SECRET_KEY", "DATABASE_URL", "FORWARDED_ALLOW_IPS", "RETENTION_AUDIT_DAYS",
            "LDAP_LINE_GROUPS", "OIDC_LEAD_GROUPS", "PROMETHEUS_MULTIPROC_DIR",
            "BENCH_ENDPOINTS", "DEMO_PASSWORD", "EMAIL_HOST"} <= set(read)  # fmt: skip
    missing = {
        name: sorted(files)
        for name, files in read.items()
        if name not in documented() and name not in NOT_DEPLOYMENT_SETTINGS
    }
    assert not missing, f"read but not in .env.example: {missing}"


def test_env_example_documents_every_variable_compose_reads():
    text = (ROOT / "docker-compose.yml").read_text()
    used = set(re.findall(r"\$\{([A-Z][A-Z0-9_]+)", text))
    assert {"SECRET_KEY", "POSTGRES_PASSWORD", "PUBLIC_HOST", "EDGE_SUBNET"} <= used
    assert used <= documented(), used - documented()


# Read by the portal, documented, but no setting of a compose deployment's containers.
NOT_IN_CONTAINERS = {
    "BENCH_ENDPOINTS": "the benchmarks' own web server (docs/benchmarks.md)",
    "DEMO_PASSWORD": "make run and seed_demo (README)",
}


def backend_variables() -> set[str]:
    """The Slurm and Kubernetes backends' settings (their docs' tables), without the
    ``PORTAL_*`` a run is given (the job-script contract)."""
    names = set()
    for doc in ("backend-slurm.md", "backend-kubernetes.md"):
        names |= set(
            re.findall(r"(?m)^\| `([A-Z][A-Z0-9_]+)` \|", (ROOT / "docs" / doc).read_text())
        )
    return {n for n in names if not n.startswith("PORTAL_")}


def test_every_setting_reaches_the_portals_containers(compose):
    """docker-compose.yml passes each container only the variables it lists: one left out
    (the provider sweep, the directory filters, every Slurm and Kubernetes setting were)
    is a setting a compose deployment cannot make, whatever .env says."""
    wanted = (set(environment_reads()) | backend_variables()) - set(NOT_DEPLOYMENT_SETTINGS)
    wanted -= set(NOT_IN_CONTAINERS)
    assert {"OIDC_SWEEP", "LDAP_REQUIRED_GROUPS", "SLURM_PARTITION", "KUBECONFIG"} <= wanted
    for name in ("web", "worker", "beat", "migrate"):
        missing = wanted - set(compose["services"][name]["environment"])
        assert not missing, f"{name} is not given {sorted(missing)}"


def test_an_unset_setting_passed_as_empty_keeps_its_default(compose):
    """Compose passes an unset variable as "" (``${NAME:-}``): the portal reads that as
    unset (``core.env``; the backends' ``BackendConfig``), so a setting that defaults on
    stays on. The one whose empty value means something has its default in the file."""
    from core.env import env_bool, env_list

    env = compose["services"]["web"]["environment"]
    assert env["OIDC_REVOKE"] == "" and env_bool("OIDC_REVOKE", True, env) is True
    assert env["OIDC_SWEEP"] == "" and env_bool("OIDC_SWEEP", True, env) is True
    assert env_list("OIDC_SCOPES", ["openid"], env) == ["openid"]
    assert env["KUBERNETES_RDMA_RESOURCE"] == "rdma/hca"


def test_env_example_documents_the_backends_variables():
    names = set()
    for doc in ("backend-slurm.md", "backend-kubernetes.md"):
        names |= set(
            re.findall(r"(?m)^\| `([A-Z][A-Z0-9_]+)` \|", (ROOT / "docs" / doc).read_text())
        )
    # PORTAL_* are what a run is given (the job-script contract), not the portal's settings
    names = {n for n in names if not n.startswith("PORTAL_")}
    assert {"SLURM_CONF", "KUBECONFIG"} <= names
    assert names <= documented(), names - documented()


def test_the_proxy_runs_its_start_script_with_posix_sh(compose):
    proxy = compose["services"]["proxy"]
    assert proxy["command"] == ["/bin/sh", "/etc/caddy/start.sh"]
    mounts = {v.split(":")[1]: v.split(":") for v in proxy["volumes"]}  # source:target[:ro]
    assert mounts["/etc/caddy"] == [str(ROOT / "deploy/caddy"), "/etc/caddy", "ro"]
    assert mounts["/certs"] == [str(ROOT / "deploy/certs"), "/certs", "ro"]
    script = (ROOT / "deploy/caddy/start.sh").read_text()
    assert script.startswith("#!/bin/sh\n")  # the caddy image is Alpine: no bash
    code = [line for line in script.splitlines() if not line.lstrip().startswith("#")]
    assert not [line for line in code if "[[" in line or "$(<" in line or "function " in line]

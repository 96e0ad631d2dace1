"""The backend registry (scheduling/backends/__init__.py) and the factory that opens the
configured backend with the Django settings (scheduling/backend_factory.py).

- every registered dotted path names a ``ClusterBackend`` subclass of that name;
- an unknown name is refused with the start-up check's own words (settings validate
  SCHEDULING_BACKEND against the same registry);
- modules are imported lazily: choosing the simulator imports neither the Slurm nor
  the Kubernetes module (nor the ``kubernetes`` client);
- ``get_backend`` hands each backend the Django settings (then the environment).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from scheduling.backends import (
    BACKENDS,
    UnknownBackendError,
    backend_class,
    unknown_backend_message,
)
from scheduling.backends.base import ClusterBackend

REAL_BACKEND_MODULES = (
    "scheduling.backends.slurm",
    "scheduling.backends.slurm_cli",
    "scheduling.backends.kubernetes",
    "scheduling.backends.volcano",
    "kubernetes",
)


def python(code: str, **env: str) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter (a clean ``sys.modules``)."""
    return subprocess.run(
        [sys.executable, "-c", code],
        env={"PATH": "/usr/bin:/bin", "DEBUG": "1", **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


# ---------------------------------------------------------------------------------------
# The registry
# ---------------------------------------------------------------------------------------
def test_the_registry_lists_the_three_backends_simulator_first():
    assert list(BACKENDS) == ["simulator", "slurm", "kubernetes"]


@pytest.mark.parametrize("name", list(BACKENDS))
def test_every_registered_path_resolves_to_a_cluster_backend_subclass_of_that_name(name):
    cls = backend_class(name)
    assert f"{cls.__module__}.{cls.__qualname__}" == BACKENDS[name]
    assert issubclass(cls, ClusterBackend) and cls is not ClusterBackend
    assert cls.name == name
    assert not getattr(cls, "__abstractmethods__", None), "every interface method is there"


@pytest.mark.parametrize("name", ["yarn", "", "Simulator", " slurm", "k8s", None])
def test_an_unknown_name_is_refused_with_the_start_up_wording(name):
    with pytest.raises(UnknownBackendError) as err:
        backend_class(name)
    assert str(err.value) == (
        f"SCHEDULING_BACKEND must be one of simulator, slurm, kubernetes; got {name!r}"
    )
    assert isinstance(err.value, LookupError)


def test_a_path_that_is_not_a_backend_class_is_refused(monkeypatch):
    monkeypatch.setitem(BACKENDS, "broken", "scheduling.backends.base.run_ref")
    with pytest.raises(TypeError, match="not a ClusterBackend subclass"):
        backend_class("broken")


def test_a_path_to_a_missing_module_fails_on_first_use_not_at_import(monkeypatch):
    monkeypatch.setitem(BACKENDS, "gone", "scheduling.backends.no_such_module.Backend")
    with pytest.raises(ModuleNotFoundError):
        backend_class("gone")


# ---------------------------------------------------------------------------------------
# Lazy imports (fresh interpreters)
# ---------------------------------------------------------------------------------------
def test_importing_the_registry_imports_no_backend_and_no_engine():
    """portal/settings.py imports it at start-up: it must stay light."""
    proc = python(
        "import json, sys; import scheduling.backends as b; "
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith("
        "('scheduling.', 'kubernetes', 'django')))))"
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == ["scheduling.backends"]


def real_backend_modules_after(code: str, **env: str) -> list[str]:
    """Which of the real backends' modules ``code`` imported, in a fresh interpreter."""
    proc = python(
        f"import json, sys\n{code}\n"
        f"print(json.dumps([m for m in {list(REAL_BACKEND_MODULES)!r} if m in sys.modules]))",
        **env,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_choosing_the_simulator_imports_neither_slurm_nor_kubernetes():
    code = "from scheduling.backends import backend_class; backend_class('simulator')"
    assert real_backend_modules_after(code) == []


def test_the_portal_on_the_simulator_imports_neither_slurm_nor_kubernetes():
    """Django set up, the factory imported and asked which class to open: still lazy."""
    code = (
        "import django; django.setup()\n"
        "from django.conf import settings\n"
        "from scheduling import backend_factory\n"
        "backend_factory.backend_class(settings.SCHEDULING_BACKEND)"
    )
    assert real_backend_modules_after(code, DJANGO_SETTINGS_MODULE="portal.settings") == []


def test_choosing_slurm_imports_slurm_only():
    code = "from scheduling.backends import backend_class; backend_class('slurm')"
    assert real_backend_modules_after(code) == [
        "scheduling.backends.slurm",
        "scheduling.backends.slurm_cli",
    ]


def test_choosing_kubernetes_imports_no_slurm_and_the_client_only_when_opened():
    code = "from scheduling.backends import backend_class; backend_class('kubernetes')"
    assert real_backend_modules_after(code) == [
        "scheduling.backends.kubernetes",
        "scheduling.backends.volcano",
    ]


# ---------------------------------------------------------------------------------------
# Start-up validation uses the registry
# ---------------------------------------------------------------------------------------
def test_an_unknown_backend_refuses_to_start_with_the_same_message():
    proc = python("import portal.settings", SCHEDULING_BACKEND="yarn")
    assert proc.returncode != 0
    assert "ImproperlyConfigured: " + unknown_backend_message("yarn") in proc.stderr, proc.stderr


def test_every_registered_backend_is_accepted_at_start_up():
    code = (
        "import importlib, os, json\n"
        "names = []\n"
        f"for name in {list(BACKENDS)!r}:\n"
        "    os.environ['SCHEDULING_BACKEND'] = name\n"
        "    import portal.settings as s; s = importlib.reload(s)\n"
        "    names.append(s.SCHEDULING_BACKEND)\n"
        "print(json.dumps(names))\n"
    )
    proc = python(code)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == list(BACKENDS)


# ---------------------------------------------------------------------------------------
# The factory: the configured backend, with the Django settings as its configuration
# ---------------------------------------------------------------------------------------
@pytest.mark.django_db
def test_get_backend_opens_the_simulator_with_its_database_store(settings):
    from scheduling.backend_factory import get_backend
    from scheduling.backends.simulator import SimulatorBackend
    from scheduling.sim_state import DatabaseSimulatorStore

    settings.SCHEDULING_BACKEND = "simulator"
    backend = get_backend(1_800_000_000.0, advance=False)
    assert isinstance(backend, SimulatorBackend)
    assert isinstance(backend.store, DatabaseSimulatorStore)
    assert backend.now() == 1_800_000_000.0
    assert backend.speed == settings.SIMULATOR_SPEED


def test_get_backend_hands_slurm_the_django_settings(settings, monkeypatch):
    from scheduling.backend_factory import get_backend
    from scheduling.backends.slurm import SlurmBackend

    settings.SCHEDULING_BACKEND = "slurm"
    settings.SLURM_CONF = "/etc/slurm-lab/slurm.conf"
    settings.SLURM_PARTITION = "train"
    settings.SLURM_SBATCH_ARGS = "--qos=high"
    settings.PREEMPTION_GRACE_SECONDS = 45.0
    monkeypatch.setenv("SLURM_PARTITION", "from-env-loses")
    monkeypatch.setenv("SLURM_WORKDIR", "/from-env")
    backend = get_backend()
    assert isinstance(backend, SlurmBackend)
    assert backend.cli.env == {"SLURM_CONF": "/etc/slurm-lab/slurm.conf"}
    assert backend.partition == "train", "a Django setting beats the environment"
    assert backend.workdir == "/from-env", "the environment fills what settings leave unset"
    assert (backend.sbatch_args, backend.grace_s) == (["--qos=high"], 45.0)
    backend.close()


def test_get_backend_hands_kubernetes_the_django_settings(settings, tmp_path, monkeypatch):
    from scheduling.backend_factory import get_backend
    from scheduling.backends.kubernetes import KubernetesBackend

    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    config = tmp_path / "config"
    config.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: lab\n"
        "clusters:\n- name: lab\n  cluster:\n    server: https://10.1.2.3:6443\n"
        "users:\n- name: portal\n  user:\n    token: abc123\n"
        "contexts:\n- name: lab\n  context:\n    cluster: lab\n    user: portal\n"
    )
    settings.SCHEDULING_BACKEND = "kubernetes"
    settings.KUBECONFIG = str(config)
    settings.KUBERNETES_NAMESPACE = "gpu-portal"
    settings.KUBERNETES_VOLCANO_QUEUE = "training"
    settings.KUBERNETES_RDMA_RESOURCE = ""
    settings.PREEMPTION_GRACE_SECONDS = 61.0
    backend = get_backend()
    try:
        assert isinstance(backend, KubernetesBackend)
        assert backend.api_client.configuration.host == "https://10.1.2.3:6443"
        assert backend.namespace == "gpu-portal"
        s = backend.job_settings
        assert (s.queue, s.grace_s, s.rdma_resource) == ("training", 61, None)
    finally:
        backend.close()


def test_get_backend_refuses_a_name_set_after_start_up(settings):
    from scheduling.backend_factory import get_backend

    settings.SCHEDULING_BACKEND = "yarn"
    with pytest.raises(UnknownBackendError, match="got 'yarn'"):
        get_backend()


def test_the_settings_mapping_reads_django_settings_at_lookup(settings):
    from scheduling.backend_factory import SettingsValues

    values = SettingsValues()
    settings.SLURM_PARTITION = "later"
    assert values["SLURM_PARTITION"] == "later"
    assert values.get("PORTAL_NO_SUCH_SETTING") is None
    assert values.get("installed_apps") is None, "only upper-case names are settings"
    settings.SLURM_PARTITION = None
    assert "SLURM_PARTITION" not in values
    assert "SCHEDULING_BACKEND" in set(values) and len(values) > 10

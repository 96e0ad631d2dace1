"""Backend configuration (scheduling/backends/config.py, scheduling/backend_factory.py):
the values the factory passes win, then the environment, then the default; the real
backends read theirs through it.
"""

from __future__ import annotations

import pytest

from scheduling.backends.config import BackendConfig, BackendContext
from scheduling.backends.slurm import DEMO_JOB_SCRIPT, SlurmBackend
from scheduling.backends.slurm_cli import SlurmCLI


@pytest.mark.parametrize(
    "values, environ, expected",
    [
        ({"X": "from settings"}, {"X": "from env"}, "from settings"),
        ({}, {"X": "from env"}, "from env"),
        ({"X": None}, {"X": "from env"}, "from env"),
        ({"X": ""}, {"X": "from env"}, "from env"),
        ({"X": ""}, {"X": ""}, "default"),
        ({}, {}, "default"),
        ({"X": 0}, {"X": "7"}, 0),  # a falsy number is a value
        ({"X": False}, {}, False),
        ({"Y": "other"}, {"Z": "other"}, "default"),
    ],
    ids=["settings win", "env next", "None is unset", "empty is unset", "both empty",
         "neither", "zero is a value", "False is a value", "other names"],
)  # fmt: skip
def test_a_value_comes_from_settings_then_the_environment_then_the_default(
    values, environ, expected
):
    assert BackendConfig(values, environ).get("X", "default") == expected


@pytest.mark.parametrize(
    "values, environ, expected",
    [({"X": ""}, {"X": "env"}, ""), ({}, {"X": ""}, ""), ({}, {}, "default")],
    ids=["empty setting kept", "empty env kept", "unset"],
)
def test_keep_empty_makes_an_empty_string_a_value(values, environ, expected):
    assert BackendConfig(values, environ).get("X", "default", keep_empty=True) == expected


@pytest.mark.parametrize(
    "given, expected", [("kwarg", "kwarg"), ("", ""), (0, 0), (None, "setting")]
)
def test_pick_prefers_the_given_keyword_argument_unless_it_is_none(given, expected):
    assert BackendConfig({"X": "setting"}, {}).pick(given, "X", "default") == expected


def test_the_environment_is_read_at_lookup_time(monkeypatch):
    config = BackendConfig()
    monkeypatch.setenv("PORTAL_TEST_VALUE", "later")
    assert config.get("PORTAL_TEST_VALUE") == "later"
    monkeypatch.delenv("PORTAL_TEST_VALUE")
    assert config.get("PORTAL_TEST_VALUE", "gone") == "gone"


def test_a_context_defaults_to_no_values_now_and_advancing():
    context = BackendContext()
    assert (context.wall_now, context.advance, context.simulator_store) == (None, True, None)
    assert context.config.get("PORTAL_SURELY_UNSET_NAME", 5) == 5


# ---------------------------------------------------------------------------------------
# The Slurm backend reads its configuration through it
# ---------------------------------------------------------------------------------------
def slurm(values: dict, environ: dict | None = None, **kwargs) -> SlurmBackend:
    return SlurmBackend(config=BackendConfig(values, environ or {}), **kwargs)


def test_slurm_takes_every_value_from_the_config(tmp_path):
    script = tmp_path / "train.sh"
    script.write_text("#!/bin/bash\ntrain\n")
    backend = slurm({
        "SLURM_CONF": "/etc/slurm-lab/slurm.conf", "SLURM_PARTITION": "gpu",
        "SLURM_TIMEOUT": "12", "SLURM_JOB_SCRIPT": str(script), "SLURM_JOB_OUTPUT": "/o/%j",
        "SLURM_WORKDIR": "/scratch", "SLURM_SBATCH_ARGS": "--qos=high --account='ml team'",
        "PREEMPTION_GRACE_SECONDS": 90.0, "SLURM_DEFAULT_GPU_MODEL": "A100",
        "SLURM_DEFAULT_GPU_MEMORY_GB": "40",
    })  # fmt: skip
    assert backend.partition == "gpu" and backend.cli.partition == "gpu"
    assert backend.cli.env == {"SLURM_CONF": "/etc/slurm-lab/slurm.conf"}
    assert backend.cli.timeout == 12.0
    assert backend.job_script == "#!/bin/bash\ntrain\n"
    assert (backend.job_output, backend.workdir) == ("/o/%j", "/scratch")
    assert backend.sbatch_args == ["--qos=high", "--account=ml team"]
    assert backend.grace_s == 90.0
    assert (backend.default_gpu_model, backend.default_gpu_memory_gb) == ("A100", 40)


def test_slurm_defaults_without_any_configuration():
    backend = slurm({})
    assert backend.partition is None and backend.cli.env is None
    assert backend.job_script == DEMO_JOB_SCRIPT
    assert (backend.job_output, backend.workdir, backend.sbatch_args) == ("/dev/null", "/tmp", [])
    assert backend.grace_s == 300.0 and backend.default_gpu_model == "unknown"


def test_slurm_keyword_arguments_beat_the_config_and_the_config_beats_the_environment():
    backend = slurm({"SLURM_WORKDIR": "/from-settings", "PREEMPTION_GRACE_SECONDS": 90},
                    {"SLURM_WORKDIR": "/from-env", "SLURM_JOB_OUTPUT": "/env-out"},
                    cli=SlurmCLI(env={}), grace_s=15)  # fmt: skip
    assert backend.workdir == "/from-settings"
    assert backend.job_output == "/env-out"
    assert backend.grace_s == 15


def test_slurm_open_uses_the_contexts_config():
    backend = SlurmBackend.open(BackendContext(BackendConfig({"SLURM_PARTITION": "p"}, {})))
    assert isinstance(backend, SlurmBackend) and backend.partition == "p"

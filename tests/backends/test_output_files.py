"""Reading run output files safely (``scheduling/backends/output_files.py``), and the Slurm
backend's ``read_output`` without Slurm (the run gone from ``squeue``, output discarded).
The same against a real Slurm: ``tests/backends/test_slurm_output.py``."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from scheduling.backends.base import NoOutput, OutputTail
from scheduling.backends.output_files import OutputFiles, UnsafePath, read_tail
from scheduling.backends.slurm import SlurmBackend
from scheduling.backends.slurm_cli import SlurmCLI


@pytest.fixture
def logs(tmp_path: Path) -> Path:
    (tmp_path / "logs").mkdir()
    return tmp_path / "logs"


def files_in(logs: Path, pattern: str = "%x-%j.out") -> OutputFiles:
    files = OutputFiles.configure(str(logs / pattern), "/tmp")
    assert files is not None
    return files


def test_the_tail_of_a_file_and_whether_it_was_cut(logs):
    data = bytes(range(256)) * 10
    (logs / "a.out").write_bytes(data)
    assert read_tail(str(logs / "a.out"), logs, 100) == (data[-100:], True)
    assert read_tail(str(logs / "a.out"), logs, len(data)) == (data, False)
    assert read_tail(str(logs / "a.out"), logs, 10_000) == (data, False)


def test_a_symlink_leading_out_of_the_directory_is_refused(logs, tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("root:x:0:0")
    (logs / "job.out").symlink_to(secret)  # the file itself a link: not followed
    with pytest.raises(OSError):
        read_tail(str(logs / "job.out"), logs, 100)
    (logs / "sub").symlink_to(tmp_path)  # a directory on the way: followed, then refused
    with pytest.raises(UnsafePath, match="leads out of the output directory"):
        read_tail(str(logs / "sub" / "secret"), logs, 100)
    out = files_in(logs).tail(str(logs / "sub" / "secret"), 100)
    assert isinstance(out, NoOutput) and "root:x" not in out.reason
    assert isinstance(files_in(logs).tail(str(logs / "job.out"), 100), NoOutput)
    assert isinstance(files_in(logs).tail(str(logs / ".." / "secret"), 100), NoOutput)


def test_a_fifo_or_a_device_is_refused_without_blocking(logs):
    os.mkfifo(logs / "pipe.out")
    started = time.monotonic()
    with pytest.raises(UnsafePath, match="not a regular file"):
        read_tail(str(logs / "pipe.out"), logs, 100)
    assert time.monotonic() - started < 1
    with pytest.raises(UnsafePath):
        read_tail("/dev/zero", Path("/dev"), 100)


def test_a_missing_file_says_so(logs):
    out = files_in(logs).tail(str(logs / "nothing.out"), 100)
    assert isinstance(out, NoOutput) and "no output file" in out.reason


@pytest.mark.parametrize("pattern", [None, "", "/dev/null", " /dev/null "])
def test_discarded_output_is_not_configured(pattern):
    assert OutputFiles.configure(pattern, "/tmp") is None


def test_the_directory_is_the_patterns_fixed_part_and_relative_means_the_workdir(logs):
    assert files_in(logs, "%u/%x-%j.out").root == logs.resolve()
    files = OutputFiles.configure("out/%x.log", str(logs))
    assert files is not None and files.root == (logs / "out").resolve()
    assert files.pattern == str(logs / "out" / "%x.log")


def test_patterns_expand_as_sbatch_does(logs):
    files = files_in(logs, "%x-%j-%u-%5j-%%.out")
    assert files.expand(name="portal-4-2", user="svc", job_id=17) == str(
        logs / "portal-4-2-17-svc-00017-%.out"
    )
    assert files_in(logs, "%N-%j.out").expand(name="r", user="u", job_id=1) is None
    assert files.expand(name="a[b]", user="u", job_id=None) == str(
        logs / "a[[]b]-[0-9]*-u-[0-9]*-%.out"
    )


def test_without_a_job_id_the_newest_matching_file(logs):
    files = files_in(logs)
    (logs / "portal-4-2-10.out").write_text("old")
    os.utime(logs / "portal-4-2-10.out", (1, 1))
    (logs / "portal-4-2-12.out").write_text("new")
    (logs / "portal-4-22-13.out").write_text("another run")
    assert files.newest(name="portal-4-2", user="u") == str(logs / "portal-4-2-12.out")
    assert files.newest(name="portal-5-1", user="u") is None


# -- the Slurm backend without Slurm ---------------------------------------------------------------


def slurm_without_the_run(logs: Path, monkeypatch, pattern: str = "%x-%j.out") -> SlurmBackend:
    backend = SlurmBackend(cli=SlurmCLI(env={}), job_output=str(logs / pattern), workdir="/tmp")
    monkeypatch.setattr(backend, "_newest_job_named", lambda ref: None)  # forgotten (MinJobAge)
    return backend


def test_slurm_reads_a_run_it_no_longer_lists_from_the_pattern(logs, monkeypatch):
    (logs / "portal-4-2-31.out").write_bytes(b"epoch 1\n\x1b[31mTraceback\x1b[0m\n")
    out = slurm_without_the_run(logs, monkeypatch).read_output("portal-4-2", 14)
    assert isinstance(out, OutputTail) and out.truncated
    assert out.data == b"Traceback\x1b[0m\n" and out.source == str(logs / "portal-4-2-31.out")


def test_slurm_says_why_it_has_no_output(logs, monkeypatch):
    out = slurm_without_the_run(logs, monkeypatch).read_output("portal-4-3", 100)
    assert isinstance(out, NoOutput) and "no file matches" in out.reason
    node_pattern = slurm_without_the_run(logs, monkeypatch, "%N-%j.out")
    assert isinstance(node_pattern.read_output("portal-4-3", 100), NoOutput)
    discarded = SlurmBackend(cli=SlurmCLI(env={}))  # SLURM_JOB_OUTPUT: /dev/null by default
    out = discarded.read_output("portal-4-3", 100)
    assert isinstance(out, NoOutput) and "SLURM_JOB_OUTPUT is /dev/null" in out.reason

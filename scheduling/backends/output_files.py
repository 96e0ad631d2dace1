"""Reading the tail of a run's output file safely: the Slurm backend's ``read_output``.

The portal host reads files that user jobs wrote (``sbatch --output`` on shared
storage), so a job controls their content and, through its working directory, maybe
their place. The rules:

- only inside the directory ``SLURM_JOB_OUTPUT`` names (its leading components up to the
  first ``%`` code): a path, or a symbolic link anywhere along it, that leads out of it is
  refused (checked on the file actually opened, ``/proc/self/fd``, so swapping a link in
  between does not help);
- only regular files (no FIFO that blocks, no device), opened without blocking;
- only the last ``max_bytes`` are read, whatever the file's size.

Also the expansion of sbatch's filename codes for a run whose Slurm job is gone
(``%j`` unknown then: the newest file matching the pattern with any job id).
"""

from __future__ import annotations

import glob
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from scheduling.backends.base import NoOutput, OutputAnswer, OutputTail

DISCARDED = ("", "/dev/null")
# sbatch --output codes (``man sbatch``, "filename pattern"): %% and an optional width.
_CODE = re.compile(r"%(\d*)([%AaJjNnstux])")
NOT_KEPT = NoOutput(
    "SLURM_JOB_OUTPUT is /dev/null: Slurm keeps no output of the portal's runs "
    "(set it to a file pattern on storage the portal host can read)"
)


class UnsafePath(Exception):
    """A path the portal refuses to read (outside the output directory, not a file)."""


@dataclass(frozen=True)
class OutputFiles:
    """Where runs write their output: ``pattern`` (absolute) and the directory it may
    resolve in (``root``, real path)."""

    pattern: str
    root: Path

    @classmethod
    def configure(cls, pattern: str | None, workdir: str) -> OutputFiles | None:
        """From ``SLURM_JOB_OUTPUT`` (relative to ``SLURM_WORKDIR``, as sbatch takes it);
        None when output is discarded."""
        if not pattern or pattern.strip() in DISCARDED:
            return None
        full = os.path.join(workdir, pattern)
        fixed = []
        for part in Path(full).parent.parts:
            if "%" in part:
                break
            fixed.append(part)
        return cls(pattern=full, root=Path(os.path.realpath(Path(*fixed))))

    def expand(self, *, name: str, user: str, job_id: int | None) -> str | None:
        """The pattern with ``%x`` (name), ``%u`` (user) and ``%j``/``%J``/``%A`` (the job
        id); with ``job_id`` None, a glob matching any job id (the rest escaped). None when
        the pattern uses a code that depends on where the run ran (``%N``, ``%n``, ``%t``,
        ``%s``, ``%a``)."""
        any_id = job_id is None
        literal = glob.escape if any_id else str
        out, pos = [], 0
        for m in _CODE.finditer(self.pattern):
            out.append(literal(self.pattern[pos : m.start()]))
            pos = m.end()
            width, letter = m.groups()
            if letter in "jJA":
                out.append("[0-9]*" if any_id else str(job_id).zfill(int(width or 0)))
                continue
            value = {"%": "%", "x": name, "u": user}.get(letter)
            if value is None:
                return None
            out.append(literal(value))
        out.append(literal(self.pattern[pos:]))
        return "".join(out)

    def newest(self, *, name: str, user: str) -> str | None:
        """The newest file matching the pattern for run ``name`` with any job id."""
        found = self.expand(name=name, user=user, job_id=None)
        if found is None:
            return None
        paths = [p for p in glob.glob(found) if os.path.isfile(p)]
        return max(paths, key=lambda p: (os.path.getmtime(p), p)) if paths else None

    def tail(self, path: str, max_bytes: int) -> OutputAnswer:
        """The last ``max_bytes`` of ``path``, or why it cannot be read."""
        try:
            data, truncated = read_tail(path, self.root, max_bytes)
        except UnsafePath as err:
            return NoOutput(str(err))
        except FileNotFoundError:
            return NoOutput(f"no output file {path} (yet)")
        except OSError as err:
            return NoOutput(f"cannot read {path}: {err.strerror or err}")
        return OutputTail(data=data, truncated=truncated, source=path)


def _opened_path(fd: int, path: str) -> str:
    """The real path of the file open as ``fd`` (Linux: /proc; elsewhere ``realpath``)."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return os.path.realpath(path)


def read_tail(path: str, root: Path, max_bytes: int) -> tuple[bytes, bool]:
    """The last ``max_bytes`` of the regular file ``path`` inside ``root`` and whether
    the file was longer. Raises :class:`UnsafePath` or ``OSError``."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NOCTTY", 0)
    fd = os.open(path, flags)
    try:
        real = Path(_opened_path(fd, path))
        if real != root and root not in real.parents:
            raise UnsafePath(f"{path} leads out of the output directory {root}: not read")
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UnsafePath(f"{path} is not a regular file: not read")
        start = max(0, info.st_size - max_bytes)
        os.lseek(fd, start, os.SEEK_SET)
        chunks, left = [], max_bytes
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 16))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks), start > 0
    finally:
        os.close(fd)

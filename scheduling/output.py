"""A job's output (the tail of a run's stdout/stderr), read from the backend for a person.

"My job failed, why?": the page ``/jobs/<id>/output/``, the API
``GET /api/v1/jobs/<id>/output/`` and ``gpuctl logs`` all read it here. The rules:

- **Who**: :func:`scheduling.permissions.may_read_output` (the owner, a team lead of
  the job's line, on-call, admins). The caller finds the job with the selectors first (a
  job the user may not see is a 404 there); one they may see but not troubleshoot is
  ``PermissionDenied`` here.
- **Which run**: ``attempt`` 1 .. ``job.attempt`` (runs launched so far), default the
  latest; the backend's name of it is ``run_ref(job, attempt)``.
- **How much**: :data:`DEFAULT_BYTES`, at most :data:`MAX_BYTES` (bad values:
  ``ValidationError``, a 400).
- **How long**: the backend is asked in a small pool of threads and waited for at most
  :data:`TIMEOUT_S`; no answer in time, or a backend error, is :class:`OutputUnavailable`
  (a 503 saying so), never a 500.
- **What is shown**: bytes decoded as UTF-8 (bad bytes replaced) and made displayable
  (``core.security.displayable_text``: terminal escapes removed, control and bidi
  characters written out). Templates still escape it; nothing marks it safe.

Read-only: the simulator is read as its last save left it (``read_only_backend``).
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import PermissionDenied, ValidationError

from core.security import displayable_text
from scheduling.backend_factory import read_only_backend
from scheduling.backends.base import BackendError, NoOutput, run_ref
from scheduling.models import Job
from scheduling.permissions import OUTPUT_READERS, may_read_output

logger = logging.getLogger(__name__)

DEFAULT_BYTES = 64 * 1024
MAX_BYTES = 1024 * 1024
TIMEOUT_S = 5.0
# Backend calls that outlive their timeout keep a thread until they return: at most this
# many, so a hung cluster cannot pile up threads (further reads wait, then time out).
_POOL = ThreadPoolExecutor(max_workers=4, thread_name_prefix="job-output")


class OutputUnavailable(Exception):
    """The backend could not answer now (down, slow, refused): try again later (503)."""


@dataclass(frozen=True)
class JobOutput:
    """What a person reads: ``text`` (displayable), whether it is only the end
    (``truncated``), where it came from (``source``), and ``reason`` when there is none."""

    job_id: int
    state: str  # the job's, when read (``gpuctl logs -f`` stops once it has ended)
    attempt: int | None  # the run read; None: the job has not run
    attempts: int  # runs launched so far (1 .. attempts may be asked for)
    text: str
    truncated: bool
    source: str
    reason: str = ""

    def as_dict(self) -> dict[str, Any]:
        """The API's body (``docs/api.md``, "Job output")."""
        return {
            "job": self.job_id, "state": self.state, "attempt": self.attempt, "attempts": self.attempts,
            "text": self.text, "truncated": self.truncated, "source": self.source,
            "reason": self.reason or None,
        }  # fmt: skip


def decode_output(data: bytes, truncated: bool) -> str:
    """Bytes a program wrote, as displayable text. A tail cut inside a UTF-8 character
    starts at the next one (no replacement character for what was cut away)."""
    if truncated:
        skip = 0
        while skip < min(3, len(data)) and 0x80 <= data[skip] < 0xC0:
            skip += 1
        data = data[skip:]
    return displayable_text(data.decode("utf-8", errors="replace"))


def check_request(job: Job, attempt: int | None, max_bytes: int) -> int | None:
    """The attempt to read (None: the job has not run), or ``ValidationError`` naming the
    parameter (``attempt``, ``bytes``)."""
    if not 1 <= max_bytes <= MAX_BYTES:
        raise ValidationError({"bytes": [f"between 1 and {MAX_BYTES} (1 MiB)"]})
    if attempt is None:
        return job.attempt or None
    if job.attempt == 0:
        raise ValidationError({"attempt": ["the job has not started a run yet"]})
    if not 1 <= attempt <= job.attempt:
        raise ValidationError({"attempt": [f"between 1 and {job.attempt} (its runs so far)"]})
    return attempt


def read_job_output(
    user: Any, job: Job, *, attempt: int | None = None, max_bytes: int = DEFAULT_BYTES
) -> JobOutput:
    """The last ``max_bytes`` of run ``attempt`` (default: the latest) of ``job``, a job
    ``user`` may see (found with the selectors). Raises ``PermissionDenied``,
    ``ValidationError`` or :class:`OutputUnavailable`."""
    if not may_read_output(user, job):
        raise PermissionDenied(f"{OUTPUT_READERS} may read a job's output")
    chosen = check_request(job, attempt, max_bytes)
    base = {"job_id": job.pk, "state": job.state, "attempts": job.attempt}
    if chosen is None:
        return JobOutput(**base, attempt=None, text="", truncated=False, source="",
                         reason="the job has not started a run yet")  # fmt: skip
    answer = _ask_backend(run_ref(job.pk, chosen), max_bytes, job.checkpoint_path)
    if isinstance(answer, NoOutput):
        return JobOutput(**base, attempt=chosen, text="", truncated=False, source="",
                         reason=answer.reason)  # fmt: skip
    return JobOutput(**base, attempt=chosen, text=decode_output(answer.data, answer.truncated),
                     truncated=answer.truncated, source=answer.source)  # fmt: skip


def _ask_backend(ref: str, max_bytes: int, checkpoint_path: str) -> Any:
    """The backend's ``read_output`` answer within :data:`TIMEOUT_S`."""
    try:
        with read_only_backend() as backend:
            future = _POOL.submit(
                backend.read_output, ref, max_bytes, checkpoint_path=checkpoint_path
            )
            try:
                return future.result(timeout=TIMEOUT_S)
            except FutureTimeout:
                raise OutputUnavailable(
                    f"the cluster did not answer within {TIMEOUT_S:g} s; try again shortly"
                ) from None
    except OutputUnavailable:
        raise
    except BackendError as exc:
        raise OutputUnavailable(f"the cluster could not be read: {exc}") from exc
    except Exception as exc:  # a backend's bug must not become a 500 for the reader
        logger.exception("reading the output of %s failed", ref)
        raise OutputUnavailable(
            f"reading the output failed ({type(exc).__name__}); try again later"
        ) from exc

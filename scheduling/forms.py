"""Forms of the researcher pages: submit a job, the resource estimator, the job list filters.

The submit form checks types and bounds only (the same ``scheduling.limits`` as the API
serializer); the business rules (queue access, tier ceiling, job shape, shared-storage
checkpoints) are ``scheduling.services``' and their errors are mapped back onto the form.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.core.exceptions import NON_FIELD_ERRORS, ValidationError
from django.db.models import QuerySet

from core.query_forms import PageNumberField, QueryForm
from core.security import is_ascii_number
from quotas.models import Queue, Tier
from scheduling import arrays, estimator, limits
from scheduling.array_services import parse_spec
from scheduling.models import Job, JobArray
from scheduling.services import JobRequest

TRI_STATE = {"": None, "yes": True, "no": False}
NULLABLE = {"tier", "gpus_per_node", "gpu_memory_gb", "rdma", "preemptible",
            "estimated_runtime_minutes", "time_limit_minutes", "sim_duration_minutes",
            "begin_at"}  # fmt: skip


def _tri_state(value: str) -> bool | None:
    return TRI_STATE.get(value)


def initial_like(job: Job, node_size: int) -> dict[str, Any]:
    """The submit form's values for a new job like ``job`` ("Submit a job like this one").

    What the submission left to a default (the queue's tier, RDMA for multi-node jobs,
    preemptible below core, GPUs per node derived from the size) stays the default, so
    changing the size or the queue on the copy changes them too; what was chosen is
    copied as chosen. Runtime hints are copied; the job's history (state, retries,
    preemptions) is not."""
    multi_node = job.gpus_per_node is not None and job.gpus > job.gpus_per_node
    derived_per_node = job.gpus if job.gpus <= node_size else node_size
    default_preemptible = Tier.rank(job.tier) < Tier.rank(Tier.CORE)
    values: dict[str, Any] = {
        "name": job.name,
        "queue": str(job.queue_id),
        "tier": "" if job.tier == job.queue.tier else job.tier,
        "gpus": job.gpus,
        "gpus_per_node": "" if job.gpus_per_node == derived_per_node else job.gpus_per_node,
        "gpu_memory_gb": job.gpu_memory_gb or "",
        "rdma": "" if job.rdma == multi_node else ("yes" if job.rdma else "no"),
        "exclusive_node": job.exclusive_node,
        "avoid_inference": job.avoid_inference,
        "preemptible": ""
        if job.preemptible == default_preemptible
        else ("yes" if job.preemptible else "no"),
        "max_retries": job.max_retries,
        "checkpoint_path": job.checkpoint_path,
        "checkpoint_interval_minutes": job.checkpoint_interval_minutes,
        "estimated_runtime_minutes": job.estimated_runtime_minutes or "",
        "time_limit_minutes": job.time_limit_minutes or "",
        "model_name": job.model_name,
        "sim_duration_minutes": job.sim_duration_minutes or "",
    }
    return values


class JobSubmitForm(forms.Form):
    """Every field of API.md's job submission, with labels and help text."""

    name = forms.CharField(
        label="Job name", max_length=limits.NAME_MAX, strip=True,
        help_text="A short name you will recognise, e.g. llama-7b-sft-run3 (1 to 100 characters).",
    )  # fmt: skip
    queue = forms.CharField(
        label="Queue", max_length=80, widget=forms.Select,
        help_text="Only the queues of your business lines are listed. The queue sets the "
        "highest tier your job may have.",
    )  # fmt: skip
    tier = forms.ChoiceField(
        label="Priority tier", required=False,
        choices=[("", "The queue's tier (default)"), *Tier.choices],
        help_text="Never above the queue's tier. Urgent > core > fine-tuning > experiment.",
    )  # fmt: skip
    gpus = forms.IntegerField(
        label="GPUs in total", min_value=1, max_value=limits.GPUS_MAX,
        help_text="Whole GPUs for the whole job. Jobs larger than one node use whole nodes.",
    )  # fmt: skip
    gpus_per_node = forms.IntegerField(
        label="GPUs per node", min_value=1, max_value=limits.GPUS_PER_NODE_MAX, required=False,
        help_text="Leave empty to derive it: up to 8 on one node, whole nodes above that. "
        "The total must split evenly.",
    )  # fmt: skip
    gpu_memory_gb = forms.IntegerField(
        label="Minimum GPU memory (GB)", min_value=1, max_value=limits.GPU_MEMORY_GB_MAX,
        required=False,
        help_text="Only GPUs with at least this much memory. The estimator fills it in.",
    )  # fmt: skip
    rdma = forms.TypedChoiceField(
        label="RDMA between nodes", required=False, coerce=_tri_state, empty_value=None,
        choices=[("", "Default: yes when multi-node"), ("yes", "Yes, RDMA nodes only"),
                 ("no", "No")],
        help_text="Multi-node training needs RDMA to be fast.",
    )  # fmt: skip
    exclusive_node = forms.BooleanField(
        label="Whole nodes to itself", required=False,
        help_text="Nothing else may share its nodes (e.g. a 4-GPU job takes a whole 8-GPU node).",
    )  # fmt: skip
    avoid_inference = forms.BooleanField(
        label="Avoid nodes serving online inference", required=False,
        help_text="Never co-locate with online inference traffic.",
    )  # fmt: skip
    preemptible = forms.TypedChoiceField(
        label="Preemptible", required=False, coerce=_tri_state, empty_value=None,
        choices=[("", "Default for the tier: yes below core"), ("yes", "Yes"), ("no", "No")],
        help_text="A preemptible job may borrow idle capacity beyond quota and may be "
        "checkpointed and paused for higher-priority work.",
    )  # fmt: skip
    max_retries = forms.IntegerField(
        label="Automatic retries", min_value=0, max_value=limits.MAX_RETRIES_MAX, initial=3,
        required=False,
        help_text="Restarts after a failure, from the last checkpoint (0 to 10).",
    )  # fmt: skip
    checkpoint_path = forms.CharField(
        label="Checkpoint location", max_length=limits.CHECKPOINT_PATH_MAX, required=False,
        help_text="Shared storage only, e.g. nfs://… or s3://… — never a node's local disk.",
    )  # fmt: skip
    checkpoint_interval_minutes = forms.IntegerField(
        label="Checkpoint every (minutes)", min_value=1, max_value=limits.CHECKPOINT_INTERVAL_MAX,
        initial=60, required=False,
        help_text="E.g. 60 for pre-training, 120 for small runs. Progress since the last "
        "checkpoint is lost on failure.",
    )  # fmt: skip
    estimated_runtime_minutes = forms.IntegerField(
        label="Your runtime estimate (minutes)", min_value=1, max_value=limits.RUNTIME_MAX_MINUTES,
        required=False,
        help_text="Optional. Short jobs may start early in gaps (backfill); the predictor may "
        "override it from history.",
    )  # fmt: skip
    time_limit_minutes = forms.IntegerField(
        label="Time limit (minutes)", min_value=1, max_value=limits.RUNTIME_MAX_MINUTES,
        required=False,
        help_text="Optional, as Slurm's --time: the longest one run may last. A run that "
        "reaches it is asked to checkpoint and stop, and the job fails, with no retry. With a "
        "limit, the scheduler never predicts a run longer, so it can start sooner in a gap.",
    )  # fmt: skip
    begin_at = forms.DateTimeField(
        label="Not before", required=False,
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
        error_messages={"invalid": "not a date and time"},
        help_text="Optional, as Slurm's --begin: the job does not start before this time (in "
        "your time zone), e.g. tonight, after a deadline or a maintenance. It waits without "
        "holding a place in the queue, and its wait counts from then.",
    )  # fmt: skip
    model_name = forms.CharField(
        label="Model name", max_length=limits.MODEL_NAME_MAX, required=False,
        help_text="Optional, e.g. llama-7b: nodes that recently ran it are preferred and "
        "runtimes are predicted from its history.",
    )  # fmt: skip
    after = forms.CharField(
        label="Start after jobs", required=False, max_length=400,
        help_text="Optional: ids of jobs that must all succeed first, e.g. 12, 13 (at most "
        f"{limits.AFTER_MAX}). If one of them fails or is cancelled, this job is cancelled "
        "(unless it starts once they have ended or failed, below).",
    )  # fmt: skip
    after_arrays = forms.CharField(
        label="Start after arrays", required=False, max_length=400,
        help_text="Optional: ids of job arrays every task of which must succeed first, e.g. "
        f"42, 43 (at most {limits.AFTER_ARRAYS_MAX}). If one of their tasks fails for good or "
        "is cancelled, this job is cancelled (unless it starts once they have ended or failed, "
        "below).",
    )  # fmt: skip
    after_condition = forms.ChoiceField(
        label="Start once they have", required=False, choices=Job.AfterCondition.choices,
        initial=Job.AfterCondition.SUCCEEDED,
        help_text="What the jobs and arrays above must have done first. Ended: succeeded, "
        "failed or cancelled, whichever; this job then waits for them all to end and is never "
        "cancelled for their outcome (e.g. a cleanup or report job that must run even if "
        "training failed). Failed or been cancelled: it runs only if they all did (an array: "
        "all its tasks ended, not all succeeded), and is cancelled if one succeeds (e.g. a "
        "fallback run, or an alert).",
    )  # fmt: skip
    singleton = forms.BooleanField(
        label="One at a time by name", required=False,
        help_text="Waits for your older jobs of the same name that are still waiting or "
        "running to end, whatever the outcome, as Slurm's --dependency=singleton: submit a "
        "run's next parts under one name and they run one after another.",
    )  # fmt: skip
    array = forms.CharField(
        label="Array", required=False, max_length=arrays.SPEC_MAX, strip=True,
        help_text="Run many copies that differ by index, as Slurm's --array: 0-99, 1,3,5-9 "
        "or 0-99%10 (at most 10 at once). Each task gets PORTAL_ARRAY_TASK_ID.",
    )  # fmt: skip
    after_corresponding = forms.CharField(
        label="Each task after the same task of arrays", required=False, max_length=400,
        help_text="Optional, with Array: ids of job arrays, e.g. 42; task 7 of this array "
        "then starts once task 7 of each has succeeded (or ended, as chosen above), not once "
        "the whole array has, as Slurm's aftercorr.",
    )  # fmt: skip
    sim_duration_minutes = forms.IntegerField(
        label="Simulated true runtime (minutes)", min_value=1,
        max_value=limits.RUNTIME_MAX_MINUTES, required=False,
        help_text="Simulator only, for drills: how long the job really runs (hidden from the "
        "scheduler). Left empty, it is drawn at random.",
    )  # fmt: skip

    # The submit page's fieldsets, (legend, field names) in page order; every field is in one.
    FIELDSETS = (
        ("What and where", ("name", "queue", "tier", "preemptible")),
        ("Resources", ("gpus", "gpus_per_node", "gpu_memory_gb", "rdma", "exclusive_node",
                       "avoid_inference")),
        ("Failures and checkpoints", ("max_retries", "checkpoint_path",
                                      "checkpoint_interval_minutes")),
        ("Hints for the scheduler", ("estimated_runtime_minutes", "time_limit_minutes",
                                     "model_name", "sim_duration_minutes")),
        ("Pipeline", ("after", "after_arrays", "after_condition", "singleton", "begin_at")),
        ("Many copies (a job array)", ("array", "after_corresponding")),
    )  # fmt: skip

    # The fields that decide where, whether and when a job can run (the runtime estimate and
    # the model feed the runtime prediction, which decides backfill): the what-if's input.
    FEASIBILITY_FIELDS = (
        "queue", "tier", "gpus", "gpus_per_node", "gpu_memory_gb", "rdma", "exclusive_node",
        "avoid_inference", "preemptible", "estimated_runtime_minutes", "time_limit_minutes",
        "model_name", "after", "after_arrays", "after_condition", "singleton", "array", "after_corresponding",
        "begin_at",
    )  # fmt: skip
    # The what-if's query: those, and the name (a singleton waits for the jobs of its name;
    # left empty, the what-if answers for an unnamed job)
    FEASIBILITY_QUERY = (*FEASIBILITY_FIELDS, "name")

    def __init__(self, *args: Any, queues: list[Queue], simulator: bool = True, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.queues = queues
        self.fields["queue"].widget.choices = [("", "Choose a queue…")] + [
            (str(q.pk), f"{q.name} — {q.get_nature_display()}, tier {q.tier}") for q in queues
        ]
        if not simulator:
            del self.fields["sim_duration_minutes"]

    def fieldsets(self) -> list[tuple[str, list[forms.BoundField]]]:
        """``FIELDSETS`` as bound fields, leaving out those this form dropped (the simulator's)."""
        return [
            (legend, [self[name] for name in names if name in self.fields])
            for legend, names in self.FIELDSETS
        ]

    def clean_after(self) -> list[int]:
        """Job ids separated by commas or spaces, digits 0-9 only; which jobs they may be is
        the service's rule (``services.check_after``)."""
        return _ids(self.cleaned_data["after"], "a job id", "12, 13")

    def clean_after_arrays(self) -> list[int]:
        """Array ids, as ``after``'s job ids; which arrays they may be is the service's rule
        (``services.check_after_arrays``)."""
        return _ids(self.cleaned_data["after_arrays"], "an array id", "42, 43")

    def clean_after_corresponding(self) -> list[int]:
        """Array ids, as ``after_arrays``'; that they need an array, and which arrays they
        may be, are the service's rules (``services.corresponding_tasks``)."""
        return _ids(self.cleaned_data["after_corresponding"], "an array id", "42, 43")

    def clean_after_condition(self) -> str:
        """One of ``Job.AfterCondition`` (the choice checks it); not given (a query without
        it): the default, succeeded. Whether it may be ended is the service's rule
        (``services.check_dependencies``: only with jobs or arrays to wait for)."""
        return self.cleaned_data["after_condition"] or Job.AfterCondition.SUCCEEDED

    def clean_array(self) -> str:
        """The array's spec as given, or empty for a single job; a spec that names no
        indices is refused with the service's words (``array_services.parse_spec``)."""
        spec = self.cleaned_data["array"]
        if spec:
            try:
                parse_spec(spec)
            except ValidationError as exc:
                raise ValidationError(exc.message_dict["array"]) from None
        return spec

    def job_request(self) -> JobRequest:
        """The service's request from a valid form (the array's spec is not part of it)."""
        data = dict(self.cleaned_data)
        data.pop("array", None)
        data["tier"] = data.get("tier") or None
        data.setdefault("sim_duration_minutes", None)
        # Left empty: the API's defaults (JobRequest's).
        return JobRequest(**{k: v for k, v in data.items() if v is not None or k in NULLABLE})

    def feasibility_request(self) -> JobRequest | None:
        """A request for the what-if when the fields that matter are valid (the name and
        the other fields may still be missing)."""
        self.is_valid()
        if any(name in self.errors for name in self.FEASIBILITY_FIELDS if name != "array"):
            return None
        data = {name: self.cleaned_data.get(name) for name in self.FEASIBILITY_FIELDS}
        data.pop("array")  # asked apart: ``feasibility_array``
        if not data["queue"] or not data["gpus"]:
            return None
        data["tier"] = data["tier"] or None
        data["exclusive_node"] = bool(data["exclusive_node"])
        data["avoid_inference"] = bool(data["avoid_inference"])
        data["model_name"] = data["model_name"] or ""
        data["after"] = data["after"] or ()
        data["after_arrays"] = data["after_arrays"] or ()
        data["after_corresponding"] = data["after_corresponding"] or ()
        data["after_condition"] = data["after_condition"] or Job.AfterCondition.SUCCEEDED
        data["singleton"] = bool(data["singleton"])
        return JobRequest(name=self.cleaned_data.get("name") or "(unnamed)", **data)

    def feasibility_array(self) -> str | None:
        """The array's spec for the what-if (its tasks said together), None for one job; one
        the form refused as given, for the what-if to refuse in the service's words."""
        if "array" in self.errors:
            return str(self.data.get("array") or "") or None
        return self.cleaned_data.get("array") or None

    def add_service_errors(self, exc: ValidationError) -> None:
        """Put the service's field errors on their fields (others on the form)."""
        errors = exc.message_dict if hasattr(exc, "error_dict") else {None: exc.messages}
        for field, messages in errors.items():
            target = field if field in self.fields else None
            for message in messages:
                said = (
                    message
                    if target or field in (None, NON_FIELD_ERRORS)
                    else f"{field}: {message}"
                )
                self.add_error(target, said)


def _ids(value: str, what: str, example: str) -> list[int]:
    """Ids separated by commas or spaces, digits 0-9 only, each 1 to ``limits.JOB_ID_MAX``
    (a bigint: a larger number names nothing), or a ValidationError naming the first bad one
    as ``what`` it is not."""
    words = value.replace(",", " ").split()
    for word in words:
        if not is_ascii_number(word) or int(word) > limits.JOB_ID_MAX or int(word) < 1:
            raise ValidationError(f"not {what}: {word[:20]!r} (give ids like {example})")
    return [int(word) for word in words]


class EstimatorForm(forms.Form):
    """Inputs of the resource estimator (P6); ``estimate_input()`` gives the pure input."""

    params = forms.CharField(
        label="Model size (parameters)", max_length=20, initial="7B",
        help_text="E.g. 7B, 70B, 1.3B or 350M.",
    )  # fmt: skip
    precision = forms.ChoiceField(
        label="Precision", choices=list(estimator.PRECISIONS.items()), initial="bf16",
        help_text="Mixed precision keeps an fp32 master copy of the weights for the optimizer.",
    )  # fmt: skip
    optimizer = forms.ChoiceField(
        label="Optimizer", choices=list(estimator.OPTIMIZERS.items()), initial="adamw",
        help_text="Adam/AdamW keep two fp32 moments (8 bytes per parameter), SGD one, "
        "Adafactor almost none.",
    )  # fmt: skip
    zero_stage = forms.TypedChoiceField(
        label="Sharding (ZeRO / FSDP)", coerce=int, initial=0,
        choices=list(estimator.ZERO_STAGES.items()),
        help_text="Sharding splits these across the data-parallel GPUs.",
    )  # fmt: skip
    data_parallel = forms.IntegerField(
        label="Data-parallel degree", min_value=1, max_value=estimator.DATA_PARALLEL_MAX,
        initial=1, help_text="How many GPUs hold a replica (or a shard) of the model.",
    )  # fmt: skip
    seq_len = forms.IntegerField(
        label="Sequence length (tokens)", min_value=1, max_value=estimator.SEQ_LEN_MAX,
        initial=4096,
    )  # fmt: skip
    micro_batch = forms.IntegerField(
        label="Micro-batch per GPU", min_value=1, max_value=estimator.MICRO_BATCH_MAX, initial=1,
        help_text="Sequences per GPU per forward pass (before gradient accumulation).",
    )  # fmt: skip
    hidden_size = forms.IntegerField(
        label="Hidden size", min_value=estimator.HIDDEN_MIN, max_value=estimator.HIDDEN_MAX,
        required=False, help_text="Optional: derived from the model size when empty.",
    )  # fmt: skip
    num_layers = forms.IntegerField(
        label="Layers", min_value=1, max_value=estimator.LAYERS_MAX, required=False,
        help_text="Optional: derived from the model size when empty.",
    )  # fmt: skip
    activation_checkpointing = forms.BooleanField(
        label="Activation checkpointing", required=False,
        help_text="Recompute activations in the backward pass: far less memory, about a "
        "third more compute.",
    )  # fmt: skip

    def clean_params(self) -> float:
        try:
            value = estimator.parse_params(self.cleaned_data["params"])
        except ValueError as exc:
            raise ValidationError(str(exc)) from None
        if not estimator.PARAMS_MIN <= value <= estimator.PARAMS_MAX:
            raise ValidationError("between 1M and 10T parameters")
        return value

    def estimate_input(self) -> estimator.EstimateInput:
        return estimator.EstimateInput(**self.cleaned_data)


class JobFilterForm(QueryForm):
    """Filters of the job list and its page number, all optional (empty: any). A bad value
    (an unknown state, a queue the user may not see, a page that is not a number) is an
    error the page shows with a 400 and no jobs, never a list that ignores it."""

    state = forms.ChoiceField(
        label="State", required=False, choices=[("", "Any state"), *Job.State.choices],
        error_messages={"invalid_choice": "unknown state “%(value)s”; one of "
                                          + ", ".join(Job.State.values)},
    )  # fmt: skip
    queue = forms.TypedChoiceField(
        label="Queue", required=False, coerce=int, empty_value=None,
        error_messages={"invalid_choice": "no queue “%(value)s” among those you may see "
                                          "(give its id, as the list below offers)"},
    )  # fmt: skip
    mine = forms.ChoiceField(
        label="Whose jobs", required=False,
        choices=[("1", "Only mine"), ("0", "All I can see")],
        error_messages={"invalid_choice": "“%(value)s” is neither 1 (only mine) nor 0 (all)"},
    )  # fmt: skip
    held = forms.ChoiceField(
        label="On hold", required=False,
        choices=[("", "Held or not"), ("1", "Only held"), ("0", "Not held")],
        error_messages={"invalid_choice": "“%(value)s” is neither 1 (only held) nor 0 (not held)"},
    )  # fmt: skip
    name = forms.CharField(
        label="Named", required=False, max_length=limits.NAME_MAX,
        help_text="Exactly this job name, e.g. every part of one run.",
    )  # fmt: skip
    # The tasks of one job array (its page links here); kept by the Filter button.
    array = forms.CharField(label="Array", required=False, widget=forms.HiddenInput)
    # Not drawn (the Filter button starts again at page 1); only checked. Beyond the last
    # page is the last page, as the list may have shrunk since the link was made.
    page = PageNumberField()

    def __init__(self, *args: Any, queues: list[Queue], arrays: QuerySet[JobArray], **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.fields["queue"].choices = [("", "Any queue")] + [(q.pk, q.name) for q in queues]
        self.arrays = arrays

    def clean_array(self) -> JobArray | None:
        """The array whose tasks to list, among those the user may see (``arrays``); one
        they may not see reads as one that does not exist."""
        value = self.cleaned_data["array"]
        if not value:
            return None
        number = is_ascii_number(value) and len(value) <= 18  # a bigint, never an overflow
        array = self.arrays.filter(pk=int(value)).first() if number else None
        if array is None:
            raise ValidationError(f"no array “{value[:20]}” among those you may see")
        return array


class ArrayPageForm(QueryForm):
    """The array page's query: its tasks' page number, nothing else."""

    page = PageNumberField()


class ArrayBoundForm(forms.Form):
    """The most tasks of an array to run at once, or empty for no bound; its range (1 to
    the array's size) is the service's rule (``array_services.set_max_running``)."""

    max_running = forms.CharField(
        label="Most tasks at once", required=False, max_length=6, strip=True,
        help_text="A whole number of tasks, or empty for no bound. A lower bound stops no "
        "running task; a higher one starts more at the next cycle.",
    )  # fmt: skip

    def clean_max_running(self) -> int | None:
        value = self.cleaned_data["max_running"]
        if not value:
            return None
        if not is_ascii_number(value):
            raise ValidationError("a whole number of tasks (digits 0-9), or empty for no bound")
        return int(value)


class BeginTimeForm(forms.Form):
    """A waiting job's new earliest start (Slurm's ``scontrol update StartTime=``), in the
    viewer's zone, or empty for none; its rules, and the reason's, are the service's
    (``begin_time_services.change_begin_time``)."""

    begin_at = forms.DateTimeField(
        label="Not before", required=False,
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
        error_messages={"invalid": "not a date and time"},
        help_text="In your time zone; empty: none, it queues from now.",
    )  # fmt: skip

"""``Job.state`` is assigned in exactly one module: ``scheduling.transitions.set_state``.

A scan of the source tree (the AST of every production module) for the ways a job's
state can be written: an assignment to ``<obj>.state``, ``setattr(<obj>, "state", ...)``,
and ``.update(state=...)`` on a queryset. Other objects have a ``state`` too; each one
allowed below is named with what it is. The pure simulator core and the replay have
their own job objects (not models) and are not scanned.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("core", "scheduling", "quotas", "monitoring", "portal", "demo", "bench", "replay")
WRITER = "scheduling/transitions.py"
NOT_SCANNED = ("scheduling/simcore/", "replay/")

# Objects with a ``state`` of their own, by the expression the code writes them through.
OTHER_STATES = {
    "node": "scheduling.models.Node: ready, cordoned, draining, down, unhealthy",
    "req": "quotas.models.QuotaRequest (its own machine: quotas/transitions.py)",
    "self.row": "the simulator's saved state (SimulatorState.state, a JSON document)",
    "row": "the simulator's saved state (SimulatorState.state, a JSON document)",
    "window": "scheduling.models.MaintenanceWindow: scheduled, active, done, cancelled",
}
# Querysets whose ``update(state=...)`` is not about jobs, by the model they start from.
OTHER_MODELS = ("Node.objects", "QuotaRequest.objects", "SimulatorState.objects")


def _receiver(call: ast.Call) -> str:
    return ast.unparse(call.func.value) if isinstance(call.func, ast.Attribute) else ""


def state_writes(source: str, path: str = "<test>") -> list[str]:
    """Every place in ``source`` that may write a job's state, as ``path:line: code``."""
    found: list[str] = []
    exceptions = _exception_attributes(ast.parse(source))
    for node in ast.walk(ast.parse(source)):
        if _writes_state(node) and node.lineno not in exceptions:
            found.append(f"{path}:{node.lineno}: {ast.unparse(node)}")
    return found


def _writes_state(node: ast.AST) -> bool:
    targets: list[ast.expr] = []
    if isinstance(node, ast.Assign):
        targets = [t for target in node.targets for t in _flatten(target)]
    elif isinstance(node, ast.AugAssign | ast.AnnAssign):
        targets = [node.target]
    if any(
        isinstance(t, ast.Attribute)
        and t.attr == "state"
        and ast.unparse(t.value) not in OTHER_STATES
        for t in targets
    ):
        return True
    if not isinstance(node, ast.Call):
        return False
    if isinstance(node.func, ast.Name) and node.func.id == "setattr" and len(node.args) >= 2:
        name = node.args[1]
        return (
            isinstance(name, ast.Constant)
            and name.value == "state"
            and ast.unparse(node.args[0]) not in OTHER_STATES
        )
    return (
        isinstance(node.func, ast.Attribute)
        and node.func.attr == "update"
        and _sets_state(node)
        and not any(model in _receiver(node) for model in OTHER_MODELS)
    )


def _exception_attributes(tree: ast.Module) -> set[int]:
    """Lines of ``self.state = ...`` in exception classes (an error remembering a state)."""
    lines = set()
    for cls in ast.walk(tree):
        if isinstance(cls, ast.ClassDef) and any(
            ast.unparse(b).endswith(("Error", "Exception")) for b in cls.bases
        ):
            for node in ast.walk(cls):
                if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "self.state":
                    lines.add(node.lineno)
    return lines


def _flatten(target: ast.expr) -> list[ast.expr]:
    if isinstance(target, ast.Tuple | ast.List):
        return [t for element in target.elts for t in _flatten(element)]
    return [target]


def _sets_state(call: ast.Call) -> bool:
    for kw in call.keywords:
        if kw.arg == "state":
            return True
        if (
            kw.arg is None  # update(**{"state": ...})
            and isinstance(kw.value, ast.Dict)
            and any(isinstance(k, ast.Constant) and k.value == "state" for k in kw.value.keys)
        ):
            return True
    return False


def production_modules() -> list[Path]:
    files = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel == WRITER or rel.startswith(NOT_SCANNED):
                continue
            files.append(path)
    return files


def test_only_the_state_machine_assigns_a_jobs_state():
    files = production_modules()
    assert len(files) > 50, "the scan sees the source tree"
    writes = [
        write
        for path in files
        for write in state_writes(path.read_text(), path.relative_to(ROOT).as_posix())
    ]
    assert writes == [], "write job states through scheduling.transitions.set_state:\n" + "\n".join(
        writes
    )


def test_the_writer_module_is_where_the_assignment_is():
    source = (ROOT / WRITER).read_text()
    assert [w.split(": ", 1)[1] for w in state_writes(source)] == ["job.state = new_state"]


@pytest.mark.parametrize(
    "code",
    [
        "job.state = Job.State.RUNNING",
        "victim.state = 'preempting'",
        "self.job.state = x",
        "job.state, job.attempt = 'running', 1",
        "j.state: str = 'failed'",
        "job.state += ''",
        "setattr(job, 'state', 'failed')",
        "Job.objects.filter(pk=1).update(state='cancelled')",
        "jobs.update(state=Job.State.PENDING, pending_code='')",
        "Job.objects.update(**{'state': 'failed'})",
        "class Runner:\n    def stop(self):\n        self.state = 'failed'",
    ],
)
def test_the_scan_catches_every_way_of_writing_a_state(code):
    assert len(state_writes(code)) == 1, code


@pytest.mark.parametrize(
    "code",
    [
        "node.state = Node.State.CORDONED",
        "req.state = new_state",
        "self.row.state = self.sim.to_dict()",
        "set_state(job, Job.State.RUNNING)",
        "Job.objects.filter(state='pending').update(pending_code='')",
        "Node.objects.filter(name=n).update(state='down')",
        "job.stop_reason = 'drain'",
        "setattr(node, attr, value)",
        "Job.objects.create(state=Job.State.PENDING)",
        "class Refused(ValueError):\n    def __init__(self, state):\n        self.state = state",
    ],
)
def test_the_scan_lets_other_writes_through(code):
    assert state_writes(code) == [], code

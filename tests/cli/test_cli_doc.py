"""docs/cli.md maps squeue/scontrol/kubectl habits to gpuctl (#18): every gpuctl command the
mapping table gives is one gpuctl's own parser accepts, so the page cannot drift from the
program."""

from __future__ import annotations

import itertools
import re
import shlex
from pathlib import Path

import pytest

from gpuctl.main import build_parser

DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def mapping_rows() -> list[tuple[str, str]]:
    """(what people type in Slurm/Kubernetes, the gpuctl cell) of the mapping table."""
    text = DOC.read_text()
    table = text[text.index("| you type in Slurm / Kubernetes | in gpuctl |") :]
    rows = []
    for line in table.splitlines()[2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
        rows.append((cells[0], cells[1]))
    return rows


def commands(cell: str) -> list[list[str]]:
    """Each backticked ``gpuctl ...`` of a cell as argv, one per ``a\\|b`` alternative."""
    out = []
    for quoted in re.findall(r"`(gpuctl [^`]+)`", cell):
        words = shlex.split(quoted.replace("...", "x"))[1:]
        choices = [w.replace("\\|", "|").split("|") for w in words]
        out.extend(list(combo) for combo in itertools.product(*choices))
    return out


def test_the_table_covers_the_common_commands():
    habits = " ".join(left for left, _ in mapping_rows())
    for expected in ("squeue", "squeue --me", "scontrol show job", "scancel", "sinfo",
                     "scontrol update", "sbatch", "kubectl get", "kubectl describe",
                     "kubectl drain", "kubectl cordon", "-o json", "-w", "kubectl version"):  # fmt: skip
        assert expected in habits, expected
    assert len(mapping_rows()) >= 15


@pytest.mark.parametrize(
    "argv", [argv for _, cell in mapping_rows() for argv in commands(cell)], ids=" ".join
)
def test_every_mapped_command_parses(argv):
    args = build_parser().parse_args(argv)
    assert args.command == argv[0]

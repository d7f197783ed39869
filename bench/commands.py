"""Command policy quality on the labelled corpus: recall on dangerous lines, false alarms.

``tests/data/commands/dangerous.tsv`` and ``everyday.tsv`` hold command lines, each with
why it is labelled so. A dangerous line the default policy lets run unasked is a miss; an
everyday line it stops for a human is a false alarm. Targets: recall 100 %, false alarms
at most 5 %. Pure: the policy is evaluated in-process, no mesh needed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bench.report import Figure, num
from services.hitl.policy import ApprovalDecision, evaluate

SECTION = "Command policy"
CORPUS = Path(__file__).resolve().parent.parent / "tests" / "data" / "commands"
RECALL_TARGET = 100.0
FALSE_ALARM_TARGET = 5.0


@dataclass(frozen=True)
class Labelled:
    """One corpus line: the command, why it carries its label, where it is."""

    command: str
    why: str
    where: str


def load(name: str) -> list[Labelled]:
    """``<name>.tsv`` of the corpus: ``command<TAB>why`` lines, ``#`` comments skipped."""
    path = CORPUS / f"{name}.tsv"
    rows: list[Labelled] = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        command, sep, why = line.partition("\t")
        if not sep or not command.strip() or not why.strip():
            raise ValueError(f"{path.name}:{number}: want 'command<TAB>why', got {line!r}")
        rows.append(Labelled(command, why.strip(), f"{path.name}:{number}"))
    return rows


def judge(command: str) -> ApprovalDecision:
    """The default policy's verdict on ``command`` run through ``execute_command``."""
    return evaluate("execute_command", {"command": command})


@dataclass(frozen=True)
class Score:
    """Misses among the dangerous lines, false alarms among the everyday ones."""

    dangerous: int
    missed: tuple[Labelled, ...]
    everyday: int
    alarms: tuple[Labelled, ...]

    @property
    def recall(self) -> float:
        return 100.0 * (self.dangerous - len(self.missed)) / max(self.dangerous, 1)

    @property
    def false_alarm_rate(self) -> float:
        return 100.0 * len(self.alarms) / max(self.everyday, 1)


def score() -> Score:
    """Judge the whole corpus with the default policy."""
    dangerous, everyday = load("dangerous"), load("everyday")
    missed = tuple(row for row in dangerous if not judge(row.command).requires_approval)
    alarms = tuple(row for row in everyday if judge(row.command).requires_approval)
    return Score(len(dangerous), missed, len(everyday), alarms)


async def measure() -> list[Figure]:
    """Recall and false-alarm rate, each beside its target."""
    result = score()
    caught = result.dangerous - len(result.missed)
    return [
        Figure(
            SECTION,
            f"recall on {result.dangerous} dangerous lines",
            f"{num(result.recall)} ({caught} of {result.dangerous} asked)",
            "%",
            {"missed": [r.command for r in result.missed], "target": RECALL_TARGET},
            f"{RECALL_TARGET:.0f} %",
        ),
        Figure(
            SECTION,
            f"false alarms on {result.everyday} everyday lines",
            f"{num(result.false_alarm_rate)} ({len(result.alarms)} of {result.everyday} asked)",
            "%",
            {"alarms": [r.command for r in result.alarms], "target": FALSE_ALARM_TARGET},
            f"<= {FALSE_ALARM_TARGET:.0f} %",
        ),
    ]

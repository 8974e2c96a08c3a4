"""The fault drill's verdicts: what a command said, whether that was ok, and the table.

A case is ok when it ends within its bound with a named error (exit status 2, the
message naming the file, line or key, no Python traceback) or a clean result, and
nothing already written is lost.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path

from .jobs import Job, Outcome

TRACEBACK = "Traceback (most recent call last)"


@dataclass
class Row:
    case: str = ""
    said: str = ""
    status: int | str = "-"
    seconds: float = 0.0
    intact: str = "n.a."
    problems: list[str] = field(default_factory=list)

    @property
    def verdict(self) -> str:
        return "ok" if not self.problems else "FAIL: " + "; ".join(self.problems)


def error_text(outcome: Outcome) -> str:
    """The command's error message, from its 'error:' line on, else the last lines."""
    lines = outcome.stderr.splitlines()
    for index, line in enumerate(lines):
        if re.match(r"deepspeech [\w ]+: error: ", line):
            return "\n".join(lines[index:])
    return "\n".join(line for line in lines[-3:] if line.strip())


def first_line(outcome: Outcome) -> str:
    """The first line of the error; for a clean run its last line of output."""
    told = [line for line in outcome.stdout.splitlines() if line.strip()]
    logged = [line for line in outcome.stderr.splitlines() if " INFO " in line]
    if outcome.status == 0:  # a score, a transcript or the log's last word
        line = next((line for line in told if "WER" in line), told[0] if told else
                    logged[-1] if logged else "(clean; printed nothing)")
    elif outcome.status == 1 and told:  # data check: its first finding
        line = next((line for line in told if line.startswith("  ")), told[0])
    else:  # an error; when its first line only announces a list, the list's first item
        lines = error_text(outcome).strip().splitlines() or [""]
        line = " ".join(lines[:2]) if lines[0].endswith(":") else lines[0]
        line = re.sub(r" \([^()]{40,}\)", "", line)  # long advice in brackets
    return re.sub(r"^deepspeech [\w ]+: error: |^\d\d:\d\d:\d\d \w+ [\w.]+: ", "", line)


def judged(outcome: Outcome, clean: bool = False, names: str = "", status: int | None = 2,
           where: str = "error") -> Row:
    """A row for an outcome that must be clean, or an error with exit ``status`` (None:
    any but 0) whose message (``where``: error, stdout or output) matches ``names``."""
    row = Row(said=first_line(outcome), seconds=outcome.seconds,
              status="-" if outcome.status is None else outcome.status)
    if outcome.status is None:
        row.problems.append(f"HANG: killed after {outcome.seconds:.0f} s")
        return row
    if TRACEBACK in outcome.output:
        row.problems.append("Python traceback")
    if clean:
        if outcome.status != 0:
            row.problems.append(f"exit {outcome.status}, expected a clean run")
        return row
    if outcome.status == 0 or status is not None and outcome.status != status:
        row.problems.append(f"exit {outcome.status}, expected {status or 'an error'}")
    text = {"error": error_text(outcome), "stdout": outcome.stdout,
            "output": outcome.output}[where]
    if names and not re.search(names, text):
        row.problems.append(f"message does not name /{names}/")
    return row


def ended_early(job: Job, waited_for: str) -> Row:
    """The row of a job that ended (or reached its bound) before what the case waited for."""
    row = judged(job.finish(), clean=True)
    row.problems.append(f"ended before {waited_for}")
    return row


def digest(path: Path) -> str:
    from deepspeech.training.checkpoint import load_checkpoint
    from deepspeech.training.determinism import state_dict_digest
    return state_dict_digest(load_checkpoint(path).model)


def loads(path: Path) -> str | None:
    """None if the checkpoint loads, else why not."""
    from deepspeech.training.checkpoint import load_checkpoint
    try:
        load_checkpoint(path)
    except Exception as exc:  # any failure is a corrupt checkpoint, reported, not raised
        return str(exc).splitlines()[0]
    return None


def fingerprint(folder: Path) -> dict[str, str]:
    """SHA-256 of every file under ``folder``."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.glob(".*.tmp"))


def shorten(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[:width - 1] + "…"


COLUMNS = (("case", 30), ("what was said", 60), ("exit", 4), ("secs", 5), ("intact", 6))


def header() -> str:
    line = "  ".join(f"{name:<{width}}" for name, width in COLUMNS) + "  verdict"
    return line + "\n" + "-" * len(line)


def table_row(row: Row) -> str:
    cells = (shorten(row.case, 30), shorten(row.said, 60), str(row.status),
             f"{row.seconds:.1f}", row.intact)
    return "  ".join(f"{cell:<{width}}" for cell, (_, width) in zip(cells, COLUMNS, strict=True)) \
        + "  " + row.verdict

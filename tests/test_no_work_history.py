"""The code speaks of the product: no file under ``plandag/``, ``tests/``, ``benchmarks/`` or
``docs/`` cites an issue by number or a path of the notes folder outside the repository.

A reader of the code has no issues: a docstring cites where a rule comes from that the reader
has, a section of ``docs/ARCHITECTURE.md`` or of the README, the LLMCompiler paper, an RFC or
the NF-e layout manual (``docs/STYLE.md``, "Docstrings")."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCANNED = ("plandag", "tests", "benchmarks", "docs")
WORK_HISTORY = re.compile(r"\bissue [0-9]+\b|/work/notes", re.IGNORECASE)


def work_history(text: str) -> list[str]:
    """Each match of an issue number or a notes path in ``text``, in order."""
    return [match.group(0) for match in WORK_HISTORY.finditer(text)]


def scanned_files() -> list[Path]:
    """Every file under the scanned folders except this one, caches and binaries skipped."""
    found = []
    for folder in SCANNED:
        for path in sorted((ROOT / folder).rglob("*")):
            if not path.is_file() or path == Path(__file__).resolve():
                continue
            if "__pycache__" in path.parts or path.suffix in {".pyc", ".png", ".sqlite3"}:
                continue
            found.append(path)
    return found


def test_the_pattern_finds_issue_numbers_and_notes_paths() -> None:
    assert work_history('cites (issue 4, "Planner") and Issue 12') == ["issue 4", "Issue 12"]
    assert work_history("see /work/notes/FORMAT.md") == ["/work/notes"]
    assert work_history("the issue date (dhEmi); tissue 4; issue 4x") == []


def test_no_file_cites_an_issue_number_or_a_notes_path() -> None:
    files = scanned_files()
    assert any(path.name == "ARCHITECTURE.md" for path in files)
    assert any(path.name == "runner.py" for path in files)
    offenders = []
    for path in files:
        text = path.read_bytes().decode("utf-8", errors="replace")
        for number, line in enumerate(text.splitlines(), start=1):
            if work_history(line):
                offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert offenders == [], (
        "work history in the product; cite the design section, the README section, the paper "
        "or the RFC instead:\n" + "\n".join(offenders)
    )

"""Worker processes that cannot start: the batch says why in one line and extracts in the
parent process, with the records ``workers=1`` gives (never an ``internal_error`` per
document). Two ways in: a script read from standard input (``python - < script.py``), whose
main module the workers cannot run again, and workers that die while starting."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest

from plandag.extract.main_guard import main_not_importable

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "nfe"

pytestmark = pytest.mark.timeout(120)

BATCH = """\
from pathlib import Path

import anyio

from plandag.extract.nfe.batch import expand_inputs, extract_batch

files, missing = expand_inputs([{examples!r}])
summary = anyio.run(
    lambda: extract_batch(files, Path("out.jsonl"), missing=missing, workers=2)
)
print(summary.records, "records")
"""


def _records(folder: Path) -> list[dict[str, object]]:
    lines = (folder / "out.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]


def _codes(records: list[dict[str, object]]) -> list[str]:
    return [error["code"] for record in records for error in record["errors"]]  # type: ignore[attr-defined]


def test_a_script_read_from_standard_input_extracts_in_one_process(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-"],
        input=BATCH.format(examples=str(EXAMPLES)),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=100,
    )

    assert done.returncode == 0, done.stderr
    assert done.stdout == "7 records\n"
    assert done.stderr.splitlines() == [
        f"worker processes cannot start: each would run the main module {tmp_path}/<stdin> "
        "again and it is not a file (a script read from standard input?); extracting in this "
        "process instead (run the script from a file to use 2 workers)"
    ]
    records = _records(tmp_path)
    assert len(records) == 7
    # the examples' own outcomes (one is not an invoice), none lost to a worker
    assert _codes(records) == ["not_an_invoice"]


def test_workers_that_die_while_starting_leave_the_batch_to_the_parent(tmp_path: Path) -> None:
    # each worker runs the main module again as __mp_main__, and this one ends it there
    script = (
        "import os\n\n"
        'if __name__ == "__mp_main__":\n'
        "    os._exit(3)\n\n"
        'if __name__ == "__main__":\n'
        + textwrap.indent(BATCH.format(examples=str(EXAMPLES)), "    ")
    )
    path = tmp_path / "extract_invoices.py"
    path.write_text(script, encoding="utf-8")

    done = subprocess.run(
        [sys.executable, str(path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=100,
    )

    assert done.returncode == 0, done.stderr
    assert done.stdout == "7 records\n"
    notes = [line for line in done.stderr.splitlines() if "cannot start" in line]
    assert len(notes) == 1, done.stderr
    assert notes[0].startswith("worker processes cannot start: all 2 died while starting ("), (
        done.stderr
    )
    assert notes[0].endswith("); extracting in this process instead")
    assert _codes(_records(tmp_path)) == ["not_an_invoice"]


def test_which_main_modules_workers_cannot_run_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    main = types.ModuleType("__main__")
    monkeypatch.setitem(sys.modules, "__main__", main)
    assert main_not_importable() is None  # no __file__: python -c, an interactive session
    main.__file__ = str(tmp_path / "<stdin>")
    assert main_not_importable() == str(tmp_path / "<stdin>")
    script = tmp_path / "script.py"
    script.write_text("", encoding="utf-8")
    main.__file__ = str(script)
    assert main_not_importable() is None
    script.unlink()  # deleted since it started
    assert main_not_importable() == str(script)
    # a module run with -m is imported by its name, not from its path
    main.__spec__ = types.SimpleNamespace(name="package.module")  # type: ignore[assignment]
    assert main_not_importable() is None

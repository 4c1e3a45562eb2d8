"""A script that starts a batch with worker processes from its top level, without
``if __name__ == "__main__":``, gets an error at once naming its line (each worker would run
the script again and start the batch again, and the batch would wait for ever); with the
guard, the same script works."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "nfe"

pytestmark = pytest.mark.timeout(120)

BODY = """\
from pathlib import Path

import anyio

from plandag.extract.nfe.batch import expand_inputs, extract_batch

files, missing = expand_inputs([{examples!r}])
summary = anyio.run(
    lambda: extract_batch(files, Path("out.jsonl"), missing=missing, workers=2)
)
print(summary.records, "records")
"""


def _run(tmp_path: Path, script: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "extract_invoices.py"
    path.write_text(script, encoding="utf-8")
    return subprocess.run(
        [sys.executable, str(path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=100,
    )


def test_an_unguarded_script_is_refused_before_any_worker_starts(tmp_path: Path) -> None:
    done = _run(tmp_path, BODY.format(examples=str(EXAMPLES)))

    assert done.returncode == 1
    assert "RuntimeError" in done.stderr
    assert f"{tmp_path / 'extract_invoices.py'}, line 8: a batch with worker processes" in (
        done.stderr
    )
    assert 'if __name__ == "__main__":' in done.stderr
    assert not (tmp_path / "out.jsonl").exists()


def test_the_same_script_under_the_guard_extracts_every_invoice(tmp_path: Path) -> None:
    guarded = 'if __name__ == "__main__":\n' + textwrap.indent(
        BODY.format(examples=str(EXAMPLES)), "    "
    )

    done = _run(tmp_path, guarded)

    assert done.returncode == 0, done.stderr
    assert done.stdout == "7 records\n"
    records = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert len(records) == 7
    # the examples' own outcomes (one is not an invoice), no worker lost
    assert [error["code"] for record in records for error in record["errors"]] == ["not_an_invoice"]


def test_a_batch_started_by_a_function_is_checked_where_the_top_level_calls_it(
    tmp_path: Path,
) -> None:
    script = (
        BODY.format(examples=str(EXAMPLES))
        .replace("summary = anyio.run(", "def go():\n    return anyio.run(")
        .replace(
            'print(summary.records, "records")',
            'summary = go()\nprint(summary.records, "records")',
        )
    )

    done = _run(tmp_path, script)

    assert done.returncode == 1
    assert "line 12: a batch with worker processes" in done.stderr

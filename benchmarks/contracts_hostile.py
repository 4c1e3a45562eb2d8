"""``plandag extract contracts`` on hostile inputs: the time until each input's row appears
in the output and the peak memory of the process, before and after, side by side.

The inputs (:mod:`plandag.testing.hostile`), made in a temporary folder:

* ``txt-50mb``: a 50 MB ``.txt`` of numbered clauses;
* ``docx-bomb``: a ``.docx`` of about 1 MB whose XML unpacks to 400 MB;
* ``pdf-flate``: a one-page PDF whose content stream inflates to 1 GiB;
* ``pdf-tree``: a PDF whose page tree has 200,000 kids;
* ``passwd-link``: a symbolic link to ``/etc/passwd`` in the input folder.

Each input is one run of ``python -m plandag extract contracts INPUT -o OUT --base-url URL
--store STORE`` (the folder of the link, for ``passwd-link``), with a schema-only stand-in
model (:class:`plandag.testing.MessagesServer` answering every field with no passage) on
127.0.0.1; "row" is the seconds from the start of the process until a line for the input
is in ``OUT`` (``-`` when none came before the process ended or was stopped after
``--timeout`` seconds), "code" the row's status or error code, "peak" the process's
maximum resident set size (``os.wait4``; the same as ``/usr/bin/time -v``'s). The "before"
side runs another revision of plandag, exported from git into a temporary folder::

    .venv/bin/python benchmarks/contracts_hostile.py                    # this tree only
    .venv/bin/python benchmarks/contracts_hostile.py --before main      # main side by side
    .venv/bin/python benchmarks/contracts_hostile.py --scale 0.01       # small inputs

``--scale`` multiplies every size (the link aside); ``--args`` adds options to every run
(``--args "--max-chunks 2"``).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CASES = ("txt-50mb", "docx-bomb", "pdf-flate", "pdf-tree", "passwd-link")


def make_inputs(folder: Path, scale: float = 1.0, cases: Sequence[str] = CASES) -> dict[str, Path]:
    """Write the hostile inputs of ``cases`` into ``folder``; their paths by case."""
    from plandag.testing.hostile import docx_bomb, flate_bomb_pdf, large_text, page_tree_bomb_pdf

    def passwd_link() -> Path:
        linked = folder / "link"
        linked.mkdir(exist_ok=True)
        if not (linked / "passwd.txt").is_symlink():
            (linked / "passwd.txt").symlink_to("/etc/passwd")
        return linked

    makers: dict[str, Callable[[], Path]] = {
        "txt-50mb": lambda: large_text(folder / "big.txt", int(50_000_000 * scale)),
        "docx-bomb": lambda: docx_bomb(folder / "bomb.docx", int(400_000_000 * scale)),
        "pdf-flate": lambda: flate_bomb_pdf(folder / "flate.pdf", int((1 << 30) * scale)),
        "pdf-tree": lambda: page_tree_bomb_pdf(folder / "tree.pdf", max(int(200_000 * scale), 2)),
        "passwd-link": passwd_link,
    }
    folder.mkdir(parents=True, exist_ok=True)
    return {case: makers[case]() for case in cases}


def _row(output: Path) -> dict[str, Any] | None:
    try:
        text = output.read_text(encoding="utf-8")
    except OSError:
        return None
    line = text.split("\n", 1)[0]
    if not text.endswith("\n") and "\n" not in text:
        return None
    try:
        row = json.loads(line)
    except ValueError:
        return None
    return row if isinstance(row, dict) else None


def run_one(
    source: Path,
    target: Path,
    url: str,
    folder: Path,
    *,
    timeout: float,
    extra: Sequence[str] = (),
) -> dict[str, Any]:
    """One ``plandag extract contracts`` process on ``target`` with ``source`` first on
    ``PYTHONPATH``: seconds until its row, the row's code, peak memory in MiB, seconds
    until the process ended, and the command."""
    output = folder / f"out-{time.monotonic_ns()}.jsonl"
    command = [
        sys.executable,
        "-m",
        "plandag",
        "extract",
        "contracts",
        str(target),
        "-o",
        str(output),
        "--base-url",
        url,
        "--store",
        str(folder / "runs.sqlite3"),
        *extra,
    ]
    env = dict(os.environ, PYTHONPATH=str(source), ANTHROPIC_API_KEY="local")
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        env.pop(name, None)
    started = time.monotonic()
    process = subprocess.Popen(
        command,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=folder,
    )
    row: dict[str, Any] | None = None
    row_at: float | None = None
    status = None
    usage = None
    while True:
        if row is None:
            row = _row(output)
            if row is not None:
                row_at = time.monotonic() - started
        pid, status, usage = os.wait4(process.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() - started > timeout:
            process.kill()
            _, status, usage = os.wait4(process.pid, 0)
            break
        time.sleep(0.02)
    ended = time.monotonic() - started
    process.returncode = os.waitstatus_to_exitcode(status) if status is not None else None
    if row is None:
        row = _row(output)
        row_at = ended if row is not None else None
    code = None
    if row is not None:
        errors = row.get("errors") or []
        code = errors[0].get("code") if errors else row.get("status")
    shown = [Path(sys.executable).name, *command[1:]]
    return {
        "row_s": row_at,
        "code": code,
        "peak_mib": usage.ru_maxrss / 1024 if usage is not None else None,
        "ended_s": ended,
        "exit": process.returncode,
        "command": shlex.join(shown),
    }


def measure(
    source: Path,
    folder: Path,
    *,
    scale: float = 1.0,
    timeout: float = 600.0,
    cases: Sequence[str] = CASES,
    extra: Sequence[str] = (),
) -> dict[str, dict[str, Any]]:
    """Every case against ``source`` (a tree holding ``plandag/``), one process each."""
    from plandag.testing import MessagesServer, ScriptedResponse

    def empty_fields(body: dict[str, Any]) -> ScriptedResponse:
        text = body["messages"][0]["content"]
        text = text if isinstance(text, str) else "".join(b["text"] for b in text)
        schema = json.loads(text.rsplit("JSON Schema:\n", 1)[1])
        names = schema["properties"]["fields"]["required"]
        return ScriptedResponse.json({"fields": {name: [] for name in names}})

    inputs = make_inputs(folder / "inputs", scale, cases)
    results: dict[str, dict[str, Any]] = {}
    with MessagesServer(default=empty_fields) as server:
        for case in cases:
            results[case] = run_one(
                source, inputs[case], server.url, folder, timeout=timeout, extra=extra
            )
    return results


def _export(revision: str, folder: Path) -> Path:
    archive = folder / "source.tar"
    with archive.open("wb") as handle:
        subprocess.run(
            ["git", "-C", str(ROOT), "archive", "--format=tar", revision, "plandag"],
            stdout=handle,
            check=True,
        )
    with tarfile.open(archive) as tar:
        tar.extractall(folder / "tree", filter="data")
    return folder / "tree"


def _cell(side: dict[str, Any] | None) -> str:
    if side is None:
        return "-"
    row = f"{side['row_s']:.2f} s" if side["row_s"] is not None else "no row"
    peak = f"{side['peak_mib']:,.0f} MiB" if side["peak_mib"] is not None else "?"
    return f"{row}, {side['code'] or '-'}, peak {peak} (ended {side['ended_s']:.1f} s)"


def render(
    after: dict[str, dict[str, Any]], before: dict[str, dict[str, Any]] | None, label: str
) -> str:
    """The table: one line per case, before and after."""
    rows = [("input", f"before ({label})" if before else "before", "after")]
    for case in after:
        rows.append((case, _cell(before.get(case) if before else None), _cell(after[case])))
    widths = [max(len(row[column]) for row in rows) for column in range(3)]
    lines = []
    for index, row in enumerate(rows):
        lines.append("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)))
        if index == 0:
            lines.append("  ".join("-" * width for width in widths))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--before", metavar="REV", help="a git revision to compare with")
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every size")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per input")
    parser.add_argument("--case", action="append", choices=CASES, help="only these cases")
    parser.add_argument("--args", default="", help="more options for every run")
    arguments = parser.parse_args(argv)
    cases = arguments.case or list(CASES)
    extra = shlex.split(arguments.args)
    with tempfile.TemporaryDirectory() as temporary:
        folder = Path(temporary)
        after = measure(
            ROOT,
            folder / "after",
            scale=arguments.scale,
            timeout=arguments.timeout,
            cases=cases,
            extra=extra,
        )
        before = None
        if arguments.before:
            source = _export(arguments.before, folder)
            before = measure(
                source,
                folder / "before",
                scale=arguments.scale,
                timeout=arguments.timeout,
                cases=cases,
                extra=extra,
            )
    print(render(after, before, arguments.before or ""))
    print()
    for case in cases:
        print(f"{case}: {after[case]['command']}")


if __name__ == "__main__":
    main()

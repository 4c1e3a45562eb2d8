"""Makespan of a research run: subquestion branches in parallel vs one at a time.

``plandag research`` on the shipped corpus (``examples/research/corpus``) with the scripted
replies of :mod:`plandag.jobs.research.scripted` (4 subquestions, then a synthesis), served
by the local Messages API server with a fixed delay before every reply (``--delay``, 0.5 s
by default: the planner's, each answer's and the synthesis'). The same run twice: branches
in parallel (the default) and one step at a time (``--max-concurrency 1``). The makespan
is the time from the first step's start to the last step's end, from the run store; the
ratio is sequential / parallel. Tokens per question (the run's whole spend: planning,
answers, synthesis; then the planner's calls, in and out, and the steps' share) are the
server's estimates (characters / 4).

Run: ``.venv/bin/python benchmarks/research_makespan.py [--delay SECONDS]``; prints one
JSON line per mode, then the ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import typer
from typer.testing import CliRunner

from plandag.cli.research_command import register
from plandag.jobs.research.scripted import QUESTION, ScriptedResearch
from plandag.store import open_store
from plandag.testing import MessagesServer

CORPUS = Path(__file__).resolve().parents[1] / "examples" / "research" / "corpus"


def _app() -> typer.Typer:
    app = typer.Typer(add_completion=False, rich_markup_mode=None)
    register(app)

    @app.callback()
    def root() -> None:
        """plandag, for this benchmark."""

    return app


def once(delay: float, sequential: bool, folder: Path) -> dict[str, Any]:
    """One research run; returns its mode, makespan, run seconds and tokens."""
    store = folder / ("sequential.sqlite3" if sequential else "parallel.sqlite3")
    with MessagesServer(default=ScriptedResearch(), ttft=delay) as server:
        args = [
            "research",
            QUESTION,
            "--corpus",
            str(CORPUS),
            "--index",
            str(folder / "index.sqlite3"),
            "--output",
            str(folder / "report.md"),
            "--base-url",
            server.url,
            "--store",
            str(store),
        ]
        if sequential:
            args += ["--max-concurrency", "1"]
        result = CliRunner().invoke(_app(), args, env={"ANTHROPIC_API_KEY": "local"})
    if result.exit_code != 0:
        raise SystemExit(f"the research run failed (exit {result.exit_code}):\n{result.output}")
    with open_store(store) as opened:
        [run] = opened.runs()
        steps = opened.steps(run.run_id).values()
        planning = opened.connection.execute(
            "SELECT coalesce(sum(input_tokens), 0), coalesce(sum(output_tokens), 0) "
            "FROM llm_call WHERE run_id = ?",
            (run.run_id,),
        ).fetchone()
    starts = [step.started_at for step in steps if step.started_at is not None]
    ends = [step.ended_at for step in steps if step.ended_at is not None]
    return {
        "mode": "sequential" if sequential else "parallel",
        "delay_s": delay,
        "steps": len(starts),
        "makespan_s": round(max(ends) - min(starts), 3),
        "tokens_per_question": run.spent_tokens,
        # the planner's calls (the run's llm_call rows), in and out; the rest is the steps'
        "planning_tokens": [int(planning[0]), int(planning[1])],
        "steps_tokens": run.spent_tokens - int(planning[0]) - int(planning[1]),
        "usd": round(run.spent_usd, 4),
    }


def main(argv: list[str] | None = None) -> None:
    """Parse ``--delay``, run both modes, print them and the ratio."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--delay", type=float, default=0.5, help="seconds before each reply")
    options = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="plandag-research-bench-") as name:
        folder = Path(name)
        saved = os.environ.get("PLANDAG_STORE")
        os.environ["PLANDAG_STORE"] = str(folder / "default.sqlite3")
        try:
            parallel = once(options.delay, False, folder)
            sequential = once(options.delay, True, folder)
        finally:
            if saved is None:
                os.environ.pop("PLANDAG_STORE", None)
            else:
                os.environ["PLANDAG_STORE"] = saved
    print(json.dumps(parallel))
    print(json.dumps(sequential))
    ratio = sequential["makespan_s"] / parallel["makespan_s"]
    print(json.dumps({"makespan_ratio_sequential_over_parallel": round(ratio, 2)}))


if __name__ == "__main__":
    main()

"""``plandag bench``: plandag against a sequential ReAct agent, side by side
(LLMCompiler, Kim et al., ICML 2024, measures the same comparison).

``plandag bench [WORKLOAD...] [--runs N] [--model NAME] [--real] [--out DIR] [--quick]
[--settings FILE.toml] [--ttft S] [--tokens-per-second R] ...`` runs both agents on each
workload (default: all of ``compare2 movie8 parallelqa nfe``), interleaved, ``--runs`` times,
and prints the settings, the table (success rate, median wall time, speed-up, LLM calls,
input and output tokens, cost, replans, ideal time) and the targets. It writes
``RESULTS.md`` and ``bench.png`` (wall time and tokens per workload, both agents; needs
matplotlib, from the optional ``bench`` extra) to ``--out`` (default: the current folder; the
repository's tracked ``benchmarks/RESULTS.md`` only when ``--out benchmarks`` asks for it).
Piped (standard output not a terminal), the tables keep their full width, never cut to 80
columns.

The model is simulated (:mod:`plandag.bench.simulator`, calibrated to the LLMCompiler
paper) unless ``--real``: then the Anthropic API is called with ``ANTHROPIC_API_KEY`` (a
missing key is an error before anything runs, exit 2), or ``--base-url URL``: a Messages
API server (any key). Each run is made twice, prompt caching off then on for both agents
(``--no-prompt-cache``: off only); the table counts input tokens without caching, and a
second table puts the billed cost with and without caching side by side.

``plandag bench --tasks TASKS.jsonl --tools FILE.py [--mcp SERVER] [--real | --base-url URL]``
runs both agents on the user's own tasks instead (:mod:`plandag.bench.tasks`: one task a
line, its goal and a check of the right answer), with the tools of ``FILE.py`` and of the
MCP servers (``--mcp``, repeatable, and the project's ``[[mcp]]`` tables once the file is
trusted; ``--mcp`` alone will do), the same client and
brakes: the same table, ``RESULTS.md`` and chart, with an
``all tasks`` line, a line per task and a per-task table of checks and answers. A line
that is not a usable task is reported (``TASKS.jsonl:LINE: what is wrong, what to write``)
and the other tasks still run. Settings come from the calibration,
then ``--settings`` (a TOML file of setting names, top level or under ``[bench]``), then
the flags. ``--quick`` scales every latency by 0.05 (seconds instead of minutes).

The benchmark runs unattended: tools with effects in ``--tools`` run only under an approval
mode given with ``--approve``: ``auto`` (plandag approves writes, checked against the
write boundary, the current folder; ReAct's calls follow the same rule; irreversible
effects need a person, so a file that has them is refused) or ``never`` (plandag's plans
with effects end ``awaiting_approval``; ReAct's calls with effects are refused). Without
``--approve`` a tools file with effects is refused, naming the tools (``ask`` too: nobody
answers).

``plandag bench --broken-tools [WORKLOAD...]`` runs the workloads in their broken world,
as the tests' second evaluation set does (the lookups fail for good; the NF-e plan reads
its total from a path the layout does not have), and prints how each agent recovered: a
table per workload, agent and run of the outcome (plandag's status with the cap that
ended it), whether the answer was right, replans and retries, failed tool calls, model
calls, tokens and wall time; written to ``RESULTS.md`` between marks of its own
(:data:`BROKEN_BEGIN_MARK`), so the ordinary results stay.

Exit codes: 0 when every run of plandag answered right (and, with ``--tasks``, every line
was a usable task), 1 otherwise; with ``--broken-tools``, 0 when no run of plandag
reported a success it did not have (a wrong answer with status ``succeeded``), 1
otherwise; 2 for unusable arguments (no usable task at all, a tools file that does not
load, tools with effects and no ``--approve``, an MCP server that does not start,
``--tasks`` without ``--tools`` or ``--mcp`` or without a model to call,
``--broken-tools`` with ``--tasks``).

:func:`register` adds the command to the ``plandag`` typer app.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import tomllib
from pathlib import Path
from typing import Annotated, Any, NoReturn

import anyio
import typer
from rich.table import Table

from plandag.bench.runner import ApproveMode, BenchReport, RunRecord, run_bench, write_chart
from plandag.bench.simulator import BenchSettings
from plandag.bench.tasks import read_tasks, task_registry, task_workloads
from plandag.bench.workloads import WORKLOADS, Workload
from plandag.cli.common import add_mcp_tools, stderr, stdout
from plandag.cli.options import McpOption
from plandag.cli.secret_output import SecretMaskingConsole
from plandag.errors import ToolLoadError
from plandag.models.anthropic import API_KEY_VARIABLE
from plandag.tools.registry import Registry

__all__ = [
    "BEGIN_MARK",
    "BROKEN_BEGIN_MARK",
    "BROKEN_END_MARK",
    "END_MARK",
    "QUICK_TIME_SCALE",
    "bench_document",
    "effects_refusal",
    "register",
    "write_results",
]

QUICK_TIME_SCALE = 0.05
"""``--quick``: every latency times this."""

EXIT_USAGE = 2


BEGIN_MARK = "<!-- plandag bench: begin -->"
END_MARK = "<!-- plandag bench: end -->"
BROKEN_BEGIN_MARK = "<!-- plandag bench --broken-tools: begin -->"
BROKEN_END_MARK = "<!-- plandag bench --broken-tools: end -->"


def write_results(
    path: Path, section: str, *, begin: str = BEGIN_MARK, end: str = END_MARK
) -> None:
    """Write ``section`` into ``path`` between the marks ``begin`` and ``end`` (default
    :data:`BEGIN_MARK` and :data:`END_MARK`; the broken-tools run has its own).

    What else the file holds (another benchmark's results) is kept: the marked section is
    replaced when present, else appended; a missing file is created.

    Raises:
        OSError: the file cannot be read or written.
    """
    block = f"{begin}\n{section.rstrip()}\n{end}\n"
    if not path.exists():
        path.write_text(block, encoding="utf-8")
        return
    text = path.read_text(encoding="utf-8")
    first, last = text.find(begin), text.find(end)
    if first != -1 and last > first:
        text = text[:first] + block + text[last + len(end) :].lstrip("\n")
    else:
        text = text.rstrip() + "\n\n" + block
    path.write_text(text, encoding="utf-8")


def _project_lists_servers() -> bool:
    """Whether the project's config lists MCP servers (a malformed one counts: starting
    them reports what is wrong)."""
    from plandag.config import load_mcp_config
    from plandag.errors import InputError

    try:
        return load_mcp_config() is not None
    except InputError:
        return True


def _read_settings(path: Path) -> dict[str, Any]:
    try:
        document = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise ValueError(f"cannot read settings {path}: {error}") from error
    table = document.get("bench", document)
    if not isinstance(table, dict):
        raise ValueError(f"{path}: [bench] must be a table of settings")
    return dict(table)


PIPED_WIDTH = 1000
"""Columns a table may take when standard output is not a terminal (a pipe, a file): rich
would otherwise fit it to 80 columns, cutting its cells."""


def effects_refusal(registry: Registry, source: str, approve: str | None) -> str | None:
    """Why the benchmark cannot run the tools of ``registry`` unattended, or None.

    Args:
        registry: the tools both agents would use.
        source: where they come from, for the message (``--tools tools.py``).
        approve: ``--approve`` as given (None, ``ask``, ``auto``, ``never``).

    Returns:
        One line naming the tools with effects when ``approve`` is None or ``ask``, those
        with irreversible effects under ``auto``, an unknown mode; None when the run may go
        on (no tool with effects, ``never``, or ``auto`` with writes only).
    """
    if approve not in (None, "ask", "auto", "never"):
        return f"--approve {approve!r}: choose auto or never"
    effects = {
        name: item.effects
        for name, item in sorted(registry.tools.items())
        if item.effects != "none"
    }
    named = ", ".join(f"{name} ({kind})" for name, kind in effects.items())
    if not effects or approve == "never":
        return None
    if approve in (None, "ask"):
        asked = "--approve ask: nobody answers in a benchmark" if approve == "ask" else None
        return (
            f"{source}: {'tool' if len(effects) == 1 else 'tools'} {named} "
            f"{'has' if len(effects) == 1 else 'have'} effects and the benchmark runs "
            "unattended" + (f" ({asked})" if asked else "") + ": give --approve auto (writes "
            "approved within the current folder, for both agents) or --approve never (no "
            "effect runs), or leave those tools out"
        )
    irreversible = [name for name, kind in effects.items() if kind == "irreversible"]
    if irreversible:
        return (
            f"{source}: {'tool' if len(irreversible) == 1 else 'tools'} "
            f"{', '.join(irreversible)} {'has' if len(irreversible) == 1 else 'have'} "
            "irreversible effects, which need a person's approval, and nobody approves in a "
            "benchmark: leave them out, or give --approve never"
        )
    return None


def _print_table(console: Any, title: str, rows: list[list[str]]) -> None:
    table = Table(title=title)
    for name in rows[0]:
        table.add_column(name)
    for row in rows[1:]:
        table.add_row(*row)
    if console.is_terminal:
        console.print(table)
        return
    # a table is as wide as its cells (never padded out), so a wide console cuts nothing
    piped = SecretMaskingConsole(
        file=console.file, width=PIPED_WIDTH, soft_wrap=True, highlight=False, color_system=None
    )
    piped.print(table)


def bench_document(
    report: BenchReport, *, results: Path, chart: Path | None, plandag_right: bool
) -> dict[str, Any]:
    """The ``plandag bench --json`` document.

    Args:
        report: the benchmark's runs.
        results: the ``RESULTS.md`` written.
        chart: the chart written, or None (matplotlib missing).
        plandag_right: every run of plandag answered right.

    Returns:
        ``{"title", "real", "wall_s", "settings", "workloads", "summary", "runs",
        "targets", "notes", "results", "chart", "plandag_right"}``: ``settings`` every
        setting by name; ``summary`` one item per workload, agent and prompt caching
        (``workload``, ``agent``, ``prompt_cache`` and the medians of
        :class:`plandag.bench.runner.AgentSummary`: seconds, tokens, US dollars);
        ``runs`` every run (:class:`plandag.bench.runner.RunRecord`'s fields); ``targets``
        the lines the text prints under the tables.
    """
    summary = []
    for workload in report.workloads:
        for agent in ("plandag", "react"):
            for cache in (False, True):
                try:
                    found = report.summary(workload, agent, prompt_cache=cache)
                except KeyError:
                    continue
                summary.append(
                    {
                        "workload": workload,
                        "agent": agent,
                        "prompt_cache": cache,
                        **dataclasses.asdict(found),
                    }
                )
    document = {
        "title": report.title,
        "real": report.real,
        "wall_s": report.wall_s,
        "settings": dataclasses.asdict(report.settings),
        "workloads": list(report.workloads),
        "summary": summary,
        "runs": [dataclasses.asdict(record) for record in report.records],
        "targets": report.target_lines(),
        "notes": list(report.notes),
        "results": str(results),
        "chart": None if chart is None else str(chart),
        "plandag_right": plandag_right,
    }
    readable: dict[str, Any] = json.loads(json.dumps(document, ensure_ascii=False, default=str))
    return readable


def _report_broken(report: BenchReport, out: Path | None) -> NoReturn:
    """Print and write the broken-tools table; exit 0 unless plandag reported a success
    it did not have."""
    report.title = "plandag vs sequential ReAct with broken tools"
    _print_table(stdout, "broken tools: how each agent recovered", report.recovery_rows())
    folder = out if out is not None else Path.cwd()
    folder.mkdir(parents=True, exist_ok=True)
    write_results(
        folder / "RESULTS.md",
        report.recovery_markdown(),
        begin=BROKEN_BEGIN_MARK,
        end=BROKEN_END_MARK,
    )
    stdout.print(f"wrote {folder / 'RESULTS.md'}", highlight=False)
    made_up = [
        record for record in report.records if record.agent == "plandag" and record.made_up()
    ]
    for record in made_up:
        stderr.print(
            f"plandag reported success on {record.workload} (run {record.run + 1}) with a "
            "wrong answer",
            markup=False,
            highlight=False,
        )
    raise typer.Exit(1 if made_up else 0)


def register(app: typer.Typer) -> None:
    """Add the ``bench`` command to ``app`` (the ``plandag`` typer app).

    Args:
        app: the typer application to add the command to.
    """

    @app.command("bench")
    def bench_command(
        workloads: Annotated[
            list[str] | None,
            typer.Argument(
                metavar="[WORKLOAD]...",
                help=f"Workloads to run (default all: {' '.join(WORKLOADS)}).",
            ),
        ] = None,
        runs: Annotated[int, typer.Option("--runs", min=1, help="Runs per workload.")] = 1,
        model: Annotated[
            str | None, typer.Option("--model", metavar="NAME", help="The model name.")
        ] = None,
        real: Annotated[
            bool, typer.Option("--real", help="Call the real Anthropic API (ANTHROPIC_API_KEY).")
        ] = False,
        out: Annotated[
            Path | None,
            typer.Option(
                "--out",
                metavar="DIR",
                help="Where RESULTS.md and bench.png go (default: the current folder).",
            ),
        ] = None,
        quick: Annotated[
            bool, typer.Option("--quick", help=f"Every latency x{QUICK_TIME_SCALE}.")
        ] = False,
        settings_file: Annotated[
            Path | None,
            typer.Option("--settings", metavar="FILE.toml", help="Settings to override."),
        ] = None,
        ttft: Annotated[
            float | None, typer.Option("--ttft", help="Time to first token, seconds.")
        ] = None,
        tokens_per_second: Annotated[
            float | None, typer.Option("--tokens-per-second", help="Output tokens per second.")
        ] = None,
        thought_tokens: Annotated[
            int | None, typer.Option("--thought-tokens", help="ReAct thought tokens per turn.")
        ] = None,
        search_mean: Annotated[
            float | None, typer.Option("--search-mean", help="Mean lookup latency, seconds.")
        ] = None,
        search_sigma: Annotated[
            float | None, typer.Option("--search-sigma", help="Log-normal shape of lookups.")
        ] = None,
        observation_chars: Annotated[
            int | None,
            typer.Option("--observation-chars", help="Abstract characters per lookup result."),
        ] = None,
        time_scale: Annotated[
            float | None, typer.Option("--time-scale", help="Multiply every latency.")
        ] = None,
        seed: Annotated[int | None, typer.Option("--seed", help="Latency seed.")] = None,
        max_seconds: Annotated[
            float, typer.Option("--max-seconds", help="Wall-clock cap per question, seconds.")
        ] = 600.0,
        tasks_file: Annotated[
            Path | None,
            typer.Option(
                "--tasks",
                metavar="TASKS.jsonl",
                help="Your own tasks, one JSON object a line: goal and a check of the answer.",
            ),
        ] = None,
        tools_file: Annotated[
            Path | None,
            typer.Option(
                "--tools", metavar="FILE.py", help="The tools both agents use (with --tasks)."
            ),
        ] = None,
        mcp: McpOption = None,
        base_url: Annotated[
            str | None,
            typer.Option("--base-url", metavar="URL", help="A Messages API server to call."),
        ] = None,
        prompt_cache: Annotated[
            bool,
            typer.Option(
                "--prompt-cache/--no-prompt-cache",
                help="Also run with prompt caching on for both agents; compare billed cost.",
            ),
        ] = True,
        as_json: Annotated[
            bool,
            typer.Option(
                "--json",
                help="Print one JSON document on stdout instead of the tables (settings, "
                "per workload and agent a summary, every run, the targets, files written).",
            ),
        ] = False,
        broken_tools: Annotated[
            bool,
            typer.Option(
                "--broken-tools",
                help="Run the workloads with their tools broken; report how each agent "
                "recovered (outcome, replans, retries, tokens, time).",
            ),
        ] = False,
        approve: Annotated[
            str | None,
            typer.Option(
                "--approve",
                metavar="auto|never",
                help="Tools with effects (--tools): auto approves writes within the current "
                "folder for both agents; never runs no effect. Required for such tools.",
            ),
        ] = None,
    ) -> None:
        """Run plandag and a sequential ReAct agent on the same workloads; compare."""

        def fail(message: str) -> typer.Exit:
            stderr.print(f"error: {message}", markup=False, highlight=False)
            return typer.Exit(EXIT_USAGE)

        if real and base_url is not None:
            raise fail("give --real or --base-url URL, not both")
        if real and not os.environ.get(API_KEY_VARIABLE):
            raise fail(f"--real calls the Anthropic API: set {API_KEY_VARIABLE}")
        if approve is not None and approve not in ("auto", "never"):
            raise fail(
                f"--approve {approve!r}: choose auto or never"
                + (" (nobody answers in a benchmark)" if approve == "ask" else "")
            )
        mode: ApproveMode | None = "auto" if approve == "auto" else None
        if approve == "never":
            mode = "never"
        if broken_tools and as_json:
            raise fail("--broken-tools prints its recovery table; it does not go with --json")
        chosen: list[str | Workload]
        line_errors: list[str] = []
        if tasks_file is not None:
            if broken_tools:
                raise fail(
                    "--broken-tools breaks the built-in workloads' tools; it does not go with "
                    "--tasks (break your own tools in FILE.py instead)"
                )
            if workloads:
                raise fail("give workload names or --tasks TASKS.jsonl, not both")
            if tools_file is None and not mcp and not _project_lists_servers():
                raise fail(
                    "--tasks needs --tools FILE.py or --mcp SERVER: the tools both agents use"
                )
            if not real and base_url is None:
                raise fail(
                    "--tasks needs a model: --real (the Anthropic API) or --base-url URL "
                    "(the simulated model knows only the built-in workloads)"
                )
            try:
                tasks, errors = read_tasks(tasks_file)
            except (OSError, UnicodeDecodeError) as error:
                raise fail(f"cannot read tasks file {tasks_file}: {error}") from None
            line_errors = [error.format(str(tasks_file)) for error in errors]
            for line in line_errors:
                stderr.print(f"error: {line}", markup=False, highlight=False)
            if not tasks:
                raise fail(f"{tasks_file}: no usable task; one JSON object a line, with a goal")
            try:
                registry = task_registry(tools_file)
            except ToolLoadError as error:
                raise fail(str(error)) from None
            from_mcp = add_mcp_tools(registry, mcp or [])
            sources = [f"--tools {tools_file}"] if tools_file is not None else []
            sources += ["the MCP servers"] if from_mcp else []
            refusal = effects_refusal(registry, " and ".join(sources), approve)
            if refusal is not None:
                if from_mcp:
                    refusal += (
                        " (a tool of an MCP server counts as irreversible unless its [[mcp]] "
                        "table declares less: [mcp.tools.NAME] effects)"
                    )
                raise fail(refusal)
            chosen = list(task_workloads(tasks, registry))
        else:
            if tools_file is not None:
                raise fail("--tools goes with --tasks: the built-in workloads bring their own")
            if mcp:
                raise fail("--mcp goes with --tasks: the built-in workloads bring their own tools")
            names = list(workloads or WORKLOADS)
            unknown = [name for name in names if name not in WORKLOADS]
            if unknown:
                raise fail(
                    f"unknown workload(s) {', '.join(unknown)}; known: {', '.join(WORKLOADS)}"
                )
            chosen = list(names)
        overrides: dict[str, Any] = {}
        try:
            if settings_file is not None:
                overrides.update(_read_settings(settings_file))
            flags = {
                "ttft_s": ttft,
                "tokens_per_second": tokens_per_second,
                "thought_tokens": thought_tokens,
                "search_mean_s": search_mean,
                "search_sigma": search_sigma,
                "observation_chars": observation_chars,
                "time_scale": QUICK_TIME_SCALE if quick and time_scale is None else time_scale,
                "seed": seed,
                "model": model,
            }
            overrides.update({key: value for key, value in flags.items() if value is not None})
            settings = BenchSettings.calibrated().with_overrides(overrides)
        except (ValueError, TypeError) as error:
            raise fail(str(error)) from None
        if not as_json:
            _print_table(stdout, "settings", [["setting", "value"], *map(list, settings.rows())])

        def progress(record: RunRecord) -> None:
            stderr.print(
                f"run {record.run + 1}/{runs} {record.workload} {record.agent}: "
                f"{'right' if record.success else 'WRONG'} in {record.wall_s:.2f} s, "
                f"{record.llm_calls} LLM call(s)",
                highlight=False,
            )

        report: BenchReport = anyio.run(
            lambda: run_bench(
                chosen,
                runs,
                settings,
                real=real,
                base_url=base_url,
                max_seconds=max_seconds,
                progress=progress,
                prompt_cache=prompt_cache and not broken_tools,
                broken=broken_tools,
                approve=mode,
            )
        )
        if broken_tools:
            _report_broken(report, out)
        if tasks_file is not None:
            report.add_total("all tasks")
            report.title = f"plandag vs sequential ReAct on {tasks_file.name}"
            report.per_task = True
            report.notes.extend(f"unusable task line: {line}" for line in line_errors)
        if not as_json:
            _print_table(stdout, "plandag vs ReAct", report.table_rows())
            if report.cached:
                _print_table(stdout, "billed cost, prompt caching off and on", report.cache_rows())
            if report.per_task:
                _print_table(stdout, "per task", report.check_rows())
            for line in report.target_lines():
                stdout.print(f"- {line}", highlight=False)
        folder = out if out is not None else Path.cwd()
        folder.mkdir(parents=True, exist_ok=True)
        note = write_chart(report, folder / "bench.png")
        write_results(
            folder / "RESULTS.md",
            report.markdown(chart=None if note else "bench.png", note=note or ""),
        )
        said = stderr if as_json else stdout
        said.print(f"wrote {folder / 'RESULTS.md'}", highlight=False)
        if note:
            stderr.print(note, markup=False, highlight=False)
        else:
            said.print(f"wrote {folder / 'bench.png'}", highlight=False)
        plandag_right = all(r.success for r in report.records if r.agent == "plandag")
        if as_json:
            document = bench_document(
                report,
                results=folder / "RESULTS.md",
                chart=None if note else folder / "bench.png",
                plandag_right=plandag_right,
            )
            sys.stdout.write(json.dumps(document, ensure_ascii=False, indent=2) + "\n")
        raise typer.Exit(0 if plandag_right and not line_errors else 1)

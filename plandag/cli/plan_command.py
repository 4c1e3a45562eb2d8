"""``plandag plan "TASK" -o PLAN.json``: a model writes the plan; nothing is executed
(docs/planning.md).

The planner (:class:`plandag.planner.planner.Planner`) asks the model for the plan in the
wire format with structured output, repairs it from the compiler's diagnostics at most twice,
and the plan is written as the verbose Plan JSON (readable, ``plandag check``/``exec`` take
it), then printed with its DAG (Mermaid, critical path marked, as ``plandag graph``).

The API key is read from ``ANTHROPIC_API_KEY`` (``--provider anthropic``, the default) or
``OPENAI_API_KEY`` (``--provider openai``; not needed with ``--base-url``, local servers take
none). A missing key is an error before anything runs (exit 2).

``--investigate`` first asks the model for a read-only investigation plan (tools without
effects only; a step with effects is a compile error sent back for repair), runs it under a
wall-clock cap (``--investigate-seconds``, default 60), and gives its step results to the
planner as quoted data after the trusted context
(:func:`plandag.planner.investigate.plan_with_investigation`). A line on stderr says what
the investigation ran. Nothing with effects ever runs, and the written plan never runs.

Exit codes: 0 the plan was written; 2 unusable arguments, a missing key, or a plan (the
investigation plan too) that still did not compile after the repairs (its diagnostics printed
like ``plandag check``); 1 the model call failed (after its retries), or its answer was cut
off at ``max_tokens``.

:func:`register` adds the command to the ``plandag`` typer app.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import anyio
import typer

from plandag.brakes.retry import RetryPolicy
from plandag.cli.common import command_registry, fail, install_model_settings, stderr
from plandag.cli.models_options import (
    OFFLINE,
    BaseUrlOption,
    ModelOption,
    OfflineOption,
    ProviderOption,
    model_client,
    offline_provider,
    planner_model,
    print_offline_note,
)
from plandag.cli.options import McpOption, ToolsOption
from plandag.config import load_settings
from plandag.dag.graph import critical_path, mermaid
from plandag.errors import InputError, PlanError, StepError
from plandag.planner.investigate import (
    DEFAULT_INVESTIGATION_SECONDS,
    Investigation,
    plan_with_investigation,
)
from plandag.planner.planner import Planner, PlanOutcome
from plandag.planner.prompt import format_diagnostics
from plandag.scheduler import RunLimits

__all__ = ["OFFLINE_GOAL_MARK", "offline_marked", "plan_document", "plan_result", "register"]

EXIT_FAILED = 1


OFFLINE_PLAN = (
    "offline (offline-extractive): the plan was built from the task's words, not by a model"
)
"""What the summary line of ``plan --offline`` adds."""


OFFLINE_GOAL_MARK = "[offline plan: offline-extractive, not a model's] "
"""What the goal of a plan written by ``plan --offline`` starts with: the plan file, and
every run of it (``exec``, ``plandag runs``), says it was made offline."""


def offline_marked(outcome: PlanOutcome) -> PlanOutcome:
    """``outcome`` with its plan's goal starting with :data:`OFFLINE_GOAL_MARK` (the plan
    schema has no other free field; ``check`` and ``exec`` read the goal as any goal)."""
    import dataclasses

    goal = outcome.plan.goal
    if goal.startswith(OFFLINE_GOAL_MARK):
        return outcome
    plan = outcome.plan.model_copy(update={"goal": OFFLINE_GOAL_MARK + goal})
    return dataclasses.replace(outcome, plan=plan)


def plan_document(outcome: PlanOutcome) -> dict[str, Any]:
    """The plan as verbose Plan JSON, as written to ``-o``: ``version`` first, then only the
    fields the plan sets (a param's ``default`` only when it has one).

    Args:
        outcome: the planner's outcome.

    Returns:
        A JSON-safe dict that ``plandag check`` and ``plandag exec`` read back as the same
        plan.
    """
    document: dict[str, Any] = {"version": outcome.plan.version}
    document.update(outcome.plan.model_dump(mode="json", exclude_unset=True))
    return document


def _graph_text(outcome: PlanOutcome) -> str:
    compiled = outcome.compiled
    path, length = critical_path(compiled.graph)
    return _mermaid(outcome) + _route_line(path, length)


def _route_line(path: list[int], length: float) -> str:
    route = " -> ".join(map(str, path)) or "none (empty plan)"
    steps = int(length)
    noun = "step" if steps == 1 else "steps"
    return f"%% critical path: {route} ({steps} {noun})\n"


def _mermaid(outcome: PlanOutcome) -> str:
    compiled = outcome.compiled
    path, _ = critical_path(compiled.graph)
    labels = {}
    for step_id, compiled_step in compiled.steps.items():
        description = compiled_step.step.description
        labels[step_id] = f"{step_id}: {compiled_step.step.tool}" + (
            f" - {description}" if description else ""
        )
    return mermaid(compiled.graph, labels, highlight=path)


def plan_result(
    outcome: PlanOutcome, output: Path, investigations: list[Investigation]
) -> dict[str, Any]:
    """The ``plandag plan --json`` document.

    Args:
        outcome: the planner's outcome.
        output: where the plan was written (``-o``).
        investigations: the ``--investigate`` run, when there was one.

    Returns:
        ``{"status": "planned", "output", "plan", "steps", "critical_path": {"steps",
        "length"}, "mermaid", "plans_asked", "calls", "output_tokens", "cost_usd",
        "investigation"}``: ``plan`` as written to ``output``, ``cost_usd`` in US dollars
        over the planning calls, ``investigation`` the one-line summary of the
        ``--investigate`` run or None.
    """
    path, length = critical_path(outcome.compiled.graph)
    return {
        "status": "planned",
        "output": str(output),
        "plan": plan_document(outcome),
        "steps": len(outcome.plan.steps),
        "critical_path": {"steps": list(path), "length": int(length)},
        "mermaid": _mermaid(outcome),
        "plans_asked": len(outcome.attempts),
        "calls": len(outcome.records),
        "output_tokens": outcome.output_tokens,
        "cost_usd": sum(record.cost_usd for record in outcome.records),
        "investigation": investigations[0].summary() if investigations else None,
    }


def register(app: typer.Typer) -> None:
    """Add the ``plan`` command to ``app`` (the ``plandag`` typer app).

    Args:
        app: the typer application to add the command to.
    """

    @app.command("plan")
    def plan_command(
        task: Annotated[str, typer.Argument(metavar="TASK", help="The task, in your words.")],
        output: Annotated[
            Path,
            typer.Option("--output", "-o", metavar="PLAN.json", help="Where to write the plan."),
        ],
        tools: ToolsOption = None,
        mcp: McpOption = None,
        context: Annotated[
            Path | None,
            typer.Option(
                "--context", metavar="FILE", help="Trusted context for the planner (a text file)."
            ),
        ] = None,
        provider: ProviderOption = "anthropic",
        offline: OfflineOption = False,
        model: ModelOption = None,
        base_url: BaseUrlOption = None,
        max_repairs: Annotated[
            int,
            typer.Option(
                "--max-repairs", metavar="N", min=0, help="Repairs of a plan that fails (2)."
            ),
        ] = 2,
        investigate_first: Annotated[
            bool,
            typer.Option(
                "--investigate",
                help="First run a read-only plan (tools without effects) to gather context; "
                "its results reach the planner as quoted data.",
            ),
        ] = False,
        investigate_seconds: Annotated[
            float,
            typer.Option(
                "--investigate-seconds",
                metavar="SECONDS",
                min=0.001,
                help="Wall-clock cap of the investigation run (60).",
            ),
        ] = DEFAULT_INVESTIGATION_SECONDS,
        http_allow: Annotated[
            list[str] | None,
            typer.Option(
                "--http-allow",
                metavar="HOST",
                help="A host the --investigate run's HTTP tools may reach (a glob of host "
                "names, repeatable; http_allow in the config). The read-only investigation "
                "reaches only these.",
            ),
        ] = None,
        max_steps: Annotated[
            int | None,
            typer.Option(
                "--max-steps",
                metavar="N",
                min=1,
                help="The most steps the plan may have (500); a longer plan does not compile.",
            ),
        ] = None,
        planner_max_tokens: Annotated[
            int | None,
            typer.Option(
                "--planner-max-tokens",
                metavar="N",
                min=1,
                help="Output tokens the planning call may take (4096, sized to plans; "
                "planner_max_tokens in the config).",
            ),
        ] = None,
        as_json: Annotated[bool, typer.Option("--json", help="Print JSON on stdout.")] = False,
    ) -> None:
        """Ask a model for a plan for TASK and write it; nothing is executed.

        The plan is compiled (and repaired from its diagnostics at most --max-repairs
        times), written to -o as Plan JSON, and printed with its DAG. With --investigate,
        tools without effects run first and their results reach the planner as quoted data;
        it reaches only the hosts of --http-allow (or http_allow in the config), and the
        plan written after it counts as written from outside content: its steps that send
        data out need a person's approval when run. --json prints one document instead
        of the plan and its DAG: status, output, plan, steps, critical_path, mermaid,
        plans_asked, calls, output_tokens, cost_usd (US dollars) and investigation; a plan
        that does not compile gives {"status": "invalid_plan", "diagnostics"} (exit 2).
        """
        try:
            settings = load_settings().with_flags(
                {
                    "http_allow": http_allow,
                    "max_steps": max_steps,
                    "planner_max_tokens": planner_max_tokens,
                }
            )
        except InputError as error:
            fail(str(error))
        install_model_settings(settings)
        provider = offline_provider(provider, offline, base_url)
        name = planner_model(provider, model)
        if provider == OFFLINE:
            print_offline_note()
        context_text = ""
        if context is not None:
            try:
                context_text = context.read_text(encoding="utf-8-sig")
            except (OSError, UnicodeDecodeError) as error:
                fail(f"cannot read --context {context}: {error}")
        # the built-ins, --tools and the MCP servers' tools only: what the planner is shown
        # is what the plan may use
        registry = command_registry(tools, resolve_installed=False, mcp=mcp or [])
        # Check where the plan goes before paying for it: a folder, or a folder that cannot be
        # made, is an error now rather than after the model's answer.
        if output.is_dir():
            fail(f"-o {output} is a folder; name the plan file, e.g. {output / 'plan.json'}")
        try:
            output.parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            fail(f"-o {output}: cannot create its folder ({error.strerror or error})")
        client = model_client(provider, base_url, registry)

        investigations: list[Investigation] = []

        async def make_plan() -> PlanOutcome:
            try:
                planner = Planner(
                    client,
                    name,
                    registry,
                    retry=RetryPolicy(),
                    max_repairs=max_repairs,
                    http_allow=settings["http_allow"],
                    max_steps=settings["max_steps"],
                    max_tokens=settings["planner_max_tokens"],
                )
                if not investigate_first:
                    return await planner.plan(task, context_text)

                def investigated(investigation: Investigation) -> None:
                    investigations.append(investigation)
                    stderr.print(investigation.summary(), markup=False)

                investigated_plan = await plan_with_investigation(
                    planner,
                    task,
                    context_text,
                    limits=RunLimits(max_seconds=investigate_seconds, heartbeat_every=None),
                    on_investigated=investigated,
                )
                return investigated_plan.plan
            finally:
                await client.aclose()

        try:
            outcome = anyio.run(make_plan)
        except PlanError as error:
            if as_json:
                document = {
                    "status": "invalid_plan",
                    "diagnostics": [diagnostic.as_dict() for diagnostic in error.diagnostics],
                }
                sys.stdout.write(json.dumps(document, ensure_ascii=False, indent=2) + "\n")
            for line in format_diagnostics(error.diagnostics).splitlines():
                stderr.print(line, markup=False)
            which = "investigation plan" if investigate_first and not investigations else "plan"
            fail(f"the model's {which} does not compile; nothing was written to {output}")
        except StepError as error:
            fail(f"{provider} {name}: {error}", EXIT_FAILED)
        if provider == OFFLINE:  # the plan file itself says it was made offline
            outcome = offline_marked(outcome)
        text = json.dumps(plan_document(outcome), ensure_ascii=False, indent=2) + "\n"
        try:
            output.parent.mkdir(parents=True, exist_ok=True)
            output.write_text(text, encoding="utf-8")
        except OSError as error:
            fail(f"cannot write {output}: {error}")
        if as_json:
            planned: dict[str, Any] = dict(plan_result(outcome, output, investigations))
            if provider == OFFLINE:
                planned["offline"] = True
            sys.stdout.write(json.dumps(planned, ensure_ascii=False, indent=2) + "\n")
        else:
            typer.echo(text + "\n" + _graph_text(outcome), nl=False)
        steps = len(outcome.plan.steps)
        calls = len(outcome.records)
        cost = sum(record.cost_usd for record in outcome.records)
        stderr.print(
            f"{output}: {steps} step{'' if steps == 1 else 's'}, "
            f"{len(outcome.attempts)} plan(s) asked, {calls} call(s), "
            f"{outcome.output_tokens} output tokens "
            f"({outcome.output_tokens_per_step:.1f} per step), ${cost:.4f}"
            + (f"; {OFFLINE_PLAN}" if provider == OFFLINE else ""),
            markup=False,
        )

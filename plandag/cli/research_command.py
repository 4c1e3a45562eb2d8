"""``plandag research QUESTION --corpus DIR``: subquestions as parallel branches over a
corpus, every citation checked in code, a Markdown report and a JSON record
(docs/guides/research.md).

1. The corpus folder is indexed, or its index reused
   (:class:`~plandag.jobs.research.corpus.Corpus`);
2. the :class:`~plandag.planner.agent.Agent` plans the question (``--provider``, ``--model``,
   ``--base-url`` as ``plandag run``) with the research context
   (:data:`~plandag.jobs.research.planning.RESEARCH_CONTEXT`) and the tools of this job
   only (the file and HTTP built-ins withheld:
   :func:`~plandag.jobs.research.planning.withheld_tools`; ``--tools`` files stay), runs
   the branches at once, replans a branch whose citations fail their check (within the
   caps), and runs the synthesis;
3. the report (``--output``, default ``research.md``) and its JSON record (the same name,
   ``.json``) are built from the run store: ``plandag research --from-run RUN_ID`` builds
   them again at any later time. ``plandag resume RUN_ID [--instruction TEXT]`` goes on
   with an escalated (or crashed, interrupted) research run: its corpus, index, models and
   report path are stored with it (:func:`plandag.jobs.research.run.research_segment`).

Brakes: the ``research`` row of :data:`plandag.brakes.JOB_BRAKES` ($2.00, 500,000 tokens,
30 min, stall 120 s), printed at the start; the write boundary is the report's folder, and
the plan may use no tool with effects (the report is written by plandag, not by a step).

Exit codes as ``plandag run``: 0 succeeded (the report holds the answer); 1 failed or
gave_up; 2 unusable arguments or a missing key; 3 timed_out or budget_exceeded; 5
escalated (the replan caps); 130/143 interrupted. A report is written whatever the outcome
(without an answer when the run has none: nothing is made up).
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from plandag.cli.common import (
    EXIT_CODES,
    EXIT_USAGE,
    boundary_words,
    brake_flags,
    command_settings,
    fail,
    print_brakes,
    run_limits_for,
    stderr,
    stdout,
)
from plandag.cli.models_options import (
    OFFLINE_SUMMARY,
    BaseUrlOption,
    OfflineOption,
    PlannerModelOption,
    ProviderOption,
    ResearchExecutorModelOption,
)
from plandag.cli.options import (
    HeartbeatEveryOption,
    HeartbeatOption,
    HttpAllowOption,
    JsonOption,
    MaxConcurrencyOption,
    MaxCostOption,
    MaxSecondsOption,
    MaxStepsOption,
    MaxTokensOption,
    McpOption,
    PlanCostFactorOption,
    PlannerMaxTokensOption,
    PlanTimeFactorOption,
    RetriesOption,
    RpmOption,
    SlowStartOption,
    StallAfterOption,
    StopOnStallOption,
    ToolsOption,
    TpmOption,
)

if TYPE_CHECKING:
    from plandag.jobs.research.report import Report
    from plandag.store import Store

__all__ = ["register", "write_report"]


def write_report(report: Report, output: Path) -> Path:
    """Write the Markdown report to ``output`` and its JSON record beside it (``.json``),
    each atomically (:func:`plandag.jobs.research.run.write_report`). Returns the record's
    path.

    Raises:
        OSError: the folder cannot be written.
    """
    from plandag.jobs.research.run import write_report as write

    return write(report, output)


def _rebuild(store: Store, run_text: str, output: Path | None, as_json: bool) -> None:
    """``--from-run``: the report of a stored run, built again."""
    from plandag.errors import InputError
    from plandag.jobs.research.corpus import Corpus
    from plandag.jobs.research.report import build_report, load_run

    try:
        run_id = store.resolve_run_id(run_text)
        row = store.run(run_id)
    except (InputError, KeyError) as error:
        fail(f"--from-run {run_text}: {error}")
    if row.command != "research":
        fail(
            f"--from-run {run_id}: a `plandag {row.command}` run, not a research run; give the "
            "id of a `plandag research` run (`plandag runs` lists them)"
        )
    stored = load_run(store, run_id)
    research = row.options.get("research") or {}
    lookup = None
    folder = research.get("corpus")
    if folder and Path(folder).is_dir():
        try:
            corpus = Corpus.open(folder, index=research.get("index"))
            lookup = corpus.chunk
        except InputError:
            lookup = None
    report = build_report(stored, lookup)
    target = output or Path(research.get("output") or "research.md")
    _write(report, target)
    if as_json:
        stdout.print_json(json.dumps(report.record, ensure_ascii=False))


def _write(report: Report, output: Path) -> None:
    try:
        record = write_report(report, output)
    except OSError as error:
        run_id = report.record["run_id"]
        fail(
            f"cannot write the report {output}: {error.strerror or error}; the run is in the "
            f"store: `plandag research --from-run {run_id} --output FILE` writes it elsewhere",
            1,
        )
    stderr.print(f"report: {output} (record: {record})", markup=False, highlight=False)


def register(app: typer.Typer) -> None:
    """Add the ``research`` command to ``app`` (the ``plandag`` typer app).

    Args:
        app: the typer application to add the command to.
    """

    @app.command("research")
    def research_command(
        question: Annotated[
            str | None, typer.Argument(metavar="QUESTION", help="The research question.")
        ] = None,
        corpus: Annotated[
            Path | None,
            typer.Option(
                "--corpus",
                metavar="DIR",
                help="Folder of .md, .txt, .html and .pdf documents to research.",
            ),
        ] = None,
        output: Annotated[
            Path | None,
            typer.Option(
                "--output",
                metavar="FILE",
                help="The Markdown report (default research.md); the JSON record is written "
                "beside it with the suffix .json.",
            ),
        ] = None,
        index: Annotated[
            Path | None,
            typer.Option(
                "--index",
                metavar="FILE",
                help="The corpus index (SQLite; default in the user's cache folder).",
            ),
        ] = None,
        from_run: Annotated[
            str | None,
            typer.Option(
                "--from-run",
                metavar="RUN_ID",
                help="Build the report of a stored research run again; nothing runs.",
            ),
        ] = None,
        provider: ProviderOption = "anthropic",
        offline: OfflineOption = False,
        model: PlannerModelOption = None,
        base_url: BaseUrlOption = None,
        executor_model: ResearchExecutorModelOption = None,
        tools: ToolsOption = None,
        mcp: McpOption = None,
        http_allow: HttpAllowOption = None,
        max_seconds: MaxSecondsOption = None,
        max_cost: MaxCostOption = None,
        max_tokens: MaxTokensOption = None,
        rpm: RpmOption = None,
        tpm: TpmOption = None,
        max_concurrency: MaxConcurrencyOption = None,
        max_steps: MaxStepsOption = None,
        retries: RetriesOption = None,
        heartbeat: HeartbeatOption = None,
        heartbeat_every: HeartbeatEveryOption = None,
        stall_after: StallAfterOption = None,
        stop_on_stall: StopOnStallOption = None,
        plan_cost_factor: PlanCostFactorOption = None,
        plan_time_factor: PlanTimeFactorOption = None,
        slow_start: SlowStartOption = None,
        planner_max_tokens: PlannerMaxTokensOption = None,
        as_json: JsonOption = False,
        store: Annotated[
            Path | None,
            typer.Option(
                "--store",
                metavar="FILE",
                help="The run store (default: $PLANDAG_STORE or the user's data folder).",
            ),
        ] = None,
    ) -> None:
        """Research QUESTION over a folder of documents; write a report with checked citations.

        The planner splits the question into subquestions, each an independent branch
        (search, read, answer) run in parallel, then a synthesis. Every quote of every
        answer is checked in code against the chunk it cites (exact, or after whitespace
        and case normalisation, reported as such) with offsets computed by plandag; an
        answer with an unsupported claim fails its check and its branch is replanned (at
        most 3 replans). The report (--output, default research.md) holds the answer, a
        methodology generated from the plan and the run store, and the references; the
        JSON record is written beside it. `plandag research --from-run RUN_ID` builds the
        report of a stored run again.
        """
        from plandag.cli.durable import open_cli_store

        if from_run is not None:
            if question is not None or corpus is not None:
                fail("--from-run rebuilds a stored run's report: give no QUESTION or --corpus")
            run_store = open_cli_store(store)
            try:
                _rebuild(run_store, from_run, output, as_json)
            finally:
                run_store.close()
            return
        if not question or not question.strip():
            fail("give the research QUESTION (or --from-run RUN_ID to rebuild a report)")
        if corpus is None:
            fail("--corpus DIR is required: the folder of documents to research")
        from plandag.cli.models_options import executor_for, offline_provider, planner_model
        from plandag.errors import InputError

        provider = offline_provider(provider, offline, base_url)
        name = planner_model(provider, model, executor_model=executor_model)
        from plandag.jobs.research.run import check_output

        try:
            target, folder = check_output(output if output is not None else Path("research.md"))
        except InputError as error:
            fail(f"--{error}")
        settings = command_settings(
            {
                "write_boundary": [str(folder)],
                "http_allow": http_allow,
                **brake_flags(
                    max_seconds=max_seconds,
                    max_cost=max_cost,
                    max_tokens=max_tokens,
                    rpm=rpm,
                    tpm=tpm,
                    max_concurrency=max_concurrency,
                    max_steps=max_steps,
                    retries=retries,
                    heartbeat=heartbeat,
                    heartbeat_every=heartbeat_every,
                    stall_after=stall_after,
                    stop_on_stall=stop_on_stall,
                    plan_cost_factor=plan_cost_factor,
                    plan_time_factor=plan_time_factor,
                    slow_start=slow_start,
                ),
                "planner_max_tokens": planner_max_tokens,
                "executor_model": executor_model,
            },
            "research",
        )
        _run(
            question=question.strip(),
            corpus_folder=corpus,
            index=index,
            target=target,
            folder=folder,
            provider=provider,
            name=name,
            base_url=base_url,
            executor=executor_for(provider, name, settings["executor_model"]),
            tools=tools,
            mcp=mcp or [],
            settings=settings,
            store=store,
            as_json=as_json,
        )


def _run(
    *,
    question: str,
    corpus_folder: Path,
    index: Path | None,
    target: Path,
    folder: Path,
    provider: str,
    name: str,
    base_url: str | None,
    executor: str,
    tools: list[Path] | None,
    mcp: list[str],
    settings: Any,
    store: Path | None,
    as_json: bool,
) -> None:
    from plandag.cli.common import command_registry, write_boundary_for
    from plandag.cli.durable import open_cli_store
    from plandag.cli.models_options import (
        OFFLINE,
        model_client,
        print_offline_note,
        require_model_key,
    )
    from plandag.cli.signals import Interruptible, exit_code_for_signal
    from plandag.cli.watchdog import deadline_guard
    from plandag.errors import InputError
    from plandag.jobs.research.corpus import Corpus
    from plandag.jobs.research.run import ResearchRun, research_options
    from plandag.runs.options import mcp_fields
    from plandag.scheduler import JsonlHeartbeatWriter
    from plandag.scheduler.events import Observer

    require_model_key(provider, base_url)  # before the corpus is indexed
    if provider == OFFLINE:
        print_offline_note()
    try:
        opened = Corpus.open(corpus_folder, index=index)
    except InputError as error:
        fail(str(error))
    update = opened.update
    documents = opened.documents()
    skipped = [document for document in documents if document.status == "skipped"]
    state = (
        "reused"
        if update.reused
        else f"updated: {len(update.added)} added, {len(update.modified)} modified, "
        f"{len(update.removed)} removed"
    )
    stderr.print(
        f"corpus {opened.folder}: {len(documents) - len(skipped)} document(s), "
        f"{opened.chunk_count()} chunk(s); index {opened.index_path} {state}",
        markup=False,
        highlight=False,
    )
    for document in skipped:
        stderr.print(f"skipped {document.path}: {document.error}", markup=False, highlight=False)
    if opened.chunk_count() == 0:
        opened.close()
        fail(
            f"--corpus {opened.folder}: no readable document (.md, .txt, .html, .pdf) with "
            "text; add documents to the folder"
            + (f" ({len(skipped)} skipped, listed above)" if skipped else "")
        )
    from plandag.jobs.research.planning import withheld_tools

    registry = command_registry(
        tools,
        applications=("research",),
        resolve_installed=False,
        withhold=withheld_tools(),
        mcp=mcp,
    )
    boundary = write_boundary_for(settings["write_boundary"], Path.cwd())
    limits = run_limits_for(settings)
    print_brakes(
        settings,
        boundary_words(None, folder),
        [(name, provider, base_url), (executor, provider, base_url)],
    )
    observers: list[Observer] = []
    if settings["heartbeat"]:
        heartbeat_file = Path(settings["heartbeat"])
        if not heartbeat_file.parent.is_dir():
            fail(f"--heartbeat {heartbeat_file}: its folder does not exist")
        observers.append(JsonlHeartbeatWriter(heartbeat_file))
    client = model_client(provider, base_url, registry)  # a missing key stops here
    run_store = open_cli_store(store)
    options = research_options(
        limits=limits,
        folder=folder,
        provider=provider,
        model=name,
        base_url=base_url,
        executor_model=executor,
        corpus=opened,
        output=target,
        tools=tools or (),
        retries=settings["retries"],
        max_concurrency=settings["max_concurrency"],
        max_steps=settings["max_steps"],
        http_allow=settings["http_allow"],
    )
    options.update(mcp_fields(registry))
    run = ResearchRun(
        run_store,
        question,
        opened,
        client=client,
        model=name,
        executor_model=executor,
        registry=registry,
        limits=limits,
        options=options,
        write_boundary=boundary,
        retries=settings["retries"],
        max_concurrency=settings["max_concurrency"],
        max_steps=settings["max_steps"],
        http_allow=settings["http_allow"],
        planner_max_tokens=settings["planner_max_tokens"],
        observers=observers,
    )
    run_id = run.run_id
    try:
        with deadline_guard(run_store.path):
            outcome = Interruptible(functools.partial(run.work)).run()
        report = run.finish(outcome.result)
    finally:
        run_store.close()
        opened.close()
    _write(report, target)
    result = outcome.result
    status = result.status if result is not None else "interrupted"
    failure = report.record.get("failure")
    stderr.print(
        f"{status}: run {run_id}, {len(report.record['subquestions'])} subquestion(s), "
        f"{len(report.record['replans'])} replan(s), {report.record['spend']['total_tokens']:,} "
        f"tokens, ${report.record['spend']['total_usd']:.4f}"
        + (f"; no answer came through: {failure}" if failure else "")
        + (f"; {OFFLINE_SUMMARY}" if report.record.get("offline") else ""),
        markup=False,
        highlight=False,
    )
    if as_json:
        stdout.print_json(json.dumps(report.record, ensure_ascii=False))
    elif report.record["answer"] is not None:
        stdout.print(report.record["answer"], markup=False, highlight=False)
    if outcome.signal is not None:
        raise typer.Exit(exit_code_for_signal(outcome.signal))
    if result is None:
        raise typer.Exit(130)
    if result.plan_did_not_compile:
        raise typer.Exit(EXIT_USAGE)
    raise typer.Exit(EXIT_CODES.get(result.status, 1))

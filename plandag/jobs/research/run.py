"""Research from Python: :func:`research` (``plandag.research``), and the run both it and
``plandag research`` make (:class:`ResearchRun`) (docs/guides/research.md).

A research run is a planned run (the :class:`~plandag.planner.agent.Agent`) with:

* the corpus bound for the ``search`` and ``read`` tools and the citation checks
  (:func:`~plandag.jobs.research.tools.use_corpus`);
* the tools of this job only: the built-ins that stay inside the run (the file and HTTP
  tools are withheld: :func:`~plandag.jobs.research.planning.withheld_tools`; the corpus
  is reached through ``search`` and ``read``), ``research``, and the user's tools files;
* no tool with effects (the report is written by plandag, not by a step) and the write
  boundary of the report's folder;
* the ``research`` row of :data:`plandag.brakes.JOB_BRAKES` ($2.00, 500,000 tokens, 30 min,
  stall 120 s) unless the caller gives its own limits;
* everything a later segment needs stored with the run (``run.options``): the planner's
  and the executor model's provider, model and base URL (never a key), and the corpus
  folder, its index and the report's path (``research``), so ``plandag resume RUN_ID``
  (:func:`research_segment`) and ``plandag research --from-run RUN_ID`` work on it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from plandag.errors import InputError
from plandag.models.offline import OFFLINE_MODEL, OFFLINE_PROVIDER

if TYPE_CHECKING:
    from plandag.approval import Approver
    from plandag.jobs.research.corpus import Corpus
    from plandag.jobs.research.report import Report
    from plandag.planner.agent import AgentResult
    from plandag.scheduler import RunLimits
    from plandag.scheduler.events import Observer
    from plandag.store import Store

__all__ = [
    "ResearchResult",
    "ResearchRun",
    "check_output",
    "model_client",
    "research",
    "research_options",
    "research_segment",
    "write_report",
]

DEFAULT_PLANNER_MODELS: Mapping[str, str] = {
    "anthropic": "claude-sonnet-4-6",
    OFFLINE_PROVIDER: OFFLINE_MODEL,
}
"""The planner's model by provider when none is given (``openai`` needs one)."""


@dataclasses.dataclass(frozen=True)
class ResearchResult:
    """What :func:`research` returns.

    Attributes:
        run_id: the run's id in the run store (``plandag runs``, ``plandag research
            --from-run``, ``plandag resume``).
        status: the run's final state (``succeeded``, ``escalated``, ``failed``,
            ``timed_out``, ``budget_exceeded``...).
        answer: the synthesis' answer text, or None when the run has none (nothing is made
            up).
        report: the Markdown report and its JSON record
            (:class:`~plandag.jobs.research.report.Report`).
        report_path: where the Markdown report was written.
        record_path: where the JSON record was written (``report_path`` with ``.json``).
        result: what the agent produced (plan versions, replans, model calls), or None
            when the run was cancelled before it could report.
    """

    run_id: str
    status: str
    answer: str | None
    report: Report
    report_path: Path
    record_path: Path
    result: AgentResult | None


def check_output(output: str | Path) -> tuple[Path, Path]:
    """The report's path and its folder (the run's write boundary), checked before anything
    runs; a missing folder is created (as ``plandag extract`` creates its output's).

    Raises:
        InputError: ``output`` (or its ``.json`` record) is a folder, its folder cannot be
            created (a file is in the way) or cannot be written (what, where, and what to
            do).
    """
    target = Path(output).expanduser()
    record = target.with_suffix(".json")
    for path in (target, record):
        if path.is_dir():
            raise InputError(f"output {target}: {path} is a folder; give the report's file name")
    folder = target.resolve().parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        reason = (
            "a file is in the way"
            if isinstance(error, FileExistsError | NotADirectoryError)
            else error.strerror or str(error)
        )
        raise InputError(
            f"output {target}: its folder {folder} cannot be created ({reason}); give "
            "--output a file in a folder you can write"
        ) from error
    if not os.access(folder, os.W_OK | os.X_OK):
        raise InputError(
            f"output {target}: its folder {folder} cannot be written; give --output a file "
            "in a folder you can write"
        )
    for existing in (target, record):
        if existing.exists() and not os.access(existing, os.W_OK):
            raise InputError(
                f"output {target}: {existing} exists and cannot be written; remove it or "
                "give another --output"
            )
    return target, folder


def research_options(
    *,
    limits: RunLimits,
    folder: Path,
    provider: str,
    model: str,
    base_url: str | None,
    executor_model: str,
    corpus: Corpus,
    output: Path,
    tools: Sequence[str | Path] = (),
    retries: int = 2,
    max_concurrency: int | None = None,
    max_steps: int | None = None,
    http_allow: Sequence[str] | None = None,
) -> dict[str, Any]:
    """The options stored with a research run (``run.options``): the
    :class:`~plandag.runs.options.RunOptions` of a read-only planned run (``planner`` and
    ``executor``: provider, model, base URL; never a key; ``withheld_tools``: the file and
    HTTP tools, left out of every segment's registry) plus ``research``: ``{"corpus",
    "index", "output"}`` (absolute paths), which a later segment re-binds."""
    from plandag.dag.limits import DEFAULT_MAX_STEPS
    from plandag.jobs.research.planning import RESEARCH_CONTEXT, withheld_tools
    from plandag.runs.options import RunOptions
    from plandag.runs.stored import tools_record

    files, tools_sha256 = tools_record(tools)
    options = RunOptions(
        tools=files,
        tools_sha256=tools_sha256,
        write_boundary=(str(folder),),
        base=str(Path.cwd()),
        read_only=True,
        limits=limits.as_json(),
        retries=retries,
        max_concurrency=max_concurrency,
        max_steps=max_steps if max_steps is not None else DEFAULT_MAX_STEPS,
        planner={
            "provider": provider,
            "model": model,
            "base_url": base_url,
            "context": RESEARCH_CONTEXT,
            "executor_model": executor_model,
        },
        executor={
            "provider": provider,
            "model": model,
            "base_url": base_url,
            "executor_model": executor_model,
        },
        http_allow=tuple(http_allow) if http_allow else None,
        withheld_tools=withheld_tools(),
    )
    return {
        **options.as_json(),
        "research": {
            "corpus": str(corpus.folder),
            "index": str(corpus.index_path),
            "output": str(output.resolve()),
        },
    }


class ResearchRun:
    """One research run recorded in a run store: made by :meth:`start`, run by
    :meth:`work` (a coroutine function, so the command line can run it under its signal
    handling), closed by :meth:`finish`, which records it and builds the report.

    Args:
        store: the open run store.
        question: the research question (not empty).
        corpus: the opened corpus (:meth:`~plandag.jobs.research.corpus.Corpus.open`).
        client: the provider's client (planner and ``llm`` steps alike).
        model: the planner's model.
        executor_model: the model of the plan's ``llm`` steps.
        registry: the tools and checks the planner is given
            (:func:`~plandag.jobs.research.planning.research_registry`, the user's tools
            loaded into it); ``agent`` steps may list only these too.
        limits: the run's brakes.
        options: what is stored with the run (:func:`research_options`).
        write_boundary: the report's folder.
        retries, max_concurrency, max_steps, http_allow, planner_max_tokens: as
            :class:`~plandag.planner.agent.Agent` takes them.
        approve: as :class:`~plandag.planner.agent.Agent` takes it (the plan is
            read-only, so it never asks for its effects).
        approver: as :class:`~plandag.planner.agent.Agent` takes it.
        observers: run event observers (progress, heartbeat...).
    """

    def __init__(
        self,
        store: Store,
        question: str,
        corpus: Corpus,
        *,
        client: Any,
        model: str,
        executor_model: str,
        registry: Any,
        limits: RunLimits,
        options: Mapping[str, Any],
        write_boundary: Any,
        retries: int = 2,
        max_concurrency: int | None = None,
        max_steps: int | None = None,
        http_allow: Sequence[str] | None = None,
        planner_max_tokens: int | None = None,
        approve: Any = None,
        approver: Approver | None = None,
        observers: Sequence[Observer] = (),
    ) -> None:
        from plandag.brakes import DEFAULT_PLANNER_MAX_TOKENS
        from plandag.brakes.retry import RetryPolicy
        from plandag.dag.limits import DEFAULT_MAX_STEPS
        from plandag.executors import ModelAccess
        from plandag.jobs.research.planning import research_params
        from plandag.planner.agent import Agent
        from plandag.runs.planned import SessionRecorder
        from plandag.runs.traces import trace_factory

        self.store = store
        self.question = question
        self.corpus = corpus
        self.client = client
        self.run_id = uuid.uuid4().hex[:16]
        self.params = research_params()
        self.write_boundary = write_boundary
        store.create_run(
            self.run_id,
            command="research",
            goal=question,
            params=self.params,
            options=dict(options),
        )
        self.writer = trace_factory(store, False)(self.run_id, 0)
        self.writer.run_started("research", question, self.params)
        recorder = SessionRecorder(store, self.run_id, self.params, write_boundary=write_boundary)
        self.agent = Agent(
            client,
            model,
            registry,
            limits=limits,
            retry=RetryPolicy(retries=retries),
            observers=[*observers, recorder, self.writer],
            max_concurrency=max_concurrency,
            read_only=True,
            write_boundary=write_boundary,
            http_allow=http_allow,
            max_steps=max_steps if max_steps is not None else DEFAULT_MAX_STEPS,
            plan_max_tokens=planner_max_tokens or DEFAULT_PLANNER_MAX_TOKENS,
            on_session=recorder.bind,
            # each plan version is stored before its steps start: a killed run can resume
            on_plan_version=recorder.plan_version,
            escalate="person",
            approve=approve,
            approver=approver,
            tool_durations=store.tool_durations(registry.tools),
            models=ModelAccess(client, executor_model, registry=registry),
        )

    async def work(self) -> AgentResult:
        """Plan and run the question with the corpus bound; the client is closed after."""
        import anyio

        from plandag.jobs.research.planning import RESEARCH_CONTEXT
        from plandag.jobs.research.tools import use_corpus

        try:
            with use_corpus(self.corpus):
                return await self.agent.run(
                    self.question, RESEARCH_CONTEXT, self.params, run_id=self.run_id
                )
        finally:
            with anyio.CancelScope(shield=True):  # close even when interrupted
                await self.client.aclose()

    def finish(self, result: AgentResult | None) -> Report:
        """Record what the run produced (``interrupted`` when ``result`` is None), close the
        trace, and build the report from the store."""
        from plandag.jobs.research.report import build_report, load_run
        from plandag.runs.planned import record_agent_run

        try:
            if result is not None:
                record_agent_run(
                    self.store,
                    self.writer,
                    self.run_id,
                    result,
                    write_boundary=self.write_boundary,
                    params=self.params,
                    hooks=None,
                )
            else:
                self.store.update_run(self.run_id, status="interrupted", pid=None)
            return build_report(load_run(self.store, self.run_id), self.corpus.chunk)
        finally:
            self.writer.close()


def model_client(provider: str, base_url: str | None, key: str | None) -> Any:
    """The provider's client (``max_retries=0``: the scheduler's retry policy decides;
    :func:`plandag.executors.access.provider_client`)."""
    from plandag.executors.access import provider_client

    return provider_client(provider, base_url, key)


def write_report(report: Report, output: Path) -> Path:
    """Write the Markdown report to ``output`` and its JSON record beside it (``.json``),
    each atomically (a temporary file renamed). Returns the record's path.

    Raises:
        OSError: the folder cannot be written.
    """
    import json

    from plandag.tools.boundary import WriteBoundary
    from plandag.tools.writing import write_atomic

    record = output.with_suffix(".json")
    boundary = WriteBoundary.from_specs([output.resolve().parent])
    write_atomic(boundary, output.resolve(), report.markdown.encode("utf-8"))
    text = json.dumps(report.record, ensure_ascii=False, indent=2) + "\n"
    write_atomic(boundary, record.resolve(), text.encode("utf-8"))
    return record


def research(
    question: str,
    *,
    corpus: str | Path,
    provider: str = "anthropic",
    model: str | None = None,
    base_url: str | None = None,
    executor_model: str | None = None,
    output: str | Path = "research.md",
    index: str | Path | None = None,
    store: str | Path | None = None,
    limits: RunLimits | None = None,
    retries: int = 2,
    max_concurrency: int | None = None,
    max_steps: int | None = None,
    http_allow: Sequence[str] | None = None,
    tools: Sequence[str | Path] = (),
    planner_max_tokens: int | None = None,
    approve: Any = None,
    approver: Approver | None = None,
    observers: Sequence[Observer] = (),
) -> ResearchResult:
    """Research ``question`` over the documents of ``corpus``: the Python form of
    ``plandag research QUESTION --corpus DIR``, with the same safe defaults.

    The planner splits the question into subquestions, each an independent branch
    (``search`` → ``read`` → an ``llm`` answer whose every quote is checked in code against
    its chunk), run in parallel, then a synthesis; a branch whose citations fail is
    replanned (at most 3 replans). The report (``output``) and its JSON record are written
    whatever the outcome (without an answer when the run has none).

    Defaults, as on the command line: the ``research`` brakes of
    :data:`plandag.brakes.JOB_BRAKES` ($2.00, 500,000 tokens, 30 min, stall 120 s;
    ``limits=RunLimits.for_job("research", ...)`` to change one, ``UNLIMITED`` to lift
    one); no tool with effects; the write boundary is the report's folder; the run is
    recorded in the default run store (``$PLANDAG_STORE`` or the user's data folder), so
    ``plandag research --from-run RUN_ID`` and ``plandag resume RUN_ID`` work on it.

    Args:
        question: the research question (not empty).
        corpus: the folder of ``.md``, ``.txt``, ``.html`` and ``.pdf`` documents.
        provider: ``anthropic``, ``openai`` (an OpenAI-compatible server) or ``offline``
            (the offline model: answers are extracts of the chunks read, no key; the report
            says so).
        model: the planner's model (default ``claude-sonnet-4-6`` with ``anthropic``;
            required with ``openai``).
        base_url: the provider API's base URL (a local server), or None.
        executor_model: the model of the ``llm`` steps (default ``claude-haiku-4-5`` with
            ``anthropic``, ``model`` with ``openai``).
        output: the Markdown report's path; the JSON record is written beside it
            (``.json``). Its folder is created when missing.
        index: the corpus index (SQLite); default in the user's cache folder.
        store: the run store's path; default ``$PLANDAG_STORE`` or the user's data folder.
        limits: the run's brakes; default ``RunLimits.for_job("research")``.
        retries: retries of a failed step and of a model call (>= 0).
        max_concurrency: steps at once, or None.
        max_steps: the most steps the run may have (default 500).
        http_allow: hosts a plugged-in web search may reach (host globs).
        tools: the user's tools files (``.py``), added to the research tools.
        planner_max_tokens: output tokens of a planning call (default 4096).
        approve: as :class:`~plandag.planner.agent.Agent` takes it (the plan may use no
            tool with effects, so a research plan never asks for them).
        approver: as :class:`~plandag.planner.agent.Agent` takes it.
        observers: run event observers.

    Returns:
        A :class:`ResearchResult`.

    Raises:
        ValueError: an empty question, an unknown provider, no model for ``openai``, or a
            ``base_url`` or another model with ``offline``.
        InputError: the corpus folder is missing, empty or holds no readable document; the
            output is a folder, or its folder cannot be created or written; the store
            cannot be opened.
        ToolLoadError: a tools file cannot be loaded.
        MissingAPIKeyError: the provider's key is not set (nothing has run).
        OSError: the report could not be written (the run is in the store:
            ``plandag research --from-run RUN_ID`` writes it again).
    """
    import anyio

    from plandag.executors.access import executor_model_for, require_key
    from plandag.jobs.research.corpus import Corpus
    from plandag.jobs.research.planning import research_registry
    from plandag.models.offline import load_offline_client
    from plandag.scheduler import RunLimits
    from plandag.store import open_store
    from plandag.tools.boundary import WriteBoundary

    if not question or not question.strip():
        raise ValueError("research: the question is empty; give the question to research")
    if provider not in ("anthropic", "openai", OFFLINE_PROVIDER):
        raise ValueError(f"research: provider {provider!r}: choose anthropic, openai or offline")
    if provider == OFFLINE_PROVIDER and (
        base_url is not None or model not in (None, OFFLINE_MODEL)
    ):
        raise ValueError(
            f"research: provider {OFFLINE_PROVIDER!r} runs in the process: give no base_url "
            f"and no model other than {OFFLINE_MODEL!r}"
        )
    name = model or DEFAULT_PLANNER_MODELS.get(provider)
    if name is None:
        raise ValueError(f"research: give model= with provider {provider!r}")
    target, folder = check_output(output)
    executor = executor_model_for(provider, name, executor_model)
    key = require_key(provider, base_url)  # before the corpus is indexed
    registry = research_registry()
    for item in tools:
        registry.load_file(item)
    run_limits = limits if limits is not None else RunLimits.for_job("research")
    opened = Corpus.open(corpus, index=index)
    try:
        if opened.chunk_count() == 0:
            raise InputError(
                f"corpus {opened.folder}: no readable document (.md, .txt, .html, .pdf) "
                "with text; add documents to the folder"
            )
        options = research_options(
            limits=run_limits,
            folder=folder,
            provider=provider,
            model=name,
            base_url=base_url,
            executor_model=executor,
            corpus=opened,
            output=target,
            tools=tools,
            retries=retries,
            max_concurrency=max_concurrency,
            max_steps=max_steps,
            http_allow=http_allow,
        )
        client = (
            load_offline_client(registry)
            if provider == OFFLINE_PROVIDER
            else model_client(provider, base_url, key)
        )
        with open_store(store) as run_store:
            run = ResearchRun(
                run_store,
                question.strip(),
                opened,
                client=client,
                model=name,
                executor_model=executor,
                registry=registry,
                limits=run_limits,
                options=options,
                write_boundary=WriteBoundary.from_specs([folder]),
                retries=retries,
                max_concurrency=max_concurrency,
                max_steps=max_steps,
                http_allow=http_allow,
                planner_max_tokens=planner_max_tokens,
                approve=approve,
                approver=approver,
                observers=observers,
            )
            result: AgentResult | None = None
            try:
                result = anyio.run(run.work)
            finally:
                report = run.finish(result)
    finally:
        opened.close()
    record_path = write_report(report, target)
    return ResearchResult(
        run_id=run.run_id,
        status=result.status if result is not None else "interrupted",
        answer=report.record["answer"],
        report=report,
        report_path=target,
        record_path=record_path,
        result=result,
    )


@contextlib.contextmanager
def research_segment(
    store: Store, run_id: str, row: Any, *, say: Callable[[str], None]
) -> Iterator[None]:
    """A later segment of a research run (``plandag resume RUN_ID``): its corpus opened
    again from the run's options and bound for the research tools and checks while the
    segment runs; when it ends, however it ends, the report and its record are built again
    from the store and written to the run's report path (``say`` is given where they were
    written, or why they could not be).

    Raises:
        InputError: (on entering, before anything runs) the run stored no corpus folder,
            or the folder or its index is gone: what, where, what to do.
    """
    from plandag.jobs.research.corpus import Corpus
    from plandag.jobs.research.report import build_report, load_run
    from plandag.jobs.research.tools import use_corpus

    research = row.options.get("research") or {}
    folder = research.get("corpus")
    if not folder:
        raise InputError(
            f"run {run_id}: a research run that did not store its corpus folder (made by an "
            "older plandag); start it again with `plandag research QUESTION --corpus DIR`"
        )
    if not Path(folder).is_dir():
        raise InputError(
            f"run {run_id}: its corpus folder {folder} does not exist any more; put it back "
            f"there, then run `plandag resume {run_id}` again (or start a new `plandag "
            "research` run on the folder where it is now)"
        )
    try:
        corpus = Corpus.open(folder, index=research.get("index"))
    except InputError as error:
        raise InputError(f"run {run_id}: {error}") from error
    output = Path(research.get("output") or "research.md")
    try:
        with use_corpus(corpus):
            yield
    finally:
        try:
            after = store.run(run_id)
            ran = (after.status, after.segment, after.updated) != (
                row.status,
                row.segment,
                row.updated,
            )
            report = build_report(load_run(store, run_id), corpus.chunk) if ran else None
        finally:
            corpus.close()
        if report is not None:  # written whatever ended the segment (its exit code stands)
            try:
                record = write_report(report, output)
            except OSError as error:
                say(
                    f"cannot write the report {output}: {error.strerror or error}; `plandag "
                    f"research --from-run {run_id} --output FILE` writes it elsewhere"
                )
            else:
                say(f"report: {output} (record: {record})")

"""``plandag extract contracts``: fields of contracts in batches, each value with its evidence
(docs/guides/contracts.md), recorded in the run store as one run with one row per contract and a
trace with one bar per contract."""

from __future__ import annotations

import json
import signal
import sys
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from plandag.brakes import cap_or_none
from plandag.cli.batch import batch_progress, batch_run_options, close_batch
from plandag.cli.common import (
    brake_flags,
    command_settings,
    fail,
    run_limits_for,
    stderr,
    stdout,
    write_boundary_for,
)
from plandag.cli.durable import open_cli_store
from plandag.cli.models_options import (
    BaseUrlOption,
    ContractsExecutorModelOption,
    ContractsModelOption,
    ProviderOption,
)
from plandag.cli.options import (
    BoundaryOption,
    FollowLinksOption,
    HeartbeatEveryOption,
    HeartbeatOption,
    JsonOption,
    MaxChunksOption,
    MaxConcurrencyOption,
    MaxCostOption,
    MaxInputBytesOption,
    MaxPlanningSecondsOption,
    MaxSecondsOption,
    MaxTokensOption,
    MaxUnpackedBytesOption,
    RedactOption,
    RetriesOption,
    RpmOption,
    SlowStartOption,
    StallAfterOption,
    StopOnStallOption,
    StoreOption,
    TpmOption,
)
from plandag.cli.signals import Interruptible, exit_code_for_signal
from plandag.errors import InputError
from plandag.models.offline import OFFLINE_PROVIDER
from plandag.runs.traces import trace_factory

__all__ = ["extract_contracts_command", "model_options", "register"]

_T = TypeVar("_T")

_STOPS = {
    "budget": "the cost or token cap (--max-cost, --max-tokens)",
    "deadline": "--max-seconds",
    "stalled": "a stall (--stall-after)",
    "interrupted": "an interruption",
}


def extract_contracts_command(
    paths: Annotated[
        list[str],
        typer.Argument(
            metavar="FILES...", help="Contracts (.txt, .md, .pdf, .docx), folders or globs."
        ),
    ],
    output: Annotated[
        Path,
        typer.Option(
            "--output", "-o", metavar="OUT", help="Output file: .jsonl (default) or .csv."
        ),
    ],
    fields_spec: Annotated[
        str,
        typer.Option(
            "--fields",
            metavar="cuad|FIELDS.toml",
            help="The fields: cuad (the 41 CUAD v1 categories) or a TOML file of [[field]] "
            "tables with name, description, type.",
        ),
    ] = "cuad",
    output_format: Annotated[
        str | None,
        typer.Option(
            "--format", metavar="jsonl|csv", help="Output format (default: from OUT's suffix)."
        ),
    ] = None,
    jobs: Annotated[
        int | None,
        typer.Option("--jobs", "-j", metavar="N", min=1, help="Contracts at once (4)."),
    ] = None,
    resume: Annotated[
        bool,
        typer.Option(
            "--resume",
            help="Keep OUT's records that succeeded; skip inputs whose path and text SHA-256 "
            "they hold.",
        ),
    ] = False,
    follow_links: FollowLinksOption = False,
    provider: ProviderOption = "anthropic",
    offline: Annotated[
        bool,
        typer.Option(
            "--offline",
            help="Answer offline with extracts of each excerpt (no key, no network; every "
            "record says offline). Same as --provider offline.",
        ),
    ] = False,
    model: ContractsModelOption = None,
    base_url: BaseUrlOption = None,
    executor_model: ContractsExecutorModelOption = None,
    max_model_calls: Annotated[
        int | None,
        typer.Option(
            "--max-model-calls",
            metavar="N",
            min=1,
            help="Model calls of the whole batch at once at most (default: --jobs x the "
            "field groups, 20 for the CUAD fields with --jobs 4).",
        ),
    ] = None,
    chunk_chars: Annotated[
        int,
        typer.Option(
            "--chunk-chars", metavar="N", min=200, help="Characters per chunk at most (16000)."
        ),
    ] = 16_000,
    max_input_bytes: MaxInputBytesOption = None,
    max_unpacked_bytes: MaxUnpackedBytesOption = None,
    max_chunks: MaxChunksOption = None,
    max_planning_seconds: MaxPlanningSecondsOption = None,
    write_boundary: BoundaryOption = None,
    max_seconds: MaxSecondsOption = None,
    max_cost: MaxCostOption = None,
    max_tokens: MaxTokensOption = None,
    rpm: RpmOption = None,
    tpm: TpmOption = None,
    max_concurrency: MaxConcurrencyOption = None,
    retries: RetriesOption = None,
    heartbeat: HeartbeatOption = None,
    heartbeat_every: HeartbeatEveryOption = None,
    stall_after: StallAfterOption = None,
    stop_on_stall: StopOnStallOption = None,
    slow_start: SlowStartOption = None,
    as_json: JsonOption = False,
    store: StoreOption = None,
    redact: RedactOption = False,
    trace_detail: Annotated[
        str,
        typer.Option(
            "--trace-detail",
            metavar="summary|full",
            help="Per contract in the trace: a bounded summary line or the full record.",
        ),
    ] = "summary",
) -> None:
    """Extract fields from contracts: one record per contract, one error row per bad file.

    Each contract is chunked on section and clause boundaries; chunks x field groups run
    as parallel llm steps of one plan, merged per field. Every value carries its evidence:
    the quote and its [start, end) offsets in the extracted text, computed by plandag; the
    quote_exists check rejects a quote that is not in the document or does not hold its
    value, and a clause quote of fewer than 5 words is rejected as too short.

    The key comes from ANTHROPIC_API_KEY (--provider anthropic) or OPENAI_API_KEY
    (--provider openai; not needed with --base-url), checked before anything runs. --offline
    needs none: each field gets the excerpt's sentence that best matches it, its value read
    from that sentence (offline-extractive, in every record).

    Brakes apply to the whole batch (the "extract contracts" row: $20.00 and 5,000,000
    tokens per batch, stop after 300 s without a finished contract); --max-concurrency and
    --retries apply within each contract's plan. The batch is recorded in the run store as
    one run with one row per contract; `plandag trace` shows one bar per contract.
    """
    from plandag.cli.models_options import (
        OFFLINE,
        OFFLINE_MODEL,
        PROVIDERS,
        model_client,
        offline_provider,
        planner_model,
        print_offline_note,
    )
    from plandag.extract.names import display_name
    from plandag.jobs.contracts.batch import (
        batch_exit_code,
        expand_contract_inputs,
        extract_contracts,
        render_summary,
    )
    from plandag.jobs.contracts.calls import default_model_calls
    from plandag.jobs.contracts.document import MAX_CHUNKS, MAX_PLANNING_SECONDS
    from plandag.jobs.contracts.fields import FieldsError, load_fields
    from plandag.jobs.contracts.text import MAX_INPUT_BYTES, MAX_UNPACKED_BYTES
    from plandag.store.store import store_json

    settings = command_settings(
        {
            "jobs": jobs,
            "write_boundary": write_boundary,
            **brake_flags(
                max_seconds=max_seconds,
                max_cost=max_cost,
                max_tokens=max_tokens,
                rpm=rpm,
                tpm=tpm,
                max_concurrency=max_concurrency,
                retries=retries,
                heartbeat=heartbeat,
                heartbeat_every=heartbeat_every,
                stall_after=stall_after,
                stop_on_stall=stop_on_stall,
                slow_start=slow_start,
            ),
            "executor_model": executor_model,
        },
        "extract contracts",
    )
    if trace_detail not in ("summary", "full"):
        fail(f"--trace-detail must be summary or full, not {trace_detail!r}")
    if output_format not in (None, "jsonl", "csv"):
        fail(f"--format must be jsonl or csv, not {output_format!r}")
    if output.is_dir():
        fail(f"-o {output} is a folder; name the output file, e.g. {output / 'contracts.jsonl'}")
    provider = offline_provider(provider, offline, base_url)
    if provider not in PROVIDERS:
        fail(f"--provider {provider!r}: choose anthropic, openai or offline")
    if provider == OFFLINE:
        planner_model(provider, model, executor_model=executor_model)  # no other model
        print_offline_note()
    model_name = OFFLINE_MODEL if provider == OFFLINE else settings["executor_model"] or model
    if model_name is None and provider == "anthropic":
        from plandag.executors import DEFAULT_EXECUTOR_MODEL

        model_name = DEFAULT_EXECUTOR_MODEL
    if model_name is None:
        fail(
            f"--model (or --executor-model) is required with --provider {provider}: name the "
            "model your server runs"
        )
    try:
        fields = load_fields(fields_spec)
    except FieldsError as error:
        fail(str(error))
    run_limits_for(settings)  # the same checks and messages as exec for the brake settings
    heartbeat_file = Path(settings["heartbeat"]) if settings["heartbeat"] else None
    if heartbeat_file is not None and not heartbeat_file.parent.is_dir():
        fail(f"--heartbeat {heartbeat_file}: its folder does not exist")
    boundary = (
        write_boundary_for(settings["write_boundary"], output.parent)
        if settings["write_boundary"]
        else None
    )
    client = model_client(
        provider, base_url
    )  # a missing key stops here (exit 2), before anything runs
    run_options = batch_run_options(settings, output, [(model_name, provider, base_url)])
    calls = max_model_calls or default_model_calls(settings["jobs"], fields)
    run_options.update(model_options(client, model_name, calls))
    budget = run_options["budget"]
    monitor, progress, on_progress = batch_progress(settings, heartbeat_file, "contracts")

    deadline = cap_or_none(settings["max_seconds"])
    run_store = open_cli_store(store)
    batch_id = uuid.uuid4().hex[:16]
    stored_count = [0]
    writers: list[Any] = []

    def on_record(record: Mapping[str, Any], start: float, end: float) -> None:
        index = stored_count[0]
        status = str(record.get("status", ""))
        file = str(record.get("file", ""))
        usage = record.get("usage")
        writers[0].document(
            index, file, status, record, start, end, detail=trace_detail, usage=usage
        )
        run_store.record_document(
            batch_id,
            index,
            file,
            status,
            record,
            error=store_json(record.get("errors")) if status == "error" else None,
            usage=usage if isinstance(usage, Mapping) else None,
        )
        stored_count[0] += 1

    try:
        files, missing = expand_contract_inputs(paths, follow_links=follow_links)
        goal = (
            f"extract contracts: {len(files) + len(missing)} input(s) into {display_name(output)}"
        )
        batch_params = {
            "output": display_name(output),
            "inputs": len(files) + len(missing),
            "fields": fields_spec,
            "provider": provider,
            "executor_model": model_name,
        }
        run_store.create_run(
            batch_id,
            command="extract",
            goal=goal,
            params=batch_params,
            # the provider, so that listings say a batch ran offline
            options={
                "jobs": settings["jobs"],
                "resume": resume,
                "redact": redact,
                "provider": provider,
            },
        )
        writers.append(trace_factory(run_store, redact)(batch_id, 0))
        writers[0].run_started("extract", goal, batch_params)

        async def bounded() -> Any:
            import anyio

            failure: Exception | None = None
            summary = None
            with anyio.CancelScope() as scope:
                if deadline is not None:
                    scope.deadline = anyio.current_time() + deadline
                async with anyio.create_task_group() as group:
                    group.start_soon(monitor.watch, scope)
                    try:
                        summary = await extract_contracts(
                            files,
                            output,
                            fields=fields,
                            format=output_format,
                            jobs=settings["jobs"],
                            resume=resume,
                            missing=missing,
                            on_record_span=on_record,
                            on_progress=on_progress,
                            run_options=run_options,
                            write_boundary=boundary,
                            chunk_chars=chunk_chars,
                            max_input_bytes=_limit(max_input_bytes, MAX_INPUT_BYTES),
                            max_unpacked_bytes=_limit(max_unpacked_bytes, MAX_UNPACKED_BYTES),
                            max_chunks=_limit(max_chunks, MAX_CHUNKS),
                            max_planning_seconds=_limit(max_planning_seconds, MAX_PLANNING_SECONDS),
                        )
                    except Exception as caught:  # re-raised unwrapped, outside the group
                        failure = caught
                    group.cancel_scope.cancel()
            with anyio.CancelScope(shield=True):
                await client.aclose()
            if failure is not None:
                raise failure
            return summary

        with progress:
            outcome = Interruptible(bounded).run()
    except InputError as error:
        close_batch(run_store, writers[0] if writers else None, batch_id, "failed")
        fail(str(error))
    except OSError as error:
        close_batch(run_store, writers[0] if writers else None, batch_id, "failed")
        fail(f"-o {output}: cannot write it ({error.strerror or error})")
    summary = outcome.result
    stopped = summary.stopped if summary is not None else None
    batch_status = (
        "interrupted"
        if outcome.signal is not None
        else "budget_exceeded"
        if stopped == "budget"
        else "succeeded"
        if summary is not None and stopped is None
        else "timed_out"
    )
    ended: dict[str, Any] = {}
    if batch_status == "succeeded" and summary is not None and summary.failure is not None:
        batch_status = "failed"  # every model call failed: nothing was extracted
        ended["detail"] = f"every model call failed: {summary.failure}"
    run_store.update_run(
        batch_id,
        status=batch_status,
        spent_usd=budget.spent_usd,
        spent_tokens=budget.spent_tokens,
        pid=None,
        **ended,
    )
    writers[0].segment_ended(
        batch_status, spent_usd=budget.spent_usd, spent_tokens=budget.spent_tokens
    )
    writers[0].close()
    run_store.close()
    if summary is None or stopped is not None:
        if outcome.signal is not None:
            why, code, status = (
                signal.Signals(outcome.signal).name,
                exit_code_for_signal(outcome.signal),
                "interrupted",
            )
        elif stopped is not None:
            why, code, status = _STOPS.get(stopped, stopped), 3, "stopped"
        elif monitor.stalled:
            why, code, status = f"a stall (--stall-after {settings['stall_after']:g})", 3, "stalled"
        else:
            why, code, status = f"--max-seconds {deadline:g}", 3, "timed_out"
        monitor.close(status)
        if summary is not None and not as_json:
            stdout.print(
                render_summary(
                    summary, spent_tokens=budget.spent_tokens, spent_usd=budget.spent_usd
                )
            )
        stderr.print(
            f"stopped by {why} after {monitor.done} of {monitor.total or '?'} inputs; {output} "
            "holds the complete records of the inputs before the first unfinished one, in "
            "order; run the same command with --resume to go on",
            markup=False,
        )
        raise typer.Exit(code)
    monitor.close("interrupted" if outcome.signal is not None else "finished")
    offline = provider == OFFLINE_PROVIDER
    if as_json:
        document = summary.to_json_dict()
        document["spent_usd"], document["spent_tokens"] = budget.spent_usd, budget.spent_tokens
        if offline:
            document["offline"] = True
        sys.stdout.write(json.dumps(document, ensure_ascii=False, indent=2) + "\n")
    else:
        stdout.print(
            render_summary(summary, spent_tokens=budget.spent_tokens, spent_usd=budget.spent_usd)
        )
        stdout.print(
            f"records written to {display_name(output)}"
            + (
                f"; offline ({OFFLINE_MODEL}): the values are extracts, not a model's"
                if offline
                else ""
            ),
            markup=False,
            highlight=False,
        )
    if summary.failure is not None:
        stderr.print(f"every model call failed: {summary.failure}", markup=False)
    if outcome.signal is not None:
        raise typer.Exit(exit_code_for_signal(outcome.signal))
    raise typer.Exit(batch_exit_code(summary))


def _limit(given: Any, default: _T) -> _T | None:
    """A limit option's value: the default when not given, None when lifted (``none``)."""
    return default if given is None else cap_or_none(given)


def model_options(client: Any, model: str, calls: int) -> dict[str, Any]:
    """The ``run_plan`` keyword arguments that give the ``llm`` steps their model access:
    ``client`` with at most ``calls`` model calls of the batch at once (a call takes its
    slot before it reserves on the batch's budget, so the calls waiting hold nothing)."""
    import anyio

    from plandag.executors import ModelAccess

    if calls < 1:
        raise ValueError(f"the model calls at once must be at least 1, not {calls}")
    return {"models": ModelAccess(client, model, call_slots=anyio.CapacityLimiter(calls))}


def register(group: typer.Typer) -> None:
    """Add ``contracts`` to ``group``, the ``plandag extract`` group
    (:mod:`plandag.cli.extract_group`)."""
    group.command("contracts")(extract_contracts_command)

"""``plandag extract nfe``: batch extraction of NF-e/NFC-e invoices through the stored plan
(docs/guides/nfe.md; docs/NFE.md), recorded in the run store as one run
with one row per document and a trace with one bar per document."""

from __future__ import annotations

import array
import contextlib
import functools
import json
import signal
import sys
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from plandag.brakes import cap_or_none
from plandag.cli.batch import batch_progress, batch_run_options, close_batch, start_up_frozen
from plandag.cli.common import (
    brake_flags,
    command_registry,
    command_settings,
    fail,
    run_limits_for,
    stderr,
    stdout,
    write_boundary_for,
)
from plandag.cli.durable import open_cli_store
from plandag.cli.models_options import (
    PlannerModelOption,
    PlannerOption,
    PlannerUrlOption,
    attached_planner_model,
    model_client,
)
from plandag.cli.options import (
    BoundaryOption,
    FollowLinksOption,
    HeartbeatEveryOption,
    HeartbeatOption,
    JsonOption,
    MaxConcurrencyOption,
    MaxCostOption,
    MaxSecondsOption,
    MaxTokensOption,
    RedactOption,
    RetriesOption,
    RpmOption,
    SaveRepairsOption,
    SlowStartOption,
    StallAfterOption,
    StopOnStallOption,
    StoreOption,
    TpmOption,
)
from plandag.cli.signals import Interruptible, exit_code_for_signal
from plandag.errors import InputError
from plandag.runs.traces import trace_factory

if TYPE_CHECKING:
    from plandag.extract.nfe.encoded import EncodedRecord

__all__ = ["extract_nfe", "register"]


def extract_nfe(
    paths: Annotated[
        list[str], typer.Argument(metavar="PATH...", help="NF-e/NFC-e XML files, folders or globs.")
    ],
    output: Annotated[
        Path,
        typer.Option(
            "--output", "-o", metavar="OUT", help="Output file: .jsonl (default) or .csv."
        ),
    ],
    output_format: Annotated[
        str | None,
        typer.Option(
            "--format", metavar="jsonl|csv", help="Output format (default: from OUT's suffix)."
        ),
    ] = None,
    jobs: Annotated[
        int | None,
        typer.Option(
            "--jobs", "-j", metavar="N", min=1, help="Documents at once in each worker (4)."
        ),
    ] = None,
    resume: Annotated[
        bool, typer.Option("--resume", help="Skip inputs whose sha256 already has a record.")
    ] = False,
    follow_links: FollowLinksOption = False,
    workers: Annotated[
        int | None,
        typer.Option(
            "--workers",
            metavar="N",
            min=1,
            help="Worker processes (default: the workers setting, else the machine's cores; "
            "1: this process).",
        ),
    ] = None,
    cluster: Annotated[
        str | None,
        typer.Option(
            "--cluster",
            metavar="local|tcp://HOST:PORT",
            help="Extract on a Dask cluster: local, or a running scheduler's address.",
        ),
    ] = None,
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
    planner: PlannerOption = None,
    model: PlannerModelOption = None,
    base_url: PlannerUrlOption = None,
    save_repairs: SaveRepairsOption = None,
    store: StoreOption = None,
    redact: RedactOption = False,
    trace_detail: Annotated[
        str,
        typer.Option(
            "--trace-detail",
            metavar="summary|full",
            help="Per document in the trace: a bounded summary line (status, failing checks, "
            "error codes; at most 1 KB) or the full record.",
        ),
    ] = "summary",
) -> None:
    """Extract NF-e/NFC-e invoices into records: one per invoice, one error row per bad input.

    The batch is recorded in the run store (--store, PLANDAG_STORE) as one run with one row
    per document (its record or its error), not per step; `plandag runs` lists it and
    `plandag trace` shows one bar per document (--redact masks personal data there); each
    bar holds a summary of the record (--trace-detail full: the whole record).

    Brakes apply to the whole batch: --max-seconds is the batch's deadline, --max-cost and
    --max-tokens one budget shared by every document, --heartbeat counts documents;
    --max-concurrency and --retries apply within each document's plan.

    --workers N extracts in N worker processes (default: the machine's cores), --jobs
    documents at a time in each; --cluster local or --cluster tcp://HOST:8786 on a Dask
    cluster (the dask extra). Either way the output is the same as with --workers 1, and
    only this process writes the output, the store and the trace, and pays model calls.

    With --planner, each document still runs the stored plan with no model call; a document
    whose run fails on a step (a tool error, or a structural check; never the NF-e checks'
    business outcomes nor an unusable input) gets a repair for that document only, paid by
    the batch's budget; its records carry "repair".
    """
    from plandag.extract.names import display_name
    from plandag.extract.nfe.batch import (
        batch_exit_code,
        expand_inputs,
        extract_batch,
        render_summary,
    )
    from plandag.store.store import store_json

    settings = command_settings(
        {
            "jobs": jobs,
            "workers": workers,
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
        },
        "extract nfe",
    )
    if trace_detail not in ("summary", "full"):
        fail(f"--trace-detail must be summary or full, not {trace_detail!r}")
    if output_format not in (None, "jsonl", "csv"):
        fail(f"--format must be jsonl or csv, not {output_format!r}")
    if output.is_dir():
        fail(f"-o {output} is a folder; name the output file, e.g. {output / 'invoices.jsonl'}")
    run_limits_for(settings)  # the same checks and messages as exec for the brake settings
    heartbeat_file = Path(settings["heartbeat"]) if settings["heartbeat"] else None
    if heartbeat_file is not None and not heartbeat_file.parent.is_dir():
        fail(f"--heartbeat {heartbeat_file}: its folder does not exist")
    boundary = (
        write_boundary_for(settings["write_boundary"], output.parent)
        if settings["write_boundary"]
        else None
    )
    model_name = attached_planner_model(planner, model, base_url, save_repairs)
    client = (
        model_client(planner, base_url, offline_hint=False) if planner is not None else None
    )  # a missing key stops here (exit 2), before anything runs
    repairer = None
    if client is not None and model_name is not None:
        from plandag.planner.repair import PlanRepairer

        repairer = PlanRepairer(client, model_name, command_registry(None, applications=("nfe",)))
    run_options = batch_run_options(
        settings,
        output,
        [(model_name, planner, base_url)] if planner is not None and model_name else [],
    )
    # the batch escapes each record (and each name it shows) once, where it keeps them
    run_options["escape_results"] = False
    budget = run_options["budget"]
    monitor, progress, on_progress = batch_progress(settings, heartbeat_file, "documents")

    from plandag.extract.parallel import default_workers

    worker_count: int = settings["workers"] or default_workers()
    in_process = worker_count == 1 and cluster is None
    deadline = cap_or_none(settings["max_seconds"])
    run_store = open_cli_store(store)
    batch_id = uuid.uuid4().hex[:16]
    stored_count = [0]
    last_record_at = [time.time()]
    writers: list[Any] = []  # the trace, once the batch is recorded
    spans = array.array("d")  # each record's (start, end) in the trace, for corrections

    def record_document(
        index: int,
        record: Mapping[str, Any],
        start: float,
        end: float,
        record_json: str | None = None,
    ) -> None:
        status = str(record.get("status", ""))
        source = str(record.get("source", ""))
        writers[0].document(index, source, status, record, start, end, detail=trace_detail)
        run_store.record_document(
            batch_id,
            index,
            source,
            status,
            record,
            error=store_json(record.get("errors")) if status == "error" else None,
            record_json=record_json,
        )

    # Records wait here, already encoded (by the worker that extracted them, with workers),
    # until the batch writes its group (on_flush): then their trace lines go out in one
    # write and their rows in one transaction, which the store's thread commits while the
    # batch goes on; the group before is committed by then (at most one group waits), and
    # every group is before the batch's end rewrites records in the file (on_settled).
    waiting: list[tuple[int, EncodedRecord, float, float]] = []
    committing: list[Callable[[], None]] = []

    def on_settled() -> None:
        while committing:
            committing.pop()()

    def on_encoded(record: EncodedRecord) -> None:
        now = time.time()
        waiting.append((stored_count[0], record, last_record_at[0], now))
        spans.extend((last_record_at[0], now))
        last_record_at[0] = now
        stored_count[0] += 1

    def on_flush() -> None:
        if not waiting:
            return
        group = list(waiting)
        waiting.clear()
        rows: list[tuple[int, str, str, str | None, bool, str | None]] = []
        with writers[0].grouped():
            for index, record, start, end in group:
                full = trace_detail == "full"
                writers[0].document(
                    index,
                    record.source,
                    record.status,
                    record.record() if full else None,
                    start,
                    end,
                    detail=trace_detail,
                    summary=None if full else record.summary,
                    summary_text=None if full else record.summary_text,
                )
                error = (
                    store_json(record.record().get("errors")) if record.status == "error" else None
                )
                if record.compact is None:  # not JSON data: stored as before
                    run_store.record_document(
                        batch_id, index, record.source, record.status, record.value, error=error
                    )
                    continue
                rows.append(
                    (
                        index,
                        record.source,
                        record.status,
                        record.compact,
                        record.sealing_rules,
                        error,
                    )
                )
        on_settled()
        committed = run_store.record_document_texts_soon(batch_id, rows)
        if in_process:
            # documents extracted in this process: its event loop holds the GIL nearly all
            # the time, and the store's thread contending for it while a group commits costs
            # more CPU than waiting for the commit here (measured: ~7 % of a 3,000-document
            # batch at load 2)
            committed()
        else:
            committing.append(committed)

    stored: dict[int, Any] = {}

    previous_corrections: list[tuple[Any, dict[str, Any]]] = []

    def on_previous_correction(kept: Any, change: Mapping[str, Any]) -> None:
        # --resume: a record of an earlier run of this output that a new input duplicates;
        # that run's store row and trace bar take the file's final outcome.
        from plandag.extract.nfe.batch import with_unique_in_batch
        from plandag.extract.nfe.output import written_record

        for row in run_store.input_documents(kept.source):
            if (
                row.batch_id != batch_id
                and isinstance(row.record, Mapping)
                and row.record.get("sha256") == kept.sha256
                and written_record(row.record).chNFe == kept.chNFe
                and _same_output(run_store.run(row.batch_id).params.get("output"), output)
            ):
                previous_corrections.append((row, with_unique_in_batch(row.record, change)))
                return

    def on_correction(index: int, change: Mapping[str, Any]) -> None:
        # unique_in_batch decided after the record was stored and traced: the store's row
        # and the trace's bar take the file's final outcome.
        from plandag.extract.nfe.batch import with_unique_in_batch

        if not stored:
            stored.update((row.idx, row.record) for row in run_store.documents(batch_id))
        record = stored.get(index)
        if isinstance(record, Mapping):
            record_document(
                index, with_unique_in_batch(record, change), spans[2 * index], spans[2 * index + 1]
            )

    # this process's CPU over the batch, outside extract_batch's own count (which leaves
    # out starting and stopping the workers): before it, and after it up to the store's close
    cpu_outside = -time.process_time()
    try:
        statuses: dict[str, Any] = {}  # each input's status, read once for the batch
        files, missing = expand_inputs(paths, follow_links=follow_links, statuses=statuses)
        goal = f"extract nfe: {len(files) + len(missing)} input(s) into {display_name(output)}"
        batch_params = {"output": display_name(output), "inputs": len(files) + len(missing)}
        run_store.create_run(
            batch_id,
            command="extract",
            goal=goal,
            params=batch_params,
            options={
                "jobs": settings["jobs"],
                "workers": worker_count,
                "cluster": cluster,
                "resume": resume,
                "redact": redact,
            },
        )
        writers.append(trace_factory(run_store, redact)(batch_id, 0))
        writers[0].run_started("extract", goal, batch_params)
        work = functools.partial(
            extract_batch,
            files,
            output,
            format=output_format,
            jobs=settings["jobs"],
            resume=resume,
            missing=missing,
            on_encoded=on_encoded,
            on_flush=on_flush,
            on_settled=on_settled,
            on_progress=on_progress,
            on_correction=on_correction,
            on_previous_correction=on_previous_correction,
            run_options=run_options,
            write_boundary=boundary,
            repairer=repairer,
            save_repairs=save_repairs,
            workers=worker_count,
            cluster=cluster,
            statuses=statuses,
        )

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
                        summary = await work()
                    except Exception as caught:  # re-raised unwrapped, outside the group
                        failure = caught
                    group.cancel_scope.cancel()
            if client is not None:
                with anyio.CancelScope(shield=True):
                    await client.aclose()
            if failure is not None:
                raise failure
            return summary

        cpu_outside += time.process_time()
        with progress, start_up_frozen():
            outcome = Interruptible(bounded).run()
        cpu_outside -= time.process_time()
        _correct_documents(run_store, previous_corrections)
    except InputError as error:
        close_batch(run_store, writers[0] if writers else None, batch_id, "failed")
        fail(str(error))
    except OSError as error:
        close_batch(run_store, writers[0] if writers else None, batch_id, "failed")
        fail(f"-o {output}: cannot write it ({error.strerror or error})")
    except Exception:
        # anything else (a store that cannot take a group's rows): the batch recorded as
        # failed where the store still can, its trace and the store closed, the error raised
        _close_failed(run_store, writers[0] if writers else None, batch_id)
        raise
    summary = outcome.result
    batch_status = (
        "interrupted"
        if outcome.signal is not None
        else "succeeded"
        if summary is not None
        else "timed_out"
    )
    try:
        run_store.update_run(
            batch_id,
            status=batch_status,
            spent_usd=budget.spent_usd,
            spent_tokens=budget.spent_tokens,
            pid=None,
        )
    except Exception:
        # the batch's end could not be stored (a delayed commit failure): recorded as
        # failed where the store still can, its trace and the store closed, the error raised
        _close_failed(run_store, writers[0], batch_id)
        raise
    writers[0].segment_ended(
        batch_status, spent_usd=budget.spent_usd, spent_tokens=budget.spent_tokens
    )
    writers[0].close()
    run_store.close()
    cpu_outside += time.process_time()
    if summary is None:
        if outcome.signal is not None:
            why, code, status = (
                signal.Signals(outcome.signal).name,
                exit_code_for_signal(outcome.signal),
                "interrupted",
            )
        elif monitor.stalled:
            why, code, status = f"a stall (--stall-after {settings['stall_after']:g})", 3, "stalled"
        else:
            why, code, status = f"--max-seconds {deadline:g}", 3, "timed_out"
        monitor.close(status)
        stderr.print(
            f"stopped by {why} after {monitor.done} of {monitor.total or '?'} inputs; {output} "
            "holds the complete records of the inputs before the first unfinished one, in "
            "order; run the same command with --resume to go on"
        )
        raise typer.Exit(code)
    monitor.close("interrupted" if outcome.signal is not None else "finished")
    summary.cpu_seconds += cpu_outside
    if as_json:
        document = summary.to_json_dict()
        document["spent_usd"], document["spent_tokens"] = budget.spent_usd, budget.spent_tokens
        sys.stdout.write(json.dumps(document, ensure_ascii=False, indent=2) + "\n")
    else:
        stdout.print(render_summary(summary))
        written = f"records written to {display_name(output)}"
        if summary.items_output is not None:
            written += f" (items: {display_name(summary.items_output)})"
        stdout.print(written)
    if outcome.signal is not None:
        raise typer.Exit(exit_code_for_signal(outcome.signal))
    raise typer.Exit(batch_exit_code(summary))


def _close_failed(store: Any, writer: Any, batch_id: str) -> None:
    """End a batch that stopped on an unexpected error: each step tried on its own, none of
    their own errors raised (the batch's error is the one to report)."""
    if writer is not None:
        with contextlib.suppress(Exception):
            writer.segment_ended("failed")
        with contextlib.suppress(Exception):
            writer.close()
    with contextlib.suppress(Exception):
        store.update_run(batch_id, status="failed", pid=None)
    with contextlib.suppress(Exception):
        store.close()


def _same_output(recorded: Any, output: Path) -> bool:
    """Whether ``recorded`` (an earlier batch's ``output`` parameter, the path as it was
    given) names the file ``output``."""
    from plandag.extract.names import display_name

    if not isinstance(recorded, str):
        return False
    if recorded == display_name(output):
        return True
    try:
        return Path(recorded).resolve() == output.resolve()
    except (OSError, ValueError):
        return False


def _correct_documents(store: Any, corrections: list[tuple[Any, dict[str, Any]]]) -> None:
    """Give earlier batches' documents the records the output file now holds for them: each
    store row is replaced, and each batch's trace gets the document's bar again (same step,
    times and detail, the new outcome), which the trace reader takes over the first.

    Args:
        store: the open run store.
        corrections: ``(document row, corrected record)`` pairs.
    """
    from plandag.trace.redact import Redactor
    from plandag.trace.writer import TraceWriter

    by_batch: dict[str, list[tuple[Any, dict[str, Any]]]] = {}
    for row, record in corrections:
        status = str(record.get("status", ""))
        store.record_document(row.batch_id, row.idx, row.input, status, record, error=row.error)
        by_batch.setdefault(row.batch_id, []).append((row, record))
    for batch, documents in by_batch.items():
        path = store.trace_path(batch)
        spans = _document_spans(path, {row.idx + 1 for row, _ in documents})
        if not spans:
            continue  # no trace (deleted, or the batch never wrote one): nothing to correct
        run = store.run(batch)
        redactor = Redactor(personal=bool(run.options.get("redact")))
        with TraceWriter(path, batch, segment=run.segment, redact=redactor) as writer:
            for row, record in documents:
                if row.idx + 1 in spans:
                    start, end, detail = spans[row.idx + 1]
                    status = str(record.get("status", ""))
                    writer.document(row.idx, row.input, status, record, start, end, detail=detail)


_SUMMARY_KEYS = frozenset({"status", "failed_checks", "errors", "more"})


def _document_spans(path: Path, step_ids: set[int]) -> dict[int, tuple[float, float, str]]:
    """The last ``extract`` document span of each of ``step_ids`` in the trace at ``path``:
    step id → (start, end, ``summary`` or ``full``); {} when there is no trace."""
    from plandag.trace.writer import flush_traces

    flush_traces(path)  # the lines a writer of this process holds back are read too
    found: dict[int, tuple[float, float, str]] = {}
    try:
        handle = path.open(encoding="utf-8", errors="replace")
    except OSError:
        return found
    with handle:
        for line in handle:
            if '"tool":"extract"' not in line:
                continue
            try:
                span = json.loads(line)
                attrs = span["attrs"]
                step_id = attrs["step_id"]
                if step_id not in step_ids:
                    continue
                result = attrs.get("result")
                summary = isinstance(result, Mapping) and set(result) <= _SUMMARY_KEYS
                found[step_id] = (
                    float(span["start"]),
                    float(span["end"]),
                    "summary" if summary else "full",
                )
            except (ValueError, KeyError, TypeError):
                continue  # a line cut by a crash, or not a span
    return found


def register(group: typer.Typer) -> None:
    """Add ``nfe`` to ``group``, the ``plandag extract`` group
    (:mod:`plandag.cli.extract_group`)."""
    group.command("nfe")(extract_nfe)

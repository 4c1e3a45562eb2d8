"""Batch extraction of contracts: many files → one output file, one record or error row per
file, in input order (docs/guides/contracts.md).

How a batch runs (as NF-e's, :mod:`plandag.extract.nfe.batch`, whose input expansion it
reuses):

- **Inputs**: files, folders (every entry inside, recursively, hidden names skipped,
  sorted) or glob patterns, in argument order, each file once; a pattern matching nothing
  gets an error row (``no_such_input``); an entry that is not a regular file gets one
  (``not_a_file``) without being opened.
- **Nothing is lost**: every input ends as a record or an error row (``unsupported_type``,
  ``unreadable``, ``encrypted_pdf``, ``empty``, ``no_text``, ``missing_extra`` (a PDF or
  DOCX without the ``documents`` extra); ``internal_error`` for an
  unexpected exception, with its type and text) and the batch goes on.
- **Concurrency**: ``jobs`` contracts at once; within each, its plan's ``llm`` steps run in
  parallel (``run_options["max_concurrency"]`` bounds them).
- **Order and streaming**: records are written in input order, each flushed as soon as it
  and every one before it are done; an interrupted batch leaves a prefix of whole records.
- **The output is never an input**: an input that is the output file is skipped when it
  holds a previous contracts output, and the batch is refused otherwise.
- **--resume**: the previous records with status ``ok`` or ``check_failed`` are kept (first
  in the file); an input whose path and extracted text's SHA-256 match one of them is
  skipped with no model call (its text is read again to compare: a changed file is
  extracted again, and its new record replaces the previous one at the end). Error rows
  are dropped and their inputs tried again.
- **Brakes**: the budget in ``run_options`` is shared by every contract; when a brake stops
  a contract's run (:class:`~plandag.jobs.contracts.document.BatchStopped`), the batch
  stops: the records before it stay, and :attr:`ContractsSummary.stopped` says why.
- **Hostile inputs**: each input is bounded before any model call, and a bound that is
  passed is an error row for that input only (the batch goes on): its size
  (``max_input_bytes``, ``too_large``), a ``.docx``'s unpacked size (``max_unpacked_bytes``,
  ``too_large``), its chunks (``max_chunks``, ``too_many_chunks``) and the time from the
  start of its reading until its plan is compiled (``max_planning_seconds``,
  ``planning_timeout``); reading and planning run in worker threads, so the other inputs
  and the brakes go on meanwhile (:mod:`~plandag.jobs.contracts.document`).
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
from rich.table import Table

from plandag.errors import InputError
from plandag.executors.usage import ModelUsage
from plandag.extract.names import display_name, escape_surrogates
from plandag.jobs.contracts.chunks import DEFAULT_CHUNK_CHARS
from plandag.jobs.contracts.document import (
    MAX_CHUNKS,
    MAX_PLANNING_SECONDS,
    BatchStopped,
    contract_error_record,
    extract_contract,
    max_text_chars,
    planning_timeout_row,
    read_in_thread,
)
from plandag.jobs.contracts.fields import CUAD_FIELDS, FieldSpec
from plandag.jobs.contracts.output import (
    OutputFormat,
    RecordWriter,
    is_contracts_output,
    load_previous,
    output_format_for,
    rewrite_previous,
)
from plandag.jobs.contracts.text import MAX_INPUT_BYTES, MAX_UNPACKED_BYTES, ContractText
from plandag.tools.boundary import WriteBoundary

__all__ = [
    "ContractExtractor",
    "ContractsSummary",
    "batch_exit_code",
    "expand_contract_inputs",
    "extract_contracts",
    "render_summary",
]

#: ``async (path, contract) -> record``: one contract's record from its text already read.
ContractExtractor = Callable[[Path, ContractText], Awaitable[dict[str, Any]]]

_KEPT_STATUSES = frozenset({"ok", "check_failed"})


@dataclass
class ContractsSummary:
    """What a contracts batch did, for the summary table and the exit code.

    Attributes:
        inputs: input files plus patterns that matched nothing.
        records: records (and error rows) written by this run.
        inputs_with_record: inputs that got a record (written, or kept by ``--resume``).
        skipped_by_resume: inputs not extracted again: a kept record has their path and
            text SHA-256.
        kept_from_previous: records of the previous output kept by ``--resume``.
        by_status: this run's records by status (``ok``, ``check_failed``, ``error``).
        error_codes: error code → records carrying it, most frequent first.
        values: evidence-backed values in this run's records.
        rejected: rejected quotes by reason (``quote_not_found``, ``value_not_in_quote``,
            ``quote_too_short``...).
        fields_answered: fields with at least one value, over this run's records.
        duration: wall-clock seconds.
        output: the output file. format: ``jsonl`` or ``csv``.
        stopped: None, or why a brake stopped the batch before every input got a record
            (``budget``, ``deadline``, ``stalled``, ``interrupted``), with ``stopped_at``
            the input it stopped on.
        usage: what this run's records say their model calls used, summed
            (``{"requests", "failed_requests", "input_tokens", "output_tokens",
            "cost_usd"}``, :class:`plandag.executors.usage.ModelUsage`).
        failure: None, or why every model call of the batch failed (at least one was
            sent, none got an answer), in a line: the most frequent failure and ``(N of N
            model calls)``; the batch then exits 1 (:func:`batch_exit_code`).
    """

    inputs: int = 0
    records: int = 0
    inputs_with_record: int = 0
    skipped_by_resume: int = 0
    kept_from_previous: int = 0
    by_status: dict[str, int] = field(default_factory=dict)
    error_codes: dict[str, int] = field(default_factory=dict)
    values: int = 0
    rejected: dict[str, int] = field(default_factory=dict)
    fields_answered: int = 0
    duration: float = 0.0
    output: Path | None = None
    format: OutputFormat = "jsonl"
    stopped: str | None = None
    stopped_at: str | None = None
    usage: dict[str, Any] = field(default_factory=lambda: ModelUsage().as_dict())
    failure: str | None = None

    def to_json_dict(self) -> dict[str, Any]:
        """The summary as JSON-safe data (``--json``)."""
        data = asdict(self)
        data["output"] = display_name(self.output) if self.output is not None else None
        return data


def expand_contract_inputs(
    patterns: Sequence[str], *, follow_links: bool = False
) -> tuple[list[Path], list[dict[str, Any]]]:
    """The inputs of the PATH arguments (:func:`plandag.extract.nfe.batch.expand_inputs`),
    with an error row for each pattern that matched nothing (``no_such_input``) and, unless
    ``follow_links``, for each symbolic link that leads outside the folders and files given
    (``link_outside``: a link in a folder, a glob's match, or a link named as an argument
    whose target lies in no other argument), which is never read.

    Returns:
        ``(inputs, missing)``: inputs in argument order (a pattern that matched nothing,
        and a link refused, stays in its place), and the error rows of those.

    Raises:
        InputError: no pattern, an empty pattern, or no pattern matched anything.
    """
    from plandag.extract.nfe.batch import expand_inputs

    inputs, missing = expand_inputs(patterns, follow_links=follow_links)
    rows = []
    for record in missing:
        error = (record.get("errors") or [{}])[0]
        rows.append(
            contract_error_record(
                str(record.get("source", "")),
                str(error.get("code", "no_such_input")),
                str(error.get("message", "")),
            )
        )
    return inputs, rows


def _without_output(inputs: Sequence[Path], output: Path, placeholders: set[str]) -> list[Path]:
    target = os.path.realpath(output)
    kept: list[Path] = []
    for path in inputs:
        if os.fspath(path) in placeholders or os.path.realpath(path) != target:
            kept.append(path)
            continue
        if is_contracts_output(path):
            continue
        raise InputError(
            f"-o {display_name(output)} is also an input; it would be overwritten: choose "
            "another output file"
        )
    return kept


class _Tally:
    def __init__(self) -> None:
        self.by_status: Counter[str] = Counter()
        self.error_codes: Counter[str] = Counter()
        self.rejected: Counter[str] = Counter()
        self.records = 0
        self.values = 0
        self.fields_answered = 0
        self.usage = ModelUsage()
        self.failures: Counter[str] = Counter()

    def add(self, record: Mapping[str, Any]) -> None:
        self.records += 1
        self.by_status[str(record.get("status"))] += 1
        usage = record.get("usage")
        if isinstance(usage, Mapping):
            self.usage.add(usage)
        for error in record.get("errors") or []:
            if isinstance(error, Mapping):
                self.error_codes[str(error.get("code"))] += 1
                if error.get("failure"):
                    self.failures[str(error["failure"])] += 1
        found = record.get("fields")
        for item in found.values() if isinstance(found, Mapping) else []:
            if not isinstance(item, Mapping):
                continue
            values = item.get("values") or []
            self.values += len(values)
            self.fields_answered += 1 if values else 0
            for rejected in item.get("rejected") or []:
                if isinstance(rejected, Mapping):
                    self.rejected[str(rejected.get("reason"))] += 1


def _output_folder(output: Path) -> WriteBoundary:
    """The default write boundary: the output file's folder (ARCHITECTURE.md, "Brakes")."""
    return WriteBoundary([output.resolve().parent])


def _regular_file_problem(path: Path) -> tuple[str, str] | None:
    from plandag.extract.nfe.batch import not_a_regular_file

    return not_a_regular_file(path)


async def extract_contracts(
    inputs: Sequence[Path],
    output: Path,
    *,
    fields: Sequence[FieldSpec] = CUAD_FIELDS,
    format: str | None = None,
    jobs: int = 4,
    resume: bool = False,
    missing: Sequence[Mapping[str, Any]] = (),
    on_record: Callable[[Mapping[str, Any]], None] | None = None,
    on_record_span: Callable[[Mapping[str, Any], float, float], None] | None = None,
    on_progress: Callable[[int, int], None] | None = None,
    extractor: ContractExtractor | None = None,
    run_options: Mapping[str, Any] | None = None,
    write_boundary: WriteBoundary | None = None,
    chunk_chars: int = DEFAULT_CHUNK_CHARS,
    model: str | None = None,
    max_input_bytes: int | None = MAX_INPUT_BYTES,
    max_unpacked_bytes: int | None = MAX_UNPACKED_BYTES,
    max_chunks: int | None = MAX_CHUNKS,
    max_planning_seconds: float | None = MAX_PLANNING_SECONDS,
) -> ContractsSummary:
    """Extract every contract and write its record to ``output``, in input order.

    Args:
        inputs: the input files in record order (:func:`expand_contract_inputs`).
        output: the output file; its folder must exist.
        fields: the fields (default the 41 CUAD categories).
        format: ``jsonl`` or ``csv``; None takes csv for a ``.csv`` name, else jsonl.
        jobs: contracts extracted at once (>= 1).
        resume: keep the previous records that succeeded and skip their inputs (see the
            module's docstring); otherwise ``output`` is overwritten.
        missing: error rows of patterns that matched nothing; one whose ``file`` is also in
            ``inputs`` is written at that place, the others first.
        on_record: called with each record as it is written (in output order).
        on_record_span: called like ``on_record`` (after it), with the record and its
            input's own run: ``start`` (when the input took its place among the ``jobs``
            at once) and ``end`` (when its record was ready), seconds since the epoch
            (:func:`time.time`); a row made without a run (a pattern that matched nothing)
            has ``start == end``, the time it was written.
        on_progress: called with ``(inputs done, inputs to extract)`` at the start and
            after each input.
        extractor: ``async (path, contract) -> record`` (default:
            :func:`~plandag.jobs.contracts.document.extract_contract` with the arguments
            below).
        run_options: keyword arguments for each contract's :func:`plandag.run_plan`:
            ``models`` (the model access of the ``llm`` steps), ``budget`` (shared by the
            batch), ``limits``, ``retry``, ``max_concurrency``.
        write_boundary: the plans' write boundary (default: the output file's folder).
        chunk_chars: characters per chunk at most.
        model: the ``llm`` steps' model (None: the run's executor model).
        max_input_bytes: the largest input read, in bytes (default 64 MiB, as
            ``--max-input-bytes``); a larger one is a ``too_large`` row. None: no limit.
        max_unpacked_bytes: the most bytes a ``.docx`` may unpack to (default 256 MiB,
            ``--max-unpacked-bytes``), checked before it is parsed; ``too_large``. None:
            no limit.
        max_chunks: the most chunks one contract may have (default 100, ``--max-chunks``);
            ``too_many_chunks``. None: no limit.
        max_planning_seconds: the most seconds from the start of an input's reading until
            its plan is compiled (default 60, ``--max-planning-seconds``); past it, a
            ``planning_timeout`` row (with ``extractor``, only its reading is timed).
            None: no limit.
        The limits apply to ``extractor``'s inputs too (the text it is given was read
        within them). A deadline over the whole batch is the caller's
        (``anyio.fail_after``; ``--max-seconds`` on the command line): reading and
        planning run in worker threads, so it cuts them short too.

    Returns:
        A :class:`ContractsSummary`; ``stopped`` is set when a brake stopped the batch.

    Raises:
        InputError: ``jobs`` < 1, an unknown format, the output is an input that is not a
            previous contracts output, or (with ``resume``) a previous output plandag did
            not write or with other fields' CSV columns.
        OSError: the output file cannot be written.
    """
    if jobs < 1:
        raise InputError(f"--jobs must be at least 1, not {jobs}")
    output_format = output_format_for(output, format)
    for name, value in (
        ("max_input_bytes", max_input_bytes),
        ("max_unpacked_bytes", max_unpacked_bytes),
        ("max_chunks", max_chunks),
        ("max_planning_seconds", max_planning_seconds),
    ):
        if value is not None and not value > 0:
            flag = "--" + name.replace("_", "-")
            raise InputError(f"{flag} must be more than 0 (or none to lift it), not {value}")
    boundary = write_boundary or _output_folder(output)
    registry = None
    if extractor is None:
        from plandag.tools.registry import default_registry

        registry = default_registry(("contracts",))  # built once for the whole batch

    async def extract(path: Path, contract: ContractText, started: float) -> dict[str, Any]:
        if extractor is not None:
            return await extractor(path, contract)
        return await extract_contract(
            path,
            fields=fields,
            registry=registry,
            run_options=run_options,
            write_boundary=boundary,
            chunk_chars=chunk_chars,
            model=model,
            contract=contract,
            max_input_bytes=max_input_bytes,
            max_unpacked_bytes=max_unpacked_bytes,
            max_chunks=max_chunks,
            max_planning_seconds=max_planning_seconds,
            planning_started=started,
        )

    started = time.perf_counter()
    placed: dict[str, Mapping[str, Any]] = {}
    unplaced: list[Mapping[str, Any]] = []
    names = {os.fspath(path) for path in inputs}
    for row in missing:
        name = os.fspath(Path(str(row.get("file", ""))))
        if name in names and name not in placed:
            placed[name] = row
        else:
            unplaced.append(row)
    paths = _without_output(inputs, output, set(placed))

    kept: list[Any] = []
    done: set[tuple[str, str]] = set()
    if resume:
        previous = load_previous(output, output_format, fields)
        kept = [record for record in previous if record.status in _KEPT_STATUSES]
        if len(kept) != len(previous):
            rewrite_previous(output, output_format, fields, kept)
        done = {(record.file, record.text_sha256) for record in kept if record.text_sha256}
    summary = ContractsSummary(
        inputs=len(paths) + len(unplaced),
        kept_from_previous=len(kept),
        output=output,
        format=output_format,
    )
    tally = _Tally()
    writer = RecordWriter(output, output_format, fields, append=resume)
    results: dict[int, dict[str, Any] | None] = {}
    spans: dict[int, tuple[float, float]] = {}
    next_to_write = 0
    finished = 0
    total = len(paths)

    kept_files = {record.file for record in kept}
    stale: set[str] = set()

    def write(record: Mapping[str, Any], span: tuple[float, float] | None = None) -> None:
        ready = escape_surrogates(dict(record))
        if ready.get("file") in kept_files:  # extracted again: its text changed, or failed
            stale.add(str(ready.get("file")))
        writer.write(ready)
        tally.add(ready)
        if on_record is not None:
            on_record(ready)
        if on_record_span is not None:
            now = time.time()
            start, end = span if span is not None else (now, now)
            on_record_span(ready, start, end)

    def flush_ready() -> None:
        nonlocal next_to_write, finished
        while next_to_write in results:
            record = results.pop(next_to_write)
            span = spans.pop(next_to_write, None)
            next_to_write += 1
            if record is not None:
                write(record, span)
            summary.inputs_with_record += 1
            finished += 1
            if on_progress is not None:
                on_progress(finished, total)

    async def run_one(index: int, path: Path, group: anyio.abc.TaskGroup) -> None:
        async with limiter:
            start = time.time()
            record: dict[str, Any] | None
            try:
                record = await _one(path)
            except BatchStopped as stop:
                if summary.stopped is None:
                    summary.stopped, summary.stopped_at = stop.reason, display_name(path)
                group.cancel_scope.cancel()
                return
            except Exception as error:
                record = contract_error_record(
                    str(path), "internal_error", f"{type(error).__name__}: {error}"
                )
            spans[index] = (start, time.time())
        results[index] = record
        flush_ready()

    async def _one(path: Path) -> dict[str, Any] | None:
        problem = _regular_file_problem(path)
        if problem is not None:
            return contract_error_record(str(path), *problem)
        started = anyio.current_time()
        try:
            with anyio.fail_after(max_planning_seconds):
                read = await read_in_thread(
                    path,
                    max_bytes=max_input_bytes,
                    max_unpacked_bytes=max_unpacked_bytes,
                    max_chars=max_text_chars(max_chunks, chunk_chars),
                )
        except TimeoutError:
            assert max_planning_seconds is not None
            return planning_timeout_row(str(path), max_planning_seconds, None)
        if isinstance(read, dict):
            return read
        if (display_name(path), read.sha256) in done:
            summary.skipped_by_resume += 1
            return None
        return await extract(path, read, started)

    limiter = anyio.CapacityLimiter(jobs)
    try:
        for row in unplaced:
            write(row)
            summary.inputs_with_record += 1
        if on_progress is not None:
            on_progress(0, total)
        async with anyio.create_task_group() as group:
            for index, path in enumerate(paths):
                waiting = placed.get(os.fspath(path))
                if waiting is not None:
                    results[index] = dict(waiting)
                    flush_ready()
                else:
                    group.start_soon(run_one, index, path, group)
    finally:
        writer.close()
        if stale:  # the previous records of inputs extracted again give way to the new ones
            written = load_previous(output, output_format, fields)
            rewrite_previous(
                output,
                output_format,
                fields,
                [r for i, r in enumerate(written) if i >= len(kept) or r.file not in stale],
            )
            summary.kept_from_previous -= sum(1 for r in kept if r.file in stale)
    summary.records = tally.records
    summary.by_status = {k: v for k, v in tally.by_status.most_common() if v > 0}
    summary.error_codes = dict(tally.error_codes.most_common())
    summary.values = tally.values
    summary.rejected = dict(tally.rejected.most_common())
    summary.fields_answered = tally.fields_answered
    summary.usage = tally.usage.as_dict()
    summary.failure = _all_failed(tally)
    summary.duration = time.perf_counter() - started
    return summary


def _all_failed(tally: _Tally) -> str | None:
    """Why every model call of the batch failed, or None when one got an answer or none
    was sent."""
    usage = tally.usage
    if not usage.all_failed:
        return None
    if tally.failures:
        words = tally.failures.most_common(1)[0][0]
    elif tally.error_codes:
        words = f"error {tally.error_codes.most_common(1)[0][0]}"
    else:
        words = "no answer"
    return f"{words} ({usage.failed_requests} of {usage.requests} model calls)"


def batch_exit_code(summary: ContractsSummary) -> int:
    """The exit code of ``plandag extract contracts`` (ARCHITECTURE.md, "States and exit
    codes"): 3 when a brake stopped the batch before every input got a record (``--resume``
    continues); 1 when it was cut short otherwise, or when every model call it sent failed
    (:attr:`ContractsSummary.failure` says why: the endpoint down, the key refused...);
    else 0, whatever the records say: a batch in which some calls failed, or no call was
    needed, succeeds with their error rows."""
    if summary.inputs_with_record < summary.inputs:
        return 3 if summary.stopped is not None else 1
    return 1 if summary.failure is not None else 0


def render_summary(
    summary: ContractsSummary,
    *,
    top: int = 10,
    spent_tokens: int | None = None,
    spent_usd: float | None = None,
) -> Table:
    """A rich table of a batch: inputs, records by status, error codes (``top`` most
    frequent), values and rejected quotes, skips by ``--resume``, the model calls (and
    those that failed), the tokens and dollars spent (when given: the batch's budget),
    seconds, output."""
    table = Table(title="Contract extraction", show_header=True, header_style="bold")
    table.add_column("", no_wrap=True)
    table.add_column("count", justify="right")
    table.add_row("inputs", str(summary.inputs))
    table.add_row("records written", str(summary.records))
    if summary.skipped_by_resume or summary.kept_from_previous:
        table.add_row("skipped (already recorded)", str(summary.skipped_by_resume))
        table.add_row("kept from the previous output", str(summary.kept_from_previous))
    table.add_section()
    for status in ("ok", "check_failed", "error"):
        table.add_row(f"status: {status}", str(summary.by_status.get(status, 0)))
    if summary.error_codes:
        table.add_section()
        for code, count in list(summary.error_codes.items())[:top]:
            table.add_row(f"error: {code}", str(count))
    table.add_section()
    table.add_row("values with evidence", str(summary.values))
    table.add_row("fields answered", str(summary.fields_answered))
    for reason, count in summary.rejected.items():
        table.add_row(f"rejected: {reason}", str(count))
    table.add_section()
    requests = int(summary.usage.get("requests") or 0)
    failed = int(summary.usage.get("failed_requests") or 0)
    table.add_row("model calls", f"{requests:,}")
    if failed:
        table.add_row("model calls failed", f"{failed:,}")
    if spent_tokens is not None:
        table.add_row("tokens (input + output)", f"{spent_tokens:,}")
    if spent_usd is not None:
        table.add_row("cost (priced models)", f"${spent_usd:.4f}")
    table.add_row("seconds", f"{summary.duration:.2f}")
    if summary.output is not None:
        table.add_row("output", display_name(summary.output))
    return table

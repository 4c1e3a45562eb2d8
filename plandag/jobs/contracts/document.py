"""One contract → one record (or one error row), through its plan
(:mod:`~plandag.jobs.contracts.plan`) on the scheduler.

The record (one JSON object per contract; ``plandag eval contracts`` reads it)::

    {"file": "path as given", "status": "ok" | "check_failed" | "error",
     "text_sha256": "hex SHA-256 of the UTF-8 extracted text",
     "extractor": {"name": "pypdf", "version": "5.x"}, "chars": 12027, "chunks": 3,
     "usage": {"requests": 5, "failed_requests": 0, "input_tokens": 14765,
               "output_tokens": 554, "cost_usd": 0.017535},
     "fields": {NAME: {"type": ..., "values": [{"value", "quote", "start", "end", "match"}],
                       "answer": ..., "rejected": [{"quote", "reason", "detail"?}]}},
     "checks": {"quote_exists": {"status": "pass" | "fail", "detail": "..."}},
     "errors": [{"code": ..., "message": ..., "failure": ...}]}

``status``: ``error`` when the file gave no text (``errors`` says why, ``fields`` is empty)
or a field group's model calls failed (its fields have no values and a null answer;
``errors`` names the group, the chunk and the reason); else ``check_failed`` when
``quote_exists`` failed for a group (a quote not in the document, or a value its quote does
not hold: it is in that field's ``rejected``, never a value); else ``ok``.
``start``/``end`` are ``[start, end)`` character offsets into the extracted text, computed
by plandag. Each value is read from its own quote
(:mod:`~plandag.jobs.contracts.grounding`); a value that cannot be normalised keeps its
evidence with ``"value_normalized": false`` and ``detail``; rejected quotes carry their
``reason`` (``quote_not_found``, ``empty_quote``, ``value_not_in_quote``,
``quote_too_short``) and, for the last two, a ``detail``.

``usage`` is what the contract's model calls used, as the provider reported it
(:class:`plandag.executors.usage.ModelUsage`): requests sent (each attempt, re-asks and
failed ones included), those that failed, input tokens (cached ones included), output
tokens, and US dollars at the model's price (0.0 unpriced); all zeros for a file that gave
no text. An error whose model calls failed also says why in ``failure``, in a person's
words (``the model endpoint http://127.0.0.1:8765 could not be reached: connection
refused``).

A run that a batch-wide brake cut short (the cost or token cap, the deadline, a stall, an
interruption) gives no record: :class:`BatchStopped` is raised, the batch stops, and
``--resume`` extracts that contract again.

Planning one contract (reading its text, chunking it, building and compiling its plan) is
CPU work done in a worker thread, never on the event loop, so the other contracts of a
batch and its brakes go on meanwhile; it is bounded twice:

* in size: a contract may have at most ``max_chunks`` chunks (:data:`MAX_CHUNKS`, 100:
  1.6 million characters at the default 16,000 a chunk, some 500 pages; with the 41 CUAD
  fields in 5 groups, a plan of 505 steps). A longer one is an error row
  ``too_many_chunks``, found from its text's length (a chunk holds at most
  ``chunk_chars``, so ``max_chunks * chunk_chars`` characters at most) before it is
  chunked, and reading stops as soon as the text passes that length;
* in time: ``max_planning_seconds`` (:data:`MAX_PLANNING_SECONDS`, 60) from the start of
  its reading until its plan is compiled; past it, the contract is an error row
  ``planning_timeout`` and the thread is told to stop at its next page, paragraph or
  stage. A batch's deadline (``--max-seconds``) or an interruption stops planning the same
  way, at once.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread

from plandag.errors import PlandagError
from plandag.executors.usage import ModelUsage, run_model_usage
from plandag.jobs.contracts.chunks import DEFAULT_CHUNK_CHARS, chunk_text
from plandag.jobs.contracts.fields import CUAD_FIELDS, FieldSpec, field_groups
from plandag.jobs.contracts.plan import contract_plan
from plandag.jobs.contracts.text import (
    MAX_INPUT_BYTES,
    MAX_UNPACKED_BYTES,
    ContractInputError,
    ContractText,
    ReadStopped,
    read_contract,
)
from plandag.jobs.contracts.tools import quote_exists
from plandag.models.offline import OFFLINE_MODEL, OFFLINE_PROVIDER

if TYPE_CHECKING:
    from plandag.compiler.compiled import CompiledPlan
    from plandag.scheduler.result import RunResult, StepRecord
    from plandag.tools.boundary import WriteBoundary
    from plandag.tools.registry import Registry

__all__ = [
    "BRAKE_REASONS",
    "MAX_CHUNKS",
    "MAX_PLANNING_SECONDS",
    "BatchStopped",
    "contract_error_record",
    "contract_record",
    "extract_contract",
    "max_text_chars",
    "planning_timeout_row",
    "read_for_batch",
    "read_in_thread",
]

MAX_CHUNKS: int = 100
"""The most chunks one contract may have by default (``--max-chunks``; see the module's
docstring)."""

MAX_PLANNING_SECONDS: float = 60.0
"""The most seconds planning one contract may take by default (``--max-planning-seconds``;
see the module's docstring)."""

BRAKE_REASONS: frozenset[str] = frozenset({"budget", "deadline", "stalled", "interrupted"})
"""Reasons of failed, skipped or cancelled steps that mean a brake stopped the run (an
``llm`` call whose reservation the cost or token cap refused fails with ``budget``), not
that the step itself went wrong."""


class BatchStopped(PlandagError):
    """A batch-wide brake stopped a contract's run before its record was complete.

    Attributes:
        reason: ``budget`` (the cost or token cap), ``deadline``, ``stalled`` or
            ``interrupted``.
    """

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def contract_error_record(
    file: str,
    code: str,
    message: str,
    contract: ContractText | None = None,
    chunks: int = 0,
) -> dict[str, Any]:
    """An error row: ``status`` ``error``, one error ``{code, message}``, no field."""
    return {
        "file": file,
        "status": "error",
        "text_sha256": contract.sha256 if contract is not None else "",
        "extractor": contract.extractor if contract is not None else None,
        "chars": len(contract.text) if contract is not None else 0,
        "chunks": chunks,
        "usage": ModelUsage().as_dict(),
        "fields": {},
        "checks": {},
        "errors": [{"code": code, "message": message}],
    }


def read_for_batch(
    path: Path,
    *,
    max_bytes: int | None = MAX_INPUT_BYTES,
    max_unpacked_bytes: int | None = MAX_UNPACKED_BYTES,
    max_chars: int | None = None,
    stop: threading.Event | None = None,
) -> ContractText | dict[str, Any]:
    """The contract's text, or its error row when the file gives none (see
    :func:`~plandag.jobs.contracts.text.read_contract` for the codes and the limits).

    Raises:
        ReadStopped: ``stop`` was set (nobody waits for the text any more).
    """
    try:
        return read_contract(
            path,
            max_bytes=max_bytes,
            max_unpacked_bytes=max_unpacked_bytes,
            max_chars=max_chars,
            stop=stop,
        )
    except ContractInputError as error:
        return contract_error_record(str(path), error.code, str(error))


async def read_in_thread(
    path: Path,
    *,
    max_bytes: int | None = MAX_INPUT_BYTES,
    max_unpacked_bytes: int | None = MAX_UNPACKED_BYTES,
    max_chars: int | None = None,
) -> ContractText | dict[str, Any]:
    """:func:`read_for_batch` in a worker thread that the caller's cancellation (a time
    limit, the batch's deadline, an interruption) abandons at once, and tells to stop at
    its next page or paragraph."""
    stop = threading.Event()
    try:
        return await anyio.to_thread.run_sync(
            functools.partial(
                read_for_batch,
                path,
                max_bytes=max_bytes,
                max_unpacked_bytes=max_unpacked_bytes,
                max_chars=max_chars,
                stop=stop,
            ),
            abandon_on_cancel=True,
        )
    finally:
        stop.set()


def _step_failure(step: StepRecord) -> tuple[str, str, str | None]:
    """``(code, message, failure)``: the step's reason and message, and the words of its
    last failed model call (None when it has none)."""
    code = step.reason or "tool_error"
    failure: str | None = None
    for attempt in step.attempt_log:
        for child in attempt.children:
            attrs = child.get("attrs") if child.get("kind") == "llm_call" else None
            if isinstance(attrs, Mapping) and attrs.get("failure"):
                failure = str(attrs["failure"])
    if step.error is not None:
        return code, str(step.error.message), failure
    return code, str(step.detail or f"step {step.id} {step.status}"), failure


def contract_record(
    file: str,
    contract: ContractText,
    chunks: int,
    fields: Sequence[FieldSpec],
    result: RunResult,
) -> dict[str, Any]:
    """The record of one contract from its plan's run (see the module's docstring).

    Args:
        file: the input's path as given.
        contract: its extracted text.
        chunks: how many chunks the plan ran over.
        fields: the fields asked for, in record order.
        result: the run of :func:`~plandag.jobs.contracts.plan.contract_plan`.

    Raises:
        BatchStopped: a step was skipped or cancelled by a brake.
    """
    merged: dict[str, dict[str, Any]] = {}
    errors: list[dict[str, str]] = []
    usage = run_model_usage(result)
    check_detail: list[str] = []
    check_failed = False
    steps = [result.steps[key] for key in sorted(result.steps)]
    for step in steps:
        if step.status in ("failed", "skipped", "cancelled") and step.reason in BRAKE_REASONS:
            raise BatchStopped(
                str(step.reason), f"{file}: step {step.id} {step.status} ({step.detail})"
            )
    groups = iter(field_groups(fields))
    group_steps: list[StepRecord] = []
    for step in steps:
        if step.tool == "contract_merge":
            outcome = step.result if isinstance(step.result, Mapping) else None
            found = outcome.get("fields") if outcome is not None else None
            if isinstance(found, Mapping) and step.status in ("succeeded", "failed"):
                next(groups, None)
                merged.update(found)
                for check in step.checks:
                    if check.kind == "quote_exists":
                        check_failed = check_failed or check.status == "fail"
                        check_detail.append(check.detail)
            else:
                names = ", ".join(spec.name for spec in next(groups, []))
                failed = [i for i, s in enumerate(group_steps) if s.status == "failed"]
                culprit = group_steps[failed[0]] if failed else step
                code, message, failure = _step_failure(culprit)
                where = f"chunk {failed[0] + 1} of {len(group_steps)}" if failed else "merge"
                error = {"code": code, "message": f"fields {names}: {where}: {message}"}
                if failure is not None:
                    error["failure"] = failure
                errors.append(error)
            group_steps = []
        else:
            group_steps.append(step)
    record_fields: dict[str, Any] = {}
    for spec in fields:
        found = merged.get(spec.name)
        if found is None:
            found = {"type": spec.type, "values": [], "answer": None, "rejected": []}
        record_fields[spec.name] = found
    status = "error" if errors else "check_failed" if check_failed else "ok"
    checks: dict[str, Any] = {}
    if check_detail:  # the groups' outcomes as one: the same check over every field
        whole = quote_exists.evaluate({"fields": merged}, {"text": contract.text})
        checks["quote_exists"] = {
            "status": "fail" if check_failed else "pass",
            "detail": whole.detail,
        }
    return {
        "file": file,
        "status": status,
        "text_sha256": contract.sha256,
        "extractor": contract.extractor,
        "chars": len(contract.text),
        "chunks": chunks,
        "usage": usage.as_dict(),
        "fields": record_fields,
        "checks": checks,
        "errors": errors,
    }


def max_text_chars(max_chunks: int | None, chunk_chars: int) -> int | None:
    """The most characters of text ``max_chunks`` chunks of at most ``chunk_chars`` hold
    (None: no limit)."""
    return max_chunks * chunk_chars if max_chunks is not None else None


def _plan_contract(
    file: str,
    contract: ContractText,
    fields: Sequence[FieldSpec],
    registry: Registry,
    write_boundary: WriteBoundary | None,
    chunk_chars: int,
    max_chunks: int | None,
    model: str | None,
    stop: threading.Event,
) -> tuple[int, CompiledPlan] | dict[str, Any]:
    """Chunk the contract and compile its plan (in a worker thread): ``(chunks, compiled)``,
    or the ``too_many_chunks`` error row. Between its stages it looks at ``stop``.

    Raises:
        ReadStopped: ``stop`` was set.
        PlanError: the plan does not compile against ``registry``.
    """
    from plandag.compiler import compile_plan

    limit = max_text_chars(max_chunks, chunk_chars)
    if limit is not None and len(contract.text) > limit:
        return _too_many_chunks(file, contract, f"more than {max_chunks}", max_chunks)
    chunks = chunk_text(contract.text, chunk_chars)
    if max_chunks is not None and len(chunks) > max_chunks:
        return _too_many_chunks(file, contract, f"{len(chunks)}", max_chunks)
    if stop.is_set():
        raise ReadStopped("planning stopped")
    plan = contract_plan(chunks, fields, model=model)
    document = {"text": contract.text, "chunks": [c.as_dict(contract.text) for c in chunks]}
    if stop.is_set():
        raise ReadStopped("planning stopped")
    compiled = compile_plan(
        plan,
        registry,
        params={"document": document},
        write_boundary=write_boundary,
        max_steps=len(plan["steps"]),
    )
    return len(chunks), compiled


def _too_many_chunks(
    file: str, contract: ContractText, count: str, max_chunks: int | None
) -> dict[str, Any]:
    return contract_error_record(
        file,
        "too_many_chunks",
        f"{file}: {len(contract.text):,} characters of text make {count} chunks, more than "
        f"the {max_chunks} a contract may have (--max-chunks); split the document, or raise "
        "--max-chunks or --chunk-chars",
        contract,
    )


def planning_timeout_row(
    file: str, seconds: float, contract: ContractText | None
) -> dict[str, Any]:
    """The ``planning_timeout`` error row of ``file``, whose planning took more than
    ``seconds`` (with its text when it was read)."""
    return contract_error_record(
        file,
        "planning_timeout",
        f"{file}: reading, chunking and planning it took more than {seconds:g} s "
        "(--max-planning-seconds); nothing was sent to the model. Split the document, or "
        "raise the limit",
        contract,
    )


async def extract_contract(
    path: Path,
    *,
    fields: Sequence[FieldSpec] = CUAD_FIELDS,
    registry: Registry | None = None,
    run_options: Mapping[str, Any] | None = None,
    write_boundary: WriteBoundary | None = None,
    chunk_chars: int = DEFAULT_CHUNK_CHARS,
    model: str | None = None,
    contract: ContractText | None = None,
    max_input_bytes: int | None = MAX_INPUT_BYTES,
    max_unpacked_bytes: int | None = MAX_UNPACKED_BYTES,
    max_chunks: int | None = MAX_CHUNKS,
    max_planning_seconds: float | None = MAX_PLANNING_SECONDS,
    planning_started: float | None = None,
) -> dict[str, Any]:
    """Extract one contract: read it, chunk it, run its plan, build its record.

    Args:
        path: the contract file (.txt, .md, .pdf, .docx); its string form is the
            record's ``file``.
        fields: the fields to extract (default the 41 CUAD categories).
        registry: tools and checks (default: the built-ins, ``llm`` among them, and this
            job's tools, :func:`plandag.tools.registry.default_registry` of ``contracts``).
        run_options: keyword arguments for :func:`plandag.scheduler.run_plan`: ``models``
            (the :class:`~plandag.executors.ModelAccess` the ``llm`` steps call), a
            ``budget`` shared by the batch, ``limits``, ``retry``, ``max_concurrency``.
        write_boundary: the plan's write boundary (it writes nothing).
        chunk_chars: characters per chunk at most.
        model: the ``llm`` steps' model (None: the run's default executor model).
        contract: the text already read (the batch reads it to match ``--resume``).
        max_input_bytes: the largest file read, in bytes (64 MiB); None: no limit.
        max_unpacked_bytes: the most bytes a ``.docx`` may unpack to (256 MiB); None: no
            limit.
        max_chunks: the most chunks the contract may have (:data:`MAX_CHUNKS`); None: no
            limit.
        max_planning_seconds: the most seconds from the start of reading until the plan
            is compiled (:data:`MAX_PLANNING_SECONDS`); None: no limit.
        planning_started: when planning began, on anyio's clock
            (:func:`anyio.current_time`; the batch gives the moment it began reading
            ``contract``); None: now.

    Returns:
        The record, or an error row (see the module's docstring; ``too_large``,
        ``too_many_chunks`` and ``planning_timeout`` among the codes).

    Raises:
        BatchStopped: a batch-wide brake stopped the run.
        PlanError: the plan does not compile against ``registry`` (no ``llm`` tool).
    """
    from plandag.scheduler import run_plan

    file = str(path)
    if registry is None:
        from plandag.tools.registry import default_registry

        registry = default_registry(("contracts",))
    stop = threading.Event()
    started = planning_started if planning_started is not None else anyio.current_time()
    left = None
    if max_planning_seconds is not None:
        left = max(max_planning_seconds - (anyio.current_time() - started), 0.0)
    try:
        with anyio.fail_after(left):
            if contract is None:
                read = await read_in_thread(
                    path,
                    max_bytes=max_input_bytes,
                    max_unpacked_bytes=max_unpacked_bytes,
                    max_chars=max_text_chars(max_chunks, chunk_chars),
                )
                if isinstance(read, dict):
                    return read
                contract = read
            planned = await anyio.to_thread.run_sync(
                functools.partial(
                    _plan_contract,
                    file,
                    contract,
                    fields,
                    registry,
                    write_boundary,
                    chunk_chars,
                    max_chunks,
                    model,
                    stop,
                ),
                abandon_on_cancel=True,
            )
    except TimeoutError:
        assert max_planning_seconds is not None
        return planning_timeout_row(file, max_planning_seconds, contract)
    finally:
        stop.set()
    if isinstance(planned, dict):
        return planned
    chunks, compiled = planned
    result = await run_plan(compiled, **dict(run_options or {}))
    record = contract_record(file, contract, chunks, fields, result)
    models = (run_options or {}).get("models")
    if getattr(models, "provider", None) == OFFLINE_PROVIDER:
        record["offline"] = True  # every value is an extract of the text, not a model's
        record["model"] = OFFLINE_MODEL
    return record

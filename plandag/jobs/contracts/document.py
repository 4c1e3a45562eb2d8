"""One contract → one record (or one error row), through its plan
(:mod:`~plandag.jobs.contracts.plan`) on the scheduler.

The record (one JSON object per contract; ``plandag eval contracts`` reads it)::

    {"file": "path as given", "status": "ok" | "check_failed" | "error",
     "text_sha256": "hex SHA-256 of the UTF-8 extracted text",
     "extractor": {"name": "pypdf", "version": "5.x"}, "chars": 12027, "chunks": 3,
     "fields": {NAME: {"type": ..., "values": [{"value", "quote", "start", "end", "match"}],
                       "answer": ..., "rejected": [{"quote", "reason"}]}},
     "checks": {"quote_exists": {"status": "pass" | "fail", "detail": "..."}},
     "errors": [{"code": ..., "message": ...}]}

``status``: ``error`` when the file gave no text (``errors`` says why, ``fields`` is empty)
or a field group's model calls failed (its fields have no values and a null answer;
``errors`` names the group, the chunk and the reason); else ``check_failed`` when
``quote_exists`` failed for a group (a quote not in the document: it is in that field's
``rejected``, never a value); else ``ok``. ``start``/``end`` are ``[start, end)``
character offsets into the extracted text, computed by plandag.

A run that a batch-wide brake cut short (the cost or token cap, the deadline, a stall, an
interruption) gives no record: :class:`BatchStopped` is raised, the batch stops, and
``--resume`` extracts that contract again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio.to_thread

from plandag.errors import PlandagError
from plandag.jobs.contracts.chunks import DEFAULT_CHUNK_CHARS, chunk_text
from plandag.jobs.contracts.fields import CUAD_FIELDS, FieldSpec, field_groups
from plandag.jobs.contracts.plan import contract_plan
from plandag.jobs.contracts.text import ContractInputError, ContractText, read_contract
from plandag.jobs.contracts.tools import quote_exists

if TYPE_CHECKING:
    from plandag.scheduler.result import RunResult, StepRecord
    from plandag.tools.boundary import WriteBoundary
    from plandag.tools.registry import Registry

__all__ = [
    "BRAKE_REASONS",
    "BatchStopped",
    "contract_error_record",
    "contract_record",
    "extract_contract",
    "read_for_batch",
]

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
        "fields": {},
        "checks": {},
        "errors": [{"code": code, "message": message}],
    }


def read_for_batch(path: Path) -> ContractText | dict[str, Any]:
    """The contract's text, or its error row when the file gives none (see
    :func:`~plandag.jobs.contracts.text.read_contract` for the codes)."""
    try:
        return read_contract(path)
    except ContractInputError as error:
        return contract_error_record(str(path), error.code, str(error))


def _step_failure(step: StepRecord) -> tuple[str, str]:
    code = step.reason or "tool_error"
    if step.error is not None:
        return code, str(step.error.message)
    return code, str(step.detail or f"step {step.id} {step.status}")


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
                code, message = _step_failure(culprit)
                where = f"chunk {failed[0] + 1} of {len(group_steps)}" if failed else "merge"
                errors.append({"code": code, "message": f"fields {names}: {where}: {message}"})
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
        "fields": record_fields,
        "checks": checks,
        "errors": errors,
    }


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

    Returns:
        The record, or an error row (see the module's docstring).

    Raises:
        BatchStopped: a batch-wide brake stopped the run.
        PlanError: the plan does not compile against ``registry`` (no ``llm`` tool).
    """
    from plandag.compiler import compile_plan
    from plandag.scheduler import run_plan

    file = str(path)
    if contract is None:
        read = await anyio.to_thread.run_sync(read_for_batch, path)
        if isinstance(read, dict):
            return read
        contract = read
    chunks = chunk_text(contract.text, chunk_chars)
    plan = contract_plan(chunks, fields, model=model)
    if registry is None:
        from plandag.tools.registry import default_registry

        registry = default_registry(("contracts",))
    document = {"text": contract.text, "chunks": [c.as_dict(contract.text) for c in chunks]}
    compiled = compile_plan(
        plan,
        registry,
        params={"document": document},
        write_boundary=write_boundary,
        max_steps=len(plan["steps"]),
    )
    result = await run_plan(compiled, **dict(run_options or {}))
    return contract_record(file, contract, len(chunks), fields, result)

"""The research report: Markdown and a JSON record, built from the run store
(docs/guides/research.md).

Everything comes from what the run store holds for the run — the plan's last version (every
step, superseded ones included), each step's record (resolved arguments, result, state,
reason, times), the replans and the model calls — so ``plandag research --from-run RUN_ID``
rebuilds the same report at any later time. Nothing in it is written by a model except the
answer and the claims, and every citation shown was checked here again: its quote located
in the chunk the run read (:func:`~plandag.jobs.research.citations.locate`), with ``[start,
end)`` offsets into the document's extracted text computed in code.

The Markdown report has three parts:

* **Answer**: the synthesis' answer, then its claims, each with its reference numbers;
* **Methodology**, generated from the plan: the subquestions (an answer step's note), for
  each its searches (query, ``k``, chunks found), the chunks read and the answer's outcome
  (claims, citations exact or normalised, or the check that failed and which steps replaced
  it), the replans (trigger, steps replaced, steps added), and the spend (model calls for
  planning and replanning, executor steps, tokens, US dollars, wall clock);
* **References**: document, chunk id, offsets and the quote, one line each.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from plandag.dag.references import find_references
from plandag.jobs.research.citations import (
    AnswerVerification,
    CitationOutcome,
    verify_answer,
    verify_synthesis,
)
from plandag.jobs.research.corpus import Chunk
from plandag.jobs.research.planning import SUBQUESTION_PREFIX
from plandag.models.offline import OFFLINE_MODEL

__all__ = ["Report", "StoredRun", "build_report", "load_run"]

ANSWER_CHECK = "citations_supported"
SYNTHESIS_CHECK = "synthesis_citations"


@dataclasses.dataclass(frozen=True)
class StoredRun:
    """What the run store holds of one research run (:func:`load_run`).

    Attributes:
        run_id, question, status, detail: the run's id, goal, final state and its detail.
        created, updated: seconds since the epoch.
        plan: the last plan version (Plan JSON: every step so far, superseded ones too).
        versions: ``(version, source)`` of every plan version (``planner``, ``replan``...).
        steps: each step's record by id: ``{"tool", "status", "reason", "detail", "args",
            "result", "started_at", "ended_at", "superseded_by", "attempts"}``.
        replans: the recorded replans (``ReplanRecord.to_json_dict``), in order.
        model_calls: the planner's, replanner's and joiner's call attempts: ``{"model",
            "input_tokens", "output_tokens", "cost_usd", "error"}``.
        spent_usd, spent_tokens: the run's whole spend (model calls and steps).
    """

    run_id: str
    question: str
    status: str
    detail: str | None
    created: float
    updated: float
    plan: Mapping[str, Any]
    versions: tuple[tuple[int, str], ...]
    steps: Mapping[int, Mapping[str, Any]]
    replans: tuple[Mapping[str, Any], ...]
    model_calls: tuple[Mapping[str, Any], ...]
    spent_usd: float
    spent_tokens: int


def load_run(store: Any, run_id: str) -> StoredRun:
    """Read one research run from the run store.

    Args:
        store: an open :class:`plandag.store.Store`.
        run_id: the run's id (resolved).

    Raises:
        KeyError: no such run (``Store.run``'s error).
    """
    row = store.run(run_id)
    versions = store.plan_versions(run_id)
    steps = {
        step_id: {
            "tool": step.tool,
            "status": step.status,
            "reason": step.reason,
            "detail": step.detail,
            "args": step.args,
            "result": step.result,
            "started_at": step.started_at,
            "ended_at": step.ended_at,
            "superseded_by": step.superseded_by,
            "attempts": step.attempts,
        }
        for step_id, step in store.steps(run_id).items()
    }
    replans = tuple(data for _, kind, data in store.events(run_id) if kind == "replan")
    calls = tuple(
        {
            "purpose": purpose,
            "model": model,
            "input_tokens": input_tokens or 0,
            "output_tokens": output_tokens or 0,
            "cost_usd": cost or 0.0,
            "error": error,
        }
        for purpose, model, input_tokens, output_tokens, cost, error in store.connection.execute(
            "SELECT purpose, model, input_tokens, output_tokens, cost_usd, error FROM llm_call "
            "WHERE run_id = ? ORDER BY id",
            (run_id,),
        )
    )
    return StoredRun(
        run_id=run_id,
        question=row.goal or "",
        status=row.status,
        detail=row.detail,
        created=row.created,
        updated=row.updated,
        plan=versions[-1].plan if versions else {"steps": []},
        versions=tuple((version.version, version.source) for version in versions),
        steps=steps,
        replans=replans,
        model_calls=calls,
        spent_usd=row.spent_usd,
        spent_tokens=row.spent_tokens,
    )


@dataclasses.dataclass(frozen=True)
class Report:
    """The report: ``markdown`` (the text of the ``.md`` file) and ``record`` (the JSON
    record, a dict; see :func:`build_report`)."""

    markdown: str
    record: dict[str, Any]


def _check_kinds(step: Mapping[str, Any]) -> list[str]:
    return [str(item.get("kind")) for item in step.get("check") or [] if isinstance(item, Mapping)]


def _attached(step: Mapping[str, Any], kind: str) -> bool:
    """The step's ``kind`` check was attached by plandag (the plan had left it out)."""
    return any(
        isinstance(item, Mapping) and item.get("kind") == kind and item.get("attached") is True
        for item in step.get("check") or []
    )


def _note(step: Mapping[str, Any]) -> str:
    return str(step.get("description") or "").strip().lower()


def _is_answer(step: Mapping[str, Any]) -> bool:
    """An answer step: it has the citation check, or it is an ``llm`` step whose note names
    a subquestion (a plan that forgot the check: its citations are checked here only)."""
    if ANSWER_CHECK in _check_kinds(step):
        return True
    return step.get("tool") == "llm" and _note(step).startswith(SUBQUESTION_PREFIX.strip())


def _is_synthesis(step: Mapping[str, Any]) -> bool:
    if SYNTHESIS_CHECK in _check_kinds(step):
        return True
    return step.get("tool") == "llm" and _note(step).startswith("synthesis")


def _dependencies(step: Mapping[str, Any]) -> set[int]:
    found = {int(item) for item in step.get("depends_on") or []}
    for _, reference in find_references(step.get("args") or {}):
        if reference.step_id is not None:
            found.add(reference.step_id)
    return found


def _ancestors(step_id: int, steps: Mapping[int, Mapping[str, Any]]) -> list[int]:
    seen: set[int] = set()
    pending = [step_id]
    for _ in range(len(steps) + 1):
        if not pending:
            break
        current = pending.pop()
        for parent in _dependencies(steps.get(current, {})):
            if parent not in seen and parent in steps:
                seen.add(parent)
                pending.append(parent)
    return sorted(seen)


def _chunks_read(run: StoredRun) -> dict[str, Chunk]:
    """Every chunk any ``read`` step of the run returned, by id (as stored)."""
    found: dict[str, Chunk] = {}
    for record in run.steps.values():
        result = record.get("result")
        if record.get("tool") != "read" or not isinstance(result, Mapping):
            continue
        for item in result.get("chunks") or []:
            try:
                chunk = Chunk(
                    str(item["chunk_id"]),
                    str(item["document"]),
                    int(str(item["chunk_id"]).rpartition("#")[2] or 0),
                    int(item["start"]),
                    int(item["end"]),
                    str(item["text"]),
                )
            except (KeyError, TypeError, ValueError):
                continue
            found.setdefault(chunk.chunk_id, chunk)
    return found


def _subquestion(step: Mapping[str, Any]) -> str:
    note = str(step.get("description") or "").strip()
    if note.lower().startswith(SUBQUESTION_PREFIX.strip()):
        return note[len(SUBQUESTION_PREFIX.strip()) :].strip(" :")
    if note:
        return note
    prompt = (step.get("args") or {}).get("prompt")
    return str(prompt).strip() if prompt else "(no subquestion written)"


def _seconds(value: float | None, origin: float | None) -> float | None:
    if value is None or origin is None:
        return None
    return round(value - origin, 3)


def _citation_json(item: CitationOutcome) -> dict[str, Any]:
    return {
        "chunk_id": item.chunk_id,
        "document": item.document,
        "start": item.start,
        "end": item.end,
        "quote": item.quote,
        "match": item.match,
        "supported": item.supported,
        "reason": item.reason,
    }


def _verification_json(verification: AnswerVerification) -> list[dict[str, Any]]:
    return [
        {
            "claim": claim.claim,
            "supported": claim.supported,
            "citations": [_citation_json(item) for item in claim.citations],
        }
        for claim in verification.claims
    ]


def _fmt_steps(ids: Sequence[int]) -> str:
    if not ids:
        return "none"
    return ", ".join(str(item) for item in ids)


def build_report(run: StoredRun, lookup: Callable[[str], Chunk | None] | None = None) -> Report:
    """The Markdown report and the JSON record of ``run``.

    Args:
        run: the run as stored (:func:`load_run`).
        lookup: where a cited chunk that no ``read`` step of the run returned is looked up
            (an open corpus' ``chunk``); None: only the chunks the run read.

    Returns:
        The report. The record holds ``run_id``, ``question``, ``status``, ``answer`` (the
        synthesis' text, or None), ``claims`` (each ``{"claim", "supported", "citations":
        [{"chunk_id", "document", "start", "end", "quote", "match", "supported",
        "reason"}]}``), ``references`` (each ``{"n", "chunk_id", "document", "start",
        "end", "quote", "match"}``), ``subquestions`` (each ``{"text", "answer_step",
        "steps", "searches": [{"step", "query", "k", "chunk_ids", "status"}], "read",
        "checked_in_run", "check_attached" (plandag attached the check the plan left out),
        "status", "reason", "detail", "superseded_by", "claims", "started_s", "ended_s"}``;
        times in seconds from the run's start), ``synthesis_step``,
        ``synthesis_check_attached``,
        ``answers_at_once`` (the most answer steps running at one instant),
        ``replans``, ``plan_versions``, ``spend`` (``{"model_calls",
        "model_input_tokens", "model_output_tokens", "model_cost_usd", "total_usd",
        "total_tokens", "executor_usd", "executor_tokens", "seconds"}``) and ``failure``:
        why no answer came through when the planning failed (``planning failed: ... (3 of
        3 planning calls failed)``) or every branch did (their most frequent failure, ``(N
        of M branches)``), else None; the report's "What failed" section and ``plandag
        research``'s summary line say it; ``models``: the planner's models called, sorted;
        ``offline``: True when the offline model (``offline-extractive``) made the plan
        (every answer is then an extract of the documents, and the methodology says so).
    """
    read_chunks = _chunks_read(run)

    def chunk_of(chunk_id: str) -> Chunk | None:
        found = read_chunks.get(chunk_id)
        if found is None and lookup is not None:
            found = lookup(chunk_id)
        return found

    plan_steps: dict[int, Mapping[str, Any]] = {
        int(step["id"]): step for step in run.plan.get("steps") or []
    }
    starts = [
        float(record["started_at"])
        for record in run.steps.values()
        if record.get("started_at") is not None
    ]
    origin = min(starts) if starts else None
    answer_ids = [i for i, step in sorted(plan_steps.items()) if _is_answer(step)]
    synthesis_ids = [i for i, step in sorted(plan_steps.items()) if _is_synthesis(step)]

    subquestions: list[dict[str, Any]] = []
    for answer_id in answer_ids:
        step = plan_steps[answer_id]
        record = run.steps.get(answer_id, {})
        branch = [*_ancestors(answer_id, plan_steps), answer_id]
        searches = []
        read_ids: list[str] = []
        for member in branch:
            tool = plan_steps[member].get("tool")
            member_record = run.steps.get(member, {})
            args = member_record.get("args") or plan_steps[member].get("args") or {}
            result = member_record.get("result")
            if tool == "search":
                searches.append(
                    {
                        "step": member,
                        "query": args.get("query"),
                        "k": args.get("k", 5),
                        "chunk_ids": list(result.get("chunk_ids") or [])
                        if isinstance(result, Mapping)
                        else [],
                        "status": member_record.get("status", "pending"),
                    }
                )
            elif tool == "read" and isinstance(result, Mapping):
                read_ids.extend(str(item.get("chunk_id")) for item in result.get("chunks") or [])
        claims: list[dict[str, Any]] = []
        result = record.get("result")
        if result is not None:
            claims = _verification_json(verify_answer(result, chunk_of))
        subquestions.append(
            {
                "text": _subquestion(step),
                "answer_step": answer_id,
                "steps": branch,
                "searches": searches,
                "read": read_ids,
                "checked_in_run": ANSWER_CHECK in _check_kinds(step),
                "check_attached": _attached(step, ANSWER_CHECK),
                "status": record.get("status", "pending"),
                "reason": record.get("reason"),
                "detail": record.get("detail"),
                "superseded_by": list(record.get("superseded_by") or []),
                "claims": claims,
                "started_s": _seconds(
                    min(
                        (
                            run.steps[i]["started_at"]
                            for i in branch
                            if run.steps.get(i, {}).get("started_at") is not None
                        ),
                        default=None,
                    ),
                    origin,
                ),
                "ended_s": _seconds(record.get("ended_at"), origin),
            }
        )

    # the synthesis that stands: the last one that succeeded, else the last one planned
    synthesis_id: int | None = None
    for candidate in synthesis_ids:
        if run.steps.get(candidate, {}).get("status") == "succeeded":
            synthesis_id = candidate
    if synthesis_id is None and synthesis_ids:
        synthesis_id = synthesis_ids[-1]
    answer_text: str | None = None
    final_claims: list[dict[str, Any]] = []
    if synthesis_id is not None and run.steps.get(synthesis_id, {}).get("status") == "succeeded":
        result = run.steps[synthesis_id].get("result")
        answers = [
            run.steps[i].get("result")
            for i in answer_ids
            if run.steps.get(i, {}).get("status") == "succeeded"
        ]
        verification = verify_synthesis(result, answers, chunk_of)
        if isinstance(result, Mapping) and isinstance(result.get("answer"), str):
            answer_text = result["answer"]
        final_claims = _verification_json(verification)

    references: list[dict[str, Any]] = []
    numbers: dict[tuple[str, int | None, int | None], int] = {}
    for claim in final_claims:
        marks = []
        for item in claim["citations"]:
            if not item["supported"]:
                continue
            key = (item["chunk_id"], item["start"], item["end"])
            if key not in numbers:
                numbers[key] = len(references) + 1
                references.append({"n": numbers[key], **{k: item[k] for k in _REF_KEYS}})
            marks.append(numbers[key])
        claim["references"] = marks

    model_in = sum(int(call["input_tokens"]) for call in run.model_calls)
    model_out = sum(int(call["output_tokens"]) for call in run.model_calls)
    model_usd = sum(float(call["cost_usd"]) for call in run.model_calls)
    ends = [
        float(record["ended_at"])
        for record in run.steps.values()
        if record.get("ended_at") is not None
    ]
    spend = {
        "model_calls": len(run.model_calls),
        "model_input_tokens": model_in,
        "model_output_tokens": model_out,
        "model_cost_usd": round(model_usd, 6),
        "total_usd": round(run.spent_usd, 6),
        "total_tokens": run.spent_tokens,
        "executor_usd": round(max(run.spent_usd - model_usd, 0.0), 6),
        "executor_tokens": max(run.spent_tokens - model_in - model_out, 0),
        "steps_seconds": round(max(ends) - origin, 3) if ends and origin is not None else None,
    }
    intervals = [
        (float(run.steps[i]["started_at"]), float(run.steps[i]["ended_at"]))
        for i in answer_ids
        if run.steps.get(i, {}).get("started_at") is not None
        and run.steps.get(i, {}).get("ended_at") is not None
    ]
    record = {
        "run_id": run.run_id,
        "question": run.question,
        "status": run.status,
        "detail": run.detail,
        "answer": answer_text,
        "claims": final_claims,
        "references": references,
        "subquestions": subquestions,
        "synthesis_step": synthesis_id,
        "synthesis_check_attached": synthesis_id is not None
        and _attached(plan_steps[synthesis_id], SYNTHESIS_CHECK),
        "answers_at_once": _most_at_once(intervals),
        "replans": [
            {
                "number": replan.get("number"),
                "trigger": replan.get("trigger"),
                "reason": replan.get("reason"),
                "replaced": list(replan.get("replaced") or []),
                "new_ids": list(replan.get("new_ids") or []),
                "applied": replan.get("applied"),
            }
            for replan in run.replans
        ],
        "plan_versions": [{"version": v, "source": s} for v, s in run.versions],
        "spend": spend,
    }
    models = sorted({str(call.get("model")) for call in run.model_calls if call.get("model")})
    record["models"] = models
    record["offline"] = bool(models) and models == [OFFLINE_MODEL]
    record["failure"] = _failure(run, subquestions)
    return Report(_markdown(record), record)


def _without_type(text: str) -> str:
    """An error's text without its leading ``SomeError: ``, as a person reads it."""
    head, separator, rest = text.partition(": ")
    return rest if separator and head.isidentifier() and head[:1].isupper() else text


def _failure(run: StoredRun, subquestions: Sequence[Mapping[str, Any]]) -> str | None:
    """Why the run got no answer, in a line, when nothing ran or every branch failed:
    ``planning failed: ... (3 of 3 planning calls)``, or the branches' most frequent
    failure with ``(N of M branches)``; None when a branch succeeded or the run did."""
    if run.status == "succeeded":
        return None
    if not subquestions:
        if run.status in ("interrupted", "awaiting_approval"):
            return None
        failed_calls = [call for call in run.model_calls if call.get("error")]
        why = run.detail or (
            _without_type(str(failed_calls[-1]["error"])) if failed_calls else run.status
        )
        counts = (
            f" ({len(failed_calls)} of {len(run.model_calls)} planning calls failed)"
            if failed_calls
            else ""
        )
        return f"planning failed: {why}{counts}"
    final = [item for item in subquestions if not item.get("superseded_by")] or list(subquestions)
    failed = [item for item in final if item["status"] in ("failed", "skipped", "cancelled")]
    if not failed or len(failed) < len(final):
        return None
    reasons = Counter(str(item["reason"] or item["status"]) for item in failed)
    reason, times = reasons.most_common(1)[0]
    first = next(item for item in failed if str(item["reason"] or item["status"]) == reason)
    words = _without_type(str(first["detail"] or reason))
    shown = f"{words} ({times} of {len(final)} branches)"
    if times < len(failed):
        shown += f"; {len(failed) - times} failed otherwise"
    return shown


_REF_KEYS = ("chunk_id", "document", "start", "end", "quote", "match")


def _quote(text: str, limit: int = 160) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _markdown(record: Mapping[str, Any]) -> str:
    lines = [f"# {record['question'] or 'Research'}", ""]
    lines += ["## Answer", ""]
    if record["answer"] is not None:
        lines += [record["answer"].strip(), ""]
        if record["claims"]:
            lines.append("Claims:")
            lines.append("")
            for claim in record["claims"]:
                marks = "".join(f"[{n}]" for n in claim["references"])
                lines.append(f"- {claim['claim'].strip()} {marks}".rstrip())
            lines.append("")
    else:
        detail = f" ({record['detail']})" if record.get("detail") else ""
        lines += [
            f"No answer: the run ended {record['status']}{detail}. Nothing was made up; the "
            "methodology below shows what ran.",
            "",
        ]
    lines += _methodology(record)
    lines += ["## References", ""]
    if not record["references"]:
        lines += ["None.", ""]
    for reference in record["references"]:
        match = (
            " (matched after whitespace and case normalisation)"
            if reference["match"] == "normalized"
            else ""
        )
        lines.append(
            f"{reference['n']}. {reference['document']}, chunk `{reference['chunk_id']}`, "
            f"characters {reference['start']}–{reference['end']}{match}: "
            f'"{_quote(reference["quote"])}"'
        )
    lines.append("")
    return "\n".join(lines)


def _methodology(record: Mapping[str, Any]) -> list[str]:
    subquestions = record["subquestions"]
    versions = record["plan_versions"]
    replans = record["replans"]
    lines = ["## Methodology", ""]
    first = [item for item in subquestions if not _added_by_replan(item, replans)]
    lines.append(
        f"The question was planned as {len(first)} subquestion(s), each an independent "
        "branch (search → read → answer with checked citations) run in parallel, then one "
        f"synthesis step (run `{record['run_id']}`, {len(versions)} plan version(s), "
        f"{len(replans)} replan(s), final state {record['status']})."
    )
    lines.append("")
    if record.get("offline"):
        lines += [
            f"Made offline ({OFFLINE_MODEL}): no model wrote this report. The plan was "
            "cut from the question's own words and every answer is an extract: the "
            "sentences of the chunks read that share the most words with the subquestion "
            "(BM25). Its citations were checked like any model's.",
            "",
        ]
    lines += ["### Subquestions", ""]
    for number, item in enumerate(subquestions, start=1):
        origin = _added_by_replan(item, replans)
        tag = f", added by replan {origin}" if origin else ""
        lines.append(f"{number}. **{item['text']}** (steps {_fmt_steps(item['steps'])}{tag})")
        for search in item["searches"]:
            found = ", ".join(f"`{chunk}`" for chunk in search["chunk_ids"]) or "nothing"
            lines.append(
                f'   - search "{search["query"]}" (k={search["k"]}, step {search["step"]}): {found}'
            )
        if item["read"]:
            lines.append(f"   - read {len(item['read'])} chunk(s)")
        lines.append(f"   - answer (step {item['answer_step']}): {_outcome(item)}")
        if item["check_attached"]:
            lines.append(
                "   - warning: the plan gave this answer no citations_supported check; "
                "plandag attached it before the step ran"
            )
        if not item["checked_in_run"]:
            lines.append(
                "   - the plan gave this answer no citations_supported check: its citations "
                "were checked for this report only, and unsupported ones are not referenced"
            )
    if not subquestions:
        lines.append("No subquestion was planned.")
    lines.append("")
    if record["answers_at_once"]:
        lines += [
            f"At most {record['answers_at_once']} answer step(s) ran at the same time "
            "(from the steps' recorded start and end times).",
            "",
        ]
    synthesis = record["synthesis_step"]
    if synthesis is not None:
        lines += [
            f"Synthesis: step {synthesis}, {len(record['claims'])} claim(s), "
            f"{len(record['references'])} reference(s), each quote checked against its "
            "chunk and against the quotes that passed in the answers.",
            "",
        ]
        if record["synthesis_check_attached"]:
            lines += [
                "Warning: the plan gave the synthesis no synthesis_citations check; plandag "
                "attached it before the step ran.",
                "",
            ]
    lines += ["### What failed and was replanned", ""]
    failed = [item for item in subquestions if item["status"] in ("failed", "skipped", "cancelled")]
    if record.get("failure"):
        lines += [f"No answer came through: {record['failure']}.", ""]
    elif not failed and not replans and record["status"] != "succeeded" and not subquestions:
        lines += [f"Nothing ran: the run ended {record['status']}.", ""]
    elif not failed and not replans:
        lines += ["Nothing failed; no replan.", ""]
    for item in failed:
        lines.append(
            f'- subquestion "{item["text"]}" (step {item["answer_step"]}): '
            f"{item['status']} ({item['reason']}) — {item['detail'] or 'no detail'}"
        )
    for replan in replans:
        applied = "applied" if replan["applied"] else "not applied"
        lines.append(
            f"- replan {replan['number']} ({replan['trigger']}, {applied}): replaced steps "
            f"{_fmt_steps(replan['replaced'])} with steps {_fmt_steps(replan['new_ids'])}"
        )
    lines.append("")
    spend = record["spend"]
    lines += [
        "### Spend",
        "",
        f"- planning and replanning: {spend['model_calls']} model call(s), "
        f"{spend['model_input_tokens']:,} input and {spend['model_output_tokens']:,} output "
        f"tokens, ${spend['model_cost_usd']:.4f}",
        f"- steps (executor model calls): {spend['executor_tokens']:,} tokens, "
        f"${spend['executor_usd']:.4f}",
        f"- total: {spend['total_tokens']:,} tokens, ${spend['total_usd']:.4f}"
        + (
            f", {spend['steps_seconds']:.1f} s from the first step to the last"
            if spend["steps_seconds"] is not None
            else ""
        ),
        "",
    ]
    return lines


def _most_at_once(intervals: Sequence[tuple[float, float]]) -> int:
    """The most ``[start, end)`` intervals that hold one instant in common."""
    events = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    most = current = 0
    for _, change in events:  # an end sorts before a start at the same instant
        current += change
        most = max(most, current)
    return most


def _added_by_replan(item: Mapping[str, Any], replans: Sequence[Mapping[str, Any]]) -> int | None:
    for replan in replans:
        if item["answer_step"] in replan["new_ids"]:
            return int(replan["number"])
    return None


def _outcome(item: Mapping[str, Any]) -> str:
    status = item["status"]
    if status == "succeeded":
        citations = [c for claim in item["claims"] for c in claim["citations"]]
        found = [c for c in citations if c["supported"]]
        normalized = sum(1 for c in found if c["match"] == "normalized")
        text = (
            f"{len(item['claims'])} claim(s), {len(found)} citation(s) found in their "
            f"chunks ({len(found) - normalized} exact, {normalized} after normalisation)"
        )
        if len(found) < len(citations):
            text += f", {len(citations) - len(found)} not found (not referenced)"
        return text
    text = f"{status} ({item['reason']})" if item["reason"] else status
    if item["detail"]:
        text += f": {item['detail']}"
    if item["superseded_by"]:
        text += f"; replanned as steps {_fmt_steps(item['superseded_by'])}"
    return text

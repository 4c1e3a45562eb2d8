"""The research tools and checks, registered through the ``plandag.tools`` entry point
``research`` (docs/guides/research.md).

* ``search(query, k=5)``: the ``k`` chunks of the corpus that best match ``query`` (BM25),
  best first: ``{"query", "hits": [{"chunk_id", "document", "start", "end", "score",
  "preview"}], "chunk_ids": [...]}``.
* ``read(chunk_id)``: one chunk id, or a list (``<step_1_result.chunk_ids>``): ``{"chunks":
  [{"chunk_id", "document", "start", "end", "text"}]}``.
* check ``citations_supported``: the step's result is an answer whose every claim is
  supported by quotes found in their chunks
  (:func:`~plandag.jobs.research.citations.verify_answer`).
* check ``synthesis_citations`` (``answers``: the subquestion answers): the synthesis cites
  only quotes that passed in those answers
  (:func:`~plandag.jobs.research.citations.verify_synthesis`).

Both checks are required, not only asked for: every answer step (an ``llm`` step whose
``schema`` is the answer schema, ``<param.answer_schema>`` or the schema itself, or whose
note starts ``subquestion:``) carries ``citations_supported``, and every synthesis step (an
``llm`` step with the synthesis schema, or noted ``synthesis``) carries
``synthesis_citations`` over the answer steps it depends on. A plan or replan that leaves
one out is not sent back to the planner: the compiler attaches it
(:attr:`~plandag.checks.base.CheckDefinition.required_on`, warning ``check_attached``)
with ``attached: true``, and the report's methodology says so.

The corpus is the one bound by :func:`use_corpus` (``plandag research --corpus DIR`` binds
it for its run), or the folder given as the optional ``corpus`` argument (a plan run with
``plandag exec``/``run``). Corpus files come from outside the run: results are tainted
(ARCHITECTURE.md, "Untrusted content"), like ``read_file``'s.

Web search is not built in: a user plugs one in as a tool of their own (``--tools
web.py``) whose requests go through :func:`plandag.tools.http` helpers and so reach only
the hosts of the HTTP allow-list (``--http-allow``); docs/guides/research.md,
shows one.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, TypedDict

from plandag.checks.base import CheckDefinition, CheckOutcome, check
from plandag.dag.plan import Step
from plandag.dag.references import find_references
from plandag.errors import PermanentStepError
from plandag.jobs.research.citations import (
    ANSWER_SCHEMA,
    SYNTHESIS_SCHEMA,
    verify_answer,
    verify_synthesis,
)
from plandag.jobs.research.corpus import Chunk, Corpus
from plandag.tools.base import Tool, tool

__all__ = [
    "RESEARCH_CHECKS",
    "RESEARCH_TOOLS",
    "ReadResult",
    "SearchResult",
    "active_corpus",
    "citations_supported",
    "is_answer_step",
    "is_synthesis_step",
    "plandag_tools",
    "read",
    "search",
    "synthesis_citations",
    "use_corpus",
]

MAX_K = 20
"""The most hits one search returns."""

_ACTIVE: contextvars.ContextVar[Corpus | None] = contextvars.ContextVar(
    "plandag_research_corpus", default=None
)


@contextlib.contextmanager
def use_corpus(corpus: Corpus) -> Iterator[Corpus]:
    """Bind ``corpus`` for the research tools and checks run inside the ``with`` block (in
    this context and the tasks it starts)."""
    token = _ACTIVE.set(corpus)
    try:
        yield corpus
    finally:
        _ACTIVE.reset(token)


@functools.lru_cache(maxsize=8)
def _opened(folder: str) -> Corpus:
    return Corpus.open(folder)


def active_corpus(folder: str | None = None) -> Corpus:
    """The corpus of ``folder`` when given, else the bound one.

    Within a research run (a corpus bound), ``folder`` may only name the bound corpus: a
    step cannot open another folder as a corpus and read its files.

    Raises:
        PermanentStepError: reason ``invalid_args``: no corpus bound and none given, the
            folder is not a corpus, or a corpus is bound and ``folder`` is another one
            (the message says what to pass).
    """
    bound = _ACTIVE.get()
    if folder is not None and bound is not None:
        if Path(folder).expanduser().resolve() != bound.folder:
            raise PermanentStepError(
                f"corpus {folder}: this research run reads its own corpus "
                f"{bound.folder} only; leave out the corpus argument",
                reason="invalid_args",
            )
        return bound
    if folder is not None:
        try:
            return _opened(str(Path(folder).expanduser().resolve()))
        except Exception as error:  # InputError: what and where
            raise PermanentStepError(str(error), reason="invalid_args") from error
    if bound is None:
        raise PermanentStepError(
            "no corpus for the research tools: run `plandag research QUESTION --corpus DIR`, "
            "or give the folder as the tool's corpus argument",
            reason="invalid_args",
        )
    return bound


class SearchResult(TypedDict):
    """What ``search`` returns."""

    query: str
    hits: list[dict[str, Any]]
    chunk_ids: list[str]


class ReadResult(TypedDict):
    """What ``read`` returns: the chunks, in the order asked."""

    chunks: list[dict[str, Any]]


@tool(inline=True, taint_source=True, typical_seconds=0.005)
def search(query: str, k: int = 5, corpus: str | None = None) -> SearchResult:
    """Search the corpus: the k chunks that best match the query (BM25), best first.

    Args:
        query: free text; chunks holding more of its words, and rarer ones, rank first.
        k: how many chunks at most (1 to 20).
        corpus: the corpus folder; default the one of the research run.

    Returns:
        ``{"query", "hits": [{"chunk_id", "document", "start", "end", "score",
        "preview"}], "chunk_ids": [...]}`` (``chunk_ids`` feeds ``read``).

    Raises:
        PermanentStepError: reason ``invalid_args`` for ``k`` out of range or no corpus.
    """
    if not 1 <= k <= MAX_K:
        raise PermanentStepError(
            f"search: k must be from 1 to {MAX_K}, not {k}", reason="invalid_args"
        )
    hits = active_corpus(corpus).search(query, k)
    return SearchResult(
        query=query,
        hits=[hit.as_dict() for hit in hits],
        chunk_ids=[hit.chunk.chunk_id for hit in hits],
    )


@tool(inline=True, taint_source=True, typical_seconds=0.002)
def read(chunk_id: str | list[str], corpus: str | None = None) -> ReadResult:
    """Read chunks of the corpus by id (one id, or a list such as a search's chunk_ids).

    Args:
        chunk_id: ``PATH#N`` or a list of them.
        corpus: the corpus folder; default the one of the research run.

    Returns:
        ``{"chunks": [{"chunk_id", "document", "start", "end", "text"}]}`` in the order
        asked (a repeated id once).

    Raises:
        PermanentStepError: reason ``missing_resource`` for an id the corpus does not hold
            (the message names the closest ids), ``invalid_args`` for no corpus.
    """
    source = active_corpus(corpus)
    ids = [chunk_id] if isinstance(chunk_id, str) else list(dict.fromkeys(chunk_id))
    chunks: list[dict[str, Any]] = []
    for item in ids:
        found = source.chunk(item)
        if found is None:
            nearest = source.nearest_ids(item)
            hint = f"; closest: {', '.join(nearest)}" if nearest else ""
            raise PermanentStepError(
                f"read: no chunk {item!r} in the corpus {source.folder}{hint}",
                reason="missing_resource",
            )
        chunks.append(found.as_dict())
    return ReadResult(chunks=chunks)


def _lookup(corpus: str | None) -> Any:
    source = active_corpus(corpus)

    def lookup(chunk_id: str) -> Chunk | None:
        return source.chunk(chunk_id)

    return lookup


def _schema_is(step: Step, param: str, schema: dict[str, Any]) -> bool:
    given = step.args.get("schema")
    return given == f"<param.{param}>" or given == schema


def _note_starts(step: Step, prefix: str) -> bool:
    return str(step.description or "").strip().lower().startswith(prefix)


def is_answer_step(step: Step) -> bool:
    """An answer step of a research plan: an ``llm`` step whose ``schema`` is the answer
    schema (``<param.answer_schema>`` or the schema itself), or whose note starts
    ``subquestion:``."""
    return step.tool == "llm" and (
        _schema_is(step, "answer_schema", ANSWER_SCHEMA) or _note_starts(step, "subquestion:")
    )


def is_synthesis_step(step: Step) -> bool:
    """A synthesis step of a research plan: an ``llm`` step whose ``schema`` is the
    synthesis schema (``<param.synthesis_schema>`` or the schema itself), or whose note
    starts ``synthesis``."""
    return step.tool == "llm" and (
        _schema_is(step, "synthesis_schema", SYNTHESIS_SCHEMA) or _note_starts(step, "synthesis")
    )


def _answer_requires(step: Step, steps: Mapping[int, Step]) -> dict[str, Any] | None:
    """``citations_supported`` is required on every answer step."""
    if is_answer_step(step) and not is_synthesis_step(step):
        return {"attached": True}
    return None


def _synthesis_requires(step: Step, steps: Mapping[int, Step]) -> dict[str, Any] | None:
    """``synthesis_citations`` is required on every synthesis step, over the answer steps it
    depends on (``depends_on`` and references in its args), in id order."""
    if not is_synthesis_step(step):
        return None
    parents = set(step.depends_on)
    parents.update(
        reference.step_id
        for _, reference in find_references(step.args)
        if reference.step_id is not None
    )
    answers = [
        f"<step_{parent}_result>"
        for parent in sorted(parents)
        if parent in steps and is_answer_step(steps[parent])
    ]
    return {"answers": answers, "attached": True}


@check(required_on=_answer_requires)
def citations_supported(
    result: Any, *, corpus: str | None = None, attached: bool = False
) -> CheckOutcome:
    """Every claim of the answer cites quotes found in their chunks (exact or normalised).

    ``attached`` is set by plandag when the plan left the check out and plandag attached
    it (the report says so); a plan does not set it.
    """
    try:
        lookup = _lookup(corpus)
    except PermanentStepError as error:
        return CheckOutcome("citations_supported", "fail", str(error))
    verification = verify_answer(result, lookup)
    citations = verification.citations()
    if not verification.supported:
        return CheckOutcome(
            "citations_supported",
            "fail",
            f"unsupported: {verification.describe_failures()}; cite only words copied from "
            "the chunks given",
        )
    normalized = sum(1 for item in citations if item.match == "normalized")
    return CheckOutcome(
        "citations_supported",
        "pass",
        f"{len(verification.claims)} claim(s), {len(citations)} citation(s) found "
        f"({len(citations) - normalized} exact, {normalized} after normalisation)",
    )


@check(required_on=_synthesis_requires)
def synthesis_citations(
    result: Any, *, answers: list[Any], corpus: str | None = None, attached: bool = False
) -> CheckOutcome:
    """The synthesis cites only quotes that passed in the subquestion answers given.

    ``attached`` is set by plandag when the plan left the check out and plandag attached
    it (the report says so); a plan does not set it.
    """
    try:
        lookup = _lookup(corpus)
    except PermanentStepError as error:
        return CheckOutcome("synthesis_citations", "fail", str(error))
    verification = verify_synthesis(result, answers, lookup)
    if not verification.supported:
        return CheckOutcome(
            "synthesis_citations",
            "fail",
            f"unsupported: {verification.describe_failures()}; cite only quotes of the "
            "subquestion answers",
        )
    return CheckOutcome(
        "synthesis_citations",
        "pass",
        f"{len(verification.claims)} claim(s), {len(verification.citations())} citation(s), "
        "all from the answers",
    )


RESEARCH_TOOLS: tuple[Tool, ...] = (search, read)
RESEARCH_CHECKS: tuple[CheckDefinition, ...] = (citations_supported, synthesis_citations)


def plandag_tools() -> tuple[tuple[Tool, ...], tuple[CheckDefinition, ...]]:
    """The ``plandag.tools`` entry point ``research``: ``(tools, checks)``."""
    return RESEARCH_TOOLS, RESEARCH_CHECKS

"""Scripted model replies for a research run over the shipped corpus
(``examples/research/corpus``), for the tests, ``benchmarks/research_makespan.py`` and the
research guide's token figures (docs/guides/research.md), served by
:class:`plandag.testing.MessagesServer`.

:class:`ScriptedResearch` is a responder (``MessagesServer(default=scripted)``) that plays
every model of a research run, whatever order the requests arrive in (branches run at once):

* the planner's first request gets :func:`research_plan` (the wire format), one branch
  ``search`` → ``read`` → ``llm`` per subquestion and a synthesis step;
* each replanner request gets :func:`replan_patch` for the subquestion whose answer failed;
* an ``llm`` step answering a subquestion quotes, word for word, the first sentence of
  each of the first two chunks it was given (read from the request's data block) — unless
  that subquestion is in ``fabricate``: its first answer then cites a sentence that is in no
  chunk, which the ``citations_supported`` check catches;
* the synthesis step reuses the first claim (and its citation) of each answer it is given.
"""

from __future__ import annotations

import dataclasses
import json
import re
import sys
import threading
from collections.abc import Mapping, Sequence
from typing import Any, Final

from plandag.executors.data import parse_data_blocks
from plandag.testing.script import ScriptedResponse

__all__ = [
    "FABRICATED_QUOTE",
    "QUESTION",
    "SUBQUESTIONS",
    "ScriptedResearch",
    "Subquestion",
    "replan_patch",
    "research_plan",
    "synthesis_patch",
]


@dataclasses.dataclass(frozen=True)
class Subquestion:
    """A subquestion of the scripted plan and the search query its branch uses."""

    text: str
    query: str
    retry_query: str


QUESTION: Final = (
    "How did the authors of The Federalist propose to control the effects of faction, and "
    "why did they expect a large union to help?"
)

SUBQUESTIONS: Final = (
    Subquestion(
        "What is a faction, and why can its causes not be removed?",
        "faction causes liberty removing nature of man",
        "definition faction citizens united common impulse passion",
    ),
    Subquestion(
        "How does a republic differ from a pure democracy?",
        "republic pure democracy representation delegation",
        "pure democracy small number citizens assemble",
    ),
    Subquestion(
        "Why is a large republic safer against faction than a small one?",
        "extend sphere variety parties interests large republic",
        "greater number citizens extent territory",
    ),
    Subquestion(
        "What did Hamilton say a firm Union would guard against?",
        "firm Union barrier domestic faction insurrection",
        "petty republics Greece Italy distractions",
    ),
)

FABRICATED_QUOTE: Final = "a large republic is always more dangerous than a small one"
"""The quote a fabricating answer cites: in no chunk of the corpus."""

_SYNTHESIS_MARK = "Answer the question from the subquestion answers"


def _step(
    i: int, tool: str, args: dict[str, Any], depends: list[int], **more: Any
) -> dict[str, Any]:
    return {"i": i, "t": tool, "a": args, "d": depends, **more}


def _branch(first_id: int, subquestion: Subquestion, query: str) -> list[dict[str, Any]]:
    search, read, answer = first_id, first_id + 1, first_id + 2
    return [
        _step(search, "search", {"query": query, "k": 4}, []),
        _step(read, "read", {"chunk_id": f"<step_{search}_result.chunk_ids>"}, [search]),
        _step(
            answer,
            "llm",
            {
                "prompt": "Answer this subquestion from the chunks in the data only: "
                f"{subquestion.text} Give each claim with citations; each quote must be words "
                "copied exactly from the chunk whose chunk_id you give.",
                "data": f"<step_{read}_result>",
                "schema": "<param.answer_schema>",
                "max_tokens": 800,
            },
            [read],
            c=[{"k": "citations_supported"}],
            n=f"subquestion: {subquestion.text}",
        ),
    ]


def _synthesis(step_id: int, answers: Sequence[int], question: str) -> dict[str, Any]:
    references = [f"<step_{i}_result>" for i in answers]
    return _step(
        step_id,
        "llm",
        {
            "prompt": f"{_SYNTHESIS_MARK} in the data only: {question} Cite only quotes that "
            "appear in those answers, with their chunk_id.",
            "data": {"json": json.dumps({"answers": references})},
            "schema": "<param.synthesis_schema>",
            "max_tokens": 1000,
        },
        list(answers),
        c=[{"k": "synthesis_citations", "a": {"answers": references}}],
        n="synthesis",
    )


def research_plan(
    question: str = QUESTION, subquestions: Sequence[Subquestion] = SUBQUESTIONS
) -> dict[str, Any]:
    """The scripted planner's plan (wire format): one branch per subquestion (steps
    ``3i+1``, ``3i+2``, ``3i+3``) and the synthesis (step ``3n+1``) as the output."""
    steps: list[dict[str, Any]] = []
    for index, subquestion in enumerate(subquestions):
        steps += _branch(3 * index + 1, subquestion, subquestion.query)
    synthesis_id = 3 * len(subquestions) + 1
    steps.append(_synthesis(synthesis_id, [3 * i + 3 for i in range(len(subquestions))], question))
    return {
        "g": question,
        "p": [{"n": "answer_schema", "t": "object"}, {"n": "synthesis_schema", "t": "object"}],
        "s": steps,
        "o": f"<step_{synthesis_id}_result>",
    }


def replan_patch(
    failed: int,
    replan_number: int = 1,
    question: str = QUESTION,
    subquestions: Sequence[Subquestion] = SUBQUESTIONS,
) -> dict[str, Any]:
    """The scripted replanner's patch after the answer of subquestion ``failed`` (0-based)
    failed: a new branch for it (another query) and a new synthesis, ids after every
    earlier step (each replan adds 4 steps)."""
    first = 3 * len(subquestions) + 2 + 4 * (replan_number - 1)
    subquestion = subquestions[failed]
    answers = [3 * i + 3 for i in range(len(subquestions)) if i != failed] + [first + 2]
    steps = _branch(first, subquestion, subquestion.retry_query)
    steps.append(_synthesis(first + 3, sorted(answers), question))
    return {"g": question, "s": steps, "o": f"<step_{first + 3}_result>"}


def synthesis_patch(
    replan_number: int = 1,
    question: str = QUESTION,
    subquestions: Sequence[Subquestion] = SUBQUESTIONS,
) -> dict[str, Any]:
    """The scripted replanner's patch after the synthesis failed its check: one new
    synthesis over the same answers (the id after every earlier step)."""
    step_id = 3 * len(subquestions) + 2 + 4 * (replan_number - 1)
    answers = [3 * i + 3 for i in range(len(subquestions))]
    return {
        "g": question,
        "s": [_synthesis(step_id, answers, question)],
        "o": f"<step_{step_id}_result>",
    }


def _first_sentence(text: str) -> str:
    """The first sentence of ``text`` with at least six words (or its first 12 words), as it
    stands in ``text`` (a citation's quote must be found there)."""
    for sentence in re.split(r"(?<=[.;:?!])\s+", text):
        if len(sentence.split()) >= 6:
            return sentence.strip()
    found = re.match(r"\s*((?:\S+\s+){0,11}\S+)", text)
    return found.group(1) if found else ""


def _shortened(sentence: str, limit: int = 200) -> str:
    """``sentence`` whole when it has at most ``limit`` characters, else its words that fit
    in ``limit`` characters followed by "…" (a cut never falls inside a word)."""
    if len(sentence) <= limit:
        return sentence
    kept = sentence[: limit + 1].rsplit(" ", 1)[0].rstrip(" ,;:")
    return f"{kept or sentence[:limit]}…"


class ScriptedResearch:
    """A responder playing the planner, the replanner and the executor model of a research
    run (see the module docstring), for :class:`~plandag.testing.MessagesServer` and
    :class:`~plandag.testing.ChatCompletionsServer` alike.

    Args:
        question, subquestions: the plan's question and subquestions.
        fabricate: 0-based subquestions whose first answer cites a fabricated quote.
        fabricate_always: their every answer does (the branch never gets through).
        stray_synthesis: the first synthesis cites words of a chunk that no answer cited
            (the first five words of each answer's first quote), which
            ``synthesis_citations`` refuses.
        without_checks: the plan and the patches give no step a check (a planner that
            forgot them; plandag attaches the required ones).

    Attributes:
        planner_requests: planner and replanner requests answered in the current run.
        answers: answers given per subquestion (0-based index → count) in the current run.
        syntheses: synthesis replies given in the current run.

    A run's first planning request starts a new run (the counts start again), so one server
    answers run after run (docs/guides/research.md).
    """

    def __init__(
        self,
        question: str = QUESTION,
        subquestions: Sequence[Subquestion] = SUBQUESTIONS,
        *,
        fabricate: Sequence[int] = (),
        fabricate_always: bool = False,
        stray_synthesis: bool = False,
        without_checks: bool = False,
    ) -> None:
        self.question = question
        self.subquestions = tuple(subquestions)
        self.fabricate = frozenset(fabricate)
        self.fabricate_always = fabricate_always
        self.stray_synthesis = stray_synthesis
        self.without_checks = without_checks
        self.planner_requests = 0
        self.answers: dict[int, int] = {}
        self.syntheses = 0
        self._failed: list[int | None] = []  # what each replan is for (None: the synthesis)
        self._lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> ScriptedResponse:
        """The reply to one request (``body``: its JSON)."""
        system_text = _text_of(body, "system")
        user = _text_of(body, "user")
        if "You are the planner of plandag" in system_text:
            with self._lock:
                if _new_run(body, user):  # a server kept running between runs starts afresh
                    self.planner_requests = 0
                    self.answers = {}
                    self.syntheses = 0
                    self._failed = []
                self.planner_requests += 1
                number = self.planner_requests
                failed = list(self._failed)
            target = failed[number - 2] if number > 1 and len(failed) >= number - 1 else 0
            if number == 1:
                patch = research_plan(self.question, self.subquestions)
            elif target is None:
                patch = synthesis_patch(number - 1, self.question, self.subquestions)
            else:
                patch = replan_patch(target, number - 1, self.question, self.subquestions)
            if self.without_checks:
                patch = {**patch, "s": [_without("c", step) for step in patch["s"]]}
            return ScriptedResponse.json(patch)
        if _SYNTHESIS_MARK in user:
            with self._lock:
                self.syntheses += 1
                stray = self.stray_synthesis and self.syntheses == 1
                if stray:
                    self._failed.append(None)
            return ScriptedResponse.json(self._synthesis(user, stray))
        for index, subquestion in enumerate(self.subquestions):
            if subquestion.text in user:
                with self._lock:
                    count = self.answers.get(index, 0) + 1
                    self.answers[index] = count
                    fabricated = index in self.fabricate and (count == 1 or self.fabricate_always)
                    if fabricated:
                        self._failed.append(index)
                return ScriptedResponse.json(self._answer(user, fabricated))
        return ScriptedResponse.text("I was not asked anything I know.")

    def _answer(self, user: str, fabricated: bool) -> dict[str, Any]:
        chunks: list[Mapping[str, Any]] = []
        for block in parse_data_blocks(user):
            value = block.value
            if isinstance(value, Mapping) and isinstance(value.get("chunks"), list):
                chunks.extend(item for item in value["chunks"] if isinstance(item, Mapping))
        claims = []
        for chunk in chunks[:2]:
            sentence = _first_sentence(str(chunk.get("text", "")))
            quote = FABRICATED_QUOTE if fabricated else sentence
            claims.append(
                {
                    "claim": f"The text says: {_shortened(sentence)}",
                    "citations": [{"chunk_id": str(chunk.get("chunk_id")), "quote": quote}],
                }
            )
        return {"claims": claims}

    def _synthesis(self, user: str, stray: bool) -> dict[str, Any]:
        claims: list[Any] = []
        for block in parse_data_blocks(user):
            value = block.value
            answers = value.get("answers") if isinstance(value, Mapping) else None
            for answer in answers if isinstance(answers, list) else []:
                found = answer.get("claims") if isinstance(answer, Mapping) else None
                if isinstance(found, list) and found:
                    claims.append(_stray(found[0]) if stray else found[0])
        text = " ".join(str(claim.get("claim", "")) for claim in claims)
        return {"answer": f"In short: {text}", "claims": claims}


def _new_run(body: Mapping[str, Any], user: str) -> bool:
    """A run's first planning request: one message, holding the trusted context (a replan
    request carries none; a repair request follows the rejected plan)."""
    messages = [
        message
        for message in body.get("messages") or []
        if isinstance(message, Mapping) and message.get("role") != "system"
    ]
    return len(messages) == 1 and "Trusted context (from the user):" in user


def _without(key: str, step: Mapping[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in step.items() if name != key}


def _stray(claim: Any) -> Any:
    """``claim`` citing the first five words of its quote instead of the whole quote."""
    if not isinstance(claim, Mapping) or not claim.get("citations"):
        return claim
    citation = claim["citations"][0]
    words = " ".join(str(citation.get("quote", "")).split()[:5])
    return {**claim, "citations": [{"chunk_id": citation.get("chunk_id"), "quote": words}]}


def _text_of(body: Mapping[str, Any], role: str) -> str:
    """The text of the request's ``role`` messages, joined: ``system`` is the Messages API's
    ``system`` field or an OpenAI-compatible ``system`` message; ``user`` the user messages."""
    parts: list[str] = []
    system = body.get("system") if role == "system" else None
    if isinstance(system, str):
        parts.append(system)
    elif isinstance(system, list):
        parts.extend(str(block.get("text", "")) for block in system if isinstance(block, dict))
    for message in body.get("messages") or []:
        if message.get("role") != role:
            continue
        content = message.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts.extend(str(block.get("text", "")) for block in content if isinstance(block, dict))
    return "\n".join(parts)


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m plandag.jobs.research.scripted [--port N] [--delay S] [--fabricate I]``:
    serve the scripted research replies on 127.0.0.1 until interrupted (the research
    guide's example, docs/guides/research.md)."""
    import argparse

    from plandag.testing import MessagesServer
    from plandag.testing.server import cannot_listen

    parser = argparse.ArgumentParser(
        prog="python -m plandag.jobs.research.scripted",
        description="Serve scripted research replies (Anthropic Messages API) on 127.0.0.1.",
    )
    parser.add_argument(
        "--port", type=int, default=0, help="port on 127.0.0.1 (default 0: any free one)"
    )
    parser.add_argument("--delay", type=float, default=0.0, help="seconds before each reply")
    parser.add_argument(
        "--fabricate",
        type=int,
        action="append",
        default=[],
        metavar="I",
        help="0-based subquestion whose first answer cites a fabricated quote (repeatable)",
    )
    options = parser.parse_args(argv)
    scripted = ScriptedResearch(fabricate=options.fabricate)
    server = MessagesServer(default=scripted, port=options.port, ttft=options.delay)
    try:
        server.start()
    except OSError as error:
        sys.stderr.write(f"error: {cannot_listen(options.port, error)}\n")
        raise SystemExit(2) from None
    try:
        print(f"serving scripted research replies on {server.url}; Ctrl-C stops", flush=True)
        try:
            threading.Event().wait()  # until Ctrl-C
        except KeyboardInterrupt:
            return
    finally:
        server.stop()


if __name__ == "__main__":
    main()

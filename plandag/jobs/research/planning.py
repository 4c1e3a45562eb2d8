"""What the planner is told for a research question, and the tools it is given
(docs/guides/research.md).

The planner (the same :class:`~plandag.planner.agent.Agent` as ``plandag run``) gets the
question as its task and :data:`RESEARCH_CONTEXT` as trusted context: write 2 to 5
subquestions, each an independent branch ``search`` → ``read`` → answer (an ``llm`` step
with the citation schema and the ``citations_supported`` check, its subquestion as the
step's note), then one synthesis ``llm`` step over the answers with the
``synthesis_citations`` check, whose result is the plan's output. The branches do not
depend on each other, so the scheduler runs them at once; a branch whose answer cites a
quote that is not in its chunk fails its check and only that branch (and the synthesis)
is replanned.

The schemas reach the plan as params (``<param.answer_schema>``,
``<param.synthesis_schema>``), so the planner does not copy them into every step.
"""

from __future__ import annotations

from typing import Any, Final

from plandag.jobs.research.citations import ANSWER_SCHEMA, SYNTHESIS_SCHEMA
from plandag.tools.registry import Registry, default_registry, outside_builtins

__all__ = [
    "RESEARCH_CONTEXT",
    "SUBQUESTION_PREFIX",
    "research_params",
    "research_registry",
    "withheld_tools",
]

SUBQUESTION_PREFIX: Final = "subquestion: "
"""How an answer step's note starts; the rest is the subquestion (the methodology shows it)."""

RESEARCH_CONTEXT: Final = """\
You plan research over a corpus of documents. The tools search(query, k) and read(chunk_id) \
reach the corpus; the tool llm asks a small model, giving it step results as data.

Declare the two params given at run time: "p":[{"n":"answer_schema","t":"object"},\
{"n":"synthesis_schema","t":"object"}] (JSON Schemas of an answer and of the synthesis).

Write 2 to 5 subquestions that together answer the question. Each subquestion is one \
independent branch of three steps; branches never depend on each other, so they run at the \
same time:
1. search: {"query": "<words likely to occur in the passages that answer it>", "k": 4}
2. read: {"chunk_id": "<step_A_result.chunk_ids>"} (A: the search step)
3. llm: {"prompt": "Answer this subquestion from the chunks in the data only: \
<subquestion> Give each claim with citations; each quote must be words copied exactly from \
the chunk whose chunk_id you give.", "data": "<step_B_result>" (B: the read step), \
"schema": "<param.answer_schema>"}, check {"k":"citations_supported"}, note \
"n":"subquestion: <subquestion>".
Then one synthesis step, depending on every answer step: llm with {"prompt": "Answer the \
question from the subquestion answers in the data only: <question> Cite only quotes that \
appear in those answers, with their chunk_id.", \
"data": {"json": "{\\"answers\\":[\\"<step_3_result>\\",\\"<step_6_result>\\"]}"}, \
"schema": "<param.synthesis_schema>"}, check \
{"k":"synthesis_citations","a":{"answers":["<step_3_result>","<step_6_result>"]}}, note \
"n":"synthesis". The plan's output "o" is the synthesis step's result: "<step_7_result>".

When you replan after a failure, rewrite only the failed branch (a new search with other \
words or a larger k, a new read, a new answer step with the same note) and a new synthesis \
step over the answers that stand; keep the completed branches."""
"""The trusted context given to the planner for every research question."""


def research_params() -> dict[str, Any]:
    """The params of a research run: the answer and synthesis schemas (JSON Schema)."""
    return {"answer_schema": ANSWER_SCHEMA, "synthesis_schema": SYNTHESIS_SCHEMA}


def withheld_tools() -> tuple[str, ...]:
    """The built-in tools a research run leaves out of its registry: every one that reaches
    outside the corpus, by what it declares (a path it reads or writes, the network, any
    effect): ``read_file``, ``write_json``, ``http_get``, ``http_post``. The corpus is
    reached through ``search`` and ``read`` only, so a plan or replan that a document's
    text talked into naming ``read_file /etc/shadow`` does not compile (``unknown_tool``).
    A user's own tools (``--tools``) are not withheld: they stay under the approval and
    taint rules (:func:`plandag.tools.registry.outside_builtins`)."""
    return outside_builtins()


def research_registry() -> Registry:
    """The tools and checks a research planner is given: the built-ins that stay inside the
    run (``llm``, ``agent``, ``json_select``, ``xml_select``; :func:`withheld_tools` are
    left out) and this job's (the ``research`` entry point), not the other installed
    applications' (``resolve_installed=False``); a user's ``--tools`` files are loaded into
    it afterwards.

    Raises:
        ToolLoadError: the research entry point is not installed (reinstall plandag).
    """
    registry = default_registry(("research",), resolve_installed=False)
    registry.withhold(withheld_tools())
    return registry

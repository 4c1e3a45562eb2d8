"""The report from a stored run: the answer with numbered references, a methodology that
follows the plan (subquestions, searches, the failed branch and the steps that replaced
it, spend) and offsets computed from the chunks the run read."""

from __future__ import annotations

from typing import Any

from plandag.jobs.research.report import StoredRun, build_report

TEXT_A = "Liberty is to faction what air is to fire, an aliment without which it expires."
TEXT_B = (
    "A republic, by which I mean a government in which the scheme of representation takes place."
)
CHUNK_A = {
    "chunk_id": "f10.md#4",
    "document": "f10.md",
    "start": 1000,
    "end": 1000 + len(TEXT_A),
    "text": TEXT_A,
}
CHUNK_B = {
    "chunk_id": "f10.md#9",
    "document": "f10.md",
    "start": 5000,
    "end": 5000 + len(TEXT_B),
    "text": TEXT_B,
}


def answer(chunk_id: str, quote: str, claim: str = "c") -> dict[str, Any]:
    return {"claims": [{"claim": claim, "citations": [{"chunk_id": chunk_id, "quote": quote}]}]}


def step(i: int, tool: str, args: dict[str, Any], d: list[int], **more: Any) -> dict[str, Any]:
    return {"id": i, "tool": tool, "args": args, "depends_on": d, **more}


ANSWER_CHECK = [{"kind": "citations_supported"}]

PLAN = {
    "goal": "How can faction be controlled?",
    "steps": [
        step(1, "search", {"query": "faction liberty", "k": 4}, []),
        step(2, "read", {"chunk_id": "<step_1_result.chunk_ids>"}, [1]),
        step(
            3,
            "llm",
            {"prompt": "p", "data": "<step_2_result>"},
            [2],
            check=ANSWER_CHECK,
            description="subquestion: Why can faction not be removed?",
        ),
        step(4, "search", {"query": "republic representation", "k": 4}, []),
        step(5, "read", {"chunk_id": "<step_4_result.chunk_ids>"}, [4]),
        step(
            6,
            "llm",
            {"prompt": "p", "data": "<step_5_result>"},
            [5],
            check=ANSWER_CHECK,
            description="subquestion: What is a republic?",
        ),
        step(
            7,
            "llm",
            {"prompt": "s"},
            [3, 6],
            check=[
                {"kind": "synthesis_citations", "answers": ["<step_3_result>", "<step_6_result>"]}
            ],
        ),
        step(8, "search", {"query": "republic scheme representation", "k": 6}, []),
        step(9, "read", {"chunk_id": "<step_8_result.chunk_ids>"}, [8]),
        step(
            10,
            "llm",
            {"prompt": "p", "data": "<step_9_result>"},
            [9],
            check=ANSWER_CHECK,
            description="subquestion: What is a republic?",
        ),
        step(
            11,
            "llm",
            {"prompt": "s"},
            [3, 10],
            check=[
                {"kind": "synthesis_citations", "answers": ["<step_3_result>", "<step_10_result>"]}
            ],
        ),
    ],
    "output": "<step_11_result>",
}


def record(
    status: str, start: float, end: float, result: Any = None, **more: Any
) -> dict[str, Any]:
    return {
        "tool": "x",
        "status": status,
        "reason": more.get("reason"),
        "detail": more.get("detail"),
        "args": more.get("args"),
        "result": result,
        "started_at": start,
        "ended_at": end,
        "superseded_by": more.get("superseded_by"),
        "attempts": 1,
    }


def stored_run() -> StoredRun:
    good_a = answer("f10.md#4", "what air is to fire", "Faction feeds on liberty.")
    fabricated = answer("f10.md#9", "a republic is a pure democracy")
    good_b = answer(
        "f10.md#9", "the scheme of  REPRESENTATION takes place", "A republic is representative."
    )
    synthesis = {
        "answer": "Faction cannot be removed without destroying liberty; a republic controls it.",
        "claims": [
            {
                "claim": "Liberty feeds faction.",
                "citations": [{"chunk_id": "f10.md#4", "quote": "what air is to fire"}],
            },
            {
                "claim": "Representation.",
                "citations": [
                    {"chunk_id": "f10.md#9", "quote": "the scheme of representation takes place"}
                ],
            },
        ],
    }
    steps = {
        1: {
            **record(
                "succeeded",
                100.0,
                100.1,
                {"chunk_ids": ["f10.md#4"]},
                args={"query": "faction liberty", "k": 4},
            ),
            "tool": "search",
        },
        2: {**record("succeeded", 100.1, 100.2, {"chunks": [CHUNK_A]}), "tool": "read"},
        3: {**record("succeeded", 100.2, 101.2, good_a), "tool": "llm"},
        4: {
            **record(
                "succeeded",
                100.0,
                100.1,
                {"chunk_ids": ["f10.md#9"]},
                args={"query": "republic representation", "k": 4},
            ),
            "tool": "search",
        },
        5: {**record("succeeded", 100.1, 100.2, {"chunks": [CHUNK_B]}), "tool": "read"},
        6: {
            **record(
                "failed",
                100.2,
                101.3,
                fabricated,
                reason="check_failed",
                detail="check citations_supported failed: unsupported",
                superseded_by=[8, 9, 10, 11],
            ),
            "tool": "llm",
        },
        7: {
            **record("skipped", 0, 0, None, reason="upstream_failed", superseded_by=[8, 9, 10, 11]),
            "tool": "llm",
            "started_at": None,
            "ended_at": None,
        },
        8: {
            **record(
                "succeeded",
                102.0,
                102.1,
                {"chunk_ids": ["f10.md#9"]},
                args={"query": "republic scheme representation", "k": 6},
            ),
            "tool": "search",
        },
        9: {**record("succeeded", 102.1, 102.2, {"chunks": [CHUNK_B]}), "tool": "read"},
        10: {**record("succeeded", 102.2, 103.0, good_b), "tool": "llm"},
        11: {**record("succeeded", 103.0, 104.0, synthesis), "tool": "llm"},
    }
    return StoredRun(
        run_id="abc123",
        question="How can faction be controlled?",
        status="succeeded",
        detail=None,
        created=99.0,
        updated=105.0,
        plan=PLAN,
        versions=((1, "planner"), (2, "replan")),
        steps=steps,
        replans=(
            {
                "number": 1,
                "trigger": "failure",
                "reason": "r",
                "replaced": [6, 7],
                "new_ids": [8, 9, 10, 11],
                "applied": True,
            },
        ),
        model_calls=(
            {
                "purpose": "model",
                "model": "m",
                "input_tokens": 1000,
                "output_tokens": 200,
                "cost_usd": 0.006,
                "error": None,
            },
            {
                "purpose": "model",
                "model": "m",
                "input_tokens": 1500,
                "output_tokens": 100,
                "cost_usd": 0.006,
                "error": None,
            },
        ),
        spent_usd=0.02,
        spent_tokens=5000,
    )


def test_the_record_follows_the_plan_and_the_store() -> None:
    report = build_report(stored_run())
    record = report.record
    assert record["answer"] == (
        "Faction cannot be removed without destroying liberty; a republic controls it."
    )
    assert [
        (s["text"], s["answer_step"], s["steps"], s["status"]) for s in record["subquestions"]
    ] == [
        ("Why can faction not be removed?", 3, [1, 2, 3], "succeeded"),
        ("What is a republic?", 6, [4, 5, 6], "failed"),
        ("What is a republic?", 10, [8, 9, 10], "succeeded"),
    ]
    assert record["subquestions"][1]["superseded_by"] == [8, 9, 10, 11]
    assert record["subquestions"][2]["searches"] == [
        {
            "step": 8,
            "query": "republic scheme representation",
            "k": 6,
            "chunk_ids": ["f10.md#9"],
            "status": "succeeded",
        }
    ]
    assert record["synthesis_step"] == 11
    assert record["answers_at_once"] == 2  # steps 3 and 6 overlapped; 10 ran after them
    # offsets computed from the chunk the run read: chunk start + position in the chunk
    assert record["references"] == [
        {
            "n": 1,
            "chunk_id": "f10.md#4",
            "document": "f10.md",
            "start": 1000 + 22,
            "end": 1000 + 41,
            "quote": "what air is to fire",
            "match": "exact",
        },
        {
            "n": 2,
            "chunk_id": "f10.md#9",
            "document": "f10.md",
            "start": 5000 + 50,
            "end": 5000 + 90,
            "quote": "the scheme of representation takes place",
            "match": "exact",
        },
    ]
    assert TEXT_A[22:41] == "what air is to fire"
    assert TEXT_B[50:90] == "the scheme of representation takes place"
    normalized = record["subquestions"][2]["claims"][0]["citations"][0]
    assert (normalized["match"], normalized["start"], normalized["end"]) == (
        "normalized",
        5050,
        5090,
    )
    assert record["spend"] == {
        "model_calls": 2,
        "model_input_tokens": 2500,
        "model_output_tokens": 300,
        "model_cost_usd": 0.012,
        "total_usd": 0.02,
        "total_tokens": 5000,
        "executor_usd": 0.008,
        "executor_tokens": 2200,
        "steps_seconds": 4.0,
    }
    assert record["replans"] == [
        {
            "number": 1,
            "trigger": "failure",
            "reason": "r",
            "replaced": [6, 7],
            "new_ids": [8, 9, 10, 11],
            "applied": True,
        }
    ]


def test_the_markdown_has_answer_methodology_and_references() -> None:
    markdown = build_report(stored_run()).markdown
    assert markdown.startswith("# How can faction be controlled?\n\n## Answer\n")
    assert "- Liberty feeds faction. [1]" in markdown
    assert "The question was planned as 2 subquestion(s)" in markdown
    assert "3. **What is a republic?** (steps 8, 9, 10, added by replan 1)" in markdown
    assert '   - search "republic scheme representation" (k=6, step 8): `f10.md#9`' in markdown
    assert (
        "   - answer (step 6): failed (check_failed): check citations_supported failed: "
        "unsupported; replanned as steps 8, 9, 10, 11"
    ) in markdown
    assert "- replan 1 (failure, applied): replaced steps 6, 7 with steps 8, 9, 10, 11" in markdown
    assert "2 model call(s), 2,500 input and 300 output tokens, $0.0120" in markdown
    assert '1. f10.md, chunk `f10.md#4`, characters 1022–1041: "what air is to fire"' in markdown


def test_a_run_without_a_synthesis_makes_no_answer_up() -> None:
    run = stored_run()
    steps = dict(run.steps)
    steps[11] = {**steps[11], "status": "failed", "result": None, "reason": "check_failed"}
    failed = StoredRun(
        **{**run.__dict__, "steps": steps, "status": "escalated", "detail": "replan caps"}
    )
    report = build_report(failed)
    assert report.record["answer"] is None
    assert report.record["references"] == []
    assert (
        "No answer: the run ended escalated (replan caps). Nothing was made up" in report.markdown
    )


def test_an_answer_the_plan_left_unchecked_is_checked_for_the_report() -> None:
    run = stored_run()
    steps = [dict(step) for step in PLAN["steps"]]
    steps[2] = {key: value for key, value in steps[2].items() if key != "check"}
    unchecked = dict(run.steps)
    unchecked[3] = {**unchecked[3], "result": answer("f10.md#4", "air is to water")}
    report = build_report(
        StoredRun(**{**run.__dict__, "plan": {**PLAN, "steps": steps}, "steps": unchecked})
    )
    first = report.record["subquestions"][0]
    assert (first["answer_step"], first["checked_in_run"]) == (3, False)
    assert first["claims"][0]["citations"][0]["reason"] == "quote_not_found"
    assert (
        "   - answer (step 3): 1 claim(s), 0 citation(s) found in their chunks (0 exact, 0 "
        "after normalisation), 1 not found (not referenced)"
    ) in report.markdown
    assert "the plan gave this answer no citations_supported check" in report.markdown

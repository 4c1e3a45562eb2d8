"""The benchmark's workloads: plans that compile, right answers, ReAct's moves, tools."""

from __future__ import annotations

import json
import time
from pathlib import Path

import anyio
import pytest

from plandag.bench.workloads import (
    DENSITY,
    MOVIE_RANKING,
    WORKLOADS,
    AnswerMove,
    ToolMove,
    World,
    data_files,
    written_answer_field,
)
from plandag.compiler import compile_plan
from plandag.errors import PermanentStepError


def test_the_workloads() -> None:
    assert list(WORKLOADS) == ["compare2", "movie8", "parallelqa", "nfe"]


@pytest.mark.parametrize("name", ["compare2", "movie8", "parallelqa"])
def test_plans_compile_against_their_registries(name: str) -> None:
    workload = WORKLOADS[name]
    plan = workload.plan
    assert plan is not None
    compiled = compile_plan(plan, workload.make_registry(World()))
    assert [d for d in compiled.diagnostics if d.severity == "error"] == []


def test_shapes() -> None:
    movie8 = WORKLOADS["movie8"].plan
    assert movie8 is not None
    assert [step.depends_on for step in movie8.steps] == [[]] * 8
    assert movie8.output is None  # the joiner writes the ranking
    parallelqa = WORKLOADS["parallelqa"].plan
    assert parallelqa is not None
    assert [step.depends_on for step in parallelqa.steps] == [
        [],
        [],
        [],
        [],
        [1, 2, 3, 4],
        [1, 2, 3, 4],
        [5, 6],
    ]  # depth 3: lookups, sums, division
    assert parallelqa.output == "<step_7_result>"


def test_right_answers() -> None:
    # (412000 + 96500 + 1254000 + 58200) / (1830 + 742.5 + 3115 + 1206) = 264.1184...
    assert DENSITY == 264.12
    assert MOVIE_RANKING == (
        "Copper Orchard",
        "The Quiet Ferryman",
        "The Salt Harbour",
        "Glass Meridian",
        "Under Vesper Hill",
        "Nightjar Protocol",
        "Paper Comets",
        "A Lantern for Mira",
    )
    assert [path.name for path in data_files()] == [
        "brnfe_without_proc.xml",
        "nfelib_35180834128745000152550010000476121675985748-nfe.xml",
        "uninfe_000040_03682759000190_002_20_10_2014-procNFe.xml",
    ]
    assert [question.expected for question in WORKLOADS["nfe"].questions] == [
        {
            "chNFe": "35170410864846000204550050000609731202489540",
            "CNPJ": "10864846000204",
            "vNF": "203.51",
        },
        {
            "chNFe": "35180834128745000152550010000476121675985748",
            "CNPJ": "34128745000152",
            "vNF": "9.06",
        },
        {
            "chNFe": "43141003682759000190650020000000401000000405",
            "CNPJ": "03682759000190",
            "vNF": "516.00",
        },
    ]


def test_react_moves_follow_the_plan_one_step_at_a_time() -> None:
    workload = WORKLOADS["parallelqa"]
    question = workload.questions[0]
    registry = workload.make_registry(World())
    observations: list[tuple[str, dict[str, object], object]] = []
    moves = []
    for _ in range(8):
        move = workload.next_move(question, observations)
        moves.append(move)
        if isinstance(move, AnswerMove):
            break
        result = anyio.run(registry.tools[move.tool].invoke, move.input)
        observations.append((move.tool, dict(move.input), result))
    assert [m.tool for m in moves if isinstance(m, ToolMove)] == [
        "search",
        "search",
        "search",
        "search",
        "sum_numbers",
        "sum_numbers",
        "divide",
    ]
    assert moves[4] == ToolMove("sum_numbers", {"values": [412000, 96500, 1254000, 58200]})
    assert moves[6] == ToolMove("divide", {"a": 1820700.0, "b": 6893.5, "digits": 2})
    assert moves[7] == AnswerMove("Answer: 264.12")
    assert workload.check(question, "Answer: 264.12")
    assert workload.check(question, 264.12)
    assert not workload.check(question, "Answer: 264.2")
    assert not workload.check(question, None)


def test_a_tool_error_is_retried_once_then_the_answer_says_unknown() -> None:
    workload = WORKLOADS["compare2"]
    question = workload.questions[0]
    failed = ("search", {"query": "Marta Lindqvist"}, {"error": "down"})
    assert workload.next_move(question, [failed]) == ToolMove(
        "search", {"query": "Marta Lindqvist"}
    )
    answer = workload.next_move(question, [failed, failed])
    assert answer == AnswerMove("Answer: unknown (the tool kept failing)")
    assert not workload.check(question, answer.text)


def test_checks() -> None:
    compare2 = WORKLOADS["compare2"]
    assert compare2.check(compare2.questions[0], "Thought...\nAnswer: Marta Lindqvist.")
    assert not compare2.check(compare2.questions[0], "Answer: Oskar Brandvold")
    movie8 = WORKLOADS["movie8"]
    right = "Answer: " + " > ".join(MOVIE_RANKING)
    assert movie8.check(movie8.questions[0], right)
    wrong = "Answer: " + " > ".join(reversed(MOVIE_RANKING))
    assert not movie8.check(movie8.questions[0], wrong)
    assert written_answer_field("no answer here") is None
    nfe = WORKLOADS["nfe"]
    question = nfe.questions[1]
    assert nfe.check(question, "Answer: " + json.dumps(question.expected))
    assert not nfe.check(question, 'Answer: {"chNFe": "1", "CNPJ": "2", "vNF": "3"}')


def test_nfe_react_reads_the_file_then_answers() -> None:
    workload = WORKLOADS["nfe"]
    question = workload.questions[1]
    move = workload.next_move(question, [])
    assert move == ToolMove("read_file", {"path": question.params["input"]})
    text = Path(question.params["input"]).read_text(encoding="utf-8")
    answer = workload.next_move(question, [("read_file", move.input, text)])
    assert isinstance(answer, AnswerMove)
    assert workload.check(question, answer.text)


def test_search_latency_observation_size_and_broken_world() -> None:
    registry = WORKLOADS["movie8"].make_registry(
        World(latency=lambda query: 0.05, observation_chars=100)
    )
    started = time.monotonic()
    result = anyio.run(registry.tools["search"].invoke, {"query": "Paper Comets"})
    assert time.monotonic() - started >= 0.05
    assert result["name"] == "Paper Comets"
    assert (result["year"], result["rating"], result["genres"]) == (1999, 7.1, ["comedy"])
    assert len(result["abstract"]) == 100
    broken = WORKLOADS["movie8"].make_registry(World(broken=True))
    with pytest.raises(PermanentStepError, match="broken on purpose"):
        anyio.run(broken.tools["search"].invoke, {"query": "Paper Comets"})
    with pytest.raises(PermanentStepError, match="no entry named 'Nope'"):
        anyio.run(registry.tools["search"].invoke, {"query": "Nope"})


def test_the_broken_nfe_plan_has_a_path_that_no_longer_matches() -> None:
    stored = WORKLOADS["nfe"].stored_plan
    assert stored is not None
    broken = stored(World(broken=True))
    paths = [step.args.get("paths", {}) for step in broken.steps]
    assert [p["vNF"] for p in paths if "vNF" in p] == ["nfe:total/nfe:ICMSTot/nfe:vNFe"]
    whole = stored(World())
    assert [p["vNF"] for s in whole.steps if "vNF" in (p := s.args.get("paths", {}))] == [
        "nfe:total/nfe:ICMSTot/nfe:vNF"
    ]

"""The benchmarks still work: each measurement at a tiny size, and the DAG generator's rules.

The real figures come from ``benchmarks/run.py``; these tests only prove the code runs and
measures what it claims (the random DAGs: parents among the previous 12 steps,
0 to 3 of them; log-normal durations with median 50 ms, capped at 0.4 s; seeded).
"""

from __future__ import annotations

import ast
import json
import logging
import math
import os
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from benchmarks.dags import chain, plan_document, random_dag, wide
from benchmarks.extract_bench import DEFAULT_DATA_DIR, measure_extract, valid_invoice_files
from benchmarks.plain_lxml_nfe import extract_file
from benchmarks.run import Row, render
from benchmarks.scheduler_bench import measure_brakes, measure_dispatch, measure_makespan

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"

needs_data = pytest.mark.skipif(
    not (DEFAULT_DATA_DIR / "SOURCES.md").is_file(), reason="shared NF-e data not found"
)


# -- the DAG generator ------------------------------------------------------------------------


def test_chain_and_wide_shapes() -> None:
    assert chain(3).parents == {1: (), 2: (1,), 3: (2,)}
    assert wide(2).parents == {1: (), 2: (1,), 3: (1,), 4: (2, 3)}
    assert wide(1000).size == 1002
    assert wide(1000).edge_count() == 2000
    assert chain(1000).children()[999] == [1000]


def test_random_dag_parents_come_from_the_previous_12_steps_0_to_3_of_them() -> None:
    dag = random_dag(1000, seed=2024)
    assert dag.size == 1000
    for step_id, parents in dag.parents.items():
        assert len(parents) <= 3
        assert len(set(parents)) == len(parents)
        assert list(parents) == sorted(parents)
        assert all(step_id - 12 <= parent < step_id for parent in parents)
    counts = Counter(len(parents) for parents in dag.parents.values())
    assert counts == {0: 258, 1: 265, 2: 225, 3: 252}
    assert dag.edge_count() == 1471


def test_random_dag_durations_are_log_normal_with_median_50_ms() -> None:
    durations = list(random_dag(1000, seed=2024).durations.values())
    assert all(0 < value <= 0.4 for value in durations)
    assert statistics.median(durations) == pytest.approx(0.0488166, abs=1e-6)
    logs = [math.log(value) for value in durations]
    assert statistics.stdev(logs) == pytest.approx(0.5, abs=0.03)


def test_random_dag_caps_durations_at_0_4_s() -> None:
    durations = random_dag(1000, seed=2024, sigma=3.0).durations.values()
    assert max(durations) == 0.4
    assert sum(1 for value in durations if value == 0.4) == 227


def test_random_dag_is_determined_by_its_seed() -> None:
    assert random_dag(200, seed=7) == random_dag(200, seed=7)
    assert random_dag(200, seed=7) != random_dag(200, seed=8)
    first = random_dag(3, seed=2024)
    assert first.parents == {1: (), 2: (1,), 3: (2,)}
    assert {key: round(value, 4) for key, value in first.durations.items()} == {
        1: 0.0262,
        2: 0.1247,
        3: 0.0384,
    }


def test_random_dag_refuses_bad_sizes() -> None:
    with pytest.raises(ValueError, match="at least 1 step"):
        random_dag(0, seed=1)
    with pytest.raises(ValueError, match="at least 1 step"):
        chain(0)


def test_plan_document_passes_durations_and_dependencies() -> None:
    dag = random_dag(3, seed=2024)
    document = plan_document(dag, "sleep_for", with_durations=True)
    assert [step["depends_on"] for step in document["steps"]] == [[], [1], [2]]
    assert document["steps"][1]["args"] == {"seconds": dag.durations[2]}
    assert plan_document(chain(2), "noop_inline")["steps"][1] == {
        "id": 2,
        "tool": "noop_inline",
        "args": {},
        "depends_on": [1],
    }


# -- the measurements, tiny -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shape", "kind", "steps"), [("chain", "inline", 20), ("wide", "async", 22)]
)
def test_measure_dispatch_runs(shape: str, kind: str, steps: int) -> None:
    figures = measure_dispatch(shape, kind, size=20, repetitions=2)  # type: ignore[arg-type]
    assert figures.steps == steps
    assert len(figures.plandag_s) == len(figures.bare_s) == len(figures.compile_s) == 2
    assert all(value > 0 for value in [*figures.plandag_s, *figures.bare_s])
    assert figures.per_step_us(figures.plandag_s) > 0


@pytest.mark.parametrize(("shape", "steps"), [("chain", 20), ("wide", 22)])
def test_measure_brakes_runs_both_schedulers(shape: str, steps: int) -> None:
    figures = measure_brakes(shape, size=20, repetitions=2)  # type: ignore[arg-type]
    assert figures.steps == steps
    assert len(figures.core_s) == len(figures.brakes_s) == 2
    assert all(seconds > 0 for seconds in figures.core_s + figures.brakes_s)


def test_measure_makespan_never_beats_the_critical_path() -> None:
    figures = measure_makespan(size=12, seed=3, repetitions=1)
    assert figures.steps == 12
    # The critical path's steps ran one after another inside the run: makespan >= path.
    assert all(ratio >= 1.0 for ratio in figures.plandag_ratios())
    assert all(ratio >= 1.0 for ratio in figures.bare_ratios())
    assert figures.plandag_critical_path_s[0] >= figures.planned_critical_path_s * 0.99


@needs_data
def test_measure_extract_runs_on_two_documents() -> None:
    files = valid_invoice_files()[:2]
    figures = measure_extract(files, repetitions=1)
    assert figures.documents == 2
    assert figures.records == 2
    assert figures.rate(figures.plandag_s) > 0
    assert figures.rate(figures.plain_s) > 0


@needs_data
def test_valid_invoice_files_are_the_ok_rows_of_sources() -> None:
    files = valid_invoice_files()
    assert len(files) == 37
    names = {path.name for path in files}
    assert "spedda_cancelada_55_new.xml" in names
    assert "spednfe_nfe_errado.txt" not in names
    assert "brnfe_event_cancel.xml" not in names


@needs_data
def test_plain_extractor_reads_the_record_fields() -> None:
    [record] = extract_file(DEFAULT_DATA_DIR / "spedda_cancelada_55_new.xml")
    assert record["ide"]["chNFe"] == "35210258716523000119550000000573661346317847"
    assert record["ide"]["dhEmi"] == "2021-02-04T13:31:00-03:00"
    assert record["emit"]["CNPJ"] == "58716523000119"
    assert record["dest"]["CNPJ"] == "10702368000155"
    assert len(record["items"]) == 2
    assert record["items"][0]["vUnCom"] == "5.4200000000"
    assert record["total"]["vNF"] == "581.55"
    assert record["protocol"]["cStat"] == "100"
    assert [event["tpEvento"] for event in record["events"]] == ["110111"]


@needs_data
def test_plain_extractor_matches_plandag_on_the_same_fields() -> None:
    import anyio

    from plandag.extract.nfe import extract_document

    for path in valid_invoice_files()[:3]:
        [plain] = extract_file(path)
        [planned] = anyio.run(extract_document, path)
        for group in ("emit", "items", "total"):
            assert plain[group] == planned[group], (path.name, group)
        assert plain["ide"]["chNFe"] == planned["ide"]["chNFe"]


def test_render_prints_every_column() -> None:
    rows = [
        Row("NF-e extraction", 500.0, 1000.0, "docs/s", "ratio ≥ 0.5", True),
        Row("compile", 12.345, None, "µs/step"),
    ]
    assert render(rows).splitlines() == [
        "| measurement     | measured     | baseline     | ratio | target      | met? |",
        "|-----------------|--------------|--------------|-------|-------------|------|",
        "| NF-e extraction | 500 docs/s   | 1,000 docs/s | 0.50  | ratio ≥ 0.5 | yes  |",
        "| compile         | 12.3 µs/step | —            | —     | —           | —    |",
    ]


# Six runs, each against a server in a process of its own, and the first client of a
# process imports the Anthropic SDK (~3 s of CPU): 2-4 s alone, but 47 s once with six
# busy loops on two cores, too close to the 60 s every test is given.
@pytest.mark.timeout(180)
def test_budget_overshoot_runs_at_a_tiny_size(capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks.budget_overshoot import main

    level = logging.getLogger("plandag").level
    rows = main(["--runs", "1", "--reply-seconds", "0.05", "--steps", "3"])
    assert logging.getLogger("plandag").level == level  # the caller's logging is left alone
    [row] = rows
    # three calls of about $0.0007 reserve 4 % of the cap: all start with the slow start on
    # too, and each bills ten times its reservation
    assert row.lying_off == pytest.approx(row.lying_on, rel=0.01)
    assert 0.3 < row.lying_on < 0.5
    assert all(value > 0 for value in (row.honest_cap_off, row.honest_default_on))
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("3 llm steps, replies after 0.05 s")
    assert [line.split()[0] for line in lines[3:]] == ["1", "median", "max"]


# -- every script, tiny --------------------------------------------------------------------


#: Each file of ``benchmarks/`` and the test that runs it at a tiny size (for a helper
#: module: a test that runs a script importing it).
SMOKED = {
    "bare_anyio.py": "test_measure_dispatch_runs",
    "budget_overshoot.py": "test_budget_overshoot_runs_at_a_tiny_size",
    "compile_hostile.py": "test_compile_hostile_runs_at_a_tiny_size",
    "conftest.py": "test_the_pytest_benchmark_suites_run_once",
    "contracts_cpu.py": "test_contracts_cpu_runs_at_a_tiny_size",
    "contracts_grounding.py": "test_contracts_grounding_runs_at_a_tiny_size",
    "contracts_hostile.py": "test_contracts_hostile_runs_at_a_tiny_size",
    "contracts_tokens.py": "test_contracts_tokens_runs_at_a_tiny_size",
    "cpu_bench.py": "test_cpu_bench_runs_at_a_tiny_size",
    "cuad_reference.py": "test_contracts_grounding_runs_at_a_tiny_size",
    "dags.py": "test_chain_and_wide_shapes",
    "extract_bench.py": "test_measure_extract_runs_on_two_documents",
    "generate_nfe.py": "test_generate_50_gives_distinct_keys_with_their_sources_statuses",
    "langgraph_bench.py": "test_run_py_tiny_prints_every_row",
    "library_reuse.py": "test_library_reuse_runs_fast_and_every_run_succeeds",
    "nfe_scheduler_overhead.py": "test_nfe_scheduler_overhead_runs_at_a_tiny_size",
    "nfe_throughput.py": "test_nfe_throughput_runs_at_a_tiny_size",
    "otel_spans.py": "test_otel_span_table_at_a_tiny_size",
    "plain_lxml_nfe.py": "test_plain_extractor_reads_the_record_fields",
    "plan_validity.py": "test_plan_validity_runs_and_no_first_answer_breaks_a_schema_rule",
    "profile_extract.py": "test_profile_extract_runs_at_a_tiny_size",
    "rate_limits.py": "test_rate_limit_429s_at_a_tiny_size",
    "research_makespan.py": "test_research_makespan_runs_at_a_tiny_size",
    "run.py": "test_run_py_tiny_prints_every_row",
    "scheduler_bench.py": "test_measure_makespan_never_beats_the_critical_path",
    "schema_tokens.py": "test_schema_tokens_runs",
    "startup.py": "test_startup_runs_once",
    "store_bench.py": "test_store_bench_runs_at_a_tiny_size",
    "test_bench_extract.py": "test_the_pytest_benchmark_suites_run_once",
    "test_bench_scheduler.py": "test_the_pytest_benchmark_suites_run_once",
    "time_to_first_tool.py": "test_time_to_first_tool_runs_fast",
    "trace_bench.py": "test_trace_bench_at_a_tiny_size",
    "wire_tokens.py": "test_wire_tokens_runs",
    "workers_bench.py": "test_workers_bench_runs_at_a_tiny_size",
}


def _smoke_tests() -> set[str]:
    """The names of the test functions in every file of ``tests/benchmarks/``."""
    names: set[str] = set()
    for path in Path(__file__).parent.glob("test_*.py"):
        tree = ast.parse(path.read_text("utf-8"))
        names |= {
            node.name
            for node in tree.body
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")
        }
    return names


def test_every_benchmark_file_runs_in_a_smoke_test() -> None:
    scripts = sorted(path.name for path in BENCHMARKS.glob("*.py"))
    missing = [name for name in scripts if name not in SMOKED]
    assert not missing, (
        f"benchmarks/{', '.join(missing)}: run each at a tiny size in a test of tests/benchmarks/ "
        "and name that test in SMOKED"
    )
    gone = sorted(set(SMOKED) - set(scripts))
    assert not gone, f"SMOKED names files benchmarks/ no longer has: {gone}"
    tests = _smoke_tests()
    unknown = {name: test for name, test in SMOKED.items() if test not in tests}
    assert not unknown, f"SMOKED names tests that tests/benchmarks/ does not have: {unknown}"


@pytest.mark.timeout(180)
def test_run_py_tiny_prints_every_row(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks.run import main

    assert main(["--tiny", "--json", str(tmp_path / "figures.json")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [cell.strip() for cell in lines[0].split("|")[1:-1]] == [
        "measurement",
        "measured",
        "baseline",
        "ratio",
        "target",
        "met?",
    ]
    labels = [line.split("|")[1].strip() for line in lines[2:] if line.startswith("|")]
    for expected in (
        "CPU, 20-step chain, store+trace on (as exec)",
        "CPU, 20-step chain, store+trace off, inline no-op",
        "CPU, 20-step chain, store+trace off, async no-op",
        "CPU, wide 1→20→1, store+trace on (as exec)",
        "dispatch, 20-step chain, inline no-op",
    ):
        assert expected in labels
    assert any(
        label.startswith("makespan / critical path, 12-step random DAG, store+trace on")
        for label in labels
    )
    assert "load average before " in lines[-1]
    raw = json.loads((tmp_path / "figures.json").read_text("utf-8"))
    assert len(raw["load_average"]["before"]) == 3
    assert [item["shape"] for item in raw["cpu"]] == ["chain", "wide"]
    assert all(ratio >= 1.0 for ratio in raw["durable_makespan"]["run_ratios"])


def test_cpu_bench_runs_at_a_tiny_size(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks.cpu_bench import main

    figures = tmp_path / "figures.json"
    arguments = ["--size", "8", "--repetitions", "1", "--makespan-size", "6", "--profile"]
    assert main([*arguments, "--json", str(figures)]) == 0
    raw = json.loads(figures.read_text("utf-8"))
    assert [item["steps"] for item in raw["cpu"]] == [8, 10]
    makespan = raw["durable_makespan"]
    assert len(makespan["whole_ratios"]) == len(makespan["run_ratios"]) == 1
    assert len(makespan["bare_makespan_s"]) == len(makespan["bare_critical_path_s"]) == 1
    assert makespan["first_whole_s"] > makespan["first_critical_path_s"] > 0
    out = capsys.readouterr().out
    assert "| store+trace on, as `plandag exec` wires them, async no-op |" in out
    assert "store+trace on, start_run's wall time" in out
    assert "store+trace on, start_run's wall time, the first run (warm-up)" in out
    assert "load average before" in out
    assert "cProfile: 3 durable runs of the chain of 8 async no-op steps" in out
    assert out.count("Ordered by:") == 2


def test_cpu_bench_durable_runs_are_stored_as_exec_stores_them(tmp_path: Path) -> None:
    import anyio

    from benchmarks.cpu_bench import ExecWiring, _compile

    compiled = _compile(chain(3), "noop_async")
    wiring = ExecWiring(tmp_path)
    try:
        outcome = anyio.run(wiring.run, compiled)
        [run] = wiring.store.runs()
        assert (run.run_id, run.command, run.status) == (outcome.run_id, "exec", "succeeded")
        steps = wiring.store.steps(run.run_id)
        assert {step.status for step in steps.values()} == {"succeeded"}
        assert wiring.store.trace_path(run.run_id).is_file()
    finally:
        wiring.close()


def test_measure_cpu_counts_every_thread_of_the_process(tmp_path: Path) -> None:
    import threading

    from benchmarks.cpu_bench import _cpu_seconds

    def spin() -> None:
        deadline = time.thread_time() + 0.05
        while time.thread_time() < deadline:
            pass

    before = _cpu_seconds()
    worker = threading.Thread(target=spin)
    worker.start()
    worker.join()
    assert _cpu_seconds() - before >= 0.05


def test_compile_hostile_runs_at_a_tiny_size(capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks.compile_hostile import main

    main(["--scale", "0.001"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["case", "figure", "-", "after"]
    assert sum(1 for line in lines if line.startswith("refs-5mb")) == 4


def test_contracts_tokens_runs_at_a_tiny_size(capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks.contracts_tokens import main

    main(["--contracts", "1"])
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert lines[-1]["contracts"] == 1
    assert lines[-1]["total"]["calls"] > 0
    assert lines[0]["contract"].startswith("cuad_")


def test_library_reuse_runs_fast_and_every_run_succeeds(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from benchmarks.library_reuse import main

    main(["--ttft", "0.01", "--tokens-per-second", "100000"])
    runs = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(run["run"], run["status"]) for run in runs] == [
        ("first (planned)", "succeeded"),
        ("reused (--task-type)", "succeeded"),
        ("reused (routed)", "succeeded"),
    ]
    assert runs[1]["model_calls"] == 0
    assert runs[2]["model_calls"] == 1
    # every prompt token is counted, those written to the prompt cache too
    assert runs[0]["input_tokens"] >= runs[0]["cache_write_tokens"] > 0


def test_time_to_first_tool_runs_fast(capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks.time_to_first_tool import SEARCH_SECONDS, main

    try:
        main(["--ttft", "0.01", "--tokens-per-second", "100000", "--search-seconds", "0.01"])
    finally:
        SEARCH_SECONDS["value"] = 0.5
    runs = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(run["stream"], run["status"], run["steps"]) for run in runs] == [
        (False, "succeeded", 9),
        (True, "succeeded", 9),
    ]


def test_research_makespan_runs_at_a_tiny_size(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from benchmarks.research_makespan import main

    monkeypatch.delenv("PLANDAG_STORE", raising=False)
    main(["--delay", "0.01"])
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line.get("mode") for line in lines[:2]] == ["parallel", "sequential"]
    assert lines[0]["steps"] == lines[1]["steps"] > 0
    planned_in, planned_out = lines[0]["planning_tokens"]
    assert planned_in > 0
    assert planned_out > 0
    assert lines[0]["tokens_per_question"] == planned_in + planned_out + lines[0]["steps_tokens"]
    assert lines[2]["makespan_ratio_sequential_over_parallel"] > 0
    assert "PLANDAG_STORE" not in os.environ


def test_nfe_scheduler_overhead_runs_at_a_tiny_size(capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks.nfe_scheduler_overhead import main

    assert main(["--documents", "2", "--repetitions", "1"]) == 0
    assert "us CPU per document" in capsys.readouterr().out


@needs_data
def test_profile_extract_runs_at_a_tiny_size(capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks.profile_extract import main

    assert main(["--passes", "1", "--top", "3"]) == 0
    assert capsys.readouterr().out.count("Ordered by:") == 2


@pytest.mark.timeout(120)
def test_startup_runs_once(capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks.startup import main

    main(["--runs", "1"])
    rows = [line.split()[:2] for line in capsys.readouterr().out.splitlines()[3:]]
    assert [row[0] for row in rows] == ["python", "plandag", "plandag", "plandag"]


@pytest.mark.timeout(180)
def test_workers_bench_runs_at_a_tiny_size(capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks.workers_bench import PLANDAG, main

    if not PLANDAG.exists():
        pytest.skip("no plandag console script beside this interpreter")
    assert main(["--count", "2", "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    for configuration in ("--workers 1", "--workers 2", "--cluster local (2 workers)"):
        assert f"\n{configuration} " in out


def test_the_pytest_benchmark_suites_run_once() -> None:
    """The suites of ``benchmarks/test_bench_*.py``, each test once (as with
    ``--benchmark-disable``), with a stand-in for pytest-benchmark's fixture."""
    from benchmarks import test_bench_extract, test_bench_scheduler

    def benchmark(function: Any, *args: Any, **kwargs: Any) -> Any:
        return function(*args, **kwargs)

    for shape in sorted(test_bench_scheduler.SHAPES):
        for tool_name in ("noop_inline", "noop_async"):
            test_bench_scheduler.test_plandag_dispatch(benchmark, shape, tool_name)
        test_bench_scheduler.test_bare_dispatch(benchmark, shape)
        test_bench_scheduler.test_compile(benchmark, shape)
    if (DEFAULT_DATA_DIR / "SOURCES.md").is_file():
        files = valid_invoice_files()[:2]
        test_bench_extract.test_plandag_extract(benchmark, files)
        test_bench_extract.test_plain_lxml_extract(benchmark, files)


# -- the plan schema ------------------------------------------------------------------------


def test_plan_validity_runs_and_no_first_answer_breaks_a_schema_rule(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from benchmarks.plan_validity import SCHEMA_RULE, classify, main, measure

    results = measure(answers=3, seed=1)
    assert set(results) == {"anthropic", "openai"}
    for result in results.values():
        assert result["answers"] == 3
        assert result["failed_calls"] == 0
        assert not [label for label in result["codes"] if label.endswith(SCHEMA_RULE)]
    assert classify("invalid_args", "args.x: Field required (tool t)", False) == SCHEMA_RULE
    assert classify("invalid_args", "args.x: Input should be greater than 0", True) == (SCHEMA_RULE)
    assert classify("invalid_args", "args.x: Input should be greater than 0", False) == (
        "(no schema rule)"
    )
    assert classify("invalid_check_args", "check[0] (regex).pattern: Value error, bad", True) == (
        "(no schema rule)"
    )
    assert main(["--answers", "1"]) == 0
    assert "| **answers with a target code for a schema rule** | 0 | 0 |" in capsys.readouterr().out


def test_schema_tokens_runs(capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks.schema_tokens import main, measure, registries

    assert main(["--tools", "2"]) == 0
    out = capsys.readouterr().out
    assert "| built-ins + 2 tools | 10 |" in out
    figures = measure(registries(2)["built-ins"])
    assert figures["schema_after"] > figures["schema_before"] > 0


def test_wire_tokens_runs(capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks.wire_tokens import main

    main()
    out = capsys.readouterr().out
    assert out.splitlines()[0].split()[:6] == [
        "plan",
        "steps",
        "verbose",
        "assign",
        "typed_long",
        "typed",
    ]
    assert "all" in out


@pytest.mark.timeout(120)  # one process; its imports alone take seconds on a loaded machine
def test_contracts_hostile_runs_at_a_tiny_size(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from benchmarks.contracts_hostile import main, make_inputs

    assert list(make_inputs(tmp_path, 0.001, ["txt-50mb"])) == ["txt-50mb"]
    assert [path.name for path in tmp_path.iterdir()] == ["big.txt"]
    main(["--case", "txt-50mb", "--scale", "0.001", "--timeout", "90", "--args", "--max-chunks 2"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["input", "before", "after"]
    case, before, after = lines[2].split(None, 2)
    assert (case, before) == ("txt-50mb", "-")
    assert "too_many_chunks" in after
    assert "no row" not in after
    # the command as run, named by the interpreter's own name (python or python3)
    python = Path(sys.executable).name
    assert lines[-1].startswith(f"txt-50mb: {python} -m plandag extract contracts ")
    assert lines[-1].endswith(" --max-chunks 2")


def test_contracts_grounding_runs_at_a_tiny_size(capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks.contracts_grounding import DEFAULT_DATA, main

    if not (DEFAULT_DATA / "cuad_labels.jsonl").is_file():
        pytest.skip("the shared contracts are not here (set PLANDAG_SHARED_CONTRACTS)")
    main(["--contracts", "1", "--share", "1.0", "--json"])
    result = json.loads(capsys.readouterr().out)
    perfect, adversarial = result["perfect"], result["adversarial"]
    assert perfect["contracts"] == 1
    assert perfect["eval_equals_cuad"]
    assert perfect["cuad_recall"] == 1.0
    assert perfect["genuine_quotes_rejected"] == 0
    assert adversarial["changed_values_accepted"] == 0
    assert adversarial["clause_quotes_under_floor_accepted"] == 0
    assert sum(sent for sent, _ in adversarial["altered_sent_accepted"].values()) > 0


def test_contracts_grounding_puts_another_tree_beside_this_one(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from benchmarks.contracts_grounding import DEFAULT_DATA, REPO, main

    if not (DEFAULT_DATA / "cuad_labels.jsonl").is_file():
        pytest.skip("the shared contracts are not here (set PLANDAG_SHARED_CONTRACTS)")
    main(["--contracts", "1", "--share", "1.0", "--before", str(REPO)])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["before", f"({REPO})", "this", "checkout"]
    rows = {" ".join(line.split()[:-2]): line.split()[-2:] for line in lines[1:]}
    assert rows["plandag eval = CUAD"] == ["True", "True"]
    assert rows["values accepted that their quote does not hold"] == ["0", "0"]


def test_contracts_cpu_runs_at_a_tiny_size(capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks.contracts_cpu import EXAMPLES, in_flight, main

    [(name, [run])] = main(
        ["--contracts", str(EXAMPLES), "--copies", "1", "--runs", "1", "--reply-seconds", "0.01"]
    )
    assert name == "this checkout"
    # three CUAD contracts of one chunk and the template of two: 5 field groups each
    assert (run["contracts"], run["calls"], run["statuses"]) == (4, 25, {"ok": 4})
    assert 1 <= run["in_flight_max"] <= 4
    assert run["cpu_ms_per_call"] > 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("4 contracts")
    assert [line.split("|")[1].strip() for line in lines[3:]] == [
        "model calls",
        "CPU ms per model call",
        "CPU seconds",
        "wall seconds",
        "contracts in flight, most",
        "contracts in flight, mean",
        "contracts in flight, median",
        "% of the time with --jobs in flight",
    ]
    # a alone for 1 s, a and b together for 1 s, b alone for 1 s
    log = [(0.0, 1, "a"), (1.0, 1, "b"), (2.0, -1, "a"), (3.0, -1, "b")]
    assert in_flight(log, 2) == (2, 4.0 / 3.0, 1, 1.0 / 3.0)


# -- OpenTelemetry span table -------------------------------------------------------------------


def test_otel_span_table_at_a_tiny_size() -> None:
    pytest.importorskip("opentelemetry.sdk")
    from benchmarks.otel_spans import capture, render, rows

    seen = capture(steps=1)
    kinds = {row.kind_name: row for row in rows(seen.anthropic, "anthropic")}
    assert set(kinds) == {"invoke_agent *", "invoke_workflow *", "execute_tool *", "chat *"}
    assert kinds["chat *"].count == 2
    assert "gen_ai.usage.input_tokens" in kinds["chat *"].attributes
    assert [row.count for row in rows(seen.openai, "openai") if row.kind_name == "chat *"] == [1]
    assert {name for name, *_ in seen.metrics} == {
        "gen_ai.client.token.usage",
        "gen_ai.client.operation.duration",
    }
    assert "| `chat *` |" in render(seen)


# -- rate limits ------------------------------------------------------------------------------


def test_rate_limit_429s_at_a_tiny_size() -> None:
    from benchmarks.rate_limits import measure, render

    without, limited = measure(steps=6, rpm=3, period_s=0.5)
    assert without.http_429 >= 3  # 6 at once against 3 per half second
    assert limited.http_429 <= 1  # a request's delay to the server may vary by a little
    assert limited.succeeded == 6
    assert limited.waited_calls >= 2
    assert "| with --rpm 3 |" in render([without, limited], 6, 3, 0.5)


# -- trace and compile CPU per step -----------------------------------------------------------


def test_trace_bench_at_a_tiny_size(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks.trace_bench import VARIANTS, main, measure_matchers, measure_once, render

    figures = measure_once(4, (4,), tmp_path, 1)
    assert set(figures) == {*VARIANTS, "compile 4", "compile 4, collector on"}
    assert all(value >= 0 for value in figures.values())
    table = render({"this": [figures]})
    assert "| store+trace - store |" in table
    assert "| compile 4 |" in table
    assert measure_matchers(1).count("\n") == 10  # a header, a rule, nine rows
    main(["--steps", "3", "--compile-sizes", "3", "--repetitions", "1", "--profile"])
    printed = capsys.readouterr().out
    assert "| trace - plain |" in printed
    assert "cProfile of store+trace (this)" in printed


# -- NF-e throughput ----------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_nfe_throughput_runs_at_a_tiny_size(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from benchmarks.nfe_throughput import main

    # three invoices made from the shipped examples (benchmarks/generate_nfe.py)
    corpus = tmp_path / "corpus"
    arguments = ["--corpus", str(corpus), "--n", "3", "--repetitions", "1"]
    assert main([*arguments, "--start-documents", "1"]) == 0
    out = capsys.readouterr().out
    assert "uptime before:" in out
    assert "uptime after:" in out
    rows = [line.split(" | ")[0].lstrip("| ") for line in out.splitlines() if line.startswith("| ")]
    for label in (
        "lxml loop (benchmarks/plain_lxml_nfe.py)",
        "plandag per-document loop (extract_document)",
        "plandag per-document loop, the command's run options",
        "plandag extract nfe --workers 1",
        "plandag extract nfe --workers 2",
        "plandag extract nfe --cluster local (2 workers)",
    ):
        assert label in rows
    assert "ceiling 32 cores" in out


def test_nfe_throughput_compares_the_checkout_it_is_given_from_inside_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # run from inside a checkout (this repository), --compare OTHER must run OTHER's plandag,
    # not the one the working directory would put first on sys.path
    from benchmarks.nfe_throughput import _compare_command

    other = tmp_path / "other"
    (other / "plandag").mkdir(parents=True)
    (other / "plandag" / "__init__.py").write_text("", encoding="utf-8")
    (other / "plandag" / "__main__.py").write_text(
        "print('the other checkout')\n", encoding="utf-8"
    )
    monkeypatch.chdir(Path(__file__).resolve().parents[2])
    command = _compare_command(str(other))
    shown = subprocess.run(
        [*command.argv, "--version"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        env={**os.environ, **command.environment},
    )
    assert shown.stdout.strip() == "the other checkout"


def test_nfe_throughput_cpu_table_gives_the_amdahl_ceilings() -> None:
    from benchmarks.nfe_throughput import Row, amdahl, render_cpu

    assert amdahl(0.1, 2) == pytest.approx(1 / 0.55)
    assert amdahl(0.0, 8) == pytest.approx(8.0)
    row = Row("w2", [1.0], cpu=[2.0], parent=[0.2], parent_target=0.15)
    # the command reports its CPU over the batch: the target and f are judged on it
    reported = Row(
        "w2 now",
        [1.0],
        cpu=[2.0],
        parent=[0.2, 0.3],
        parent_target=0.15,
        batch_parent=[0.14, 0.1, 0.12],
    )
    lines = render_cpu([Row("lxml", [1.0]), row, reported], 1000).splitlines()
    assert lines[2] == (
        "| w2 | 2.000 | n/a |  | 0.200 | 0.200-0.200 | ≤ 0.15 | no | 0.100 "
        "| 1.82× | 4.71× | 7.80× | 10.0× |"
    )
    assert lines[3] == (
        "| w2 now | 2.000 | 0.120 | 0.100-0.140 | 0.250 | 0.200-0.300 | ≤ 0.15 | yes | 0.060 "
        "| 1.89× | 5.63× | 11.19× | 16.7× |"
    )
    assert len(lines) == 4  # a row without CPU figures is left out


# -- the run store's cost per step --------------------------------------------------------------


def test_store_bench_runs_at_a_tiny_size(capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks.store_bench import VARIANTS, main

    assert main(["--size", "5", "--repetitions", "1", "--makespan", "5"]) == 0
    out = capsys.readouterr().out
    for variant in VARIANTS:
        assert f"| ({variant}) " in out
    assert "CPU µs/step" in out
    assert "makespan ÷ critical path, 5-step random DAG, store + trace: median" in out


def test_store_bench_puts_another_tree_beside_this_one(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from benchmarks.store_bench import SIDE_BY_SIDE, main

    this_tree = Path(__file__).resolve().parents[2]
    arguments = ["--size", "3", "--repetitions", "1", "--makespan", "3", "--rounds", "1"]
    assert main([*arguments, "--before", str(this_tree)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert f"before ({this_tree}): CPU" in lines[0]
    labels = [line.split("|")[1].strip() for line in lines[2:] if line.startswith("|")]
    assert labels == [label for label, _, _ in SIDE_BY_SIDE] + [
        "makespan ÷ critical path, store + trace",
        "makespan ÷ critical path, no store",
    ]
    assert any(line.startswith("load average (1, 5, 15 min) before:") for line in lines)

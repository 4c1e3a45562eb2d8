"""The step lines written from their parts (:mod:`plandag.trace.lines`) are the lines the
writer's general way writes (its attrs built, converted and masked whole), for generated
steps: results, args, errors, checks and names holding credentials, personal data, lone
surrogates, values that are not JSON, and keys that mask or make a mapping a person's."""

from __future__ import annotations

import json
import math
import os
import struct
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from plandag.checks.base import CheckOutcome
from plandag.scheduler import events
from plandag.scheduler.result import AttemptRecord, StepErrorInfo, StepRecord
from plandag.trace import lines as lines_module
from plandag.trace.lines import StepLines
from plandag.trace.redact import Redactor
from plandag.trace.writer import TraceWriter

SECRET_NAME, SECRET_VALUE = "STEP_LINES_TEST_API_KEY", "lines-secret-7d1e9a"

_PIECES = [
    "plain",
    "fetch",
    "succeeded",
    " ",
    "sk-ant-abcdefgh1234",
    "sk-" + "A" * 24,
    "Bearer abcDEF123456789",
    "password=hunter22",
    "token: abcdefghij",
    "https://u:pw123456@h.example/x",
    "maria@example.com",
    "529.982.247-25",
    "52998224725",
    "(11) 91234-5678",
    SECRET_VALUE,
    "\ud800",
    "\udcff",
    "ünï ✓",
    '"',
    "\\",
    "\n",
    "\u0131",
    "<dest><CPF>52998224725</CPF><xNome>Ana</xNome></dest>",
]
_KEYS = [
    "name",
    "text",
    "token",
    "api_key",
    "Authorization",
    "CPF",
    "cpf",
    "nfe:CPF",
    "xNome",
    "fone",
    "email",
    "CNPJ",
    "idEstrangeiro",
    "step_id",
    "hash",
    "password=x",
    SECRET_VALUE,
    "ok\ud800",
]

texts = st.lists(st.sampled_from(_PIECES), max_size=4).map("".join)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**20), 10**20),
    st.floats(allow_nan=True, allow_infinity=True),
    texts,
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.tuples(inner, inner),
        st.dictionaries(st.one_of(st.sampled_from(_KEYS), texts), inner, max_size=4),
        st.tuples(st.sampled_from(["Authorization", "Accept", "x-api-key"]), inner).map(list),
    ),
    max_leaves=12,
)
maybe_text = st.one_of(st.none(), texts)
times = st.one_of(
    st.floats(1e9, 2e9),
    st.just(float("nan")),
    st.just(float("inf")),
    st.integers(0, 2 * 10**9),
)
errors = st.one_of(st.none(), st.builds(StepErrorInfo, texts, texts))


@st.composite
def attempts(draw: st.DrawFn) -> AttemptRecord:
    return AttemptRecord(
        number=draw(st.integers(1, 5)),
        started_at=draw(times),
        ended_at=draw(st.one_of(st.none(), times)),
        error=draw(errors),
        reason=draw(st.one_of(st.none(), st.sampled_from(["deadline", "tool_error"]), texts)),
        retry=draw(st.one_of(st.none(), st.sampled_from(["retried", "reask"]), texts)),
        children=draw(
            st.lists(
                st.fixed_dictionaries(
                    {"kind": st.just("model_call"), "name": texts},
                    optional={"attrs": st.dictionaries(st.sampled_from(_KEYS), scalars)},
                ),
                max_size=1,
            )
        ),
    )


@st.composite
def records(draw: st.DrawFn) -> StepRecord:
    return StepRecord(
        id=draw(st.integers(1, 3)),
        tool=draw(st.one_of(st.sampled_from(["fetch", "noop_async"]), texts)),
        status=draw(st.sampled_from(["succeeded", "failed", "cancelled"])),
        result=draw(values),
        error=draw(errors),
        reason=draw(maybe_text),
        detail=draw(maybe_text),
        started_at=draw(st.one_of(st.none(), times)),
        ended_at=draw(st.one_of(st.none(), times)),
        checks=draw(
            st.lists(
                st.builds(CheckOutcome, texts, st.sampled_from(["pass", "fail"]), texts),
                max_size=2,
            )
        ),
        attempt_log=draw(st.lists(attempts(), max_size=2)),
        superseded_by=draw(st.one_of(st.none(), st.lists(st.integers(1, 9), max_size=2))),
    )


REDACTORS: dict[str, Callable[[], Redactor | None]] = {
    "none": lambda: None,
    "secrets": Redactor,
    "personal": lambda: Redactor(personal=True),
}


@pytest.fixture(autouse=True)
def _environment_secret() -> Iterator[None]:
    previous = os.environ.get(SECRET_NAME)
    os.environ[SECRET_NAME] = SECRET_VALUE
    yield
    if previous is None:
        os.environ.pop(SECRET_NAME, None)
    else:
        os.environ[SECRET_NAME] = previous


def _written(
    folder: Path,
    name: str,
    redact: Redactor | None,
    steps: list[tuple[StepRecord, Any, Any]],
    assembled: bool,
) -> str:
    path = folder / f"{name}.jsonl"
    writer = TraceWriter(path, "run\ud800-x", redact=redact, clock=lambda: 5.0)
    if not assembled:
        writer._lines = None  # the general way alone
    for step_id in range(1, 4):
        writer.set_dependencies({step_id: list(range(1, step_id))})
    for record, args, skipped in steps:
        writer.step_args(record.id, args)
        start = record.started_at if record.started_at is not None else 1.0
        writer(events.StepStarted("r", record.id, record.tool, 1, start))
        end = record.ended_at if record.ended_at is not None else 2.0
        if skipped is not None:
            writer(events.StepSkipped("r", record.id, "upstream_failed", skipped, end))
        elif record.status == "succeeded":
            writer(events.StepSucceeded("r", record.id, 0.1, end, record.result, record))
        elif record.status == "failed":
            writer(events.StepFailed("r", record.id, "tool_error", record.error, end, record))
        else:
            writer(events.StepCancelled("r", record.id, "deadline", end, record))
        writer._step_span(record, 1.0, 3.0)  # again at the run's end: written once
    writer.close()
    return path.read_bytes().decode("utf-8")


@pytest.mark.parametrize("name", sorted(REDACTORS))
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    steps=st.lists(
        st.tuples(records(), st.one_of(st.none(), values), st.one_of(st.none(), texts)),
        min_size=1,
        max_size=3,
    )
)
def test_assembled_lines_equal_the_general_ones(
    name: str, steps: list[tuple[StepRecord, Any, Any]]
) -> None:
    with tempfile.TemporaryDirectory() as folder:
        general = _written(Path(folder), "general", REDACTORS[name](), steps, False)
        assembled = _written(Path(folder), "assembled", REDACTORS[name](), steps, True)
    assert assembled == general


def test_a_secret_added_while_the_writer_goes_is_masked_from_then_on(tmp_path: Path) -> None:
    late_name, late_value = "STEP_LINES_LATE_TOKEN", "late-value-5c2b9e10"
    writer = TraceWriter(tmp_path / "t.jsonl", "r", redact=Redactor(), clock=lambda: 5.0)
    try:
        writer(events.StepStarted("r", 1, f"tool-{late_value}", 1, 1.0))
        os.environ[late_name] = late_value
        writer(events.StepStarted("r", 2, f"tool-{late_value}", 1, 2.0))
    finally:
        os.environ.pop(late_name, None)
        writer.close()
    first, second = (tmp_path / "t.jsonl").read_text(encoding="utf-8").splitlines()
    assert late_value in first
    assert late_value not in second
    assert "tool-[secret]" in second


def test_a_secret_added_between_two_steps_is_masked_in_the_later_steps_result(
    tmp_path: Path,
) -> None:
    late_name, late_value = "STEP_LINES_LATE_RESULT_TOKEN", "late-result-7d41a0c3"
    # the result's text holds no word that sends it through the walk (the text is checked)
    writer = TraceWriter(tmp_path / "t.jsonl", "r", redact=Redactor(), clock=lambda: 5.0)

    def succeed(step_id: int) -> None:
        started = float(step_id)
        record = StepRecord(
            id=step_id,
            tool="fetch",
            status="succeeded",
            result={"body": f"value {late_value}", "n": step_id},
            attempts=1,
            attempt_log=[AttemptRecord(number=1, started_at=started, ended_at=started + 0.5)],
            started_at=started,
            ended_at=started + 0.5,
        )
        writer(events.StepStarted("r", step_id, "fetch", 1, started))
        writer(events.StepSucceeded("r", step_id, 0.5, started + 0.5, record.result, record))

    try:
        succeed(1)
        os.environ[late_name] = late_value
        succeed(2)
    finally:
        os.environ.pop(late_name, None)
        writer.close()
    spans = [
        json.loads(line)
        for line in (tmp_path / "t.jsonl").read_text(encoding="utf-8").splitlines()
        if '"kind":"step"' in line
    ]
    assert [span["attrs"]["result"]["body"] for span in spans] == [
        f"value {late_value}",
        "value [secret]",
    ]


def test_a_key_masked_by_the_environment_sends_the_lines_the_general_way() -> None:
    # an environment secret equal to a key of the step lines: StepLines does not write them
    lines = StepLines("r", 0, Redactor())
    assert lines.ready()
    os.environ["STEP_LINES_KEY_SECRET"] = "superseded_by"
    try:
        assert not lines.ready()
    finally:
        os.environ.pop("STEP_LINES_KEY_SECRET")
    assert lines.ready()


def test_numbers_are_written_as_the_encoder_writes_them() -> None:
    lines = StepLines("r", 0, None)
    for number in (0.1, 1e22, 1e-7, -0.0, 1700000000.123456, 10**30, True, None):
        assert lines.value(number) == __import__("json").dumps(number)
    for odd in (math.nan, math.inf, -math.inf):
        assert lines.value(odd) is None


def _bits_to_float(bits: int) -> float:
    return struct.unpack("<d", struct.pack("<Q", bits))[0]


_BAND_EDGES = [
    edge
    for bound in (0.0001, 1e16, 2.0**30, 2.0**31, 1e9, 1e15)
    for edge in (math.nextafter(bound, 0.0), bound, math.nextafter(bound, math.inf))
]


@settings(max_examples=3000, deadline=None)
@given(
    number=st.one_of(
        st.floats(allow_nan=False, allow_infinity=False),
        st.floats(1e9, 2.2e9),
        st.floats(0.0, 1e6),
        st.integers(0, 2**64 - 1).map(_bits_to_float).filter(math.isfinite),
        st.integers(0, 2**22).map(lambda part: 1796658087 + part / 2**22),
        st.sampled_from(_BAND_EDGES),
    )
)
def test_a_float_is_written_as_the_encoder_writes_it(number: float) -> None:
    # times since the epoch are written by another serializer than float.__repr__: the
    # same text, for any finite float
    assert lines_module._float(number) == float.__repr__(number) == json.dumps(number)
    assert StepLines("r", 0, None).value(number) == json.dumps(number)


def test_times_a_run_writes_are_written_as_the_encoder_writes_them() -> None:
    # a clock's times, microseconds apart, and their halves at the last bit (ties)
    now = time.time()
    for offset in range(20_000):
        value = now + offset * 1.3e-6
        assert lines_module._float(value) == float.__repr__(value)
    for whole in (1_073_741_824, 1_796_658_087, 2_147_483_647):
        for eighths in range(0, 2**11, 7):
            value = whole + eighths / 2**11
            assert lines_module._float(value) == float.__repr__(value)


def test_a_span_that_cannot_be_written_leaves_its_step_end_written(tmp_path: Path) -> None:
    # an int too long for str() (Python's limit on integer digits) cannot be encoded: the
    # span is lost as the general way loses it, the step_ended line before it is kept
    record = StepRecord(
        id=1, tool="t", status="succeeded", result=[10**5000], started_at=1.0, ended_at=2.0
    )
    texts = []
    for assembled in (False, True):
        path = tmp_path / f"{assembled}.jsonl"
        writer = TraceWriter(path, "r", redact=Redactor(), clock=lambda: 5.0)
        if not assembled:
            writer._lines = None
        writer(events.StepSucceeded("r", 1, 1.0, 2.0, record.result, record))
        writer.close()
        texts.append(path.read_text(encoding="utf-8"))
    assert texts[0] == texts[1]
    assert '"kind":"step_ended"' in texts[1]


def test_an_environment_secret_holding_an_undecodable_byte_is_masked_in_a_result(
    tmp_path: Path,
) -> None:
    # the result's JSON text has the byte escaped (\\xff), the secret's own JSON has it raw:
    # the text alone cannot tell, so the result is walked
    value = "undecodable-\udcff-value99"
    os.environ["STEP_LINES_BYTE_SECRET"] = value
    try:
        record = StepRecord(
            id=1,
            tool="t",
            status="succeeded",
            result={"said": f"it is {value} here"},
            started_at=1.0,
            ended_at=2.0,
        )
        texts = []
        for assembled in (False, True):
            path = tmp_path / f"{assembled}.jsonl"
            writer = TraceWriter(path, "r", redact=Redactor(), clock=lambda: 5.0)
            if not assembled:
                writer._lines = None
            writer(events.StepSucceeded("r", 1, 1.0, 2.0, record.result, record))
            writer.close()
            texts.append(path.read_text(encoding="utf-8"))
    finally:
        os.environ.pop("STEP_LINES_BYTE_SECRET")
    assert texts[0] == texts[1]
    assert '"said":"it is [secret] here"' in texts[1]


@st.composite
def plain_steps(draw: st.DrawFn) -> tuple[StepRecord, Any, float | int]:
    """A step that succeeded at one attempt with nothing else to say (the lines most runs
    write), its args, and its step_started time (mostly the record's own start)."""
    start, end = draw(times), draw(times)
    attempt = AttemptRecord(number=draw(st.integers(1, 3)), started_at=start)
    attempt.started_at = draw(st.one_of(st.just(start), times))
    attempt.ended_at = draw(st.one_of(st.just(end), times))  # the step end itself, or another
    record = StepRecord(
        id=draw(st.integers(1, 3)),
        tool=draw(st.one_of(st.sampled_from(["fetch", "noop_async", "succeeded"]), texts)),
        status="succeeded",
        result=draw(st.one_of(st.none(), values)),
        started_at=start,
        ended_at=end,
        attempt_log=[attempt],
    )
    started = draw(st.one_of(st.just(start), times))
    return record, draw(st.one_of(st.none(), values)), started


@pytest.mark.parametrize("name", sorted(REDACTORS))
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    steps=st.lists(
        st.tuples(plain_steps(), st.sampled_from(["none", "write", None])),
        min_size=1,
        max_size=4,
    ),
    end_at_start=st.booleans(),
)
def test_the_lines_of_plain_steps_equal_the_general_ones(
    name: str,
    steps: list[tuple[tuple[StepRecord, Any, float | int], str | None]],
    end_at_start: bool,
) -> None:
    # the lines of a step that succeeded at one attempt are assembled in one go: the same
    # text as the general way's, the step_ended time the record's end or another, the
    # step_started time the record's start or another; the span not written again at the
    # run's end
    texts = []
    for assembled in (False, True):
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "t.jsonl"
            writer = TraceWriter(path, "run\ud800-x", redact=REDACTORS[name](), clock=lambda: 5.0)
            if not assembled:
                writer._lines = None
            for step_id in range(1, 3):
                writer.set_dependencies({step_id: list(range(1, step_id))})
            for (record, args, started), effects in steps:
                if args is not None:
                    writer.step_args(record.id, args)
                writer(events.StepStarted("r", record.id, record.tool, 1, started, effects))
                end = record.ended_at if end_at_start else 7.5
                writer(events.StepSucceeded("r", record.id, 0.1, end, record.result, record))
            for (record, _, _), _ in steps:
                writer._step_span(record, 1.0, 3.0)  # the run's end: nothing new
            writer.close()
            texts.append(path.read_bytes().decode("utf-8"))
    assert texts[1] == texts[0]

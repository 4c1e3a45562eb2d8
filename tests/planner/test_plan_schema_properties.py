"""Instances of the plan schema itself never carry a diagnostic for a rule the schema
states: drawn by hypothesis-jsonschema (an independent generator) and by the stand-in's own
generator, read and compiled as the planner does."""

from __future__ import annotations

import json
import random
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis_jsonschema import from_schema

from plandag.errors import PlanError
from plandag.planner.planner import provider_schema
from plandag.planner.schema import plan_json_schema
from plandag.planner.wire import compile_wire
from plandag.testing import random_instance
from plandag.tools.registry import Registry, default_registry

REGISTRY = default_registry(["nfe"], resolve_installed=False)
BOUNDED = plan_json_schema(REGISTRY, bounds=True)
"""The schema as an OpenAI-compatible server gets it, before strict mode (bounds kept)."""
LOOSE = plan_json_schema(REGISTRY, bounds=False)
"""The schema as Anthropic gets it (no numeric bounds)."""

SCHEMA_CODES = frozenset({"invalid_json", "invalid_schema", "unknown_tool", "unknown_check"})
"""Codes whose every rule a schema states (for plans that are instances of it)."""
ARG_CODES = frozenset({"invalid_args", "invalid_check_args"})
STATED = (
    "Field required",
    "Extra inputs are not permitted",
    "Input should be a valid",
    "Input should be '",
)
"""Pydantic's words for a type, a required argument, an unknown argument and an enum."""


def stated_problems(instance: Any, registry: Registry, *, bounds: bool) -> list[str]:
    """The diagnostics of ``instance`` for rules its schema states (none expected)."""
    try:
        compile_wire(json.dumps(instance), registry)
    except PlanError as error:
        diagnostics = error.diagnostics
    else:
        return []
    found = []
    for diagnostic in diagnostics:
        if diagnostic.code in SCHEMA_CODES:
            bound = "greater than" in diagnostic.message or "less than" in diagnostic.message
            if not (bound and not bounds):
                found.append(diagnostic.format())
        elif diagnostic.code in ARG_CODES and any(words in diagnostic.message for words in STATED):
            found.append(diagnostic.format())
        elif (
            diagnostic.code in ARG_CODES
            and bounds
            and ("greater than" in diagnostic.message or "less than" in diagnostic.message)
        ):
            found.append(diagnostic.format())
    return found


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.data())
def test_hypothesis_instances_of_the_bounded_schema_compile_without_stated_errors(
    data: st.DataObject,
) -> None:
    instance = data.draw(from_schema(BOUNDED))
    assert stated_problems(instance, REGISTRY, bounds=True) == []


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.data())
def test_hypothesis_instances_of_the_anthropic_schema_compile_without_stated_errors(
    data: st.DataObject,
) -> None:
    instance = data.draw(from_schema(LOOSE))
    assert stated_problems(instance, REGISTRY, bounds=False) == []


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
def test_the_stand_in_draws_valid_instances_that_compile_without_stated_errors(
    provider: str,
) -> None:
    schema = provider_schema(plan_json_schema(REGISTRY, bounds=provider != "anthropic"), provider)
    rng = random.Random(11)
    for _ in range(150):
        instance = random_instance(schema, rng)
        jsonschema.validate(instance, schema)
        assert stated_problems(instance, REGISTRY, bounds=provider != "anthropic") == []

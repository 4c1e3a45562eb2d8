"""Instances of the plan schema itself never carry a diagnostic for a rule the schema
states: drawn by the stand-in's generator (:func:`plandag.testing.random_instance`) from
random sources hypothesis picks, each instance checked against the schema with jsonschema
first, then read and compiled as the planner does.

(hypothesis-jsonschema 0.23.1, its latest release, fails to draw from this schema with the
hypothesis in use: ``AttributeError: 'many' object has no attribute 'more'``.)"""

from __future__ import annotations

import json
import random
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from plandag.errors import PlanError
from plandag.models.schemas import prepare_schema
from plandag.planner.schema import plan_json_schema
from plandag.planner.wire import compile_wire
from plandag.testing import random_instance
from plandag.tools.registry import Registry, default_registry

REGISTRY = default_registry(["nfe"], resolve_installed=False)
SCHEMAS = {
    provider: prepare_schema(plan_json_schema(REGISTRY), provider).schema
    for provider in ("anthropic", "openai")
}
"""The schema as each provider gets it: Anthropic with the numeric bounds in descriptions
(it cannot enforce them), an OpenAI-compatible server in strict mode with them."""
VALIDATORS = {
    provider: jsonschema.Draft202012Validator(schema) for provider, schema in SCHEMAS.items()
}

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
            unique = "declared twice" in diagnostic.message  # names unique: no schema rule
            if not (bound and not bounds) and not unique:
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


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.randoms(use_true_random=False), st.sampled_from(["anthropic", "openai"]))
def test_instances_of_the_schema_compile_without_errors_the_schema_states(
    source: random.Random, provider: str
) -> None:
    bounds = provider != "anthropic"
    schema = SCHEMAS[provider]
    instance = random_instance(schema, source)
    VALIDATORS[provider].validate(instance)
    assert stated_problems(instance, REGISTRY, bounds=bounds) == []


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
def test_the_stand_in_draws_valid_instances_that_compile_without_stated_errors(
    provider: str,
) -> None:
    schema = SCHEMAS[provider]
    rng = random.Random(11)
    for _ in range(150):
        instance = random_instance(schema, rng)
        VALIDATORS[provider].validate(instance)
        assert stated_problems(instance, REGISTRY, bounds=provider != "anthropic") == []

"""The plan artifact: the contract between a planner and the executor.

A plan is JSON (see ``plandag schema plan``)::

    {"version": 1, "goal": "...", "params": {"input": {"type": "string"}},
     "steps": [{"id": 1, "tool": "read_file", "args": {"path": "<param.input>"},
                "depends_on": [], "check": [{"kind": "not_empty"}]}],
     "output": "<step_1_result>"}

The models here check only the *shape* of a plan. Everything that needs the tool registry or
the whole graph (unknown tools, references, cycles, write boundary) is the compiler's job, so
that it can report every problem at once (``plandag.compiler``).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt

__all__ = ["PLAN_FORMAT_VERSION", "CheckSpec", "ParamSpec", "Plan", "Step"]

PLAN_FORMAT_VERSION = 1

ParamType = Literal["string", "integer", "number", "boolean", "object", "array", "any"]


class ParamSpec(BaseModel):
    """A named input of a plan, given at run time (``--param NAME=VALUE``).

    Referenced in step arguments as ``<param.NAME>``. A param without ``default`` is required.
    """

    model_config = ConfigDict(extra="forbid")

    type: ParamType = "string"
    description: str | None = None
    default: Any = None
    required: bool | None = Field(
        default=None,
        description="Whether the param must be given; defaults to true when no default is set.",
    )

    @property
    def is_required(self) -> bool:
        """True when the run must supply this param."""
        if self.required is not None:
            return self.required
        return "default" not in self.model_fields_set


class CheckSpec(BaseModel):
    """A structured success check evaluated in code after a step returns.

    ``kind`` names a registered check (``not_empty``, ``equals``, ``regex``, ``jmespath``,
    ``file_exists``, ``tolerance`` or a domain validator such as ``nfe_key_check_digit``);
    the remaining fields are that check's arguments, validated by the compiler against the
    check's own schema. Argument values may hold references (``<step_2_result.total>``).
    """

    model_config = ConfigDict(extra="allow")

    kind: str = Field(min_length=1)

    @property
    def arguments(self) -> dict[str, Any]:
        """The check's arguments: every field but ``kind``."""
        return dict(self.model_extra or {})


class Step(BaseModel):
    """One node of the plan: a tool call, its dependencies and its success checks."""

    model_config = ConfigDict(extra="forbid")

    id: int = Field(gt=0, strict=True, description="Positive integer, unique within the plan.")
    tool: str = Field(min_length=1, description="Name of a registered tool.")
    args: dict[str, Any] = Field(
        default_factory=dict,
        description="Arguments for the tool; strings may hold references "
        "(<step_N_result>, <step_N_result.path>, <param.NAME>) at any depth.",
    )
    depends_on: list[StrictInt] = Field(
        default_factory=list,
        description="Ids of steps that must succeed before this one starts.",
    )
    check: list[CheckSpec] = Field(
        default_factory=list, description="Success checks, all evaluated on the result."
    )
    description: str | None = None


class Plan(BaseModel):
    """A whole plan: goal, params, steps and the output to return.

    ``output`` may hold references; it is resolved once every step it needs succeeded.
    """

    model_config = ConfigDict(extra="forbid")

    version: Literal[1] = 1
    goal: str = ""
    params: dict[str, ParamSpec] = Field(default_factory=dict)
    steps: list[Step]
    output: Any = None

"""Success checks: facts evaluated in code on a step's result, never "looks right".

A check is a typed function registered like a tool::

    from plandag.checks import check, CheckOutcome

    @check
    def positive(result: Any, *, path: str | None = None) -> CheckOutcome:
        "The value at `path` is a positive number."
        ...

Its keyword arguments (everything after the leading ``result`` parameter) form a pydantic
args model that the compiler validates a plan's ``{"kind": NAME, ...}`` entries against.
The function returns a :class:`CheckOutcome` (``pass``, ``fail`` or ``not_applicable`` with a
detail), or a bool. A failed check fails the step with the check's detail as its reason.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal, TypeAlias, overload

from pydantic import BaseModel, ConfigDict, Field, create_model

from plandag.errors import ToolDefinitionError

if TYPE_CHECKING:
    from plandag.dag.plan import Step

__all__ = ["CheckDefinition", "CheckOutcome", "CheckStatus", "RequiredOn", "check"]

RequiredOn: TypeAlias = "Callable[[Step, Mapping[int, Step]], Mapping[str, Any] | None]"
"""A check's rule for the steps it must be on: ``rule(step, steps)`` (``steps``: every step
of the run by id, the new ones included) returns the arguments the check is attached with
when ``step`` must carry it and does not, else None."""

CheckStatus = Literal["pass", "fail", "not_applicable"]


@dataclasses.dataclass(frozen=True, slots=True)
class CheckOutcome:
    """The outcome of one check on one result.

    Attributes:
        kind: the check's registered name (``regex``, ``nfe_vnf_formula``...).
        status: ``pass``, ``fail`` or ``not_applicable`` (never fails a step).
        detail: what was compared and why it passed or failed, for a person.
    """

    kind: str
    status: CheckStatus
    detail: str = ""

    @property
    def failed(self) -> bool:
        """True when the status is ``fail``."""
        return self.status == "fail"

    def as_dict(self) -> dict[str, str]:
        """``{"kind", "status", "detail"}`` for JSON output."""
        return {"kind": self.kind, "status": self.status, "detail": self.detail}


class _CheckArgsBase(BaseModel):
    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)


@dataclasses.dataclass(frozen=True)
class CheckDefinition:
    """A registered check kind. Build one with :func:`check`.

    Attributes:
        name: the ``kind`` plans use.
        description: the docstring's first paragraph.
        function: ``function(result, **args) -> CheckOutcome | bool``.
        args_model: pydantic model of the arguments (extra keys refused).
        required_on: the steps this check must be on (:data:`RequiredOn`), or None. The
            compiler attaches the check, with the arguments the rule returns, to every step
            of a plan or patch the rule names that lacks it, with a ``check_attached``
            warning: an application's guard (a research answer's ``citations_supported``)
            does not depend on the planner remembering it.
    """

    name: str
    description: str
    function: Callable[..., CheckOutcome | bool]
    args_model: type[BaseModel]
    required_on: RequiredOn | None = None

    @functools.cached_property
    def takes_arguments(self) -> bool:
        """True when the check declares arguments (its args model has fields)."""
        return bool(self.args_model.model_fields)

    def evaluate(self, result: Any, args: Mapping[str, Any]) -> CheckOutcome:
        """Run the check on ``result`` with already-resolved ``args``.

        A check that raises is reported as ``fail`` with the exception in its detail: a
        check that cannot be evaluated has not established the fact it stands for.
        """
        try:
            if args or self.takes_arguments:
                model = self.args_model.model_validate(dict(args))
                kwargs = {name: getattr(model, name) for name in type(model).model_fields}
                outcome = self.function(result, **kwargs)
            else:
                outcome = self.function(result)
        except Exception as error:
            return CheckOutcome(self.name, "fail", f"{type(error).__name__}: {error}")
        if isinstance(outcome, CheckOutcome):
            if outcome.kind != self.name:
                return dataclasses.replace(outcome, kind=self.name)
            return outcome
        return CheckOutcome(self.name, "pass" if outcome else "fail", "" if outcome else "false")


def _build_check(
    function: Callable[..., CheckOutcome | bool],
    name: str | None,
    description: str | None,
    required_on: RequiredOn | None = None,
) -> CheckDefinition:
    check_name: str = name or str(getattr(function, "__name__", ""))
    if not check_name.isidentifier():
        raise ToolDefinitionError(f"check name {check_name!r} must be a Python identifier")
    hints = typing.get_type_hints(function, include_extras=True)
    parameters = list(inspect.signature(function).parameters.values())
    if not parameters:
        raise ToolDefinitionError(f"check {check_name}: the first parameter takes the result")
    fields: dict[str, Any] = {}
    for parameter in parameters[1:]:
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            raise ToolDefinitionError(f"check {check_name}: *args and **kwargs are not allowed")
        annotation = hints.get(parameter.name, inspect.Parameter.empty)
        if annotation is inspect.Parameter.empty:
            raise ToolDefinitionError(
                f"check {check_name}: argument {parameter.name!r} has no type hint"
            )
        default = ... if parameter.default is inspect.Parameter.empty else parameter.default
        fields[parameter.name] = (annotation, Field(default=default))
    args_model = create_model(f"{check_name}_check_args", __base__=_CheckArgsBase, **fields)
    doc = inspect.cleandoc(function.__doc__ or "").split("\n\n", 1)[0].replace("\n", " ")
    return CheckDefinition(
        name=check_name,
        description=description if description is not None else doc,
        function=function,
        args_model=args_model,
        required_on=required_on,
    )


@overload
def check(function: Callable[..., CheckOutcome | bool], /) -> CheckDefinition: ...


@overload
def check(
    *,
    name: str | None = None,
    description: str | None = None,
    required_on: RequiredOn | None = None,
) -> Callable[[Callable[..., CheckOutcome | bool]], CheckDefinition]: ...


def check(
    function: Callable[..., CheckOutcome | bool] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    required_on: RequiredOn | None = None,
) -> CheckDefinition | Callable[[Callable[..., CheckOutcome | bool]], CheckDefinition]:
    """Declare a check kind: ``function(result, **args) -> CheckOutcome | bool``.

    Args:
        function: the function, when used bare.
        name: the ``kind`` plans use (default: the function's name).
        description: default: the docstring's first paragraph.
        required_on: the steps the check must be on (:data:`RequiredOn`): the compiler
            attaches it where a plan left it out (``check_attached`` warning); None: only
            where a plan puts it.

    Returns:
        A :class:`CheckDefinition`, or a decorator returning one.

    Raises:
        ToolDefinitionError: no result parameter, an argument without a type hint.
    """
    if function is not None:
        return _build_check(function, name, description, required_on)
    return lambda inner: _build_check(inner, name, description, required_on)

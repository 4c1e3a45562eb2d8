"""Tools: typed Python functions a plan's steps call.

``@tool`` turns a typed function (sync or async) into a :class:`Tool`: a name, a pydantic
args model built from its signature (the ``ctx: ToolContext`` parameter excluded), its
declared result type, and how it may be run (ARCHITECTURE.md, "Tools")::

    from plandag import tool, ToolContext

    @tool
    def add(a: int, b: int) -> int:
        "Add two integers."
        return a + b

    @tool(effects="write", writes="path", idempotent=False, timeout=5.0)
    async def append_line(path: str, line: str, ctx: ToolContext) -> int: ...

Defaults: ``effects="none"``; ``idempotent`` true for tools without effects and false
otherwise; no timeout; no concurrency limit; sync tools run in a worker thread unless
declared ``inline=True`` (cheap, non-blocking work that can run on the event loop).
"""

from __future__ import annotations

import contextvars
import copy
import dataclasses
import functools
import inspect
import logging
import math
import threading
import time
import typing
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Literal, overload

import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import SchemaValidator, core_schema

from plandag.errors import PermanentStepError, StepTimeoutError, ToolDefinitionError
from plandag.tools.boundary import WriteBoundary

if TYPE_CHECKING:
    from plandag.access import ModelAccessProtocol

__all__ = [
    "EFFECTS_ORDER",
    "Acquirer",
    "CostEstimator",
    "Effects",
    "EffectsOf",
    "Hold",
    "Reserver",
    "Tool",
    "ToolContext",
    "bind_effects",
    "tool",
]

Effects = Literal["none", "write", "irreversible"]
EFFECTS_ORDER: tuple[Effects, ...] = ("none", "write", "irreversible")
"""The effects from least to most: a step's effects cover those before them."""
EffectsOf = Callable[[Mapping[str, Any], Mapping[str, "Tool"]], Effects]
"""``effects_of(args, tools) -> effects``: the effects of one step of a tool whose effects
depend on its arguments (an ``agent`` listing tools with effects), from the step's
arguments as the plan writes them and the registered tools by name."""
WritesSpec = str | Callable[[Mapping[str, Any]], Iterable[str]] | None
CostEstimator = Callable[[Mapping[str, Any]], tuple[float | None, int]]
"""``estimate(args) -> (usd, tokens)``: what one call with these arguments may cost, US
dollars (None: the model has no price) and tokens. ``args`` are the step's arguments as the
plan writes them (a reference is still its ``<step_N_result>`` text)."""
Settler = Callable[[float, int], None]
Reserver = Callable[[float, int], Settler]
"""``reserve(usd, tokens) -> settle``: hold an amount on the run's budget and return the
function that settles it with the real ``(usd, tokens)``, or raise
:class:`~plandag.errors.BudgetRefusedError`."""
Acquirer = Callable[[float, int], Awaitable[Settler]]
"""``await acquire(usd, tokens) -> settle``: as :data:`Reserver`, waiting first while the
run's budget holds the call back (:meth:`plandag.brakes.budget.Budget.acquire`)."""


@dataclasses.dataclass
class ToolContext:
    """What a running step may know about itself. Pass it by declaring ``ctx: ToolContext``
    (or ``ctx: ToolContext | None = None``, so the function can also be called directly).

    Attributes:
        run_id: the run's id.
        step_id: the step's id in the plan.
        attempt: 1 for the first attempt, 2 for the first retry, and so on.
        idempotency_key: ``"{run_id}:{step_id}"``, stable across retries and resumes; give
            it to outside systems that accept idempotency keys so a repeat is dropped.
        logger: a logger named after the run and step.
        cost_usd: real cost reported so far by this attempt, in US dollars.
        tokens: real tokens reported so far by this attempt.
        cost_reported: :meth:`report_cost` was called during this attempt. When it was
            not, a run with a cost cap charges the attempt the tool's estimate.
        write_boundary: the run's write boundary, or None when the run checks no writes.
            A tool that writes files passes it to
            :func:`plandag.tools.writing.write_atomic` or
            :func:`~plandag.tools.writing.open_for_write`, which check and write in one.
        http_allow: the hosts this step's HTTP requests may reach (host globs, see
            :mod:`plandag.allowlist`): the run's configured ``http_allow`` and the
            hosts its approved plan lists. The runner always sets it; None (a tool called
            outside a run) checks nothing.
        models: what the run gives its model-backed steps
            (:class:`plandag.access.ModelAccessProtocol`; the ``llm`` and ``agent`` tools
            take a :class:`plandag.executors.ModelAccess`: the client of the run's provider,
            the default executor model, prices), from ``run_plan(models=...)``; None when
            the run has none (the ``llm`` and ``agent`` tools then fail and say so).
        step_state: a dict kept across the attempts of this step (empty on the first):
            what an attempt leaves for the next one (the reply a re-ask quotes).
        charged_usd: US dollars of this attempt already settled on the run's budget
            through :meth:`Hold.settle` (part of ``cost_usd``; the runner charges the rest).
        charged_tokens: tokens likewise.
        children: what the attempt did inside, in order, for the trace (each a dict
            ``{"kind", "name", "start", "end", "attrs"}``: a model call, a tool call of an
            agent); :meth:`add_child` appends one.
        clock: wall-clock seconds since the epoch, from the run's clock.
        effects: the step's effects as compiled (a tool's own, or what its ``effects_of``
            gave for this step's arguments): what the plan's approval covered.
        step_args: the step's arguments as the plan wrote them (references not resolved),
            or None outside a run: a tool that quotes referenced results as data (``llm``)
            tells them apart from the plan's own text.
        resolve: resolves a value written like ``step_args`` (references inside it)
            against the run's results and params, or None outside a run.
    """

    run_id: str
    step_id: int
    attempt: int = 1
    logger: logging.Logger = dataclasses.field(
        default_factory=lambda: logging.getLogger("plandag.tool")
    )
    cost_usd: float = 0.0
    tokens: int = 0
    cost_reported: bool = False
    write_boundary: WriteBoundary | None = None
    http_allow: tuple[str, ...] | None = None
    models: ModelAccessProtocol | None = None
    step_state: dict[str, Any] = dataclasses.field(default_factory=dict)
    charged_usd: float = 0.0
    charged_tokens: int = 0
    children: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    clock: Callable[[], float] = dataclasses.field(default=time.time, repr=False)
    effects: Effects = "none"
    reserver: Reserver | None = dataclasses.field(default=None, repr=False)
    acquirer: Acquirer | None = dataclasses.field(default=None, repr=False)
    step_args: Mapping[str, Any] | None = dataclasses.field(default=None, repr=False)
    resolve: Callable[[Any], Any] | None = dataclasses.field(default=None, repr=False)

    @property
    def idempotency_key(self) -> str:
        """``run_id:step_id``; the same for every attempt and after a resume."""
        return f"{self.run_id}:{self.step_id}"

    def report_cost(self, *, usd: float = 0.0, tokens: int = 0) -> None:
        """Add real spend for this attempt (US dollars, tokens); the runner settles it."""
        if usd < 0 or tokens < 0:
            raise ValueError("cost and tokens reported must be >= 0")
        self.cost_usd += usd
        self.tokens += tokens
        self.cost_reported = True

    def reserve(self, usd: float, tokens: int) -> Hold:
        """Hold what the call about to be made may cost on the run's budget, before making
        it: a per-call reservation (ARCHITECTURE.md, "Brakes": "each LLM call reserves its
        estimated cost before it starts, so parallel calls cannot overshoot").

        Settle the :class:`Hold` returned with the usage the provider reported, failed
        calls included (:meth:`Hold.settle`, which also reports it as this attempt's cost);
        whatever is still held when the attempt ends is released by the runner. Outside a
        run (no budget) nothing is held.

        Args:
            usd: the most the call may cost, US dollars (>= 0; 0.0 for an unpriced
                model, which the token cap alone limits).
            tokens: its tokens (>= 0): the prompt's and ``max_tokens``.

        Raises:
            ValueError: a negative or non-finite amount.
            BudgetRefusedError: the amount does not fit the run's cost or token cap; nothing
                is held and the call must not be made (the step fails, reason ``budget``,
                and the run ends ``budget_exceeded``).
        """
        if not math.isfinite(usd) or usd < 0 or tokens < 0:
            raise ValueError("a reservation must be a finite cost and tokens >= 0")
        settle = self.reserver(usd, tokens) if self.reserver is not None else None
        return Hold(self, settle, usd, tokens)

    async def acquire(self, usd: float, tokens: int) -> Hold:
        """Hold what the call about to be made may cost, as :meth:`reserve`, waiting first
        while the run's budget holds new calls back: until a first call has settled (the
        slow start), or while the calls in flight could pass a cap at the worst ratio a
        provider reported over its reservations
        (:meth:`plandag.brakes.budget.Budget.acquire`). The way a model call reserves.

        Args:
            usd: the most the call may cost, US dollars (>= 0).
            tokens: its tokens (>= 0): the prompt's and ``max_tokens``.

        Returns:
            The :class:`Hold`; settle it as :meth:`reserve`'s.

        Raises:
            ValueError: a negative or non-finite amount.
            BudgetRefusedError: the amount does not fit the run's caps, now or once the
                calls in flight have settled; nothing is held.
        """
        if not math.isfinite(usd) or usd < 0 or tokens < 0:
            raise ValueError("a reservation must be a finite cost and tokens >= 0")
        if self.acquirer is not None:
            settle: Settler | None = await self.acquirer(usd, tokens)
        else:
            settle = self.reserver(usd, tokens) if self.reserver is not None else None
        return Hold(self, settle, usd, tokens)

    def add_child(
        self, kind: str, name: str, start: float, end: float, **attrs: Any
    ) -> dict[str, Any]:
        """Record something the attempt did inside (a model call, an agent's tool call): the
        trace shows it as a child span of the step.

        Args:
            kind: ``llm_call`` or ``tool_call``.
            name: a short name (``anthropic:claude-haiku-4-5``, ``read_file``).
            start: wall-clock start, seconds since the epoch (:attr:`clock`).
            end: wall-clock end, likewise.
            attrs: JSON-like details (tokens, cost, the tool's args, an error).

        Returns:
            The child recorded.
        """
        child = {"kind": kind, "name": name, "start": start, "end": end, "attrs": attrs}
        self.children.append(child)
        return child


@dataclasses.dataclass
class Hold:
    """An amount held on the run's budget for one call (:meth:`ToolContext.reserve`).

    Attributes:
        usd: US dollars held.
        tokens: tokens held.
        settled: :meth:`settle` was called.
    """

    context: ToolContext = dataclasses.field(repr=False)
    settler: Settler | None = dataclasses.field(repr=False)
    usd: float
    tokens: int
    settled: bool = False

    def settle(self, usd: float, tokens: int) -> None:
        """Release the hold and charge the call's real cost (US dollars, tokens), which
        also counts as cost reported by the attempt; a second call does nothing.

        Raises:
            ValueError: a negative amount.
        """
        if self.settled:
            return
        if usd < 0 or tokens < 0:
            raise ValueError("cost and tokens settled must be >= 0")
        self.settled = True
        context = self.context
        context.report_cost(usd=usd, tokens=tokens)
        if self.settler is not None:
            self.settler(usd, tokens)
            context.charged_usd += usd
            context.charged_tokens += tokens


class _LenientJsonSchema(GenerateJsonSchema):
    """JSON Schema generator that describes Python-only types instead of failing."""

    def is_instance_schema(self, schema: core_schema.IsInstanceSchema) -> JsonSchemaValue:
        cls = schema["cls"]
        name = getattr(cls, "__name__", str(cls))
        return {"description": f"a {name} object, passed by reference from another step"}


class _ArgsBase(BaseModel):
    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)


@dataclasses.dataclass(frozen=True)
class Tool:
    """A registered tool. Build one with :func:`tool`, not directly.

    Attributes:
        name: the name plans use in ``"tool"``.
        description: first paragraph of the docstring, shown to planners.
        function: the wrapped function.
        args_model: pydantic model of the arguments (``ctx`` excluded; extra keys refused).
        result_type: the return annotation, used by the compiler to check reference paths.
        effects: ``"none"``, ``"write"`` or ``"irreversible"``.
        idempotent: whether repeating a call is harmless (retries after unknown outcomes).
        writes: name of the argument holding the write target, or a function of the
            arguments returning targets; ``None`` for tools that write nothing.
        timeout: per-attempt timeout in seconds, or None.
        max_concurrency: at most this many calls of this tool at once, or None.
        inline: a sync tool run on the event loop instead of in a worker thread.
        takes_context: the function declares a ``ToolContext`` parameter.
        cost_estimate_usd: estimated cost of one call, US dollars; a run with a cost cap
            reserves it before each attempt.
        tokens_estimate: estimated tokens of one call; reserved likewise under a token cap.
        egress: the tool sends data out of the machine (an HTTP request to any host, a
            mail): tainted data flowing into it needs a person's approval, even when it has
            no other effect (ARCHITECTURE.md, "Untrusted content").
        taint_source: its results come from outside (an HTTP body, a file this run did not
            write) and are tainted, as is everything computed from them.
        reaches: the argument holding the URL the tool requests; a literal URL there is a
            host the plan lists (added to the run's HTTP allow-list), or None.
        reads: the argument holding the local file the tool reads; a file written by this
            run from untainted data is not tainted when read back. None: no file.
        typical_seconds: how long one call typically takes, seconds, or None when the tool
            does not say; a plan's time estimate adds these along its critical path (a
            figure measured in the run store replaces it once the tool has run in 5 runs).
        estimate: a function of the step's arguments returning ``(usd, tokens)`` for one
            call (:data:`CostEstimator`), used by a plan's estimate instead of the fixed
            ``cost_estimate_usd`` / ``tokens_estimate`` (a model call's cost depends on its
            prompt and ``max_tokens``); None for the fixed figures.
        effects_of: a function of a step's arguments and the registered tools returning
            that step's effects (:data:`EffectsOf`), for a tool whose effects depend on its
            arguments; the compiler binds each step to the tool with those effects
            (:func:`bind_effects`), so read-only runs, approval and the store see them.
            None: ``effects`` for every step.
        names_tools: the argument holding a list of registered tool names (an ``agent``'s
            scope): the compiler reports each name of a literal list that is not
            registered as ``unknown_tool`` with the nearest names, before anything runs.
            None: the tool takes no tool names.
        input_schema: the JSON Schema of the arguments, for a tool described by one rather
            than by a Python signature (an MCP server's tool, :mod:`plandag.tools.mcp`):
            the arguments are validated against it (``args_model`` is built from it by
            :func:`plandag.tools.schema_args.json_schema_args_model`), planners are shown
            it, and the function is called with the arguments as given. None: the
            signature's.
        schema_sha256: SHA-256 of what a plan's approval relies on for a tool defined
            outside the process (an MCP tool's name on its server, input and output
            schemas, effects): part of the plan's hash
            (:func:`plandag.approval.plan_hash`), so a tool that changes after a plan was
            approved no longer matches it. None for Python tools (their files' hashes are
            kept with the run).
        origin: where a tool that is not Python code comes from, in words (``MCP server
            weather (stdio: python weather.py)``), or None. Planners are shown the
            description and argument descriptions of such a tool as quoted data, never as
            instructions (ARCHITECTURE.md, "Untrusted content").
    """

    name: str
    description: str
    function: Callable[..., Any]
    args_model: type[BaseModel]
    result_type: Any
    effects: Effects = "none"
    idempotent: bool = True
    writes: WritesSpec = None
    timeout: float | None = None
    max_concurrency: int | None = None
    inline: bool = False
    takes_context: bool = False
    context_parameter: str | None = None
    cost_estimate_usd: float = 0.0
    tokens_estimate: int = 0
    egress: bool = False
    taint_source: bool = False
    reaches: str | None = None
    reads: str | None = None
    typical_seconds: float | None = None
    estimate: CostEstimator | None = None
    effects_of: EffectsOf | None = None
    names_tools: str | None = None
    input_schema: Mapping[str, Any] | None = None
    schema_sha256: str | None = None
    origin: str | None = None

    @functools.cached_property
    def is_async(self) -> bool:
        """True when the function is a coroutine function (runs on the event loop)."""
        return inspect.iscoroutinefunction(self.function)

    @functools.cached_property
    def _keyword_names(self) -> tuple[tuple[str, str], ...]:
        """``(model attribute, keyword argument)`` pairs, aliases resolved once."""
        return tuple(
            (name, field.alias or name) for name, field in self.args_model.model_fields.items()
        )

    @functools.cached_property
    def _keywords_are_names(self) -> bool:
        """True when every field is passed under its own name (no alias)."""
        return all(name == keyword for name, keyword in self._keyword_names)

    def json_schema(self) -> dict[str, Any]:
        """JSON Schema of the arguments, as shown to planners.

        An argument of a Python-only type (a parsed document passed by reference) appears
        as an unconstrained value whose description names the type. A tool described by a
        JSON Schema (``input_schema``) gives a copy of that schema.
        """
        if self.input_schema is not None:
            return copy.deepcopy(dict(self.input_schema))
        return self.args_model.model_json_schema(schema_generator=_LenientJsonSchema)

    def write_targets(self, args: Mapping[str, Any]) -> list[str]:
        """The write targets named by ``args`` (paths or URLs), as strings."""
        if self.writes is None:
            return []
        if isinstance(self.writes, str):
            value = args.get(self.writes)
            if value is None:
                return []
            if isinstance(value, list | tuple):
                return [str(item) for item in value]
            return [str(value)]
        return [str(target) for target in self.writes(args)]

    @functools.cached_property
    def _dict_validator(self) -> SchemaValidator | None:
        """The args model's field validators as one validator returning a plain dict
        (:func:`dict_validator`), or None when the model is not of that plain shape."""
        return dict_validator(self.args_model)

    def validate_args(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """Validate ``args`` against the args model; returns the coerced keyword arguments.

        A model of the plain shape :func:`dict_validator` accepts is validated without
        building a model instance (the same field validators, the same values); anything
        it refuses is validated again by the model itself, so that the error raised is the
        model's own. A tool described by a JSON Schema (``input_schema``) is validated
        against it and gets the arguments as given (no default filled in).

        Raises:
            pydantic.ValidationError: an argument is missing, unknown or of the wrong type.
        """
        data = args if type(args) is dict else dict(args)
        if self.input_schema is not None:  # validated against the JSON Schema, kept as given
            self.args_model.model_validate(data)
            return dict(data)
        fast = self._dict_validator
        if fast is not None:
            try:
                values: dict[str, Any] = fast.validate_python(data)
            except ValidationError:
                pass  # the model's own validation below raises the model's own error
            else:
                if self._keywords_are_names:
                    return values
                return {keyword: values[name] for name, keyword in self._keyword_names}
        model = self.args_model.model_validate(data)
        if self._keywords_are_names:
            return dict(model.__dict__)  # the fields' values, in order
        return {keyword: getattr(model, name) for name, keyword in self._keyword_names}

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the wrapped function directly (no validation, no thread): handy in tests."""
        return self.function(*args, **kwargs)

    async def invoke(self, args: Mapping[str, Any], ctx: ToolContext | None = None) -> Any:
        """Validate ``args`` and call the tool once, the way its declaration says.

        Async functions are awaited on the event loop; sync functions run in a worker
        thread unless ``inline``. A worker thread that outlives a cancelled call (a timeout)
        is abandoned: its late result is discarded. A call that blocked the event loop past
        the tool's timeout (inline or async code that never yields) cannot be interrupted,
        but its result is discarded all the same.

        Raises:
            pydantic.ValidationError: the arguments do not fit the args model.
            StepTimeoutError: the call blocked the event loop past the tool's timeout.
            PermanentStepError: reason ``tool_exit``, the tool raised ``SystemExit`` or
                ``KeyboardInterrupt``.
            Exception: whatever the tool raises.
        """
        if self.inline and not self.is_async:
            return self.invoke_inline(args, ctx)
        kwargs = self.validate_args(args)
        if self.context_parameter is not None:
            kwargs[self.context_parameter] = ctx or ToolContext(run_id="adhoc", step_id=0)
        timeout = self.timeout
        started = time.monotonic() if timeout is not None else 0.0  # read for a limit only
        try:
            if self.is_async:
                result = await self.function(**kwargs)
            else:
                return await run_in_daemon_thread(lambda: self.function(**kwargs))
        except (SystemExit, KeyboardInterrupt) as error:
            raise self._exit_error(error) from error
        if timeout is not None:
            self._check_blocked(started)
        return result

    def invoke_inline(self, args: Mapping[str, Any], ctx: ToolContext | None = None) -> Any:
        """:meth:`invoke` for an ``inline`` sync tool, called without an event loop turn:
        such a call never suspends, so awaiting it would change nothing.

        Raises:
            ValueError: the tool is not an inline sync tool.
            pydantic.ValidationError, StepTimeoutError, PermanentStepError, Exception: as
                :meth:`invoke`.
        """
        if not self.inline or self.is_async:
            raise ValueError(f"tool {self.name} is not an inline sync tool; await invoke()")
        kwargs = self.validate_args(args)
        if self.context_parameter is not None:
            kwargs[self.context_parameter] = ctx or ToolContext(run_id="adhoc", step_id=0)
        timeout = self.timeout
        started = time.monotonic() if timeout is not None else 0.0  # read for a limit only
        try:
            result = self.function(**kwargs)
        except (SystemExit, KeyboardInterrupt) as error:
            raise self._exit_error(error) from error
        if timeout is not None:
            self._check_blocked(started)
        return result

    def _exit_error(self, error: BaseException) -> PermanentStepError:
        """The failure of a tool whose own code raised ``SystemExit`` or
        ``KeyboardInterrupt`` (a signal from the user reaches the run as a cancellation,
        not as an exception inside a tool)."""
        return PermanentStepError(
            f"tool {self.name} raised {type(error).__name__}({error}); a tool must "
            "return or raise an Exception",
            reason="tool_exit",
        )

    def _check_blocked(self, started: float) -> None:
        """Raise when a call that ran on the event loop (``time.monotonic()`` at
        ``started``) outlasted the tool's timeout.

        Raises:
            StepTimeoutError: it did.
        """
        if self.timeout is not None and time.monotonic() - started > self.timeout:
            # Code that blocks the event loop (an inline tool, an async tool calling a
            # blocking function) cannot be interrupted; its late result is still discarded.
            raise StepTimeoutError(
                f"tool {self.name} blocked the event loop for "
                f"{time.monotonic() - started:.2f} s, past its timeout of {self.timeout:g} s; "
                "its result is discarded (blocking work belongs in a sync tool without "
                "inline=True, which runs in a thread)"
            )


_MODEL_KEYS = frozenset(
    {"type", "cls", "schema", "custom_init", "root_model", "config", "ref", "metadata"}
)
_MODEL_FIELDS_KEYS = frozenset({"type", "fields", "model_name", "computed_fields"})
_MODEL_FIELD_KEYS = frozenset(
    {
        "type",
        "schema",
        "validation_alias",
        "serialization_alias",
        "serialization_exclude",
        "metadata",
    }
)


def _pure(schema: Any) -> bool:
    """True when a core schema validates with no code of its own: no validator function,
    no default factory, no custom ``__init__`` or ``__post_init__`` anywhere in it (its
    ``metadata``, which only JSON Schema generation reads, is left out)."""
    if isinstance(schema, dict):
        if "function" in schema or "default_factory" in schema or "post_init" in schema:
            return False
        if schema.get("custom_init") is True:
            return False
        return all(_pure(value) for key, value in schema.items() if key not in ("metadata", "cls"))
    if isinstance(schema, list | tuple):
        return all(_pure(item) for item in schema)
    return True


def dict_validator(model: type[BaseModel]) -> SchemaValidator | None:
    """A validator that gives, for a dict, what ``model.model_validate`` gives as the
    fields' values (``model.__dict__``: every field by name, in the model's order, defaults
    filled in), as a plain dict, without building the model instance.

    It is built from the model's own core schema: the same field schemas, the same config
    (unknown keys refused when the model refuses them), as a ``typed-dict`` schema
    (pydantic-core's validator of dicts with known keys). Only for a model of the plain
    shape :func:`tool` builds from a signature: no model or field validator function, no
    default factory, no computed field, no custom ``__init__``, no root model; and no code
    of its own anywhere in its fields' schemas (:func:`_pure`), so that validating twice
    (again by the model, to raise its own error) is harmless.

    Args:
        model: a pydantic model class.

    Returns:
        A ``pydantic_core.SchemaValidator`` whose ``validate_python(dict)`` returns a dict,
        or None when ``model`` is not of that shape (validate with the model itself).
    """
    schema: Any = model.__pydantic_core_schema__
    if not isinstance(schema, dict) or schema.get("type") != "model":
        return None
    inner = schema.get("schema")
    if (
        not set(schema) <= _MODEL_KEYS
        or schema.get("custom_init")
        or schema.get("root_model")
        or not isinstance(inner, dict)
        or inner.get("type") != "model-fields"
        or not set(inner) <= _MODEL_FIELDS_KEYS
        or inner.get("computed_fields")
        or model.__pydantic_decorators__.model_validators
        or model.__pydantic_decorators__.field_validators
    ):
        return None
    fields: dict[str, core_schema.TypedDictField] = {}
    for name, field in inner["fields"].items():
        if field.get("type") != "model-field" or not set(field) <= _MODEL_FIELD_KEYS:
            return None
        field_schema = field["schema"]
        if not _pure(field_schema):
            return None
        fields[name] = core_schema.typed_dict_field(
            field_schema,
            required=field_schema.get("type") != "default",
            validation_alias=field.get("validation_alias"),
        )
    config: core_schema.CoreConfig | None = schema.get("config")
    try:
        return SchemaValidator(core_schema.typed_dict_schema(fields, config=config))
    except Exception:  # a schema pydantic-core takes in a model but not in a typed dict
        return None


def _shadows_model_attribute(name: str) -> bool:
    return name.startswith("model_") or hasattr(BaseModel, name)


async def run_in_daemon_thread(function: Callable[[], Any]) -> Any:
    """Call ``function()`` in a new daemon thread and wait for it without blocking the loop.

    The thread runs in a copy of the caller's context variables (the current trace span
    among them), as ``anyio.to_thread.run_sync`` does. The wait is cancellable: a
    cancelled caller (a step's timeout, the run's deadline, Ctrl-C) stops waiting at once
    and the thread is abandoned, its late result discarded.
    Daemon threads matter here: a blocking tool that never returns must not keep the
    process alive after the run has ended (a non-daemon worker thread would be joined at
    interpreter exit). The number of such threads waited on at once is bounded by anyio's
    default thread limiter (40).

    Returns:
        What ``function`` returned.

    Raises:
        Exception: whatever ``function`` raised.
    """
    token = anyio.lowlevel.current_token()
    done = anyio.Event()
    outcome: list[tuple[bool, Any]] = []

    def target() -> None:
        try:
            outcome.append((True, function()))
        except BaseException as error:  # handed back to the waiting task
            outcome.append((False, error))
        try:
            anyio.from_thread.run_sync(done.set, token=token)
        except Exception:  # the loop has closed: nobody waits for this result any more
            return

    # the thread runs in a copy of the caller's context: the step's trace span stays the
    # current span there, so a tool's own spans (and its SDK calls') nest under the step
    context = contextvars.copy_context()
    async with anyio.to_thread.current_default_thread_limiter():
        threading.Thread(
            target=context.run, args=(target,), name="plandag tool", daemon=True
        ).start()
        await done.wait()
    succeeded, value = outcome[0]
    if succeeded:
        return value
    raise value


def _first_paragraph(doc: str | None) -> str:
    if not doc:
        return ""
    return inspect.cleandoc(doc).split("\n\n", 1)[0].replace("\n", " ").strip()


def _build_tool(
    function: Callable[..., Any],
    *,
    name: str | None,
    description: str | None,
    effects: Effects,
    idempotent: bool | None,
    writes: WritesSpec,
    timeout: float | None,
    max_concurrency: int | None,
    inline: bool,
    cost_estimate_usd: float = 0.0,
    tokens_estimate: int = 0,
    egress: bool = False,
    taint_source: bool = False,
    reaches: str | None = None,
    reads: str | None = None,
    typical_seconds: float | None = None,
    estimate: CostEstimator | None = None,
    effects_of: EffectsOf | None = None,
    names_tools: str | None = None,
) -> Tool:
    if isinstance(function, Tool):
        raise ToolDefinitionError(f"{function.name} is already a tool; apply @tool once")
    if not callable(function):
        raise ToolDefinitionError(f"@tool needs a function, got {type(function).__name__}")
    tool_name: str = name or str(getattr(function, "__name__", ""))
    if not tool_name.isidentifier():
        raise ToolDefinitionError(f"tool name {tool_name!r} must be a Python identifier")
    if effects not in ("none", "write", "irreversible"):
        raise ToolDefinitionError(
            f"tool {tool_name}: effects must be 'none', 'write' or 'irreversible', not {effects!r}"
        )
    if timeout is not None and timeout <= 0:
        raise ToolDefinitionError(f"tool {tool_name}: timeout must be > 0 seconds")
    if max_concurrency is not None and max_concurrency < 1:
        raise ToolDefinitionError(f"tool {tool_name}: max_concurrency must be >= 1")
    if not math.isfinite(cost_estimate_usd) or cost_estimate_usd < 0:
        raise ToolDefinitionError(
            f"tool {tool_name}: cost_estimate_usd must be a finite number of US dollars >= 0"
        )
    if tokens_estimate < 0:
        raise ToolDefinitionError(f"tool {tool_name}: tokens_estimate must be >= 0")
    if typical_seconds is not None and (
        isinstance(typical_seconds, bool)
        or not isinstance(typical_seconds, int | float)
        or not math.isfinite(typical_seconds)
        or typical_seconds < 0
    ):
        raise ToolDefinitionError(
            f"tool {tool_name}: typical_seconds must be a finite number of seconds >= 0 or "
            f"None, not {typical_seconds!r}"
        )
    try:
        hints = typing.get_type_hints(function, include_extras=True)
    except Exception as error:  # unresolvable forward references and the like
        raise ToolDefinitionError(
            f"tool {tool_name}: cannot read its type hints ({error})"
        ) from error
    signature = inspect.signature(function)
    fields: dict[str, Any] = {}
    argument_names: list[str] = []
    context_parameter: str | None = None
    for parameter in signature.parameters.values():
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            raise ToolDefinitionError(
                f"tool {tool_name}: *args and **kwargs are not allowed; name every argument"
            )
        if parameter.kind is parameter.POSITIONAL_ONLY:
            raise ToolDefinitionError(
                f"tool {tool_name}: argument {parameter.name!r} is positional-only; plans "
                "pass arguments by name, so remove the '/'"
            )
        annotation = hints.get(parameter.name, inspect.Parameter.empty)
        if annotation is ToolContext or annotation == ToolContext | None:
            context_parameter = parameter.name
            continue
        if annotation is inspect.Parameter.empty:
            raise ToolDefinitionError(
                f"tool {tool_name}: argument {parameter.name!r} has no type hint; "
                "add one so plans can be checked against it"
            )
        argument_names.append(parameter.name)
        default = ... if parameter.default is inspect.Parameter.empty else parameter.default
        if _shadows_model_attribute(parameter.name):
            # A field named like a BaseModel attribute (json, copy, model_config...) would
            # shadow it; store it under another name and keep the argument's name as alias.
            fields[f"{parameter.name}_argument"] = (
                annotation,
                Field(default=default, alias=parameter.name),
            )
        else:
            fields[parameter.name] = (annotation, Field(default=default))
    if writes is not None and isinstance(writes, str) and writes not in argument_names:
        raise ToolDefinitionError(
            f"tool {tool_name}: writes={writes!r} names no argument of the tool"
        )
    for option, value in (("reaches", reaches), ("reads", reads)):
        if value is not None and value not in argument_names:
            raise ToolDefinitionError(
                f"tool {tool_name}: {option}={value!r} names no argument of the tool"
            )
    if reaches is not None and not egress:
        raise ToolDefinitionError(
            f"tool {tool_name}: reaches={reaches!r} needs egress=True (a tool that requests "
            "a URL sends data out)"
        )
    try:
        args_model = create_model(f"{tool_name}_args", __base__=_ArgsBase, **fields)
    except Exception as error:  # pydantic cannot build a validator for an annotation
        raise ToolDefinitionError(
            f"tool {tool_name}: its argument types cannot be validated ({error}); use JSON-like "
            "types (str, int, float, bool, list, dict, TypedDict, pydantic models)"
        ) from error
    if names_tools is not None and names_tools not in args_model.model_fields:
        raise ToolDefinitionError(
            f"tool {tool_name}: names_tools={names_tools!r} is not one of its arguments; name "
            "the argument holding the list of tool names"
        )
    if inline and inspect.iscoroutinefunction(function):
        raise ToolDefinitionError(f"tool {tool_name}: inline=True is for sync functions only")
    return Tool(
        name=tool_name,
        description=description if description is not None else _first_paragraph(function.__doc__),
        function=function,
        args_model=args_model,
        result_type=hints.get("return", Any),
        effects=effects,
        idempotent=(effects == "none") if idempotent is None else idempotent,
        writes=writes,
        timeout=timeout,
        max_concurrency=max_concurrency,
        inline=inline,
        takes_context=context_parameter is not None,
        context_parameter=context_parameter,
        cost_estimate_usd=float(cost_estimate_usd),
        tokens_estimate=tokens_estimate,
        egress=egress,
        taint_source=taint_source,
        reaches=reaches,
        reads=reads,
        typical_seconds=float(typical_seconds) if typical_seconds is not None else None,
        estimate=estimate,
        effects_of=effects_of,
        names_tools=names_tools,
    )


def bind_effects(tool: Tool, args: Mapping[str, Any], tools: Mapping[str, Tool]) -> Tool:
    """``tool`` as one step with ``args`` uses it: itself, or, for a tool with
    ``effects_of``, a copy with that step's effects (not idempotent when it has any) when they
    are more than its own.

    Args:
        tool: the registered tool.
        args: the step's arguments as the plan writes them.
        tools: the registered tools by name.

    Returns:
        The :class:`Tool` to bind the step to.
    """
    if tool.effects_of is None:
        return tool
    effects = tool.effects_of(args, tools)
    if EFFECTS_ORDER.index(effects) <= EFFECTS_ORDER.index(tool.effects):
        return tool
    return dataclasses.replace(tool, effects=effects, idempotent=False)


@overload
def tool(function: Callable[..., Any], /) -> Tool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    effects: Effects = "none",
    idempotent: bool | None = None,
    writes: WritesSpec = None,
    timeout: float | None = None,
    max_concurrency: int | None = None,
    inline: bool = False,
    cost_estimate_usd: float = 0.0,
    tokens_estimate: int = 0,
    egress: bool = False,
    taint_source: bool = False,
    reaches: str | None = None,
    reads: str | None = None,
    typical_seconds: float | None = None,
    estimate: CostEstimator | None = None,
    effects_of: EffectsOf | None = None,
    names_tools: str | None = None,
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    function: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    effects: Effects = "none",
    idempotent: bool | None = None,
    writes: WritesSpec = None,
    timeout: float | None = None,
    max_concurrency: int | None = None,
    inline: bool = False,
    cost_estimate_usd: float = 0.0,
    tokens_estimate: int = 0,
    egress: bool = False,
    taint_source: bool = False,
    reaches: str | None = None,
    reads: str | None = None,
    typical_seconds: float | None = None,
    estimate: CostEstimator | None = None,
    effects_of: EffectsOf | None = None,
    names_tools: str | None = None,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Declare a typed function as a plan tool; usable bare (``@tool``) or with options.

    Args:
        function: the function, when used bare.
        name: the tool's name in plans (default: the function's name).
        description: shown to planners (default: the docstring's first paragraph).
        effects: ``"none"`` (reads only), ``"write"`` or ``"irreversible"``.
        idempotent: repeating the call is harmless; default true for ``effects="none"``.
        writes: the argument naming the write target, or a function of the arguments
            returning targets; the write boundary is checked on them.
        timeout: seconds per attempt, counted from the attempt's start.
        max_concurrency: at most this many calls of this tool at once.
        inline: run a sync function on the event loop (only for cheap, non-blocking work).
        cost_estimate_usd: estimated US dollars per call, reserved before each attempt in a
            run with a cost cap (``run_plan(limits=RunLimits(max_cost_usd=...))``).
        tokens_estimate: estimated tokens per call, reserved likewise under a token cap.
        egress: the tool sends data out (HTTP to any host, mail): a step whose arguments
            carry tainted data needs approval even without other effects, and a read-only
            run refuses it (diagnostic ``tainted_egress``).
        taint_source: the tool's results come from outside and are tainted.
        reaches: the argument holding the URL the tool requests (needs ``egress``); a
            literal URL there adds its host to the hosts the plan lists.
        reads: the argument holding the local file the tool reads (a ``taint_source``
            reading back a file this run wrote from untainted data gives untainted data).
        typical_seconds: seconds one call typically takes (None: not declared). A plan's
            time estimate is the critical path of these figures, and a run may take 3x its
            estimate before it stops and escalates (``plan_time_factor``); the median
            duration of the tool's latest 1,000 succeeded steps in the run store replaces
            the figure once the tool has succeeded in 5 runs. A plan with a step whose tool
            has neither has an unknown time estimate, and only the absolute caps apply to it.
        estimate: ``estimate(args) -> (usd, tokens)``, what one call with the step's
            arguments may cost (usd None for an unpriced model); a plan's estimate uses it
            instead of the fixed figures. A tool whose cost depends on its arguments also
            reserves it per call at run time with :meth:`ToolContext.reserve`.
        effects_of: ``effects_of(args, tools) -> effects``, a step's effects when they
            depend on its arguments (:func:`bind_effects`); the tool reads what was bound in
            ``ctx.effects``.
        names_tools: the argument holding a list of tool names (an agent's scope); each
            name of a literal list must be registered, else the plan does not compile
            (``unknown_tool``, hint: the nearest names).

    Returns:
        A :class:`Tool` (bare use) or a decorator that returns one.

    Raises:
        ToolDefinitionError: an argument without a type hint, ``*args``, a bad option.
    """

    def decorate(inner: Callable[..., Any]) -> Tool:
        return _build_tool(
            inner,
            name=name,
            description=description,
            effects=effects,
            idempotent=idempotent,
            writes=writes,
            timeout=timeout,
            max_concurrency=max_concurrency,
            inline=inline,
            cost_estimate_usd=cost_estimate_usd,
            tokens_estimate=tokens_estimate,
            egress=egress,
            taint_source=taint_source,
            reaches=reaches,
            reads=reads,
            typical_seconds=typical_seconds,
            estimate=estimate,
            effects_of=effects_of,
            names_tools=names_tools,
        )

    if function is not None:
        return decorate(function)
    return decorate

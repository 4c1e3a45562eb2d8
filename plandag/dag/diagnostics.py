"""Diagnostics: what the compiler reports about a plan, with stable codes users and
replanners key on. In the lowest layer, beside the plan's models, so that the error
hierarchy (:class:`plandag.errors.PlanError`) names them without importing the compiler.

Every code, its severity and meaning (also listed in docs/plan-format.md):

=========================  ========  ======================================================
code                       severity  meaning
=========================  ========  ======================================================
invalid_json               error     the plan text is not JSON (or not UTF-8, or holds
                                     an integer past Python's 4300-digit limit)
invalid_schema             error     the plan does not fit the Plan schema (field, why),
                                     or nests more than 200 levels deep
invalid_json_text          error     a model's plan holds a JSON-text wrapper
                                     (``{"json": "..."}``) whose text is not JSON (the
                                     wire reader's, :mod:`plandag.planner.wire`)
duplicate_step_id          error     two steps share an id
too_many_steps             error     more steps than the run allows (``max_steps``)
args_too_large             error     a step's arguments exceed ``max_arg_bytes`` as JSON
unknown_tool               error     the tool is not registered (hint: nearest names)
invalid_args               error     the args fail the tool's schema (which field, why)
unknown_check              error     a check kind is not registered (hint: nearest names)
invalid_check_args         error     a check's fields fail its schema
unknown_dependency         error     ``depends_on`` names a step that does not exist
self_dependency            error     a step depends on itself
duplicate_dependency       error     ``depends_on`` lists the same id twice
cycle                      error     the dependencies form a cycle (its steps, in order)
malformed_reference        error     an angle reference does not fit the grammar (hint:
                                     the nearest valid spelling)
reference_to_missing_step  error     ``<step_N_result>`` names no step of the plan
unknown_param              error     ``<param.NAME>`` names no declared param, or a value
                                     was given for an undeclared param
missing_param              error     a required param was not given a value
invalid_param_value        error     a param value does not fit its declared type
invalid_reference_path     error     the path cannot exist in the referenced tool's
                                     declared result type
implied_dependency         warning   a reference implies an edge missing from
                                     ``depends_on``; the edge is added
check_attached             warning   a check an application requires on the step (its
                                     ``required_on`` rule) was left out; it is attached
effects_in_read_only       error     a tool with effects in a read-only run
write_outside_boundary     error     a literal write target lies outside the boundary
tainted_egress             error     a read-only run (which never asks) has a step that
                                     sends tainted data out: an ``egress`` tool (HTTP to
                                     any host, mail) whose args carry outside content
host_not_allowed           error     a read-only run names a host that the configured
                                     HTTP allow-list (``http_allow``) does not list
integer_out_of_range       error     an integer outside ±(2^53 - 1), which the plan's hash
                                     (RFC 8785) cannot encode exactly (JSON path given)
lone_surrogate             error     a string or key holds a lone UTF-16 surrogate
                                     (``"\\ud800"``), which is not Unicode text (JSON path)
diagnostics_omitted        error     more diagnostics than are listed (the first 100):
                                     how many more, errors and warnings, by code
warnings_omitted           warning   more warnings than are listed, in a plan that
                                     compiles: how many more, by code
=========================  ========  ======================================================
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Callable
from typing import Literal

from plandag.dag.limits import MAX_DIAGNOSTICS

__all__ = [
    "DIAGNOSTIC_CODES",
    "OUT_OF_REGISTRY_CODES",
    "Diagnostic",
    "DiagnosticCollector",
    "Severity",
    "printable",
]

Severity = Literal["error", "warning"]

DIAGNOSTIC_CODES: dict[str, Severity] = {
    "invalid_json": "error",
    "invalid_schema": "error",
    "invalid_json_text": "error",
    "duplicate_step_id": "error",
    "too_many_steps": "error",
    "args_too_large": "error",
    "unknown_tool": "error",
    "invalid_args": "error",
    "unknown_check": "error",
    "invalid_check_args": "error",
    "unknown_dependency": "error",
    "self_dependency": "error",
    "duplicate_dependency": "error",
    "cycle": "error",
    "malformed_reference": "error",
    "reference_to_missing_step": "error",
    "unknown_param": "error",
    "missing_param": "error",
    "invalid_param_value": "error",
    "invalid_reference_path": "error",
    "implied_dependency": "warning",
    "check_attached": "warning",
    "effects_in_read_only": "error",
    "write_outside_boundary": "error",
    "tainted_egress": "error",
    "host_not_allowed": "error",
    "integer_out_of_range": "error",
    "lone_surrogate": "error",
    "diagnostics_omitted": "error",
    "warnings_omitted": "warning",
}

OUT_OF_REGISTRY_CODES = frozenset({"unknown_tool", "unknown_check"})
"""The codes of a plan that names a tool or a check kind the registry does not have: on a
model's plan, an out-of-registry alert (docs/operations.md)."""


def printable(text: str) -> str:
    """``text`` with every lone UTF-16 surrogate written as its escape (``\\ud800``).

    A surrogate code point is not Unicode text: no UTF-8 stream can print it. Every other
    character is kept as it is.
    """
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


@dataclasses.dataclass(frozen=True, slots=True)
class Diagnostic:
    """One problem found in a plan.

    Attributes:
        code: a stable code from :data:`DIAGNOSTIC_CODES`.
        severity: ``"error"`` (the plan does not compile) or ``"warning"``.
        step_id: the step concerned, or None for plan-level problems.
        message: what is wrong and where (field, reference), in one sentence.
        hint: what to do about it (nearest names, the valid spelling), or "".
    """

    code: str
    severity: Severity
    step_id: int | None
    message: str
    hint: str = ""

    def __post_init__(self) -> None:
        # Messages quote the plan (keys, names, tokens): a lone surrogate quoted as it is
        # would make every printer of the diagnostic fail, so it is kept as its escape.
        object.__setattr__(self, "message", printable(self.message))
        object.__setattr__(self, "hint", printable(self.hint))

    def format(self) -> str:
        """One line like a compiler's: ``step 3: error[unknown_tool]: ... (hint: ...)``."""
        where = f"step {self.step_id}" if self.step_id is not None else "plan"
        hint = f" (hint: {self.hint})" if self.hint else ""
        return f"{where}: {self.severity}[{self.code}]: {self.message}{hint}"

    def as_dict(self) -> dict[str, object]:
        """``{code, severity, step_id, message, hint}`` for ``--json`` output."""
        return dataclasses.asdict(self)


Text = str | Callable[[], str]
"""A message or hint, or a function that makes it: called only for a diagnostic that is
listed, so the cost of a long hint (the existing ids, the nearest names) is paid at most
:data:`~plandag.dag.limits.MAX_DIAGNOSTICS` times."""


class DiagnosticCollector:
    """The diagnostics of one compilation, in the order found, the first ``limit`` listed.

    Past ``limit``, diagnostics are only counted (by code and severity) and
    :attr:`items` ends with one summary: ``diagnostics_omitted`` (an error) when the plan
    has any error, listed or not; else ``warnings_omitted`` (a warning, the plan still
    compiles). A hostile plan (10,000 copies of one id, a megabyte of malformed references)
    thus gets a report of bounded size, made in time linear in the plan.

    Args:
        limit: how many diagnostics to list (>= 1; default
            :data:`~plandag.dag.limits.MAX_DIAGNOSTICS`, 100).
    """

    def __init__(self, limit: int = MAX_DIAGNOSTICS) -> None:
        self.limit = max(1, limit)
        self._listed: list[Diagnostic] = []
        self._errors = 0
        self._omitted: collections.Counter[str] = collections.Counter()
        self._omitted_errors = 0

    def add(self, code: str, step_id: int | None, message: Text, hint: Text = "") -> None:
        """Record one diagnostic of ``code`` (a key of :data:`DIAGNOSTIC_CODES`)."""
        severity = DIAGNOSTIC_CODES[code]
        if severity == "error":
            self._errors += 1
        if len(self._listed) >= self.limit:
            self._omitted[code] += 1
            if severity == "error":
                self._omitted_errors += 1
            return
        self._listed.append(
            Diagnostic(
                code,
                severity,
                step_id,
                message if isinstance(message, str) else message(),
                hint if isinstance(hint, str) else hint(),
            )
        )

    def count(self, code: str, number: int) -> None:
        """Record ``number`` diagnostics of ``code`` past the limit: counted, not listed
        (for a pass that finds the collector :attr:`full` and only counts the rest)."""
        if number <= 0:
            return
        if not self.full:
            raise RuntimeError("count() is for diagnostics past the limit; use add()")
        self._omitted[code] += number
        if DIAGNOSTIC_CODES[code] == "error":
            self._errors += number
            self._omitted_errors += number

    @property
    def full(self) -> bool:
        """True once ``limit`` diagnostics are listed: later ones are only counted."""
        return len(self._listed) >= self.limit

    @property
    def has_errors(self) -> bool:
        """True when any error was found, listed or not."""
        return self._errors > 0

    @property
    def error_count(self) -> int:
        """Every error found, listed or not (the summary diagnostic not counted)."""
        return self._errors

    @property
    def omitted_errors(self) -> int:
        """The errors found past the limit, counted but not listed."""
        return self._omitted_errors

    @property
    def items(self) -> list[Diagnostic]:
        """The listed diagnostics, then the summary of the rest when any were omitted."""
        if not self._omitted:
            return list(self._listed)
        total = sum(self._omitted.values())
        warnings = total - self._omitted_errors
        by_code = ", ".join(f"{code} {count}" for code, count in sorted(self._omitted.items()))
        code = "diagnostics_omitted" if self.has_errors else "warnings_omitted"
        summary = Diagnostic(
            code,
            DIAGNOSTIC_CODES[code],
            None,
            f"{total} more diagnostic(s) found and not listed ({self._omitted_errors} "
            f"error(s), {warnings} warning(s); by code: {by_code}); the first "
            f"{self.limit} are listed",
            "fix the ones listed and compile again: the rest often share their cause",
        )
        return [*self._listed, summary]

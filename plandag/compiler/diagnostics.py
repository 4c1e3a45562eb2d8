"""Diagnostics: what the compiler reports, with stable codes users and replanners key on.

Every code, its severity and meaning (also listed in the README):

=========================  ========  ======================================================
code                       severity  meaning
=========================  ========  ======================================================
invalid_json               error     the plan text is not JSON (or not UTF-8, or holds
                                     an integer past Python's 4300-digit limit)
invalid_schema             error     the plan does not fit the Plan schema (field, why),
                                     or nests more than 200 levels deep
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
effects_in_read_only       error     a tool with effects in a read-only run
write_outside_boundary     error     a literal write target lies outside the boundary
tainted_egress             error     a read-only run (which never asks) has a step that
                                     sends tainted data out: an ``egress`` tool (HTTP to
                                     any host, mail) whose args carry outside content
host_not_allowed           error     a read-only run names a host that the configured
                                     HTTP allow-list (``http_allow``) does not list
=========================  ========  ======================================================
"""

from __future__ import annotations

import dataclasses
from typing import Literal

__all__ = ["DIAGNOSTIC_CODES", "Diagnostic", "Severity"]

Severity = Literal["error", "warning"]

DIAGNOSTIC_CODES: dict[str, Severity] = {
    "invalid_json": "error",
    "invalid_schema": "error",
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
    "effects_in_read_only": "error",
    "write_outside_boundary": "error",
    "tainted_egress": "error",
    "host_not_allowed": "error",
}


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

    def format(self) -> str:
        """One line like a compiler's: ``step 3: error[unknown_tool]: ... (hint: ...)``."""
        where = f"step {self.step_id}" if self.step_id is not None else "plan"
        hint = f" (hint: {self.hint})" if self.hint else ""
        return f"{where}: {self.severity}[{self.code}]: {self.message}{hint}"

    def as_dict(self) -> dict[str, object]:
        """``{code, severity, step_id, message, hint}`` for ``--json`` output."""
        return dataclasses.asdict(self)

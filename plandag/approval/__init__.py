"""Approval of plans with effects, bound to the plan's hash (issue 6; see
:mod:`plandag.approval.gate`)."""

from plandag.approval.gate import (
    DEFAULT_EXPIRY_S,
    ApprovalMode,
    ApprovalRequest,
    Approver,
    CallbackApprover,
    Decision,
    InvalidDecisionError,
    StaleDecisionError,
    TerminalApprover,
    approval_needed,
    approval_reason,
    boundary_spec,
    compiled_plan_hash,
    current_user,
    plan_hash,
    tainted_egress_steps,
)

__all__ = [
    "DEFAULT_EXPIRY_S",
    "ApprovalMode",
    "ApprovalRequest",
    "Approver",
    "CallbackApprover",
    "Decision",
    "InvalidDecisionError",
    "StaleDecisionError",
    "TerminalApprover",
    "approval_needed",
    "approval_reason",
    "boundary_spec",
    "compiled_plan_hash",
    "current_user",
    "plan_hash",
    "tainted_egress_steps",
]

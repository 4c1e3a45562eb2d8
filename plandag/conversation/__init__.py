"""Conversations and their plan mode (docs/durable-runs.md, "Plan mode for conversations").

:class:`Conversation` (in :mod:`plandag.conversation.model`, where the rules are written
out), persisted by :class:`ConversationStore`; :func:`plan_turn` and
:func:`render_for_decision` in :mod:`plandag.conversation.planmode`.
"""

from plandag.conversation.agent import (
    ConversationPlanner,
    PlannerFactory,
    conversation_context,
    planner_factory,
    planner_function,
    recording_investigations,
)
from plandag.conversation.model import (
    DEFAULT_EXPIRY_S,
    ORIGINS,
    Conversation,
    ConversationError,
    EndReason,
    Mode,
    Origin,
    PendingDecision,
    PlanModeDecision,
    PlanModeError,
    StaleDecisionError,
    Turn,
    TurnKind,
    TurnWriter,
    allowed_registry,
    check_tool_allowed,
)
from plandag.conversation.planmode import (
    PlannerFunction,
    Shown,
    cut_notice,
    plan_turn,
    render_for_decision,
)
from plandag.conversation.store import ConversationStore, ConversationSummary

__all__ = [
    "DEFAULT_EXPIRY_S",
    "ORIGINS",
    "Conversation",
    "ConversationError",
    "ConversationPlanner",
    "ConversationStore",
    "ConversationSummary",
    "EndReason",
    "Mode",
    "Origin",
    "PendingDecision",
    "PlanModeDecision",
    "PlanModeError",
    "PlannerFactory",
    "PlannerFunction",
    "Shown",
    "StaleDecisionError",
    "Turn",
    "TurnKind",
    "TurnWriter",
    "allowed_registry",
    "check_tool_allowed",
    "conversation_context",
    "cut_notice",
    "plan_turn",
    "planner_factory",
    "planner_function",
    "recording_investigations",
    "render_for_decision",
]

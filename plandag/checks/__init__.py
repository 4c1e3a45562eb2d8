"""Success checks: structured facts evaluated in code after a step returns.

``check`` declares a check kind; ``BUILTIN_CHECKS`` lists the built-in kinds (``not_empty``,
``equals``, ``regex``, ``jmespath``, ``file_exists``, ``tolerance``).
"""

from plandag.checks.base import CheckDefinition as CheckDefinition
from plandag.checks.base import CheckOutcome as CheckOutcome
from plandag.checks.base import CheckStatus as CheckStatus
from plandag.checks.base import check as check
from plandag.checks.builtins import BUILTIN_CHECKS as BUILTIN_CHECKS

__all__ = ["BUILTIN_CHECKS", "CheckDefinition", "CheckOutcome", "CheckStatus", "check"]

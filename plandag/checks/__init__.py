"""Success checks: structured facts evaluated in code after a step returns.

``check`` declares a check kind; ``BUILTIN_CHECKS`` lists the built-in kinds (``not_empty``,
``equals``, ``regex``, ``jmespath``, ``file_exists``, ``tolerance``).
"""

import typing as _typing

from plandag.lazy import lazy_exports as _lazy_exports

if _typing.TYPE_CHECKING:
    from plandag.checks.base import CheckDefinition as CheckDefinition
    from plandag.checks.base import CheckOutcome as CheckOutcome
    from plandag.checks.base import CheckStatus as CheckStatus
    from plandag.checks.base import check as check
    from plandag.checks.builtins import BUILTIN_CHECKS as BUILTIN_CHECKS

__all__ = ["BUILTIN_CHECKS", "CheckDefinition", "CheckOutcome", "CheckStatus", "check"]

if not _typing.TYPE_CHECKING:
    __getattr__, __dir__ = _lazy_exports(
        __name__,
        {
            "CheckDefinition": ("plandag.checks.base", "CheckDefinition"),
            "CheckOutcome": ("plandag.checks.base", "CheckOutcome"),
            "CheckStatus": ("plandag.checks.base", "CheckStatus"),
            "check": ("plandag.checks.base", "check"),
            "BUILTIN_CHECKS": ("plandag.checks.builtins", "BUILTIN_CHECKS"),
        },
    )

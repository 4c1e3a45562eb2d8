"""A plan's limits, which the compiler holds it to: how large a plan may be, and how much
the compiler reports about it.

In the lowest layer, beside the plan's models, so that the configuration
(:mod:`plandag.config`) can name the defaults without importing the compiler.
"""

from __future__ import annotations

__all__ = [
    "DEFAULT_MAX_ARG_BYTES",
    "DEFAULT_MAX_PLAN_BYTES",
    "DEFAULT_MAX_STEPS",
    "MAX_DIAGNOSTICS",
    "MAX_NESTING",
]

DEFAULT_MAX_STEPS = 500
"""The most steps a plan (a run, with its replans) may have unless the run sets another
limit (``--max-steps``, config ``max_steps``, ``compile_plan(max_steps=...)``)."""

DEFAULT_MAX_PLAN_BYTES = 16 * 1024 * 1024
"""The largest plan file, in bytes, that ``check``, ``graph`` and ``exec`` read unless told
otherwise (``--max-plan-bytes``, config ``max_plan_bytes``): 16 MiB, about 30 times a plan
of the 500 steps :data:`DEFAULT_MAX_STEPS` allows with 1 KB of args each."""

DEFAULT_MAX_ARG_BYTES = 1_000_000
"""The most bytes a step's args may take as JSON."""

MAX_NESTING = 200
"""The deepest nesting of dicts and lists a plan may have (the compiler walks it recursively)."""

MAX_DIAGNOSTICS = 100
"""The most diagnostics one compilation lists; the rest are counted in one summary
diagnostic (``diagnostics_omitted`` or ``warnings_omitted``), so a hostile plan cannot make
the compiler's report (and its printing) grow without bound."""

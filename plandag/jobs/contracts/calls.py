"""At most N model calls of a contracts batch at once, whatever the contracts and chunks.

A batch runs ``jobs`` contracts at once and each contract's plan runs its ``llm`` steps in
parallel (chunks × field groups: 5 for a short CUAD contract, 170 for a 300-page one), so
without a bound a batch of long contracts would send hundreds of requests at once and meet
the provider's rate limits. The batch's model access has ``call_slots`` (an
:class:`anyio.CapacityLimiter` shared by every contract's run,
:class:`plandag.executors.ModelAccess`): each model call of an ``llm`` step takes one before
it reserves on the batch's budget and holds it until it has settled, so the calls waiting
for a slot hold nothing and cannot make the caps refuse calls that would fit.

By default the batch has :func:`default_model_calls` slots: one call per field group for
each of the ``jobs`` contracts at once, so that every contract of one chunk has all of its
calls in flight together (with fewer, the last contract to start waits for a slot and takes
two reply times instead of one).
"""

from __future__ import annotations

from collections.abc import Sequence

from plandag.jobs.contracts.fields import FieldSpec, field_groups

__all__ = ["default_model_calls"]


def default_model_calls(jobs: int, fields: Sequence[FieldSpec]) -> int:
    """Model calls of one batch at once by default (``--max-model-calls``): ``jobs`` × the
    field groups of ``fields`` (20 for the 41 CUAD fields, 5 groups, with ``--jobs 4``),
    at least 1.

    Args:
        jobs: contracts extracted at once (>= 1).
        fields: the batch's fields.
    """
    return max(1, jobs * len(field_groups(fields)))

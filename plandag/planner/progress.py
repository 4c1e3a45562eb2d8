"""Replans without progress, counted per failed subgraph (ARCHITECTURE.md, "Replanning").

A run replans at most ``max_replans`` times in all (3, counted elsewhere) and at most
``max_replans_without_progress`` times in a row without progress (2). The second cap is
counted per **subgraph**, so that two independent branches that each fail once do not use
up each other's count:

* the subgraph of a failure is the failed step (failed, cancelled, or skipped and left to
  a replan) and its descendants at the time of the failure: the part of the plan the
  failure stops;
* the failures one replan covers are replaced by one patch, so their subgraphs are one
  subgraph from then on, and the patch's new steps join it: a replacement that fails in
  turn is the same subgraph failing again;
* two failures whose subgraphs share a step share one count: their subgraphs merge, and
  the merged count is the larger of theirs;
* **progress** is a step of the subgraph that newly succeeded since the subgraph's last
  replan; it resets that subgraph's count only (a step succeeding in another branch says
  nothing about this one);
* a replan the joiner asks for (every step succeeded, the answer is not there yet) covers
  the whole live plan: its subgraph is every step not superseded.

:class:`ProgressLedger` keeps the subgraphs of one run. Before each counted replan,
:meth:`ProgressLedger.count` says the count of the subgraph it would cover (a count at the
cap stops the replans); after it, :meth:`ProgressLedger.replanned` merges the failures it
covered into their subgraph, updates the count (0 after progress, one more without) and
adds the patch's new steps. A replan for a person's instruction does not count:
:meth:`ProgressLedger.joined` only adds its new steps to the subgraph of the steps it
replaced.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable

import networkx as nx

from plandag.scheduler.session import SessionState

__all__ = ["ProgressLedger", "Subgraph", "failure_subgraph"]


@dataclasses.dataclass
class Subgraph:
    """The steps of one failed part of a run and its count of replans without progress.

    Attributes:
        steps: the failed steps, their descendants at the time of each failure, and the
            steps the patches that replaced them added.
        without_progress: replans of this subgraph in a row with no step of it newly
            succeeded in between (0 after its first replan).
        succeeded: the steps of it that had succeeded at its last replan.
        replans: how many replans covered it.
    """

    steps: set[int]
    without_progress: int = 0
    succeeded: set[int] = dataclasses.field(default_factory=set)
    replans: int = 0


def failure_subgraph(graph: nx.DiGraph, state: SessionState) -> set[int]:
    """The steps a replan of ``state`` covers: every step that needs a replan with its
    descendants, or, when none does (the joiner asked), every step not superseded.

    Args:
        graph: the run's dependency graph (step ids, edges parent → child).
        state: where the run stands.

    Returns:
        The step ids.
    """
    failed = state.needs_replan
    if not failed:
        superseded = set(state.superseded)
        return {int(node) for node in graph.nodes if node not in superseded}
    covered: set[int] = set()
    for step_id in failed:
        if step_id in covered:
            continue
        covered.add(step_id)
        if step_id in graph:
            covered.update(int(node) for node in nx.descendants(graph, step_id))
    return covered


class ProgressLedger:
    """The subgraphs of one run's failures and their counts (module docstring).

    Args:
        max_without_progress: replans in a row without progress that stop a subgraph
            (>= 1; ``max_replans_without_progress``).

    Raises:
        ValueError: ``max_without_progress`` < 1.
    """

    def __init__(self, max_without_progress: int) -> None:
        if max_without_progress < 1:
            raise ValueError(
                f"max_replans_without_progress must be >= 1, not {max_without_progress}"
            )
        self.max_without_progress = max_without_progress
        self.subgraphs: list[Subgraph] = []

    def _merge(self, steps: set[int]) -> tuple[Subgraph, list[Subgraph]]:
        """Replace every known subgraph that shares a step with ``steps`` by one subgraph
        holding them all (the larger count, the succeeded steps and replans of each).
        Returns the merged subgraph and the subgraphs it took in."""
        found = [item for item in self.subgraphs if not item.steps.isdisjoint(steps)]
        self.subgraphs = [item for item in self.subgraphs if all(item is not f for f in found)]
        merged = Subgraph(set(steps))
        for item in found:
            merged.steps |= item.steps
            merged.succeeded |= item.succeeded
            merged.replans += item.replans
            merged.without_progress = max(merged.without_progress, item.without_progress)
        self.subgraphs.append(merged)
        return merged, found

    def _counts(self, steps: set[int], succeeded: set[int]) -> int:
        """The count a replan of ``steps`` would have: for each known subgraph sharing a
        step with them, 0 after progress, else its count plus one; the largest (0 for
        none)."""
        return max(
            (
                0 if (item.steps & succeeded) - item.succeeded else item.without_progress + 1
                for item in self.subgraphs
                if not item.steps.isdisjoint(steps)
            ),
            default=0,
        )

    def count(self, graph: nx.DiGraph, state: SessionState) -> int:
        """The replans in a row without progress of the subgraph a replan of ``state``
        would cover, this replan not included; nothing is recorded.

        Args:
            graph: the run's dependency graph.
            state: where the run stands (its failures are what the replan would cover).

        Returns:
            The count: the replan may go ahead while it is below ``max_without_progress``.
        """
        return self._counts(failure_subgraph(graph, state), set(state.succeeded))

    def replanned(self, graph: nx.DiGraph, state: SessionState, new_ids: Iterable[int]) -> Subgraph:
        """Record a replan of ``state`` (asked for, whether its patch applied or not).

        The failures it covered (:func:`failure_subgraph`) merge with every subgraph they
        share a step with; each of those counts one more replan without progress unless a
        step of it newly succeeded since its last replan (then 0); the merged subgraph
        takes the largest count, notes its succeeded steps for the next time and takes in
        the patch's new steps.

        Args:
            graph: the run's dependency graph.
            state: where the run stood when the replan was asked for.
            new_ids: the steps the patch added (none when it did not apply).

        Returns:
            The merged subgraph.
        """
        succeeded = set(state.succeeded)
        steps = failure_subgraph(graph, state)
        counted = self._counts(steps, succeeded)
        merged, _ = self._merge(steps)
        merged.without_progress = counted
        merged.succeeded = merged.steps & succeeded
        merged.replans += 1
        merged.steps.update(new_ids)
        return merged

    def joined(self, replaced: Collection[int], new_ids: Iterable[int]) -> None:
        """A patch replaced ``replaced`` with the steps ``new_ids``: the new steps join the
        subgraph of the steps they replace (subgraphs that both hold merge, keeping the
        larger count); nothing changes when no subgraph holds a replaced step (a person's
        instruction on a run with no failure).

        Args:
            replaced: the ended steps the patch superseded (and withdrawn ones).
            new_ids: the steps the patch added.
        """
        added = set(new_ids)
        if not added or not replaced:
            return
        touched = set(replaced)
        if all(item.steps.isdisjoint(touched) for item in self.subgraphs):
            return
        merged, _ = self._merge(touched)
        merged.steps |= added

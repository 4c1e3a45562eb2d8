"""Taint and hosts: which steps carry outside content, and which hosts a plan names.

ARCHITECTURE.md, "Untrusted content": results that came from outside (``taint_source``
tools: HTTP bodies, files not written by the run) are tainted, and so is everything a step
computes from them; a step that sends data out (an ``egress`` tool) with tainted input needs
a person's approval, and a read-only run (which never asks) refuses it: ``tainted_egress``.
The literal URLs of a plan's steps list their hosts for the run's HTTP allow-list; a
read-only run reaches only the configured hosts: ``host_not_allowed``.
"""

from __future__ import annotations

from collections.abc import Container, Mapping, Sequence
from typing import Any, NamedTuple

from plandag.allowlist import host_allowed, host_pattern
from plandag.compiler.targets import holds_reference, resolve_params_only
from plandag.dag.diagnostics import DiagnosticCollector
from plandag.dag.plan import Step
from plandag.dag.references import find_references
from plandag.tools.registry import Registry

__all__ = ["StepTaint", "check_egress"]


class StepTaint(NamedTuple):
    """What :func:`check_egress` found for one step (see :class:`CompiledStep`)."""

    tainted_input: bool
    tainted_output: bool
    hosts: tuple[str, ...]
    tainted_literals: bool = False


def check_egress(
    order: Sequence[int],
    by_id: Mapping[int, Step],
    registry: Registry,
    diagnostics: DiagnosticCollector,
    *,
    tainted_before: Container[int],
    tainted_author: bool,
    params: Mapping[str, Any] | None,
    read_only: bool,
    http_allow: Sequence[str] | None,
) -> dict[int, StepTaint]:
    """Trace taint through the steps of ``order`` (a topological order) and collect the
    hosts their literal URLs list; in a read-only run, report ``tainted_egress`` and
    ``host_not_allowed`` (ARCHITECTURE.md, "Untrusted content").

    A step's input is tainted when ``tainted_author`` (its literal text was written after
    reading outside content) or when a reference in its args names a step whose output is
    tainted (of ``order``, or of ``tainted_before``: existing steps of a run). Its output
    is tainted when its input is, or when its tool is a ``taint_source``.

    Returns:
        Each step's :class:`StepTaint`, by id (steps with an unknown tool: tainted output,
        no hosts).
    """
    found: dict[int, StepTaint] = {}
    configured = tuple(http_allow or ())
    for step_id in order:
        step = by_id[step_id]
        tool = registry.tools.get(step.tool)
        referenced = {
            reference.step_id
            for _, reference in find_references(step.args, "args")
            if reference.step_id is not None
        }
        tainted_input = tainted_author or any(
            (found[parent].tainted_output if parent in found else parent in tainted_before)
            for parent in referenced
        )
        if tool is None:
            found[step_id] = StepTaint(tainted_input, True, (), tainted_author)
            continue
        hosts: list[str] = []
        if tool.reaches is not None:
            value = step.args.get(tool.reaches)
            if params is not None:
                value = resolve_params_only(value, params)
            if isinstance(value, str) and not holds_reference(value):
                pattern = host_pattern(value)
                if pattern is not None:
                    hosts.append(pattern)
                    if read_only and not host_allowed(value, configured):
                        diagnostics.add(
                            "host_not_allowed",
                            step_id,
                            f"args.{tool.reaches}: {value!r} is on host {pattern}, which the "
                            "configured HTTP allow-list does not list; a read-only run "
                            "reaches only configured hosts, never hosts the plan names",
                            f"add the host with --http-allow {pattern} (or http_allow in "
                            "plandag.toml), or drop --read-only",
                        )
        if read_only and tool.egress and tainted_input:
            why = (
                "the plan was written after reading outside content"
                if tainted_author
                else "its args use results that came from outside (steps "
                + ", ".join(
                    str(parent)
                    for parent in sorted(referenced)
                    if (
                        found[parent].tainted_output
                        if parent in found
                        else parent in tainted_before
                    )
                )
                + ")"
            )
            diagnostics.add(
                "tainted_egress",
                step_id,
                f"tool {tool.name} sends data out and {why}; a read-only run never asks, so it "
                "cannot send tainted data anywhere",
                "drop --read-only so that a person approves the step, or do not pass outside "
                "content to it",
            )
        found[step_id] = StepTaint(
            tainted_input, tainted_input or tool.taint_source, tuple(hosts), tainted_author
        )
    return found

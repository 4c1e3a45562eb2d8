"""A stored run read back for a later segment (``resume``, ``approve``, ``reject``, a
revision): its options with its model server's URL whole again (:func:`restored_options`),
its tools (:func:`run_registry`), its current plan version compiled again
(:func:`rebuild`), and the checks made before a process takes the run (:func:`prepare`:
its folder, its tools files unchanged). Each raises :class:`~plandag.errors.InputError`
with what to do, before anything is recorded."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from plandag.errors import InputError, PlanError

if TYPE_CHECKING:
    from plandag.compiler.compiled import CompiledPlan
    from plandag.runs.options import RunOptions
    from plandag.store import Store
    from plandag.tools.registry import Registry

__all__ = [
    "file_sha256",
    "prepare",
    "rebuild",
    "restored_options",
    "run_registry",
    "tools_record",
]


def file_sha256(path: str) -> str | None:
    """SHA-256 (hex) of a file's bytes, or None when it cannot be read."""
    import hashlib

    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


def tools_record(tools: Iterable[str | Path]) -> tuple[tuple[str, ...], dict[str, str]]:
    """What a run stores of its ``--tools`` files: their absolute paths (in order, each
    once) and each readable file's SHA-256, which :func:`prepare` checks again."""
    files = tuple(str(Path(tool).resolve()) for tool in dict.fromkeys(tools))
    return files, {tool: digest for tool in files if (digest := file_sha256(tool)) is not None}


def restored_options(row: Any, run_id: str, base_url: str | None = None) -> RunOptions:
    """The run's stored options, its model server's URL whole again: given again
    (``base_url``, with its user and password), or its user and password put back from the
    environment (:func:`plandag.store.base_urls.restored_model_options`).

    Raises:
        InputError: neither can, saying what to give.
    """
    from plandag.runs.options import RunOptions
    from plandag.store.base_urls import restored_model_options

    return RunOptions.from_json(restored_model_options(row.options, base_url, run_id=run_id))


def run_registry(options: RunOptions, command: str | None = None) -> Registry:
    """The registry a later segment of a stored run compiles and plans with: a research
    run's (``command`` ``research``) is its job's (the ``research`` tools, no other
    installed application, the file and HTTP built-ins withheld, as its first segment had
    them; a run stored before ``withheld_tools`` was recorded gets them withheld all the
    same, :func:`plandag.tools.registry.outside_builtins`), any other run's the built-ins
    and the installed applications less its ``withheld_tools``; the run's ``--tools``
    either way, and the MCP servers it started (:attr:`RunOptions.mcp`) started again for
    the current operation (:func:`plandag.tools.lifetime.register_mcp_servers`, the
    ``mcp_timeout`` setting).

    Raises:
        InputError: a tools entry cannot be loaded, or an MCP server cannot be started
            (:class:`~plandag.errors.ToolLoadError`'s message).
    """
    from plandag.errors import ToolLoadError
    from plandag.tools.registry import outside_builtins, registry_with

    try:
        if command == "research":
            registry = registry_with(
                options.tools,
                applications=("research",),
                resolve_installed=False,
                withhold=options.withheld_tools or outside_builtins(),
            )
        else:
            registry = registry_with(options.tools, withhold=options.withheld_tools)
        if options.mcp:
            _start_mcp_servers(registry, options)
    except ToolLoadError as error:
        raise InputError(str(error)) from error
    return registry


def _start_mcp_servers(registry: Registry, options: RunOptions) -> None:
    """Start the MCP servers a stored run recorded, under the same names, and add their
    tools to ``registry``."""
    from plandag.config import McpServerSpec, load_settings
    from plandag.tools.lifetime import register_mcp_servers

    specs = [McpServerSpec.from_json(spec) for spec in options.mcp]
    register_mcp_servers(registry, specs, load_settings()["mcp_timeout"])


def rebuild(
    store: Store,
    run_id: str,
    row: Any,
    base_url: str | None = None,
    *,
    options: RunOptions | None = None,
) -> tuple[CompiledPlan, RunOptions]:
    """The run's current plan version compiled again with its stored tools, params and
    boundary (the secrets the store keeps as references to the environment put back).

    Args:
        store, run_id, row: the run store, the run and its row.
        base_url: the model server's URL given again (:func:`restored_options`).
        options: the run's options when made already; else the stored ones.

    Returns:
        The compiled plan and the options; a plan with ``llm`` or ``agent`` steps and no
        stored model gets ``{"provider": "anthropic"}`` (runs stored before the model was).

    Raises:
        InputError: the run has no plan, its plan does not compile any more, its tools
            cannot be loaded, or its model steps' key is not set.
    """
    from plandag.access import model_steps
    from plandag.compiler import compile_plan
    from plandag.store.sealing import unseal
    from plandag.tools.boundary import WriteBoundary

    if options is None:
        options = restored_options(row, run_id, base_url)
    registry = run_registry(options, row.command)
    versions = store.plan_versions(run_id)
    if not versions:
        raise InputError(f"run {run_id} has no plan in {store.path}")
    specs = options.write_boundary if options.write_boundary is not None else [options.base]
    try:
        boundary = WriteBoundary.from_specs(specs, options.base)
        compiled = compile_plan(
            unseal(versions[-1].plan, run_id=run_id),
            registry,
            params=unseal(row.params, run_id=run_id),
            read_only=options.read_only,
            write_boundary=boundary,
            http_allow=options.http_allow,
            max_steps=options.max_steps,
        )
    except InputError:
        raise
    except (PlanError, ValueError) as error:
        raise InputError(
            f"run {run_id}: its stored plan does not compile any more: {error}"
        ) from error
    if model_steps(compiled.steps):
        from plandag.executors.access import require_key

        executor = dict(options.executor or {"provider": "anthropic"})
        try:  # the model steps' key, before anything runs
            require_key(str(executor.get("provider")), executor.get("base_url"))
        except InputError as error:
            raise InputError(f"run {run_id}: its plan has llm or agent steps: {error}") from error
        if options.executor is None:
            options = dataclasses.replace(options, executor=executor)
    return compiled, options


def prepare(
    store: Store, run_id: str, row: Any, command: str, base_url: str | None = None
) -> tuple[CompiledPlan, RunOptions]:
    """Everything a later segment needs before this process takes the run: the process
    moves to the run's own folder (relative paths in the plan mean what they meant when it
    was made), the run's tools files are checked unchanged since the plan was made (a
    person approved the plan with that code), and its current plan version is compiled
    again (:func:`rebuild`; ``base_url``: its model server's URL given again).

    Args:
        store, run_id, row: the run store, the run and its row.
        command: the command that continues it (``resume``, ``approve``), for the message.
        base_url: as :func:`rebuild`.

    Raises:
        InputError: the folder or a tools file is gone, a tools file changed, an MCP tool
            of the plan changed (:func:`~plandag.runs.options.changed_mcp_tools`), or
            :func:`rebuild` failed; nothing is recorded.
    """
    from plandag.runs.options import RunOptions

    options = RunOptions.from_json(row.options)
    try:
        os.chdir(options.base)
    except OSError as error:
        raise InputError(
            f"run {run_id}: cannot work in its folder {options.base} ({error}); restore the "
            f"folder, then run `plandag {command} {run_id}` again"
        ) from error
    for tool_file, expected in options.tools_sha256.items():
        current = file_sha256(tool_file)
        if current is None:
            raise InputError(
                f"run {run_id}: its tools file {tool_file} is missing; restore it, then run "
                f"`plandag {command} {run_id}` again"
            )
        if current != expected:
            raise InputError(
                f"run {run_id}: its tools file {tool_file} changed since the plan was made "
                f"(sha256 {expected[:12]}... -> {current[:12]}...): the plan was made and "
                "approved for the old code; restore the file, or start a new run"
            )
    from plandag.runs.options import changed_mcp_tools

    prepared = rebuild(store, run_id, row, base_url)
    changed = changed_mcp_tools(*prepared)
    if changed is not None:
        raise InputError(f"run {run_id}: {changed}")
    return prepared

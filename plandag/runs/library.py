"""The plan library's bookkeeping for a run finished in a later segment: a ``plandag run``
that went through the library and was finished by ``approve`` or ``resume``
(:func:`finish_library`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from plandag.compiler.compiled import CompiledPlan
    from plandag.dag.plan import Plan
    from plandag.runs.options import RunOptions
    from plandag.store import Store

__all__ = ["finish_library"]


def finish_library(
    store: Store,
    run_id: str,
    compiled: CompiledPlan,
    options: RunOptions,
    *,
    plan: Plan | None = None,
    tainted: tuple[int, ...] = (),
    replanned: bool = False,
) -> list[str]:
    """Bring the plan library up to date with a run that went through it and was finished
    now by ``plandag approve`` or ``plandag resume``: its use counted with the final status,
    its plan (``plan``, default the compiled one) saved by the admission rule
    (:func:`plandag.library.stored.finish_stored_run`). Runs that did not go through the
    library are left alone.

    Returns:
        What was done, one line each ([] when nothing was).

    Raises:
        InputError: the run's tools files cannot be loaded.
    """
    from plandag.library.stored import finish_stored_run
    from plandag.runs.stored import run_registry

    store.flush()
    finished = finish_stored_run(
        store,
        run_id,
        plan=plan if plan is not None else compiled.plan,
        registry=run_registry(options),
        params=compiled.params,
        approve=options.approve,
        read_only=options.read_only,
        write_boundary=compiled.write_boundary,
        http_allow=options.http_allow,
        max_steps=options.max_steps,
        tainted=tainted,
        replanned=replanned,
    )
    return list(finished.lines()) if finished is not None else []

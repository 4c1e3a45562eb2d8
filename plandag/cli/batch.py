"""What the batch extraction commands (``plandag extract nfe``, ``plandag extract
contracts``) share: the options every input's run takes under the batch's one budget, the
batch's stall monitor and progress bar, and the close of a batch that stopped on an
unusable argument."""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from plandag.brakes import cap_or_none
from plandag.brakes.retry import RetryPolicy
from plandag.cli.common import boundary_words, fail, print_brakes, stderr
from plandag.scheduler import RunLimits

if TYPE_CHECKING:
    from plandag.config import Settings

__all__ = ["batch_progress", "batch_run_options", "close_batch", "start_up_frozen"]


def batch_run_options(
    settings: Settings,
    output: Path,
    models: Iterable[tuple[str, str | None, str | None]] = (),
) -> dict[str, Any]:
    """Make the output's folder, print the batch's brakes line and return the options every
    input's run takes: the retry policy, the concurrency within an input, lifted per-run
    limits (the batch's own brakes govern every input) and the batch's one ``budget``.

    Args:
        settings: the command's resolved settings (:func:`plandag.cli.common.command_settings`).
        output: the ``-o`` file.
        models: ``(model, provider, base_url)`` of each model the batch may call (the
            brakes line says where their prices come from).

    Raises:
        typer.Exit: (exit 2) the output's folder cannot be created.
    """
    from plandag.brakes.budget import Budget

    try:
        output.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        fail(f"-o {output}: cannot create its folder ({error.strerror or error})")
    budget = Budget(
        cap_or_none(settings["max_cost"]),
        cap_or_none(settings["max_tokens"]),
        slow_start=settings["slow_start"],
    )
    print_brakes(settings, boundary_words(settings["write_boundary"], output.parent), models)
    return {
        "retry": RetryPolicy(retries=settings["retries"]),
        "max_concurrency": settings["max_concurrency"],
        "limits": RunLimits.lifted(),
        "budget": budget,
    }


def batch_progress(
    settings: Settings, heartbeat_file: Path | None, noun: str
) -> tuple[Any, Any, Callable[[int, int], None]]:
    """The batch's stall monitor (heartbeats, ``stall_after``, ``stop_on_stall``), its
    progress bar on stderr (only on a terminal, labelled ``noun``) and the callback that
    feeds both with ``(finished, total)`` inputs.

    Returns:
        ``(monitor, progress, on_progress)``: a ``BatchMonitor``, a ``rich`` ``Progress``
        to enter around the batch, and the callback.
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    from plandag.extract.monitor import BatchMonitor

    monitor = BatchMonitor(
        heartbeat_file,
        every=settings["heartbeat_every"],
        stall_after=cap_or_none(settings["stall_after"]),
        stop_on_stall=settings["stop_on_stall"],
    )
    progress = Progress(
        f"[bold]{noun}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=stderr,
        transient=True,
        disable=not stderr.is_terminal,
    )
    task = progress.add_task(noun, total=None)

    def on_progress(finished: int, total: int) -> None:
        monitor.update(finished, total)
        if not progress.disable:  # a bar that draws nothing (stderr is no terminal) is left be
            progress.update(task, completed=finished, total=total)

    return monitor, progress, on_progress


def close_batch(store: Any, writer: Any, batch_id: str, status: str) -> None:
    """A batch that stopped on an unusable argument: record it (nothing when it was never
    created) and close its trace and the store."""
    store.update_run(batch_id, status=status, pid=None)
    if writer is not None:
        writer.segment_ended(status)
        writer.close()
    store.close()


@contextmanager
def start_up_frozen() -> Iterator[None]:
    """Leave what the command made before its batch (modules, classes, the registry, the
    store's and trace's objects: most of the process's objects) out of the garbage
    collector's passes while the batch runs (``gc.freeze``), and put it back in after
    (``gc.unfreeze``, in a ``finally``).

    A batch's documents make and drop many objects; each full collection would otherwise
    walk the start-up's tens of thousands of objects again, which none of its documents
    can free (with ``plandag extract nfe --workers 1``, about 12 µs a document for 3,000
    documents, ``benchmarks/nfe_throughput.py``). Objects of the start-up that die while
    the batch runs are freed by their reference counts as usual; only a cycle among them
    waits for the first collection after the batch.
    """
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()

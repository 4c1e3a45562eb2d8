"""Refuse a batch with worker processes started from an unguarded main module.

Worker processes made by ``forkserver`` or ``spawn`` (``--workers N``)
run the program's main module again while they start, under the name ``__mp_main__``
(Python's ``multiprocessing`` documentation, "Safe importing of main module"). A script
whose top level starts a batch without ``if __name__ == "__main__":`` therefore starts the
batch again inside every worker, and the batch that started the workers waits for them
forever. :func:`unguarded_main_line` finds that case before any worker starts, so that the
caller gets an error at once. :func:`main_not_importable` finds the other case where workers
cannot start: a main module they cannot run again at all (a script read from standard input,
``python - < script.py``, whose ``__file__`` is ``<stdin>``).
"""

from __future__ import annotations

import ast
import inspect
import multiprocessing
import os
import sys
from pathlib import Path

__all__ = ["main_not_importable", "refuse_unguarded_main", "unguarded_main_line"]


def _is_main_test(test: ast.expr) -> bool:
    """Whether ``test`` is ``__name__ == "__main__"`` (either way round)."""
    if not isinstance(test, ast.Compare) or len(test.ops) != 1:
        return False
    if not isinstance(test.ops[0], ast.Eq):
        return False
    sides = (test.left, test.comparators[0])
    names = [side for side in sides if isinstance(side, ast.Name) and side.id == "__name__"]
    texts = [side for side in sides if isinstance(side, ast.Constant) and side.value == "__main__"]
    return len(names) == 1 and len(texts) == 1


def main_not_importable() -> str | None:
    """The main module's ``__file__`` when worker processes started by ``spawn`` or
    ``forkserver`` would run it again from that path and cannot, because it is not a
    readable file (``<stdin>`` for ``python - < script.py``; a file deleted since).

    The rule is ``multiprocessing.spawn``'s (``get_preparation_data``): a main module with
    a ``__spec__`` name is imported by that name, one without ``__file__`` (an interactive
    session, ``python -c``) is not run again, and ``ipython`` is skipped; any other is run
    from its path, relative paths taken from the folder the program started in.

    Returns:
        The path as the workers would open it, or None when they can run the main module
        again (or need not).
    """
    main = sys.modules.get("__main__")
    if main is None or getattr(getattr(main, "__spec__", None), "name", None) is not None:
        return None
    path = getattr(main, "__file__", None)
    if not isinstance(path, str):
        return None
    if not os.path.isabs(path):
        origin = getattr(multiprocessing.process, "ORIGINAL_DIR", None) or os.getcwd()
        path = os.path.join(origin, path)
    path = os.path.normpath(path)
    if Path(path).stem == "ipython":
        return None
    if os.path.isfile(path) and os.access(path, os.R_OK):
        return None
    return path


def unguarded_main_line() -> tuple[str, int] | None:
    """Where the main module's top level, outside ``if __name__ == "__main__":``, is
    running now, when worker processes would run that module again as they start.

    The rule is ``multiprocessing.spawn``'s: a module run with ``python -m PACKAGE`` (its
    ``__main__``), an interactive session or ``python -c`` is not run again; a script
    (``python script.py``) or a module (``python -m package.module``) is.

    Returns:
        ``(path of the main module, line number)`` of the top-level statement running now
        when it is outside every ``if __name__ == "__main__":`` block; None when the main
        module is not run again in workers, when no top-level statement of it is running
        in this thread (the batch was started from a function called later), or when its
        source cannot be read.
    """
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if main is None or not isinstance(path, str):
        return None
    spec = getattr(main, "__spec__", None)
    name = getattr(spec, "name", None)
    if isinstance(name, str) and (name == "__main__" or name.endswith(".__main__")):
        return None
    if Path(path).stem == "ipython":
        return None
    frame = inspect.currentframe()
    while frame is not None:
        if frame.f_code.co_name == "<module>" and frame.f_globals is vars(main):
            break
        frame = frame.f_back
    if frame is None:
        return None
    line = frame.f_lineno
    try:
        tree = ast.parse(Path(path).read_bytes(), filename=path)
    except (OSError, SyntaxError, ValueError):
        return None
    for node in tree.body:
        if (
            isinstance(node, ast.If)
            and _is_main_test(node.test)
            and node.lineno <= line <= (node.end_lineno or node.lineno)
        ):
            return None
    return path, line


def refuse_unguarded_main() -> None:
    """Raise before worker processes start when they would start the batch again.

    Raises:
        RuntimeError: the main module's top level starts the batch outside
            ``if __name__ == "__main__":`` (:func:`unguarded_main_line`), or this process is
            itself a worker that is still starting (its main module, run again, started a
            batch): the message names the file and line and says what to do.
    """
    advice = 'put it under `if __name__ == "__main__":`, or pass workers=1'
    if getattr(multiprocessing.current_process(), "_inheriting", False):
        raise RuntimeError(
            "a batch was started while a worker process was starting: the main module that "
            f"starts the batch runs again in each worker; {advice}"
        )
    where = unguarded_main_line()
    if where is not None:
        raise RuntimeError(
            f"{where[0]}, line {where[1]}: a batch with worker processes is started from the "
            "top level of the main module, which each worker runs again as it starts (and "
            f"so would start the batch again, for ever); {advice}"
        )

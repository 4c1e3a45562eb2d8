"""Writing files inside the write boundary, with the check and the write made one.

Checking a path and then writing to it leaves a window: a folder of the path swapped for a
symlink in between sends the write elsewhere. The functions here close it (ARCHITECTURE.md,
"Brakes", write boundary). They never hand a path to the operating system to resolve;
instead they:

1. start from a descriptor of ``/`` and open each folder of the target relative to the
   descriptor of the folder before it (``os.open(name, dir_fd=parent)``) with ``O_NOFOLLOW``
   and ``O_DIRECTORY``, keeping every descriptor, so the real path reached is known
   exactly, component by component;
2. meet a symlink only as a refused open: they read it (``os.readlink(name, dir_fd=...)``)
   and put its target's components in front of the rest of the path, resolved the same
   way from ``/`` or from the link's folder (at most 40 links, as Linux's ``MAXSYMLINKS``);
   a link that stays inside the boundary therefore works, and one that leads outside ends
   in a folder whose real path the boundary refuses;
3. apply ``..`` to the real folder reached (the descriptor before it), never to the text;
4. create a missing folder (``os.mkdir(name, dir_fd=parent)``) only when the target below
   it would be inside the boundary, and never when ``..`` follows it in the path;
5. check the real path of the final folder and name with
   :meth:`~plandag.tools.boundary.WriteBoundary.allows_real`, then create the file
   relative to that folder's descriptor (``O_NOFOLLOW``; for :func:`write_atomic`, a
   temporary file renamed over the target with ``os.rename(..., src_dir_fd=,
   dst_dir_fd=)``).

So whatever is swapped while a write runs, the file lands in the folder that was checked.
(A folder moved elsewhere after it was opened takes what is written into it along, as it
would had the write finished first.) POSIX only: it needs ``dir_fd`` support.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
import secrets
import stat
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO, TypeVar

from plandag.errors import BoundaryError
from plandag.tools.boundary import WriteBoundary

__all__ = ["open_for_write", "write_atomic"]

_T = TypeVar("_T")

_MAX_LINKS = 40
"""Links followed in one path before giving up with ``ELOOP`` (Linux's ``MAXSYMLINKS``)."""

_MAX_RETRIES = 40
"""Times a folder that vanished or appeared under us is looked at again before giving up."""

_FOLDER_FLAGS = (
    os.O_RDONLY
    | getattr(os, "O_PATH", 0)
    | os.O_DIRECTORY
    | os.O_NOFOLLOW
    | getattr(os, "O_CLOEXEC", 0)
)


class _Vanished(Exception):
    """A folder on the way was removed while it was being walked or written into."""


@dataclasses.dataclass
class _Folder:
    """An open folder (its descriptor) and its real absolute path."""

    descriptor: int
    real: str


def _parts(path: str) -> list[str]:
    return [part for part in path.split("/") if part not in ("", ".")]


def _child(real: str, name: str) -> str:
    return real.rstrip("/") + "/" + name


def _refuse_outside(
    boundary: WriteBoundary | None, text: str, real: str, step_id: int | None
) -> None:
    if boundary is not None and not boundary.allows_real(Path(real)):
        raise boundary.outside_error(text, real, step_id=step_id)


def _close(stack: list[_Folder]) -> None:
    for folder in stack:
        os.close(folder.descriptor)


def _is_neither_folder_nor_link(name: str, folder: _Folder) -> bool:
    """Whether ``name`` in ``folder`` exists right now and is neither a folder nor a link
    (a file, a FIFO...); False when it is missing, for it may be between two renames."""
    try:
        mode = os.stat(name, dir_fd=folder.descriptor, follow_symlinks=False).st_mode
    except OSError:
        return False
    return not (stat.S_ISDIR(mode) or stat.S_ISLNK(mode))


def _reach(
    boundary: WriteBoundary | None, target: str | os.PathLike[str], step_id: int | None
) -> tuple[list[_Folder], str]:
    """Open the folders down to the one that holds ``target``, checked.

    Returns:
        The open folders from ``/`` down (the caller closes them; the last one holds the
        file) and the file's name in the last one.

    Raises:
        _Vanished: a folder was removed while the path was being walked; walk again.
    """
    text = os.fspath(target)
    where = f"step {step_id}: " if step_id is not None else ""
    if not text or "\x00" in text:
        raise BoundaryError(
            f"{where}write target {text!r} is empty or holds a NUL character; name a file",
            target=text,
        )
    base = os.fspath(boundary.base) if boundary is not None else os.getcwd()
    pending = deque(_parts(os.path.join(os.path.abspath(base), text)))
    if text.endswith("/") or not pending:
        raise IsADirectoryError(errno.EISDIR, f"{text!r} names a folder, not a file")
    stack = [_Folder(os.open("/", _FOLDER_FLAGS), "/")]
    links = retries = 0
    try:
        while pending:
            name = pending.popleft()
            folder = stack[-1]
            if name == "..":
                if len(stack) > 1:
                    os.close(stack.pop().descriptor)
                continue
            link: str | None = None
            if not pending:  # the file itself: follow a link, else this is the target
                try:
                    link = os.readlink(name, dir_fd=folder.descriptor)
                except OSError as error:
                    if error.errno not in (errno.EINVAL, errno.ENOENT):
                        raise
                if link is None:
                    real = _child(folder.real, name)
                    _refuse_outside(boundary, text, real, step_id)
                    return stack, name
            else:
                try:
                    descriptor = os.open(name, _FOLDER_FLAGS, dir_fd=folder.descriptor)
                except FileNotFoundError:
                    if ".." in pending:
                        raise FileNotFoundError(
                            errno.ENOENT,
                            f"folder {_child(folder.real, name)} does not exist and the "
                            "path climbs out of it with '..'; write the path without '..'",
                        ) from None
                    below = _child(folder.real, "/".join([name, *pending]))
                    _refuse_outside(boundary, text, below, step_id)
                    try:
                        os.mkdir(name, 0o777, dir_fd=folder.descriptor)
                    except FileExistsError:
                        pass
                    except FileNotFoundError:  # the folder we are in was removed
                        raise _Vanished from None
                    retries += 1
                    if retries > _MAX_RETRIES:
                        raise OSError(
                            errno.EAGAIN, f"folder {_child(folder.real, name)} keeps changing"
                        ) from None
                    pending.appendleft(name)
                    continue
                except NotADirectoryError:
                    try:
                        link = os.readlink(name, dir_fd=folder.descriptor)
                    except OSError as error:
                        if error.errno == errno.EINVAL and _is_neither_folder_nor_link(
                            name, folder
                        ):
                            raise NotADirectoryError(  # neither a folder nor a link
                                errno.ENOTDIR, f"{_child(folder.real, name)} is not a folder"
                            ) from None
                        if error.errno not in (errno.EINVAL, errno.ENOENT):
                            raise
                        # it vanished, or became a folder, between the two calls: look again
                        retries += 1
                        if retries > _MAX_RETRIES:
                            raise
                        pending.appendleft(name)
                        continue
                else:
                    stack.append(_Folder(descriptor, _child(folder.real, name)))
                    continue
            links += 1
            if links > _MAX_LINKS:
                raise OSError(errno.ELOOP, f"more than {_MAX_LINKS} links in {text!r}")
            if link.startswith("/"):
                while len(stack) > 1:
                    os.close(stack.pop().descriptor)
            pending.extendleft(reversed(_parts(link)))
        raise IsADirectoryError(errno.EISDIR, f"{text!r} names a folder, not a file")
    except BaseException:
        _close(stack)
        raise


@contextlib.contextmanager
def open_for_write(
    boundary: WriteBoundary | None,
    path: str | os.PathLike[str],
    *,
    append: bool = False,
    step_id: int | None = None,
) -> Iterator[BinaryIO]:
    """Open ``path`` for writing in binary, creating missing folders, inside ``boundary``.

    The folders are opened one by one from ``/`` and the file is created relative to the
    last one (module docstring), so no link swapped in while this runs can send the write
    outside the boundary. Use it (or :func:`write_atomic`) in any tool that writes files.

    Args:
        boundary: the run's write boundary (a tool gets it as ``ctx.write_boundary``), or
            None for no check (links are still followed the same way).
        path: the file, absolute or relative to the boundary's base (the working
            directory when ``boundary`` is None).
        append: add to the end of an existing file instead of emptying it.
        step_id: the step writing, named in a refusal.

    Yields:
        The file, open for writing; it is closed when the block ends.

    Raises:
        BoundaryError: the file, or a folder that would have to be created for it, lies
            outside the boundary (by ``..``, an absolute path or a link), or the path is
            empty or holds a NUL character.
        OSError: the file cannot be written (a folder in the way is a file, the target is
            a folder, more than 40 links, permission denied, disk full).
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    flags |= os.O_APPEND if append else os.O_TRUNC

    def create(folder: _Folder, name: str) -> int:
        try:
            return os.open(name, flags, 0o666, dir_fd=folder.descriptor)
        except OSError as error:
            # A link put at the file's name after it was looked at, or the folder removed
            # after it was opened: walk again.
            if error.errno in (errno.ELOOP, errno.ENOENT):
                raise _Vanished from error
            raise

    descriptor = _with_retries(boundary, path, step_id, create)
    with os.fdopen(descriptor, "ab" if append else "wb") as handle:
        yield handle


def write_atomic(
    boundary: WriteBoundary | None,
    path: str | os.PathLike[str],
    data: bytes,
    *,
    step_id: int | None = None,
) -> Path:
    """Write ``data`` to ``path`` atomically, creating missing folders, inside ``boundary``.

    The bytes go to a temporary file ``.NAME.HEX.tmp`` created next to the target (in the
    folder that was checked, relative to its descriptor), are flushed to disk, then renamed
    over the target with ``os.rename(..., src_dir_fd=, dst_dir_fd=)``: a reader sees the old
    file or the whole new one. The rename replaces a link at the target's name rather than
    following it. On any failure the temporary file is removed.

    Args:
        boundary: the run's write boundary, or None for no check.
        path: the file, absolute or relative to the boundary's base (the working
            directory when ``boundary`` is None). A link at its name is followed when its
            target is inside the boundary.
        data: the file's whole content.
        step_id: the step writing, named in a refusal.

    Returns:
        The real absolute path written.

    Raises:
        BoundaryError: as for :func:`open_for_write`.
        OSError: as for :func:`open_for_write`.
    """

    def write(folder: _Folder, name: str) -> Path:
        temporary = f".{name}.{secrets.token_hex(8)}.tmp"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
        try:
            # 0o666 lets the umask decide the final mode, as for a plain open().
            descriptor = os.open(temporary, flags, 0o666, dir_fd=folder.descriptor)
        except FileNotFoundError:  # the folder was removed after it was opened
            raise _Vanished from None
        try:
            with os.fdopen(descriptor, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.rename(temporary, name, src_dir_fd=folder.descriptor, dst_dir_fd=folder.descriptor)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary, dir_fd=folder.descriptor)
            raise
        return Path(_child(folder.real, name))

    return _with_retries(boundary, path, step_id, write)


def _with_retries(
    boundary: WriteBoundary | None,
    path: str | os.PathLike[str],
    step_id: int | None,
    act: Callable[[_Folder, str], _T],
) -> _T:
    """Reach the folder of ``path`` and ``act`` on it; walk again when a folder vanished."""
    for _ in range(_MAX_RETRIES):
        try:
            stack, name = _reach(boundary, path, step_id)
        except _Vanished:
            continue
        try:
            return act(stack[-1], name)
        except _Vanished:
            continue
        finally:
            _close(stack)
    raise FileNotFoundError(
        errno.ENOENT,
        f"the folders of {os.fspath(path)!r} kept being removed or replaced while it was "
        f"written ({_MAX_RETRIES} tries); try again when nothing else changes them",
    )

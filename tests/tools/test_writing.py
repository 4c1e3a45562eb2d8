"""Writes inside the write boundary: the check and the write are one, even under a race."""

from __future__ import annotations

import concurrent.futures
import contextlib
import errno
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from plandag.errors import BoundaryError, PermanentStepError
from plandag.tools import ToolContext, WriteBoundary, write_json
from plandag.tools.writing import open_for_write, write_atomic


@pytest.fixture
def layout(tmp_path: Path) -> tuple[Path, Path]:
    """``work/`` (the base) with ``out/`` (the boundary) and ``outside/`` (empty) beside it.

    ``out/sub/`` is a folder; ``out/inner_link`` → ``out/sub``; ``out/outer_link`` →
    ``outside``; ``out/file_link.json`` → ``out/sub/real.json``; ``out/bad_file_link.json`` →
    ``outside/x.json`` (dangling); ``out/loop`` → ``out/loop``.
    """
    work = (tmp_path / "work").resolve()
    out = work / "out"
    (out / "sub").mkdir(parents=True)
    outside = tmp_path.resolve() / "outside"
    outside.mkdir()
    (out / "inner_link").symlink_to(out / "sub", target_is_directory=True)
    (out / "outer_link").symlink_to(outside, target_is_directory=True)
    (out / "file_link.json").symlink_to("sub/real.json")
    (out / "bad_file_link.json").symlink_to(outside / "x.json")
    (out / "loop").symlink_to("loop")
    return work, outside


def boundary_of(work: Path) -> WriteBoundary:
    return WriteBoundary.from_specs(["out/"], base=work)


def everything_under(folder: Path) -> list[str]:
    """Every name below ``folder``, hidden ones included, relative and sorted."""
    return sorted(
        os.path.relpath(os.path.join(root, name), folder)
        for root, folders, files in os.walk(folder)
        for name in folders + files
    )


def test_writes_inside_and_creates_missing_folders(layout: tuple[Path, Path]) -> None:
    work, _ = layout
    written = write_atomic(boundary_of(work), "out/new/deep/a.json", b"{}\n")
    assert written == work / "out" / "new" / "deep" / "a.json"
    assert written.read_bytes() == b"{}\n"
    assert sorted(os.listdir(written.parent)) == ["a.json"]  # no temporary file left


def test_a_link_that_stays_inside_is_followed(layout: tuple[Path, Path]) -> None:
    work, _ = layout
    boundary = boundary_of(work)
    assert write_atomic(boundary, "out/inner_link/a.json", b"1") == work / "out/sub/a.json"
    assert (work / "out/sub/a.json").read_bytes() == b"1"
    # a link at the file's own name is followed to its target inside
    assert write_atomic(boundary, "out/file_link.json", b"2") == work / "out/sub/real.json"
    assert (work / "out/sub/real.json").read_bytes() == b"2"
    assert (work / "out/file_link.json").is_symlink()
    # out through a link, back in through the real parent
    back_in = "out/outer_link/../work/out/b.json"
    assert write_atomic(boundary, back_in, b"3") == work / "out/b.json"


@pytest.mark.parametrize(
    ("target", "lands"),
    [
        ("out/outer_link/a.json", "outside/a.json"),  # a folder link pointing outside
        ("out/outer_link/new/a.json", "outside/new/a.json"),  # ... and a folder to create there
        ("out/bad_file_link.json", "outside/x.json"),  # a dangling file link pointing outside
        ("out/../escape.json", "work/escape.json"),  # ".."
        ("out/sub/../../escape.json", "work/escape.json"),
        ("out/outer_link/../x.json", "x.json"),  # ".." applies to the link's real folder
        ("{tmp}/outside/a.json", "outside/a.json"),  # an absolute path outside
        ("other/a.json", "work/other/a.json"),  # a relative path outside
    ],
)
def test_escapes_are_refused_and_nothing_is_created_outside(
    layout: tuple[Path, Path], target: str, lands: str
) -> None:
    work, outside = layout
    tmp = outside.parent
    target = target.format(tmp=tmp)
    before = everything_under(tmp)
    with pytest.raises(BoundaryError) as caught:
        write_atomic(boundary_of(work), target, b"x", step_id=4)
    assert str(caught.value) == (
        f"step 4: write target {target!r} resolves to {tmp / lands}, outside the write "
        f"boundary ({work}/out); write inside it or widen it with --write-boundary"
    )
    assert caught.value.target == target
    assert everything_under(tmp) == before
    assert os.listdir(outside) == []


def test_a_folder_to_create_before_dotdot_is_refused(layout: tuple[Path, Path]) -> None:
    work, _ = layout
    with pytest.raises(FileNotFoundError) as caught:
        write_atomic(boundary_of(work), "out/missing/../a.json", b"x")
    assert str(caught.value) == (
        f"[Errno 2] folder {work}/out/missing does not exist and the path climbs out of it "
        "with '..'; write the path without '..'"
    )
    assert not (work / "out" / "missing").exists()


def test_bad_targets(layout: tuple[Path, Path]) -> None:
    work, _ = layout
    boundary = boundary_of(work)
    for target in ("", "out/a\x00.json"):
        with pytest.raises(BoundaryError) as refused:
            write_atomic(boundary, target, b"x", step_id=1)
        assert str(refused.value) == (
            f"step 1: write target {target!r} is empty or holds a NUL character; name a file"
        )
    with pytest.raises(IsADirectoryError):
        write_atomic(boundary, "out/sub/", b"x")
    with pytest.raises(OSError, match="more than 40 links") as looped:
        write_atomic(boundary, "out/loop/a.json", b"x")
    assert looped.value.errno == errno.ELOOP
    (work / "out" / "plain").write_bytes(b"")
    with pytest.raises(NotADirectoryError, match=f"{work}/out/plain is not a folder"):
        write_atomic(boundary, "out/plain/a.json", b"x")


def test_without_a_boundary_links_are_followed_and_nothing_is_checked(
    layout: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    work, outside = layout
    monkeypatch.chdir(work)
    assert write_atomic(None, "out/outer_link/a.json", b"x") == outside / "a.json"


def test_open_for_write_truncates_or_appends(layout: tuple[Path, Path]) -> None:
    work, _ = layout
    boundary = boundary_of(work)
    with open_for_write(boundary, "out/inner_link/log.txt") as handle:
        handle.write(b"one\n")
    with open_for_write(boundary, "out/inner_link/log.txt", append=True) as handle:
        handle.write(b"two\n")
    assert (work / "out/sub/log.txt").read_bytes() == b"one\ntwo\n"
    with open_for_write(boundary, "out/sub/log.txt") as handle:
        handle.write(b"three\n")
    assert (work / "out/sub/log.txt").read_bytes() == b"three\n"
    with pytest.raises(BoundaryError), open_for_write(boundary, "out/outer_link/log.txt"):
        pass
    with pytest.raises(BoundaryError), open_for_write(boundary, "out/bad_file_link.json"):
        pass
    assert os.listdir(layout[1]) == []


def test_write_json_writes_through_the_step_boundary(layout: tuple[Path, Path]) -> None:
    work, outside = layout
    context = ToolContext(run_id="r", step_id=3, write_boundary=boundary_of(work))
    result = write_json(str(work / "out/inner_link/a.json"), [1], indent=None, ctx=context)
    assert result == {"path": str(work / "out/inner_link/a.json"), "bytes": 4}
    assert (work / "out/sub/a.json").read_text(encoding="utf-8") == "[1]\n"
    with pytest.raises(BoundaryError) as caught:
        write_json(str(work / "out/outer_link/a.json"), [1], ctx=context)
    assert str(caught.value).startswith("step 3: write target ")
    assert os.listdir(outside) == []
    with pytest.raises(PermanentStepError) as failed:
        write_json(str(work / "out/sub"), [1], ctx=context)
    assert failed.value.reason == "io_error"


# -- the race -------------------------------------------------------------------------------

WRITES = 200
SWAPPERS = 3
WRITERS = 8


def test_swapping_a_folder_for_a_link_during_writes_never_lands_outside(
    tmp_path: Path,
) -> None:
    """Threads keep swapping ``out/swap`` (a folder) for a link to ``outside`` while 200
    writes aim at ``out/swap/...``: every write lands inside or is refused, and nothing,
    not even a temporary file, ever appears outside."""
    work = (tmp_path / "work").resolve()
    out = work / "out"
    swap = out / "swap"
    swap.mkdir(parents=True)
    outside = tmp_path.resolve() / "outside"
    outside.mkdir()
    boundary = boundary_of(work)
    stop = threading.Event()
    swaps = [0] * SWAPPERS

    def swapper(number: int) -> None:
        parked = out / f"parked{number}"
        link = out / f".link{number}"
        for _ in range(1_000_000):  # bounded; stopped by the event long before
            if stop.is_set():
                return
            try:
                os.rename(swap, parked)  # the folder goes away ...
            except OSError:
                continue
            try:
                link.symlink_to(outside, target_is_directory=True)
                os.rename(link, swap)  # ... a link to outside takes its name ...
                swaps[number] += 1
                os.unlink(swap)  # ... and the folder comes back
            except OSError:
                pass
            finally:
                with contextlib.suppress(OSError):
                    os.rename(parked, swap)

    def target_of(index: int) -> str:
        return f"out/swap/deep/file{index}.json" if index % 2 else f"out/swap/file{index}.json"

    def write(index: int) -> Path | BoundaryError:
        try:
            return write_atomic(boundary, target_of(index), b"{}", step_id=index)
        except BoundaryError as error:
            return error

    threads = [threading.Thread(target=swapper, args=(n,)) for n in range(SWAPPERS)]
    for thread in threads:
        thread.start()
    try:
        with concurrent.futures.ThreadPoolExecutor(WRITERS) as pool:
            outcomes = list(pool.map(write, range(WRITES)))
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=10)
    assert everything_under(outside) == []
    assert sum(swaps) > 0  # the race really ran
    assert len(outcomes) == WRITES
    found = {Path(name).name for name in everything_under(out)}
    for index, outcome in enumerate(outcomes):
        if isinstance(outcome, BoundaryError):  # refused, with the boundary's own message
            assert str(outcome).startswith(
                f"step {index}: write target {target_of(index)!r} resolves to {outside}/"
            )
            assert str(outcome).endswith(
                f", outside the write boundary ({out}); write inside it or widen it with "
                "--write-boundary"
            )
        else:  # written inside, under its own name
            assert outcome.is_relative_to(out)
            assert outcome.name == f"file{index}.json"
            assert outcome.name in found


def test_a_folder_missing_between_two_renames_is_walked_again_not_called_a_file(
    layout: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``out/sub`` is a link when it is opened, the folder again when the link is read, and
    gone (between two renames) when its kind is looked at: the walk starts again and the
    file lands in the folder, rather than the write failing with "is not a folder"."""
    work, outside = layout
    sub, parked = work / "out" / "sub", work / "out" / "parked"
    real_open, real_readlink, real_stat = os.open, os.readlink, os.stat
    moves = ["link", "folder", "gone"]

    def next_move(name: Any) -> None:
        if name != "sub" or not moves:
            return
        move = moves.pop(0)
        if move == "link":
            os.rename(sub, parked)
            os.symlink(outside, sub)
        elif move == "folder":
            os.unlink(sub)
            os.rename(parked, sub)
        else:
            os.rename(sub, parked)
            moves.append("back")

    def opening(name: Any, *args: Any, **kwargs: Any) -> int:
        next_move(name)
        return real_open(name, *args, **kwargs)

    def reading_link(name: Any, *args: Any, **kwargs: Any) -> Any:
        next_move(name)
        return real_readlink(name, *args, **kwargs)

    def looking(name: Any, *args: Any, **kwargs: Any) -> Any:
        next_move(name)
        if moves == ["back"]:
            try:
                return real_stat(name, *args, **kwargs)
            finally:
                moves.clear()
        return real_stat(name, *args, **kwargs)

    monkeypatch.setattr(os, "open", opening)
    monkeypatch.setattr(os, "readlink", reading_link)
    monkeypatch.setattr(os, "stat", looking)
    written = write_atomic(boundary_of(work), "out/sub/a.json", b"{}\n")
    monkeypatch.undo()
    assert written == sub / "a.json"
    assert written.read_bytes() == b"{}\n"
    assert everything_under(outside) == []

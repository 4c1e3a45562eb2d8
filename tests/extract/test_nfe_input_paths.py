"""The inputs a folder gives: each entry's path is the one its folder's listing names
(``os.path.join`` of the folder and the name, as ``Path`` normalizes it), whatever the
folder is spelled and whatever the names hold."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from plandag.extract.nfe.batch import _folder_entries, expand_inputs


def _listed(folder: str) -> list[tuple[Path, bool]]:
    """Every entry below ``folder`` that is not a folder (links to folders included),
    hidden names skipped, by the listing's own paths."""
    found: list[tuple[Path, bool]] = []
    for root, folders, files in os.walk(folder):
        folders[:] = [name for name in folders if not name.startswith(".")]
        for name in folders + files:
            path = os.path.join(root, name)
            link = os.path.islink(path)
            if name.startswith(".") or (os.path.isdir(path) and not link):
                continue
            found.append((Path(path), link))
    return sorted(found, key=lambda item: os.fspath(item[0]).split(os.sep))


@pytest.mark.parametrize("spelling", ["tree", "./tree", "tree/", "tree/sub/..", "."])
def test_folder_entries_are_the_paths_the_listing_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spelling: str
) -> None:
    tree = tmp_path / "tree"
    (tree / "sub" / "deeper").mkdir(parents=True)
    (tree / ".hidden").mkdir()
    names = ["a.xml", "b c.xml", "ção.xml", "x\udcff.xml", ".skip.xml", "z.txt"]
    for folder in (tree, tree / "sub", tree / "sub" / "deeper", tree / ".hidden"):
        for name in names:
            (folder / name).write_bytes(b"<x/>")
    (tree / "link-to-sub").symlink_to(tree / "sub")
    (tree / "dangling.xml").symlink_to(tmp_path / "nowhere.xml")
    monkeypatch.chdir(tmp_path if spelling != "." else tree)
    entries = _folder_entries(Path(spelling))
    assert entries == _listed(os.fspath(Path(spelling)))
    assert [os.fspath(path) for path, _ in entries] == [
        os.fspath(path) for path, _ in _listed(os.fspath(Path(spelling)))
    ]
    assert len(entries) == 3 * 5 + 2  # three folders' visible files, two links
    files, missing = expand_inputs([spelling])
    assert missing == []
    assert files == [path for path, _ in entries]


@pytest.mark.parametrize("seed", range(5))
def test_folder_entries_come_in_the_order_of_their_paths_components(
    tmp_path: Path, seed: int
) -> None:
    # names that sort around each other: a folder "b" beside files "b.xml", "b-1", "b0",
    # "B", "é"; folders and files mixed at every depth
    import random

    chance = random.Random(seed)
    alphabet = ["b", "b.xml", "b-1", "b0", "B", "é", "a", "b b", "a.xml", "\udcff"]
    root = tmp_path / "tree"
    root.mkdir()
    folders = [root]
    for _ in range(60):
        parent = chance.choice(folders)
        name = chance.choice(alphabet) + chance.choice(["", "x", "/"])
        path = parent / name.rstrip("/")
        if path.exists():
            continue
        if name.endswith("/") and len(path.relative_to(root).parts) < 4:
            path.mkdir()
            folders.append(path)
        else:
            path.write_bytes(b"<x/>")
    entries = _folder_entries(root)
    assert entries == _listed(os.fspath(root))
    assert len(entries) > 10

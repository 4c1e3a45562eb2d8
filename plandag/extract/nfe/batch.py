"""Batch extraction: many NF-e inputs → one output file, in input order (NFE.md "Batch behaviour").

How a batch runs (the choices, and why):

- **Inputs** (:func:`expand_inputs`): a PATH is a file, a folder (every entry inside,
  recursively, hidden names skipped, sorted — so a stray ``.txt`` or HTML page still gets its
  error record), or a glob (``glob.glob(..., recursive=True)``, sorted). Argument order is
  kept; a file reached twice is taken once. A pattern that matches nothing gives an error
  record (code ``no_such_input``) in its argument's place instead of vanishing; when *no*
  pattern matches anything, or a PATH is empty (an unset shell variable), the arguments are
  unusable and :class:`~plandag.errors.InputError` is raised (exit code 2).
- **Nothing is lost**: an entry that is not a regular file (a named pipe, a device, a
  socket, a dangling symbolic link, a link loop, a symbolic link to a folder met inside a
  folder, which is not followed) gets an error record (code ``not_a_file``; ``io_error``
  when its status cannot be read) and is never opened: reading a pipe could block forever.
- **Links stay inside what was given**: a symbolic link leading outside the folders and
  files given (found in a folder, matched by a glob, or named as an argument whose target
  lies in no other argument) gets an error record (code ``link_outside``) in its place and
  is never read, unless ``follow_links`` (``--follow-links``): a folder someone else can
  write to cannot hand the batch ``/etc/passwd``.
- **Every name**: a file whose name is not valid UTF-8 is read like any other; wherever its
  name is shown or recorded (``source``, messages, CSV, the store, the trace, the summary),
  each undecodable byte is written ``\\xNN`` (:func:`plandag.extract.names.display_name`),
  and ``--resume`` matches it under that form.
- **The output is never an input**: when ``-o`` (or, for CSV, its items file) is one of the
  inputs (compared by real path, so through folders and symbolic links too), the input is
  dropped if it holds a previous plandag output (re-running on a folder that holds it), and
  the batch is refused otherwise (InputError, before anything is opened for writing).
- **Concurrency**: up to ``jobs`` documents are extracted at once (in one process; with
  worker processes or a cluster, as many as the map keeps in flight): the inputs are handed
  in order, through a memory object stream, to that many tasks, each extracting one at a
  time; at most ``window`` inputs are in flight or waiting to be written, so memory stays
  bounded however many inputs there are.
- **One encoding per record**: each record is encoded once; its JSONL line and the compact
  text the run store keeps (``on_record_json``) are both made from that encoding
  (:func:`~plandag.extract.nfe.output.record_json_texts`), which also tells a record holding
  a lone surrogate (from a name that is not UTF-8) from the others.
- **Order and streaming**: records are written in input order through a reorder buffer: as
  soon as the next input in order is done, its records (and every ready one after it) go to
  the file and are flushed. An interrupted batch leaves a prefix of whole inputs, which
  ``--resume`` continues.
- **unique_in_batch** needs every key, but records stream out before the last key is known.
  Each record is written with the outcome known so far (the first of a key passes, a later
  one fails naming the earlier sources); at the end, the records whose final outcome differs
  (the first of a duplicated key, or one whose detail must name later duplicates) are patched
  by rewriting the file once, atomically (temporary file + ``os.replace``). Duplicates are
  rare, so the rewrite rarely happens. The "batch" is the whole output file: with
  ``--resume`` the previous records count too.
- **Failure isolation**: any exception the extractor raises for one input becomes an error
  record for it (code ``internal_error``, the exception's type and text); the batch goes on.
- **--resume**: inputs whose sha256 already has a record for the same path in the output file
  are skipped, the extractor not called (a copy of those bytes under another name still gets
  its own record); the previous records stay first in the file and the new ones are
  appended in input order. Previous records without a sha256 (``no_such_input``,
  ``not_a_file``) or with an ``internal_error`` are dropped and their inputs extracted
  again. A file plandag did not write is refused (see
  :func:`~plandag.extract.nfe.output.load_existing`).
- **unique_in_batch details** name at most three other sources, then "and N more", so a
  key copied thousands of times keeps each record small.
- **Repairs** (``--planner``; docs/planning.md): with a ``repairer`` each
  document's run may ask the model to repair the stored plan for that input only (the trigger is
  :func:`~plandag.extract.nfe.document.nfe_needs_repair`); other inputs never call the
  model. The shared batch budget (``run_options["budget"]``) pays the calls. A repair
  that worked is reused, with no call, for later inputs failing on the same steps.
  Records that asked for a repair carry ``repair``; :attr:`BatchSummary.repairs` counts
  them by outcome, plus ``model_calls``.
- **Exit code** (ARCHITECTURE.md, "States and exit codes", ``extract``): 0 when every input
  got a record, whatever the records say; see :func:`batch_exit_code`.
"""

from __future__ import annotations

import errno
import functools
import glob
import itertools
import os
import stat
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.lowlevel
from anyio.abc import TaskGroup
from rich.table import Table

from plandag.errors import InputError
from plandag.extract.names import display_name
from plandag.extract.nfe.document import Extractor, advise_read, error_record, file_sha256
from plandag.extract.nfe.encoded import (
    FIRST_OF_KEY,
    NO_KEY,
    EncodedRecord,
    encode_ready,
    escaped,
    with_unique,
)
from plandag.extract.nfe.output import (
    OutputFormat,
    WrittenRecord,
    is_plandag_output,
    items_path_for,
    load_existing,
    open_writer,
    output_format_for,
    record_identity,
    record_json_texts,
    rewrite_unique_in_batch,
)
from plandag.tools.boundary import WriteBoundary

if TYPE_CHECKING:
    from plandag.planner.repair import PlanRepairer

__all__ = [
    "BatchSummary",
    "Extractor",
    "advise_read",
    "batch_exit_code",
    "error_record",
    "expand_inputs",
    "extract_batch",
    "not_a_regular_file",
    "render_summary",
    "with_unique_in_batch",
]

_GLOB_CHARACTERS = frozenset("*?[")

#: How many other sources a failing unique_in_batch detail names before "and N more".
_NAMED_DUPLICATES = 3

#: Seconds a written record waits at most before its group goes to the output file (and a
#: caller's ``on_flush`` commits its own rows): the console and ``plandag runs`` read the
#: store while a batch runs.
FLUSH_SECONDS = 0.2
#: Records in a group at most.
FLUSH_RECORDS = 256
#: The chunk driver lets the event loop's other tasks run at least once per this many inputs.
_YIELD_EVERY = 64


def _folder_entries(folder: Path) -> list[tuple[Path, bool]]:
    """Every entry of ``folder`` (recursively, hidden names skipped, sorted) that is not a
    folder, each with whether it is a symbolic link: regular files, and also what is not a
    regular file (a named pipe, a device, a dangling symbolic link, a symbolic link loop)
    and symbolic links to folders (never entered), so that each gets a record rather than
    vanishing. A folder that cannot be listed is passed over, as :func:`os.walk` does.

    Sorted: by the paths' components (on POSIX; elsewhere by ``Path``). On POSIX that order
    is the walk's own when each folder's entries are taken in the order of their names,
    each subfolder's entries at its name's place, so no path is compared."""
    posix = os.name == "posix"
    found: list[tuple[Path, bool]] = []
    stack = [iter(_listing(Path(folder), posix))]
    while stack:
        entry = next(stack[-1], None)
        if entry is None:
            stack.pop()
            continue
        _, path, link, below = entry
        if below:
            stack.append(iter(_listing(path, posix)))
        else:
            found.append((path, link))
    if not posix:
        found.sort(key=lambda item: item[0])
    return found


def _listing(directory: Path, ordered: bool) -> list[tuple[str, Path, bool, bool]]:
    """The entries of ``directory`` whose names do not start with ``.``, each ``(name, path,
    is a symbolic link, is a folder to enter)``, in the order of their names when
    ``ordered``; those listed before a failure when the listing fails (none when it cannot
    start)."""
    listed: list[tuple[str, Path, bool, bool]] = []
    try:
        with os.scandir(directory) as entries:
            for entry in entries:
                name = entry.name
                if name.startswith("."):
                    continue
                link = entry.is_symlink()
                # a child of the folder's Path: a name to add, not a whole path to parse
                listed.append(
                    (name, directory / name, link, not link and entry.is_dir(follow_symlinks=False))
                )
    except OSError:
        pass
    if ordered:
        listed.sort(key=_first)
    return listed


def _first(entry: tuple[str, Path, bool, bool]) -> str:
    return entry[0]


def _glob_root(pattern: str) -> Path:
    """The folder a glob pattern searches: its leading components without a glob
    character (``in/**/*.xml`` → ``in``; ``*.xml`` → ``.``)."""
    parts = Path(pattern).parts
    fixed = list(itertools.takewhile(lambda part: not (_GLOB_CHARACTERS & set(part)), parts))
    return Path(*fixed) if fixed else Path(".")


class _Places:
    """The folders and files the PATH arguments name, resolved: the places an input may
    lead to. A plain argument is the place it names itself, unless it is a symbolic link
    (a link named as an argument is a way in, not a place: it leads inside only when its
    target lies in another argument's place); a glob pattern's place is the folder it
    searches (:func:`_glob_root`)."""

    def __init__(self, patterns: Sequence[str]) -> None:
        self._files: set[str] = set()
        self._folders: list[str] = []
        for pattern in patterns:
            path = Path(pattern)
            if os.path.lexists(path):
                if path.is_symlink():
                    continue
                place = Path(os.path.realpath(path))
            elif _GLOB_CHARACTERS & set(pattern):
                place = Path(os.path.realpath(_glob_root(pattern)))
            else:
                continue
            if place.is_dir():
                self._folders.append(os.fspath(place))
            else:
                self._files.add(os.fspath(place))

    def outside(self, path: Path) -> str | None:
        """The real path ``path`` leads to when it lies outside every place, else None (a
        path that leads to nothing, a dangling link or a loop, is None: it gets its
        ``not_a_file`` record when it is read)."""
        target = os.path.realpath(path)
        if not os.path.exists(target):
            return None
        if target in self._files:
            return None
        for folder in self._folders:
            if target == folder or target.startswith(folder.rstrip(os.sep) + os.sep):
                return None
        return target


def _link_outside(path: Path, target: str) -> dict[str, Any]:
    return error_record(
        str(path),
        "",
        "link_outside",
        f"{path}: a symbolic link to {target}, outside the folders and files given; not "
        "read (name the file itself, or give --follow-links to follow links)",
    )


def _identity(path: Path, exists: bool | None = None) -> str:
    """What makes two spellings one input: the real path, or for a dangling symbolic link
    or a loop (which resolve to nothing) the link's own absolute path (``exists``: whether
    ``path`` leads to a file, when known)."""
    if exists is None:
        exists = path.exists()
    return os.path.realpath(path) if exists else os.path.abspath(path)


class _Identities:
    """The identities (:func:`_identity`) of the inputs taken so far, known without resolving
    every path: two paths with one real path lead to one file, so a path whose file (device
    and inode) no earlier input led to has a new identity, and only a path whose file was
    met already is resolved, and compared with the earlier inputs that led to that file.
    Once a path leads to no file (a dangling link, a loop), every identity is computed as
    :func:`_identity` does."""

    def __init__(self) -> None:
        self._taken: list[Path] = []
        self._by_file: dict[tuple[int, int], list[Path]] = {}
        self._known: dict[Path, str] = {}
        self._seen: set[str] | None = None  # every identity, once a path led to no file

    def take(self, path: Path, status: os.stat_result | None) -> bool:
        """True, and ``path`` remembered, unless an earlier input has its identity
        (``status``: :func:`_file_status` of ``path``)."""
        if self._seen is None:
            file = (status.st_dev, status.st_ino) if status is not None else None
            if file is not None:
                earlier = self._by_file.setdefault(file, [])
                if earlier:
                    identity = self._identity(path)
                    if any(self._identity(other) == identity for other in earlier):
                        return False
                earlier.append(path)
                self._taken.append(path)
                return True
            self._seen = {self._identity(other) for other in self._taken}
        identity = _identity(path, status is not None)
        if identity in self._seen:
            return False
        self._seen.add(identity)
        return True

    def _identity(self, path: Path) -> str:
        """The identity of a path taken while it led to a file."""
        known = self._known.get(path)
        if known is None:
            known = self._known[path] = _identity(path, True)
        return known


def expand_inputs(
    patterns: Sequence[str],
    *,
    follow_links: bool = False,
    statuses: dict[str, os.stat_result | None] | None = None,
) -> tuple[list[Path], list[dict[str, Any]]]:
    """Turn the PATH arguments into inputs, in argument order, each file once.

    Args:
        patterns: each a file, a folder (every entry inside it, recursively, names starting
            with ``.`` skipped, sorted) or a glob pattern (``*``, ``?``, ``[``; ``**``
            crosses folders; matches sorted; a matched folder is expanded like a folder).
            An entry that is not a regular file (a named pipe, a device, a dangling symbolic
            link, a link loop, a symbolic link to a folder met inside a folder) is kept: the
            batch gives it an error record without opening it.
        follow_links: follow symbolic links wherever they lead. Without it (the default),
            an input that is a symbolic link leading outside the folders and files given
            (a file of a folder, a glob's match, or a link named as an argument itself,
            which leads inside only when its target lies in another argument; a link to
            a folder named as an argument is then not entered) is not read: it gets an
            error record with code ``link_outside`` in its place, so a folder someone else
            can write to cannot hand ``/etc/passwd`` to the batch.
        statuses: a dict to fill, or None: each input's status read to tell two spellings
            of one file apart (``os.stat``, links followed; None when it leads to no file),
            by ``os.fspath`` of the input, for :func:`extract_batch`'s ``statuses``, so that
            the batch need not read it again.

    Returns:
        ``(inputs, missing)``. ``inputs`` holds the inputs in argument order without repeats
        (two spellings of the same file count once); a pattern that matched nothing, and a
        link leading outside, stays in its place as its ``Path``, and ``missing`` holds its
        ready-made error record (code ``no_such_input`` or ``link_outside``, ``sha256`` "",
        ``source`` the pattern or link as given), which :func:`extract_batch` writes at
        that place instead of extracting it.

    Raises:
        InputError: no pattern given, an empty (or blank) pattern, or no pattern matched
            anything.
    """
    if not patterns:
        raise InputError("no input given: name files, folders or glob patterns")
    for pattern in patterns:
        if not pattern.strip():
            raise InputError(
                f"an empty PATH ({display_name(pattern)!r}); did a shell variable expand to "
                "nothing?"
            )
    places = None if follow_links else _Places(patterns)
    inputs: list[Path] = []
    taken = _Identities()
    missing: list[dict[str, Any]] = []
    refused: set[str] = set()
    unmatched = 0

    def allowed(path: Path, link: bool) -> bool:
        """False, and its ``link_outside`` record placed, for a link leading outside."""
        target = places.outside(path) if places is not None and link else None
        if target is None:
            return True
        if os.path.abspath(path) not in refused:
            refused.add(os.path.abspath(path))
            missing.append(_link_outside(path, target))
            inputs.append(path)
        return False

    def add(path: Path) -> None:
        name = os.fspath(path)
        status = _file_status(name)
        if taken.take(path, status):
            inputs.append(path)
            if statuses is not None:
                statuses[name] = status

    for pattern in patterns:
        path = Path(pattern)
        matches: list[tuple[Path, bool]] = []
        if os.path.lexists(path):
            matches = [(path, path.is_symlink())]
        elif _GLOB_CHARACTERS & set(pattern):
            # a match may lie below a linked folder (``*`` and ``**`` go through links)
            matches = [(Path(match), True) for match in sorted(glob.glob(pattern, recursive=True))]
        found = 0  # candidates: files, entries of folders, refused links; repeats included
        for match, link in matches:
            if not match.is_dir():
                found += 1
                if allowed(match, link):
                    add(match)
            elif not allowed(match, link):  # a link to a folder outside: not entered
                found += 1
            else:
                for entry, entry_link in _folder_entries(match):
                    found += 1
                    if allowed(entry, entry_link):
                        add(entry)
        if found == 0:
            reason = (
                "no file matches this pattern"
                if _GLOB_CHARACTERS & set(pattern)
                else ("no such file or folder" if not path.exists() else "no file in this folder")
            )
            missing.append(error_record(pattern, "", "no_such_input", f"{pattern}: {reason}"))
            inputs.append(path)
            unmatched += 1
    if unmatched == len(inputs):
        raise InputError(
            "no input file found: "
            + "; ".join(display_name(r["errors"][0]["message"]) for r in missing)
        )
    return inputs, missing


def _problem(
    path: Path, statuses: Mapping[str, os.stat_result | None], name: str | None = None
) -> tuple[str, str] | None:
    """:func:`not_a_regular_file` of ``path``, without reading its status again when
    ``statuses`` holds it as a regular file's (``name``: ``os.fspath(path)`` when known)."""
    status = statuses.get(os.fspath(path) if name is None else name)
    if status is not None and stat.S_ISREG(status.st_mode):
        return None
    return not_a_regular_file(path)


def not_a_regular_file(path: Path) -> tuple[str, str] | None:
    """Why ``path`` cannot be read as an input file without opening it, or None when it is
    a regular file (or a symbolic link to one).

    Returns:
        ``(code, message)``: ``not_a_file`` for a named pipe (FIFO), a device, a socket, a
        folder reached through a symbolic link, a dangling symbolic link or a link loop;
        ``io_error`` when its status cannot be read (permission, vanished). A pipe or a
        device is never opened: reading one could block forever.
    """
    try:
        mode = os.stat(path).st_mode
    except OSError as error:
        if error.errno == errno.ELOOP:
            return "not_a_file", f"{path}: a symbolic link loop, not a file"
        if isinstance(error, FileNotFoundError) and os.path.islink(path):
            target = os.readlink(path)
            return "not_a_file", f"{path}: a symbolic link to {target}, which does not exist"
        return "io_error", f"{path}: cannot read it ({error.strerror or error})"
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        kind = "a symbolic link to a folder, not followed (name the folder to include it)"
    elif stat.S_ISFIFO(mode):
        kind = "a named pipe (FIFO), not a file; not read"
    elif stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        kind = "a device, not a file; not read"
    elif stat.S_ISSOCK(mode):
        kind = "a socket, not a file; not read"
    else:
        kind = "not a regular file; not read"
    return "not_a_file", f"{path}: {kind}"


@dataclass
class BatchSummary:
    """What a batch did, for the summary table and the exit code.

    Attributes:
        inputs: input files plus patterns that matched nothing.
        records: records written by this run (an ``enviNFe`` file gives several).
        inputs_with_record: inputs that got at least one record (written or kept by resume).
        skipped_by_resume: inputs not extracted because a record already held their sha256
            and path.
        kept_from_previous: records of the previous output kept by ``--resume``.
        by_status: this run's records by status (``ok``, ``check_failed``, ``error``).
        failing_checks: check name → number of this run's records where it failed, most
            frequent first.
        error_codes: error code → number of this run's records carrying it, most frequent first.
        duration: wall-clock seconds from start to the file's last write.
        start_seconds: of ``duration``, the seconds spent starting the worker processes or
            the cluster (each worker ready, the plan compiled there) before any document was
            sent (0 in one process). Stopping them, after the file's last write, is in
            neither.
        cpu_seconds: CPU seconds of this process (every thread, ``time.process_time``) over
            the batch's documents: from its start to the file's last write, less the CPU
            seconds of starting the workers or the cluster; ``plandag extract nfe`` adds its
            own work on the batch before and after (expanding the inputs, opening and
            closing the run store and the trace). With workers or a cluster, the serial part
            of the batch (reading the records back, the output, the store, the trace):
            divided by ``inputs``, what one more document costs this process, start-up left
            out.
        output: the output file; items_output: ``OUT.items.csv`` for CSV, else None.
        format: ``jsonl`` or ``csv``.
        repairs: with ``--planner``: this run's records whose run asked for a repair, by
            outcome (``repaired``, ``reused`` — repaired by a known repair with no model
            call —, ``max_replans``, ``no_progress``, ``budget``, ``replanner_error``...),
            plus ``model_calls`` (attempts); empty without.
    """

    inputs: int = 0
    records: int = 0
    inputs_with_record: int = 0
    skipped_by_resume: int = 0
    kept_from_previous: int = 0
    by_status: dict[str, int] = field(default_factory=dict)
    failing_checks: dict[str, int] = field(default_factory=dict)
    error_codes: dict[str, int] = field(default_factory=dict)
    duration: float = 0.0
    start_seconds: float = 0.0
    cpu_seconds: float = 0.0
    output: Path | None = None
    items_output: Path | None = None
    format: OutputFormat = "jsonl"
    repairs: dict[str, int] = field(default_factory=dict)

    def to_json_dict(self) -> dict[str, Any]:
        """The summary as JSON-safe data (``plandag extract nfe --json``)."""
        data = asdict(self)
        data["output"] = display_name(self.output) if self.output is not None else None
        data["items_output"] = (
            display_name(self.items_output) if self.items_output is not None else None
        )
        return data


class _Tally:
    """Counts of this run's records; adjustable when unique_in_batch is patched at the end."""

    def __init__(self) -> None:
        self.by_status: Counter[str] = Counter()
        self.failing_checks: Counter[str] = Counter()
        self.error_codes: Counter[str] = Counter()
        self.repairs: Counter[str] = Counter()
        self.records = 0

    def add(self, record: EncodedRecord) -> None:
        self.records += 1
        self.by_status[record.status] += 1
        for name in record.failed_checks:
            self.failing_checks[name] += 1
        for code in record.error_codes:
            self.error_codes[code] += 1
        if record.repair is not None:
            outcome, calls = record.repair
            self.repairs[outcome] += 1
            self.repairs["model_calls"] += calls


class _Uniqueness:
    """Tracks every record's chNFe in file order to give unique_in_batch its outcome."""

    def __init__(self) -> None:
        self.keys: list[str | None] = []
        self.sources: list[str] = []
        self.hashes: list[str | None] = []
        self.written: list[tuple[str, str] | None] = []
        self.statuses: list[str] = []
        self.positions: dict[str, list[int]] = {}

    def _add(self, key: str | None, source: str, sha256: str | None) -> int:
        position = len(self.keys)
        self.keys.append(key)
        self.sources.append(source)
        self.hashes.append(sha256)
        if key is not None:
            self.positions.setdefault(key, []).append(position)
        return position

    def add_written(self, written: WrittenRecord) -> None:
        self._add(written.chNFe, written.source, written.sha256)
        self.written.append(written.unique_in_batch)
        self.statuses.append(written.status)

    def add_new(self, record: Mapping[str, Any]) -> dict[str, Any]:
        """Register a new record; return it with unique_in_batch as known so far."""
        position = self._add(*record_identity(record))
        outcome = self.outcome(position)
        ready = with_unique(dict(record), outcome)
        self.written.append(outcome)
        self.statuses.append(str(ready["status"]))
        return ready

    def add_first(self, record: EncodedRecord) -> bool:
        """Register a record encoded as the first of its key
        (:func:`~plandag.extract.nfe.encoded.encode_first`) when that is what it is (no
        earlier record has its key): True; otherwise register nothing and return False."""
        key = record.key
        if key is not None and key in self.positions:
            return False
        self._add(key, record.source, record.sha256)
        self.written.append(FIRST_OF_KEY if key is not None else NO_KEY)
        self.statuses.append(record.status)
        return True

    def discard_last(self) -> None:
        """Forget the record :meth:`add_new` registered last, as if it never had been."""
        key = self.keys.pop()
        self.sources.pop()
        self.hashes.pop()
        self.written.pop()
        self.statuses.pop()
        if key is not None:
            positions = self.positions[key]
            positions.pop()
            if not positions:
                del self.positions[key]

    def outcome(self, position: int) -> tuple[str, str]:
        """The check's ``(status, detail)`` for the record at ``position``, as known now.

        The detail names at most :data:`_NAMED_DUPLICATES` other sources, then "and N
        more", so it stays short however many copies the batch holds.
        """
        key = self.keys[position]
        if key is None:
            return NO_KEY
        positions = self.positions[key]
        if len(positions) == 1:
            return FIRST_OF_KEY
        names: list[str] = []
        for other in positions:
            if len(names) == _NAMED_DUPLICATES:
                break
            if other == position:
                continue
            same_file = (self.sources[other], self.hashes[other]) == (
                self.sources[position],
                self.hashes[position],
            )
            names.append("another invoice in the same file" if same_file else self.sources[other])
        more = len(positions) - 1 - len(names)
        listed = ", ".join(names) + (f" and {more} more" if more else "")
        return "fail", f"chNFe {key} also in {listed}"

    def corrections(self) -> dict[int, tuple[str, str]]:
        """Positions whose written outcome differs from the final one → the final outcome."""
        changes: dict[int, tuple[str, str]] = {}
        for position, written in enumerate(self.written):
            final = self.outcome(position)
            if written != final:
                changes[position] = final
        return changes


def with_unique_in_batch(record: Mapping[str, Any], change: Mapping[str, Any]) -> dict[str, Any]:
    """``record`` with the ``unique_in_batch`` outcome of an ``on_correction`` ``change`` of
    :func:`extract_batch` and its status restated (NFE.md "Status"): what the output file
    holds for that record once the batch ended."""
    outcome = change["unique_in_batch"]
    return with_unique(dict(record), (str(outcome["status"]), str(outcome["detail"])))


def _file_status(path: Path | str) -> os.stat_result | None:
    """The status of the file ``path`` leads to (``os.stat``, links followed), or None when
    it leads to none (missing, a dangling link, a loop, unreadable)."""
    try:
        return os.stat(path)
    except (OSError, ValueError):
        return None


def _file_identity(path: Path) -> tuple[int, int] | None:
    """``(device, inode)`` of the file ``path`` leads to (links followed), or None when it
    leads to none."""
    status = _file_status(path)
    return (status.st_dev, status.st_ino) if status is not None else None


def _without_output(
    inputs: Sequence[Path],
    output: Path,
    output_format: OutputFormat,
    placeholders: Mapping[str, Any],
    statuses: dict[str, os.stat_result | None],
) -> list[Path]:
    """The inputs minus the output file and its items file when they hold a previous output.

    A folder given as input may hold the previous output (``extract in/ -o in/out.jsonl``):
    an input that is the output file, or for CSV the items file (compared by real path, so
    through symbolic links too), is dropped when it holds an output plandag wrote
    (:func:`~plandag.extract.nfe.output.is_plandag_output`). ``placeholders`` (keys:
    ``os.fspath`` of patterns that matched nothing) are left alone. ``statuses``: each
    input's status (:func:`_file_status`) by ``os.fspath``, read here for the inputs it
    does not hold, which are added to it.

    Raises:
        InputError: the output or items file is an input that plandag did not write: it
            would be overwritten. Raised before anything is opened for writing.
    """
    targets = {os.path.realpath(output): output}
    if output_format == "csv":
        targets.setdefault(os.path.realpath(items_path_for(output)), items_path_for(output))
    # Two paths with one real path name one file: an input whose file is found and is none
    # of the targets' files (or no target exists) has another real path, known without
    # resolving its every component (realpath reads each folder and link on the way).
    target_files = {_file_identity(target) for target in targets.values()} - {None}
    kept: list[Path] = []
    for path in inputs:
        name = os.fspath(path)
        if name in statuses:
            status = statuses[name]
        elif name in placeholders:
            kept.append(path)
            continue
        else:
            status = statuses[name] = _file_status(path)
        identity = (status.st_dev, status.st_ino) if status is not None else None
        if identity is not None and identity not in target_files:
            kept.append(path)
            continue
        target = targets.get(os.path.realpath(path))
        if target is None or os.fspath(path) in placeholders:
            kept.append(path)
            continue
        if is_plandag_output(path):
            continue
        shown, shown_target = display_name(output), display_name(target)
        written = f"-o {shown}" if target is output else f"-o {shown} writes {shown_target}, which"
        raise InputError(
            f"{written} is also an input ({display_name(path)}); it would be overwritten: "
            "choose another output file"
        )
    return kept


def _default_extractor(
    output: Path,
    run_options: Mapping[str, Any] | None = None,
    write_boundary: WriteBoundary | None = None,
    repairer: PlanRepairer | None = None,
    save_repairs: Path | None = None,
) -> Extractor:
    """The stored-plan extractor; its write boundary defaults to the output file's folder
    (ARCHITECTURE.md, "Tools")."""
    from plandag.extract.nfe.document import extract_document

    boundary = write_boundary or WriteBoundary([output.resolve().parent])
    if repairer is None:
        return functools.partial(extract_document, write_boundary=boundary, run_options=run_options)
    return functools.partial(
        extract_document,
        registry=repairer.registry,
        write_boundary=boundary,
        run_options=run_options,
        repairer=repairer,
        save_repairs=save_repairs,
    )


async def extract_batch(
    inputs: Sequence[Path],
    output: Path,
    *,
    format: str | None = None,
    jobs: int = 4,
    resume: bool = False,
    missing: Sequence[Mapping[str, Any]] = (),
    on_record: Callable[[Mapping[str, Any]], None] | None = None,
    on_record_json: Callable[[Mapping[str, Any], str | None], None] | None = None,
    on_progress: Callable[[int, int], None] | None = None,
    on_correction: Callable[[int, Mapping[str, Any]], None] | None = None,
    on_previous_correction: Callable[[WrittenRecord, Mapping[str, Any]], None] | None = None,
    on_encoded: Callable[[EncodedRecord], None] | None = None,
    on_flush: Callable[[], None] | None = None,
    on_settled: Callable[[], None] | None = None,
    flush_seconds: float = FLUSH_SECONDS,
    flush_records: int = FLUSH_RECORDS,
    extractor: Extractor | None = None,
    window: int | None = None,
    run_options: Mapping[str, Any] | None = None,
    write_boundary: WriteBoundary | None = None,
    repairer: PlanRepairer | None = None,
    save_repairs: Path | None = None,
    workers: int | None = None,
    cluster: str | None = None,
    statuses: Mapping[str, os.stat_result | None] | None = None,
) -> BatchSummary:
    """Extract every input and write the records to ``output``, in input order.

    Args:
        inputs: input files, in the order their records must appear (see
            :func:`expand_inputs`). An input that is the output itself (or its items file)
            is left out when it holds a previous plandag output, so a folder holding the
            output can be processed again, and refused otherwise. An input that is not a
            regular file (a named pipe, a device, a dangling link...) gets a ``not_a_file``
            error record without being opened.
        output: the output file; its folder is created when missing.
        format: ``jsonl`` or ``csv``; None takes ``csv`` for a ``.csv`` name, else ``jsonl``.
            CSV also writes ``OUT.items.csv`` (one row per item).
        jobs: documents extracted at once (≥ 1).
        resume: skip inputs whose sha256 and path already have a record in ``output`` and keep the
            previous records first; otherwise ``output`` is overwritten.
        missing: ready-made error records (patterns that matched nothing, from
            :func:`expand_inputs`). A record whose ``source`` is also in ``inputs`` (the
            placeholder :func:`expand_inputs` leaves) is written at that place; the others
            are written first.
        on_record: called with each record as it is written (in output order).
        on_record_json: called like ``on_record`` (after it, when both are given) with the
            record and its compact JSON text, ``json.dumps(record, ensure_ascii=False,
            separators=(",", ":"), allow_nan=False)``, made with the record's line (one
            encoding for both: :func:`~plandag.extract.nfe.output.record_json_texts`), or
            None when the record is not plain JSON data; for a caller that stores the
            text (``plandag extract nfe``'s run store).
        on_progress: called with ``(inputs done, inputs to extract)`` at the start and each
            time inputs are written (for a progress bar): once for the inputs that are
            ready in order together (a chunk's, with workers), so ``inputs done`` grows by
            one or more each time, up to every input.
        on_correction: called once the batch ends (also when it is cut short) for each
            record of this run whose ``unique_in_batch`` outcome changed after it was
            passed to ``on_record`` (the first record of a key that a later input
            duplicates, or one whose detail now names later duplicates), with ``(n, change)``:
            ``n`` counts this run's records from 0 in ``on_record`` order, ``change`` is
            ``{"unique_in_batch": {"status", "detail"}, "status": the record's final
            status}``; so a store or trace fed by ``on_record`` ends with the file's outcome
            (see :func:`with_unique_in_batch`).
        on_previous_correction: with ``resume``, called the same way for each record kept
            from the previous output whose ``unique_in_batch`` outcome changed (a new input
            repeats its key), with ``(kept, change)``: ``kept`` says which record
            (``source``, ``sha256``, ``chNFe``), so that the store row and trace bar of the
            run that recorded it can take the file's outcome too.
        on_encoded: called like ``on_record`` (after it and ``on_record_json``) with the
            record as an :class:`~plandag.extract.nfe.encoded.EncodedRecord`: its texts,
            made once (in the worker that extracted it, with workers), so that a caller
            that stores each record (``plandag extract nfe``'s run store and trace) need
            not encode it again.
        on_flush: called each time the batch writes a group of records: the records passed
            to the callbacks so far are in the output file (a caller that keeps its own
            group, rows of a store, commits it then). A group is written once
            ``flush_records`` records wait, at least every ``flush_seconds`` while any
            wait, and at the end (also when the batch is cut short); an interrupted batch
            still leaves whole inputs, in order.
        on_settled: called once, after the last ``on_flush`` (also when the batch is cut
            short) and before the batch's end rewrites records in the output file (their
            final unique_in_batch outcome): a caller that commits its groups' rows without
            waiting (``plandag extract nfe``'s run store) waits for them here, so that no
            row it commits holds a record the file no longer holds.
        flush_seconds: seconds a record waits at most before its group is written (> 0).
        flush_records: records in a group at most (>= 1).
        extractor: ``async (path) -> list[record]``; defaults to
            :func:`plandag.extract.nfe.document.extract_document`.
        window: inputs in flight or waiting to be written at most (default ``max(8 * jobs,
            64)``); bounds memory on huge batches.
        run_options: keyword arguments for each document's :func:`plandag.run_plan`
            (``retry``, ``max_concurrency``, a shared ``budget``, ``limits``); only used by
            the default extractor.
        write_boundary: where the documents' plans may write (default: the output file's
            folder, ARCHITECTURE.md); only used by the default extractor.
        repairer: with ``--planner``: the model side of repairs (its registry runs the
            plan), or None (no model call, ever); only used by the default extractor.
        save_repairs: a folder for the repaired plans that succeeded, or None; only used
            by the default extractor.
        workers: processes extracting documents (None: the machine's cores,
            :func:`plandag.extract.parallel.default_workers`; 1: in this process); each
            has ``jobs`` documents in flight. The records, their order and every write
            (output, store, trace) stay in this process, so the output is the same as with
            1 (see :mod:`plandag.extract.parallel`). Only used by the default extractor.
        cluster: ``"local"`` (a Dask scheduler and ``workers`` worker processes on 127.0.0.1,
            outside this process)
            or ``"tcp://HOST:PORT"`` (an existing Dask scheduler) to extract there instead
            (:mod:`plandag.extract.cluster`; the ``dask`` extra); None: this machine.
        statuses: the inputs' statuses as :func:`expand_inputs` read them (its
            ``statuses``), or None: an input's status (is it the output file, is it a
            regular file) is then not read again. A status is read for the inputs it does
            not hold; whatever the status said, an input is read without waiting (a file
            turned into a named pipe since gives an error record, never a wait).

    Returns:
        A :class:`BatchSummary` of this run.

    Raises:
        InputError: ``jobs`` < 1, ``workers`` < 1, an unknown ``cluster``, an unknown
            ``format``, the output (or its items file) is an input that is not a previous
            plandag output (nothing is written then), or (with ``resume``) an existing
            output that plandag did not write (see
            :func:`~plandag.extract.nfe.output.load_existing`).
        OSError: the output file cannot be written.
    """
    if jobs < 1:
        raise InputError(f"--jobs must be at least 1, not {jobs}")
    if workers is not None and workers < 1:
        raise InputError(f"--workers must be at least 1, not {workers}")
    if not flush_seconds > 0 or flush_records < 1:
        raise InputError(
            f"flush_seconds must be above 0 and flush_records at least 1, not {flush_seconds} "
            f"and {flush_records}"
        )
    output_format = output_format_for(output, format)
    extract = (
        extractor
        if extractor is not None
        else _default_extractor(output, run_options, write_boundary, repairer, save_repairs)
    )
    started = time.perf_counter()
    cpu_started = time.process_time()
    placed: dict[str, list[Mapping[str, Any]]] = {}
    input_names = {os.fspath(path) for path in inputs}
    unplaced: list[Mapping[str, Any]] = []
    for record in missing:
        name = os.fspath(Path(str(record.get("source", ""))))
        if name in input_names:
            placed.setdefault(name, []).append(record)
        else:
            unplaced.append(record)
    known: dict[str, os.stat_result | None] = dict(statuses) if statuses is not None else {}
    paths = _without_output(inputs, output, output_format, placed, known)

    uniqueness = _Uniqueness()
    # An input is done when a record holds both its bytes' sha256 and its path: a second
    # file with the same bytes under another name still gets its own record (nothing lost;
    # unique_in_batch then fails for both, as it does in a run without --resume).
    done: set[tuple[str, str]] = set()
    previous: list[WrittenRecord] = []
    if resume:
        previous = load_existing(output, output_format)
        for written in previous:
            uniqueness.add_written(written)
            if written.sha256:
                done.add((written.sha256, written.source))

    summary = BatchSummary(
        inputs=len(paths) + len(unplaced),
        kept_from_previous=len(previous),
        output=output,
        items_output=items_path_for(output) if output_format == "csv" else None,
        format=output_format,
    )
    tally = _Tally()
    mapper = None
    if extractor is None:  # the map: documents to worker processes or a cluster
        from plandag.extract.mapper import open_mapper

        opened = time.perf_counter()
        cpu_opened = time.process_time()
        mapper = open_mapper(
            workers=workers,
            cluster=cluster,
            documents=len(paths),
            jobs=jobs,
            run_options=run_options,
            write_boundary=write_boundary,
            output=output,
            repairs=repairer is not None,
            local=extract,
            repairer=repairer,
            save_repairs=save_repairs,
        )
        if mapper is not None:
            extract = mapper
            summary.start_seconds = time.perf_counter() - opened
            cpu_started += time.process_time() - cpu_opened
    try:
        writer = open_writer(output, output_format, append=resume, grouped=True)
    except BaseException:
        if mapper is not None:
            mapper.backend.close()
        raise
    first_new = len(previous)
    total = len(paths)
    results: dict[int, Sequence[Mapping[str, Any] | EncodedRecord]] = {}
    next_to_write = 0
    finished = 0
    held = 0  # records passed to the writer since the last group was written
    all_written = anyio.Event()

    def write_records(records: Sequence[Mapping[str, Any] | EncodedRecord]) -> None:
        nonlocal held
        encoded: list[EncodedRecord] = []
        for record in records:
            if isinstance(record, EncodedRecord):
                if uniqueness.add_first(record):  # its texts hold its outcome: written as is
                    encoded.append(record)
                    continue
                record = record.record()  # a repeated key: encoded again with its outcome
            entry = uniqueness.add_new(record)
            texts = record_json_texts(entry)
            if texts is None:
                # Not plain JSON, or a lone surrogate somewhere: a name that is not valid
                # UTF-8 is shown with its bytes escaped, everywhere. Registered again from
                # the escaped record, as if the first registration had never been.
                uniqueness.discard_last()
                entry = uniqueness.add_new(escaped(record))
                texts = record_json_texts(entry)
            encoded.append(encode_ready(entry, texts, keep=True))
        writer.write_encoded(encoded)
        for item in encoded:
            tally.add(item)
            if on_record is not None or on_record_json is not None:
                record = item.record()
                if on_record is not None:
                    on_record(record)
                if on_record_json is not None:
                    on_record_json(record, item.compact)
            if on_encoded is not None:
                on_encoded(item)
        held += len(encoded)
        if held >= flush_records:
            write_group()

    def write_group() -> None:
        """The records written so far into the file, then the caller's ``on_flush``."""
        nonlocal held
        held = 0
        writer.flush()
        if on_flush is not None:
            on_flush()

    async def write_groups() -> None:
        """A group at least every ``flush_seconds`` while records wait, until every input
        is written."""
        while not all_written.is_set():
            with anyio.move_on_after(flush_seconds):
                await all_written.wait()
            if held:
                write_group()

    def flush_ready() -> None:
        """Write the records of every input ready in order (a chunk's, often) together:
        one write, one ``on_progress``; a group still ends after the input that fills it."""
        nonlocal next_to_write, finished
        first = next_to_write
        ready: list[Mapping[str, Any] | EncodedRecord] = []
        while next_to_write in results:
            records = results.pop(next_to_write)
            next_to_write += 1
            if records:
                ready.extend(records)
                summary.inputs_with_record += 1
                if held + len(ready) >= flush_records:
                    write_records(ready)  # the group is written after this input
                    ready = []
        if ready:
            write_records(ready)
        if next_to_write > first:
            finished += next_to_write - first
            for _ in range(next_to_write - first):
                slots.release()
            if on_progress is not None:
                on_progress(finished, total)
        if finished >= total:
            all_written.set()

    def settled(index: int, path: Path, name: str | None = None) -> tuple[bool, str]:
        """``(True, "")`` when input ``index`` needs no extraction (not a regular file:
        its error record placed; already recorded, with ``resume``: skipped), else
        ``(False, its sha256 when resume needs it)`` (``name``: ``os.fspath(path)`` when
        the caller has it)."""
        problem = _problem(path, known, name)
        sha = file_sha256(path) if resume and problem is None else ""
        if problem is not None:
            results[index] = [error_record(str(path), "", *problem)]
        elif sha and (sha, display_name(path)) in done:
            summary.skipped_by_resume += 1
            summary.inputs_with_record += 1
            results[index] = []
        else:
            return False, sha
        return True, ""

    async def run_one(index: int, path: Path) -> None:
        ready, sha = settled(index, path)
        if not ready:
            results[index] = await _extract_safely(extract, path, sha)
        flush_ready()

    async def run_chunk(chunk: list[tuple[int, Path, str]], group: TaskGroup) -> None:
        """One chunk through the mapper (one wait for the whole chunk); the documents it
        hands back are extracted here by the parent's own extractor, ``jobs`` at a time."""
        assert mapper is not None
        try:
            answers: list[Any] = await mapper.map_chunk([path for _, path, _ in chunk])
        except Exception as error:  # each input still gets its row
            answers = [error] * len(chunk)
        finally:
            chunks_in_flight.release()
        for (index, path, sha), answer in zip(chunk, answers, strict=True):
            if isinstance(answer, list):
                results[index] = _checked(answer, path, sha)
            elif isinstance(answer, BaseException):
                results[index] = [_internal_error(path, sha, answer)]
            else:
                group.start_soon(run_local, index, path, sha)
        flush_ready()

    async def run_local(index: int, path: Path, sha: str) -> None:
        assert mapper is not None
        async with local_limiter:
            results[index] = await _extract_safely(mapper.local, path, sha)
        flush_ready()

    async def send_inputs(group: TaskGroup) -> None:
        """Every input to ``in_flight`` tasks that extract one at a time (the extractor in
        this process), each taking the next input once a place in the window is free."""
        queue = iter(enumerate(paths))
        for _ in range(min(in_flight, len(paths))):
            group.start_soon(take_inputs, queue)

    async def send_chunks(group: TaskGroup) -> None:
        """Every input to the mapper in chunks of :meth:`ChunkMapper.chunk_for` documents,
        at most two chunks per worker in flight; inputs that need no extraction placed as
        they are met."""
        assert mapper is not None
        chunk: list[tuple[int, Path, str]] = []
        sent = 0  # inputs in the chunks sent so far
        size = mapper.chunk_for(len(paths))  # of the chunk being filled

        async def send() -> None:
            nonlocal chunk, sent, size
            sent += len(chunk)
            size = mapper.chunk_for(len(paths) - sent)
            await chunks_in_flight.acquire()
            group.start_soon(run_chunk, chunk, group)
            chunk = []

        for index, path in enumerate(paths):
            if slots.value == 0:
                if chunk:  # the window is full: what waits goes now
                    await send()
                await slots.acquire()
            else:  # a free place: taken without a trip through the event loop
                slots.acquire_nowait()
                if index % _YIELD_EVERY == 0:
                    await anyio.lowlevel.checkpoint()  # the loop's other tasks run too
            name = os.fspath(path)
            waiting = placed.get(name)
            if waiting:
                results[index] = [dict(waiting.pop(0))]
            else:
                ready, sha = settled(index, path, name)
                if not ready:
                    chunk.append((index, path, sha))
                    if len(chunk) >= size:
                        await send()
                    continue
            flush_ready()
        if chunk:
            await send()

    async def take_inputs(queue: Iterator[tuple[int, Path]]) -> None:
        """One of ``in_flight`` tasks sharing ``queue``: a place in the window, then the next
        input, extracted before the next one is taken. Inputs go in order, each to one
        task, as from one queue, with no hand-over between tasks; a free place is taken
        without a trip through the event loop (which the task still lets run at least once
        per :data:`_YIELD_EVERY` inputs)."""
        taken = 0
        while True:
            if slots.value == 0:
                await slots.acquire()
            else:
                slots.acquire_nowait()
                taken += 1
                if taken % _YIELD_EVERY == 0:
                    await anyio.lowlevel.checkpoint()  # the loop's other tasks run too
            item = next(queue, None)
            if item is None:
                slots.release()
                return
            index, path = item
            waiting = placed.get(os.fspath(path))
            if waiting:
                results[index] = [dict(waiting.pop(0))]
                flush_ready()
            else:
                await run_one(index, path)

    def apply_corrections() -> None:
        """Give unique_in_batch its final outcome in the file, also after an interruption,
        so that the records written so far never contradict each other."""
        corrections = uniqueness.corrections()
        if corrections:
            new_statuses = rewrite_unique_in_batch(output, output_format, corrections)
            for position, outcome in corrections.items():
                if position < first_new:
                    if on_previous_correction is not None:
                        on_previous_correction(
                            previous[position],
                            {
                                "unique_in_batch": {"status": outcome[0], "detail": outcome[1]},
                                "status": new_statuses.get(position, uniqueness.statuses[position]),
                            },
                        )
                    continue
                before = uniqueness.written[position]
                if before is not None and before[0] == "fail" and outcome[0] != "fail":
                    tally.failing_checks["unique_in_batch"] -= 1
                if (before is None or before[0] != "fail") and outcome[0] == "fail":
                    tally.failing_checks["unique_in_batch"] += 1
                status_before = uniqueness.statuses[position]
                status_after = new_statuses.get(position, status_before)
                if status_after != status_before:
                    tally.by_status[status_before] -= 1
                    tally.by_status[status_after] += 1
                if on_correction is not None:
                    on_correction(
                        position - first_new,
                        {
                            "unique_in_batch": {"status": outcome[0], "detail": outcome[1]},
                            "status": status_after,
                        },
                    )

    in_flight = mapper.capacity if mapper is not None else jobs
    slots = anyio.Semaphore(window if window is not None else max(8 * in_flight, 64))
    chunks_in_flight = anyio.Semaphore(2 * max(1, mapper.backend.workers) if mapper else 1)
    local_limiter = anyio.CapacityLimiter(jobs)
    try:
        if unplaced:
            write_records(unplaced)
            summary.inputs_with_record += len(unplaced)
        if on_progress is not None:
            on_progress(0, total)
        if total == 0:
            all_written.set()
        async with anyio.create_task_group() as group:
            group.start_soon(write_groups)
            if mapper is not None:
                await send_chunks(group)
            else:
                await send_inputs(group)
    finally:
        try:
            writer.close()
            if on_flush is not None:
                on_flush()  # the last group
            if on_settled is not None:
                on_settled()  # every group's rows are there before any correction
            apply_corrections()
            ended = time.perf_counter()
            cpu_ended = time.process_time()
        finally:
            # after the file's last write: stopping the workers or a cluster is not part
            # of the batch's duration (as starting them is reported apart)
            if mapper is not None:
                mapper.backend.close()

    summary.records = tally.records
    summary.by_status = {k: v for k, v in tally.by_status.most_common() if v > 0}
    summary.failing_checks = {k: v for k, v in tally.failing_checks.most_common() if v > 0}
    summary.error_codes = dict(tally.error_codes.most_common())
    summary.repairs = {k: v for k, v in tally.repairs.most_common() if v > 0}
    summary.duration = ended - started
    summary.cpu_seconds = cpu_ended - cpu_started
    return summary


def _internal_error(path: Path, sha: str, error: BaseException) -> dict[str, Any]:
    """The ``internal_error`` record of an input whose extraction raised ``error``."""
    return error_record(
        str(path), sha or file_sha256(path), "internal_error", f"{type(error).__name__}: {error}"
    )


def _checked(records: Any, path: Path, sha: str) -> Sequence[Mapping[str, Any] | EncodedRecord]:
    """``records`` when they are a non-empty list of records (dicts, or encoded), else the
    ``internal_error`` record saying what the extractor returned instead."""
    try:
        if not isinstance(records, list) or not records:
            raise TypeError(f"the extractor returned {records!r} instead of a list of records")
        for record in records:
            if type(record) is not EncodedRecord and not isinstance(record, dict | EncodedRecord):
                raise TypeError(f"the extractor returned a {type(record).__name__}, not a record")
    except TypeError as error:
        return [_internal_error(path, sha, error)]
    return records


async def _extract_safely(
    extract: Extractor, path: Path, sha: str
) -> Sequence[Mapping[str, Any] | EncodedRecord]:
    """Run the extractor on one input; any exception becomes an ``internal_error`` record.
    Records come as dicts, or encoded (:class:`~plandag.extract.nfe.encoded.EncodedRecord`,
    from a worker)."""
    try:
        records: Any = await extract(path)
    except Exception as exc:
        return [_internal_error(path, sha, exc)]
    return _checked(records, path, sha)


def batch_exit_code(summary: BatchSummary) -> int:
    """The exit code of ``plandag extract`` (ARCHITECTURE.md, "States and exit codes").

    0 when every input (and every pattern that matched nothing) got a record, whatever the
    records say; 1 otherwise, which only happens when the batch was cut short. Unusable
    arguments (exit 2) raise :class:`~plandag.errors.InputError` before a batch starts, and
    interruptions (130/143) are the CLI's to map.
    """
    return 0 if summary.inputs_with_record >= summary.inputs else 1


def _count_rows(table: Table, title: str, counts: Iterable[tuple[str, int]]) -> None:
    rows = list(counts)
    if rows:
        table.add_section()
        for name, count in rows:
            table.add_row(f"{title}: {name}", str(count))


def render_summary(summary: BatchSummary, *, top: int = 10) -> Table:
    """A rich table of a batch: inputs, records by status, the most frequent failing checks
    and error codes (``top`` of each), skips by ``--resume``, duration, output file(s)."""
    table = Table(title="NF-e extraction", show_header=True, header_style="bold")
    table.add_column("", no_wrap=True)
    table.add_column("count", justify="right")
    table.add_row("inputs", str(summary.inputs))
    table.add_row("records written", str(summary.records))
    if summary.skipped_by_resume or summary.kept_from_previous:
        table.add_row("skipped (already recorded)", str(summary.skipped_by_resume))
        table.add_row("kept from the previous output", str(summary.kept_from_previous))
    table.add_section()
    for status in ("ok", "check_failed", "error"):
        table.add_row(f"status: {status}", str(summary.by_status.get(status, 0)))
    _count_rows(table, "failing check", list(summary.failing_checks.items())[:top])
    _count_rows(table, "error", list(summary.error_codes.items())[:top])
    _count_rows(table, "repairs", list(summary.repairs.items()))
    table.add_section()
    table.add_row("seconds", f"{summary.duration:.2f}")
    if summary.output is not None:
        table.add_row("output", display_name(summary.output))
    if summary.items_output is not None:
        table.add_row("items", display_name(summary.items_output))
    return table

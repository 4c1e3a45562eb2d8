"""Conversations in SQLite: two tables beside the run store's own.

``conversation`` holds one row per conversation (id, origin, created, expiry_s) and
``conversation_turn`` one row per turn, keyed by ``(conversation_id, seq)``. A change that
records several turns (a decision and the end of plan mode) writes them in one transaction,
and checks first that the stored conversation still has the turns the object knew of, so a
crash, or a second writer, never leaves half a change or a turn out of order. The state of
a conversation is not stored: it is derived from its turns when loaded
(:class:`plandag.conversation.model.Conversation`), so a reloaded conversation behaves as
the saved one did.

The connection may be shared (``store.connection`` of the run store): the tables are
created with ``CREATE TABLE IF NOT EXISTS``, and a write inside a transaction the caller
already opened uses a savepoint instead of its own transaction.
"""

from __future__ import annotations

import builtins
import contextlib
import dataclasses
import json
import sqlite3
import uuid
from collections.abc import Iterator, Sequence
from typing import Any, cast

from plandag.conversation.model import (
    DEFAULT_EXPIRY_S,
    ORIGINS,
    Conversation,
    ConversationError,
    Origin,
    Turn,
)

__all__ = ["ConversationStore", "ConversationSummary"]

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS conversation (
        id TEXT PRIMARY KEY,
        origin TEXT NOT NULL,
        created REAL NOT NULL,
        expiry_s REAL NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS conversation_turn (
        conversation_id TEXT NOT NULL REFERENCES conversation(id),
        seq INTEGER NOT NULL,
        kind TEXT NOT NULL,
        time REAL NOT NULL,
        text TEXT NOT NULL,
        origin TEXT,
        mode TEXT NOT NULL,
        data TEXT NOT NULL,
        PRIMARY KEY (conversation_id, seq)
    )""",
)


@dataclasses.dataclass(frozen=True, slots=True)
class ConversationSummary:
    """One line of :meth:`ConversationStore.list`.

    Attributes:
        id: the conversation's id.
        origin: who started it.
        created: wall-clock seconds since the epoch.
        turns: how many turns it has.
        last_time: time of its last turn (``created`` when it has none).
    """

    id: str
    origin: Origin
    created: float
    turns: int
    last_time: float


class ConversationStore:
    """Create, load and list persisted conversations on a SQLite connection.

    Args:
        connection: an open ``sqlite3.Connection`` (the run store's ``store.connection``,
            or one of your own). Its tables ``conversation`` and ``conversation_turn`` are
            created if missing.
    """

    def __init__(self, connection: sqlite3.Connection) -> None:
        self.connection = connection
        with self._transaction():
            for statement in _SCHEMA:
                connection.execute(statement)

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """All or nothing: BEGIN IMMEDIATE...COMMIT, or a savepoint inside the caller's
        transaction; rolled back on any exception."""
        connection = self.connection
        if connection.in_transaction:
            connection.execute("SAVEPOINT conversation_write")
            try:
                yield connection
            except BaseException:
                connection.execute("ROLLBACK TO conversation_write")
                connection.execute("RELEASE conversation_write")
                raise
            connection.execute("RELEASE conversation_write")
            return
        connection.execute("BEGIN IMMEDIATE")
        try:
            yield connection
        except BaseException:
            connection.rollback()
            raise
        connection.commit()

    def create(
        self,
        origin: Origin,
        now: float,
        *,
        expiry_s: float = DEFAULT_EXPIRY_S,
        id: str | None = None,
    ) -> Conversation:
        """Start and save a new conversation.

        Args:
            origin: who started it (:data:`plandag.conversation.Origin`).
            now: wall-clock seconds since the epoch.
            expiry_s: seconds without a decision before plan mode ends (default 24 h).
            id: the id to give it (default: a new uuid4 hex).

        Returns:
            The conversation; its changes are recorded here.

        Raises:
            ConversationError: a bad origin or expiry, or the id is taken.
        """
        conversation = Conversation(
            id=id or uuid.uuid4().hex, origin=origin, created=now, expiry_s=expiry_s, writer=self
        )
        try:
            with self._transaction() as connection:
                connection.execute(
                    "INSERT INTO conversation (id, origin, created, expiry_s) VALUES (?, ?, ?, ?)",
                    (conversation.id, origin, conversation.created, conversation.expiry_s),
                )
        except sqlite3.IntegrityError as error:
            raise ConversationError(
                f"a conversation with id {conversation.id!r} already exists"
            ) from error
        return conversation

    def load(self, conversation_id: str) -> Conversation:
        """Load a conversation and replay its turns.

        Raises:
            ConversationError: no conversation has this id.
        """
        row = self.connection.execute(
            "SELECT origin, created, expiry_s FROM conversation WHERE id = ?", (conversation_id,)
        ).fetchone()
        if row is None:
            raise ConversationError(
                f"no conversation {conversation_id!r} in this store; "
                "ConversationStore.list() shows the stored ones"
            )
        origin, created, expiry_s = row
        rows = self.connection.execute(
            "SELECT seq, kind, time, text, origin, mode, data FROM conversation_turn "
            "WHERE conversation_id = ? ORDER BY seq",
            (conversation_id,),
        ).fetchall()
        turns = [
            Turn(
                index=seq,
                kind=kind,
                time=time,
                text=text,
                origin=turn_origin,
                mode=mode,
                data=cast(dict[str, Any], json.loads(data)),
            )
            for seq, kind, time, text, turn_origin, mode, data in rows
        ]
        return Conversation(
            id=conversation_id,
            origin=origin,
            created=created,
            expiry_s=expiry_s,
            turns=turns,
            writer=self,
        )

    def list(self, *, origin: Origin | None = None) -> builtins.list[ConversationSummary]:
        """Every stored conversation, the most recently active first.

        Args:
            origin: only those started by this origin, or all when None.
        """
        if origin is not None and origin not in ORIGINS:
            raise ConversationError(f"origin must be one of {', '.join(ORIGINS)}, not {origin!r}")
        rows = self.connection.execute(
            "SELECT c.id, c.origin, c.created, COUNT(t.seq), COALESCE(MAX(t.time), c.created) "
            "FROM conversation c LEFT JOIN conversation_turn t ON t.conversation_id = c.id "
            "WHERE ? IS NULL OR c.origin = ? "
            "GROUP BY c.id ORDER BY 5 DESC, c.created DESC, c.id",
            (origin, origin),
        ).fetchall()
        return [ConversationSummary(*row) for row in rows]

    def append_turns(
        self, conversation_id: str, expected_count: int, turns: Sequence[Turn]
    ) -> None:
        """Record ``turns`` after the first ``expected_count`` turns, in one transaction.

        Raises:
            ConversationError: the stored conversation does not have ``expected_count`` turns
                (another writer recorded turns since this object was loaded: load it again);
                nothing was written.
        """
        with self._transaction() as connection:
            (count,) = connection.execute(
                "SELECT COUNT(*) FROM conversation_turn WHERE conversation_id = ?",
                (conversation_id,),
            ).fetchone()
            if count != expected_count:
                raise ConversationError(
                    f"conversation {conversation_id} has {count} stored turns, not "
                    f"{expected_count}: another writer changed it; load it again"
                )
            connection.executemany(
                "INSERT INTO conversation_turn (conversation_id, seq, kind, time, text, origin, "
                "mode, data) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (
                        conversation_id,
                        turn.index,
                        turn.kind,
                        turn.time,
                        turn.text,
                        turn.origin,
                        turn.mode,
                        json.dumps(turn.data, ensure_ascii=False, allow_nan=False),
                    )
                    for turn in turns
                ],
            )

"""Schema migrations of the run store: ``PRAGMA user_version`` and an ordered list.

A database records the number of the last migration applied in SQLite's ``user_version``
header field (https://www.sqlite.org/pragma.html#pragma_user_version; 0 in a new file and
in a store written by plandag 0.1.0, whose tables the first migration creates only where
they are missing). Opening a store applies every later migration in order, each in its own
``BEGIN IMMEDIATE`` transaction that reads the version again once it holds the write lock,
so two processes opening the same file at once apply each migration once, and a crash
mid-migration leaves the previous version intact.

Every change to the schema is a new entry at the end of :data:`MIGRATIONS`; an entry that
has shipped is never edited.
"""

from __future__ import annotations

import dataclasses
import sqlite3

from plandag.errors import InputError

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "Migration", "migrate", "schema_version"]


@dataclasses.dataclass(frozen=True, slots=True)
class Migration:
    """One step of the schema.

    Attributes:
        version: the ``user_version`` the database has once it is applied (1, 2, ...).
        description: what it changes, in a line.
        statements: the SQL statements, run in order inside one transaction.
    """

    version: int
    description: str
    statements: tuple[str, ...]


_BASELINE = (
    """CREATE TABLE IF NOT EXISTS run (
    run_id TEXT PRIMARY KEY,
    created REAL NOT NULL,
    updated REAL NOT NULL,
    command TEXT NOT NULL,
    goal TEXT,
    status TEXT NOT NULL,
    params TEXT NOT NULL DEFAULT '{}',
    options TEXT NOT NULL DEFAULT '{}',
    version INTEGER NOT NULL DEFAULT 0,
    segment INTEGER NOT NULL DEFAULT 0,
    pid INTEGER,
    spent_usd REAL NOT NULL DEFAULT 0,
    spent_tokens INTEGER NOT NULL DEFAULT 0,
    awaiting_since REAL,
    expires_at REAL,
    awaiting_reason TEXT,
    detail TEXT
)""",
    "CREATE INDEX IF NOT EXISTS run_created ON run (created)",
    """CREATE TABLE IF NOT EXISTS plan_version (
    run_id TEXT NOT NULL REFERENCES run (run_id),
    version INTEGER NOT NULL,
    hash TEXT NOT NULL,
    plan TEXT NOT NULL,
    source TEXT NOT NULL,
    created REAL NOT NULL,
    approved_by TEXT,
    approved_at REAL,
    PRIMARY KEY (run_id, version)
)""",
    """CREATE TABLE IF NOT EXISTS step (
    run_id TEXT NOT NULL REFERENCES run (run_id),
    step_id INTEGER NOT NULL,
    tool TEXT NOT NULL,
    effects TEXT NOT NULL DEFAULT 'none',
    status TEXT NOT NULL DEFAULT 'pending',
    reason TEXT,
    detail TEXT,
    attempts INTEGER NOT NULL DEFAULT 0,
    started_at REAL,
    ended_at REAL,
    duration_s REAL,
    args TEXT,
    result TEXT,
    result_hash TEXT,
    error TEXT,
    superseded_by TEXT,
    segment INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (run_id, step_id)
)""",
    """CREATE TABLE IF NOT EXISTS transition (
    id INTEGER PRIMARY KEY,
    run_id TEXT NOT NULL,
    step_id INTEGER NOT NULL,
    attempt INTEGER NOT NULL,
    state TEXT NOT NULL,
    reason TEXT,
    time REAL NOT NULL,
    segment INTEGER NOT NULL
)""",
    "CREATE INDEX IF NOT EXISTS transition_run ON transition (run_id, step_id)",
    """CREATE TABLE IF NOT EXISTS decision (
    id INTEGER PRIMARY KEY,
    run_id TEXT NOT NULL,
    version INTEGER NOT NULL,
    plan_hash TEXT NOT NULL,
    decision TEXT NOT NULL,
    who TEXT,
    feedback TEXT,
    time REAL NOT NULL
)""",
    """CREATE TABLE IF NOT EXISTS llm_call (
    id INTEGER PRIMARY KEY,
    run_id TEXT NOT NULL,
    purpose TEXT NOT NULL,
    provider TEXT,
    model TEXT,
    attempt INTEGER,
    input_tokens INTEGER,
    output_tokens INTEGER,
    cost_usd REAL,
    duration_s REAL,
    time REAL,
    error TEXT
)""",
    """CREATE TABLE IF NOT EXISTS event (
    id INTEGER PRIMARY KEY,
    run_id TEXT NOT NULL,
    time REAL NOT NULL,
    kind TEXT NOT NULL,
    data TEXT NOT NULL
)""",
    """CREATE TABLE IF NOT EXISTS document (
    batch_id TEXT NOT NULL,
    idx INTEGER NOT NULL,
    input TEXT NOT NULL,
    status TEXT NOT NULL,
    record TEXT,
    result_hash TEXT,
    error TEXT,
    time REAL NOT NULL,
    PRIMARY KEY (batch_id, idx)
)""",
)

MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "the tables of plandag 0.1.0 (created where missing)", _BASELINE),
    Migration(
        2,
        "plan estimates, escalations, instructions from a person, durations per tool",
        (
            # {"cost_usd": float | null, "seconds": float | null, "unknown": [step ids]}
            "ALTER TABLE plan_version ADD COLUMN estimate TEXT",
            # when the version was shown to a person for a decision (None: never shown)
            "ALTER TABLE plan_version ADD COLUMN shown_at REAL",
            """CREATE TABLE escalation (
    id INTEGER PRIMARY KEY,
    run_id TEXT NOT NULL,
    time REAL NOT NULL,
    reason TEXT NOT NULL,
    context TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT 'open',
    decision TEXT,
    who TEXT,
    decided_at REAL,
    note TEXT
)""",
            "CREATE INDEX escalation_status ON escalation (status, time)",
            """CREATE TABLE instruction (
    id INTEGER PRIMARY KEY,
    run_id TEXT NOT NULL,
    time REAL NOT NULL,
    who TEXT,
    text TEXT NOT NULL,
    consumed_at REAL
)""",
            "CREATE INDEX instruction_run ON instruction (run_id, consumed_at)",
            "CREATE INDEX step_tool ON step (tool, status)",
        ),
    ),
    Migration(
        3,
        "an instruction may replace the run's goal (plandag tell --new-goal)",
        ("ALTER TABLE instruction ADD COLUMN new_goal INTEGER NOT NULL DEFAULT 0",),
    ),
    Migration(
        4,
        "per-step decisions in an approval request (approved, edited, rejected, dropped)",
        (
            """CREATE TABLE step_decision (
    id INTEGER PRIMARY KEY,
    run_id TEXT NOT NULL,
    version INTEGER NOT NULL,
    step_id INTEGER NOT NULL,
    decision TEXT NOT NULL,
    args TEXT,
    who TEXT,
    time REAL NOT NULL
)""",
            "CREATE INDEX step_decision_run ON step_decision (run_id, version)",
        ),
    ),
    Migration(
        5,
        "the plan library (versions of plans by task type) and the runs of each task type",
        (
            # status: admitted (reused by runs) | pending (waits for `plandag library approve`)
            """CREATE TABLE library_plan (
    task_type TEXT NOT NULL,
    version INTEGER NOT NULL,
    plan TEXT NOT NULL,
    plan_hash TEXT NOT NULL,
    params TEXT NOT NULL,
    tools TEXT NOT NULL,
    goal TEXT,
    status TEXT NOT NULL,
    reason TEXT,
    source_run TEXT,
    approved_by TEXT,
    approved_at REAL,
    created REAL NOT NULL,
    PRIMARY KEY (task_type, version)
)""",
            # one row per run that went through the library (task_type '' when it had none)
            """CREATE TABLE task_run (
    run_id TEXT PRIMARY KEY,
    task_type TEXT NOT NULL,
    version INTEGER,
    how TEXT NOT NULL,
    status TEXT NOT NULL,
    replans INTEGER NOT NULL,
    escalated INTEGER NOT NULL,
    spent_usd REAL NOT NULL,
    planner_calls INTEGER NOT NULL,
    planner_usd REAL NOT NULL,
    routing_calls INTEGER NOT NULL,
    routing_usd REAL NOT NULL,
    alerts INTEGER NOT NULL,
    duration_s REAL,
    time REAL NOT NULL
)""",
            "CREATE INDEX task_run_type ON task_run (task_type, time)",
        ),
    ),
    Migration(
        6,
        "the start time of the process running a run (a reused process id is not its owner)",
        # seconds since the epoch (plandag.store.owner); NULL with pid NULL, or in a run
        # recorded before
        ("ALTER TABLE run ADD COLUMN pid_started REAL",),
    ),
    Migration(
        7,
        "what each document's model calls used (requests, failed, tokens, US dollars)",
        (
            # NULL in a row recorded before, or by a job that makes no model call
            "ALTER TABLE document ADD COLUMN requests INTEGER",
            "ALTER TABLE document ADD COLUMN failed_requests INTEGER",
            "ALTER TABLE document ADD COLUMN input_tokens INTEGER",
            "ALTER TABLE document ADD COLUMN output_tokens INTEGER",
            "ALTER TABLE document ADD COLUMN cost_usd REAL",
        ),
    ),
    Migration(
        8,
        "the steps' durations by tool and state in an index (measured durations are counted "
        "and their median found there, without reading every stored step)",
        (
            "CREATE INDEX step_durations ON step (tool, status, duration_s, run_id)",
            "DROP INDEX step_tool",  # the new index begins with its columns
        ),
    ),
    Migration(
        9,
        "the index of durations holds succeeded steps only (a step declared, running, failed "
        "or skipped has no entry in it, so declaring a run's steps and ending one writes none)",
        (
            "DROP INDEX step_durations",
            # read by Store.tool_durations, whose queries say the index's WHERE terms (or
            # SQLite does not use it) and read no column outside it (status included)
            "CREATE INDEX step_durations ON step (tool, duration_s, run_id, status) "
            "WHERE status = 'succeeded' AND duration_s IS NOT NULL",
        ),
    ),
    Migration(
        10,
        "the index of succeeded steps' durations in the order they ended, per tool (a step's "
        "entry is appended at its tool's end of the index, not put among the durations in "
        "order; a tool's measured duration is the median of its latest steps)",
        (
            "DROP INDEX step_durations",
            # read by Store.tool_durations, whose queries say the index's WHERE terms (or
            # SQLite does not use it) and read no column outside it (status included)
            "CREATE INDEX step_recent_durations ON step "
            "(tool, ended_at, duration_s, run_id, status) "
            "WHERE status = 'succeeded' AND duration_s IS NOT NULL",
        ),
    ),
    Migration(
        11,
        "the runs each tool succeeded in, written as each run ends (a tool is measured once "
        "it succeeded in 5 runs: counted there, without reading the steps of its oldest "
        "runs)",
        (
            # (run, tool): the run has a succeeded step of the tool (its duration known);
            # written with the run's final step rows (StoreRecorder.reconcile), never while
            # the run's steps may still change; read by Store.tool_durations (tool_run_tool)
            """CREATE TABLE tool_run (
    run_id TEXT NOT NULL,
    tool TEXT NOT NULL,
    PRIMARY KEY (run_id, tool)
) WITHOUT ROWID""",
            "CREATE INDEX tool_run_tool ON tool_run (tool)",
            # a run taken again (resume, approve): its steps may change until it stops
            """CREATE TRIGGER tool_run_running AFTER UPDATE OF status ON run
WHEN new.status = 'running' AND old.status <> 'running'
BEGIN
    DELETE FROM tool_run WHERE run_id = new.run_id;
END""",
            # a succeeded step forgotten (a revised plan, store upkeep): the run is no longer
            # listed for its tool (counted again from the steps until the run stops again)
            """CREATE TRIGGER tool_run_step_deleted AFTER DELETE ON step
WHEN old.status = 'succeeded'
BEGIN
    DELETE FROM tool_run WHERE run_id = old.run_id AND tool = old.tool;
END""",
            # the runs stored before, from their rows
            "INSERT INTO tool_run (run_id, tool) "
            "SELECT DISTINCT step.run_id, step.tool FROM step JOIN run USING (run_id) "
            "WHERE step.status = 'succeeded' AND step.duration_s IS NOT NULL "
            "AND run.status <> 'running'",
        ),
    ),
)
SCHEMA_VERSION = MIGRATIONS[-1].version
"""The schema version this release writes."""


def schema_version(connection: sqlite3.Connection) -> int:
    """The database's ``user_version`` (0 for a new file or a plandag 0.1.0 store)."""
    row = connection.execute("PRAGMA user_version").fetchone()
    return int(row[0])


def migrate(connection: sqlite3.Connection) -> int:
    """Apply every migration the database lacks, in order; return the version reached.

    Args:
        connection: an open connection in autocommit mode (``isolation_level=None``).

    Returns:
        :data:`SCHEMA_VERSION`.

    Raises:
        InputError: the database was written by a newer plandag (its version is past
            :data:`SCHEMA_VERSION`): upgrade plandag or use another store.
        sqlite3.Error: a statement failed; that migration is rolled back whole.
    """
    current = schema_version(connection)
    if current > SCHEMA_VERSION:
        listed = connection.execute("PRAGMA database_list").fetchone()
        where = f" {listed[2]}" if listed is not None and listed[2] else ""
        raise InputError(
            f"run store{where} has schema version {current}, newer than this plandag knows "
            f"({SCHEMA_VERSION}); upgrade plandag, or pick another store with --store PATH"
        )
    for migration in MIGRATIONS:
        if migration.version <= current:
            continue
        connection.execute("BEGIN IMMEDIATE")
        try:
            if schema_version(connection) >= migration.version:  # another process did it
                connection.execute("ROLLBACK")
                continue
            for statement in migration.statements:
                connection.execute(statement)
            connection.execute(f"PRAGMA user_version = {migration.version:d}")
        except BaseException:
            connection.execute("ROLLBACK")
            raise
        connection.execute("COMMIT")
    return SCHEMA_VERSION

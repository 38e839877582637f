"""SQLite: a trigger that moves a session's counter row along with its raw log.

With it, chatledger's append on SQLite is one statement: ``INSERT INTO raw_messages ..
SELECT last_sequence + 1 FROM agent_sessions ..``, and the trigger, after the insert,
sets the counter row's ``last_sequence`` to the new message's sequence.

The trigger bumps the counter only for the message right after it (``NEW.sequence =
last_sequence + 1``) of a live session (``deleted_at IS NULL``), so it never opens a
gap and never does what an append would refuse. Every other writer keeps its own
numbering correct with it in place:

* the older append (and this one when a session is new, or given fields it changes)
  bumps the counter first, then inserts a sequence equal to it: the trigger does nothing;
* ``chatledger import`` inserts the counter row at its final ``last_sequence`` before
  the messages, all at or below it: nothing;
* a writer numbering by ``MAX(sequence) + 1`` past the counter (zett-agent's own store
  after ``chatledger adopt``) takes exactly ``last_sequence + 1``: the counter follows,
  so the next append does not collide with it.

PostgreSQL's append is one statement already (a data-modifying CTE) and MySQL 8 has
no ``RETURNING``: on them this revision changes nothing. An expand-only revision:
code of earlier revisions keeps appending correctly, so ``compatible_from`` keeps its
predecessor's value. The downgrade drops the trigger. A later revision that rebuilds
a table on SQLite (create, copy, drop, rename: Alembic's batch mode) drops the trigger
first and creates it again last: ``raw_messages``'s ``DROP TABLE`` drops it, and the
``RENAME`` of a rebuilt ``agent_sessions`` fails while it names the dropped table.

Frozen: this file imports nothing from chatledger.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-03 11:00:00.000000
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0007"
#: The one predecessor.
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: The oldest revision whose code runs correctly on this schema.
compatible_from = "0004"

#: SQLite's ``max()`` of two arguments is GREATEST; the timestamps are ISO text.
COUNTER_TRIGGER = """CREATE TRIGGER raw_messages_counter AFTER INSERT ON raw_messages
FOR EACH ROW BEGIN
UPDATE agent_sessions SET last_sequence = NEW.sequence, updated_at = max(updated_at, NEW.created_at)
WHERE id = NEW.session_id AND last_sequence = NEW.sequence - 1 AND deleted_at IS NULL;
END"""


def _sqlite() -> bool:
    return op.get_context().dialect.name == "sqlite"


def upgrade() -> None:
    if _sqlite():
        op.execute(COUNTER_TRIGGER)


def downgrade() -> None:
    if _sqlite():
        op.execute("DROP TRIGGER IF EXISTS raw_messages_counter")

"""${message}

Revision ID: ${up_revision}
Revises: ${down_revision | comma,n}
Create Date: ${create_date}
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
${imports if imports else ""}
# A revision imports nothing from chatledger: copy what chatledger.types renders per
# dialect into plain SQLAlchemy types here (with_variant), as 0001 does. See
# migrations/README for the conventions.

revision: str = ${repr(up_revision)}
down_revision: str | Sequence[str] | None = ${repr(down_revision)}
branch_labels: str | Sequence[str] | None = ${repr(branch_labels)}
depends_on: str | Sequence[str] | None = ${repr(depends_on)}
#: The oldest revision whose code runs on the schema this revision leaves: this
#: revision itself (a contract), or, for an expand revision that code of the previous
#: revision keeps reading and writing correctly, the previous revision's value.
compatible_from: str = "${up_revision}"


def upgrade() -> None:
    ${upgrades if upgrades else "pass"}


def downgrade() -> None:
    ${downgrades if downgrades else "pass"}

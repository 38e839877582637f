"""``chatledger stats``: what the database holds (:mod:`chatledger.tools.stats`)."""

from __future__ import annotations

from ..stats import HELP, configure, run
from .shared import Command

COMMANDS: tuple[Command, ...] = (Command("stats", HELP, configure, run),)

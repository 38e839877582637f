"""The ``chatledger`` command's subcommands, one module per group, each ending in its
``COMMANDS``; :data:`chatledger.tools.cli.COMMANDS` joins them (see
:mod:`chatledger.tools.cli` for adding a group)."""

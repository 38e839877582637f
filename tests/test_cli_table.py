"""The command table: every command group's module is in it, each command once, so that
a new group is one module and one line in ``chatledger.tools.cli.COMMANDS``."""

from __future__ import annotations

import importlib
import pkgutil

from chatledger.tools import cli, commands


def test_every_command_group_is_in_the_table_once() -> None:
    groups = [
        importlib.import_module(f"{commands.__name__}.{module.name}")
        for module in pkgutil.iter_modules(commands.__path__)
        if module.name != "shared"
    ]
    listed = [command for group in groups for command in group.COMMANDS]
    assert sorted(command.name for command in listed) == sorted(command.name for command in cli.COMMANDS)
    assert len({command.name for command in cli.COMMANDS}) == len(cli.COMMANDS)
    assert set(listed) == set(cli.COMMANDS)

"""Progress bars of the moving commands (export, import, copy, purge), from rich."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from .rows import progress_totals


class RateColumn(ProgressColumn):
    """Items per second of a task (rich's own speed column counts bytes)."""

    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        return Text("" if speed is None else f"{speed:,.0f}/s", style="progress.data.speed")


class _Progress(Progress):
    """rich's progress display, which leaves no line behind when it stops without a bar
    (a command that failed before counting anything: a blank line on its stdout)."""

    def stop(self) -> None:
        if self.tasks or self.disable:
            super().stop()
            return
        self.live.transient = True
        self.live.stop()  # without Progress.stop's line after the (empty) display


def progress(console: Console) -> Progress:
    """A progress display with one bar per counted thing: what, done/total, rate, ETA.

    On a console that is not a terminal nothing is redrawn; the final state is
    printed once when the display stops (nothing, when no bar was added).
    """
    return _Progress(
        TextColumn("{task.description:<12}"),
        BarColumn(),
        MofNCompleteColumn(),
        RateColumn(),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
        console=console,
        refresh_per_second=4,
    )


class Tracker:
    """Advances the progress bars from the records going by."""

    def __init__(self, bars: Progress | None) -> None:
        self.bars = bars
        self.sessions: TaskID | None = None
        self.messages: TaskID | None = None

    def start(self, counts: Mapping[str, Any]) -> None:
        if self.bars is None:
            return
        sessions, messages = progress_totals(counts)
        self.sessions = self.bars.add_task("sessions", total=sessions)
        self.messages = self.bars.add_task("messages", total=messages)

    def advance(self, sessions: int = 0, messages: int = 0) -> None:
        if self.bars is None or self.sessions is None or self.messages is None:
            return
        if sessions:
            self.bars.advance(self.sessions, sessions)
        if messages:
            self.bars.advance(self.messages, messages)

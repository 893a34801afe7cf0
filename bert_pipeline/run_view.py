"""The run view: one line per task of a DAG run (state, duration, the task's key figure), redrawn in place on a
terminal (rich's Live display), or a plain line as each task ends when stdout is not a terminal (CI, a pipe, a
file), or with --verbose (the log streams between the lines).

Task rows come from bert_pipeline.run_state (Airflow's metadata DB); a mapped task's instances are one line.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from bert_pipeline.run_output import Terminal
from bert_pipeline.run_state import TaskInstanceState
from bert_pipeline.task_figures import figure

FINISHED = ("success", "failed", "upstream_failed", "skipped", "removed")
ACTIVE = ("running", "queued", "scheduled", "deferred", "up_for_reschedule", "restarting", "awaiting_input")
SYMBOLS = {"success": "✓", "failed": "✗", "running": "●", "up_for_retry": "↻", "upstream_failed": "-",
           "skipped": "-", "removed": "-", "waiting": "·"}
STYLES = {"success": "green", "failed": "bold red", "running": "cyan", "up_for_retry": "yellow",
          "upstream_failed": "dim", "skipped": "dim", "removed": "dim", "waiting": "dim"}
WORDS = {"upstream_failed": "upstream failed"}
RAN = ("success", "failed", "running", "up_for_retry")  # states whose line shows a duration


@dataclass
class TaskLine:
    """One task of the run, its instances (several when mapped) taken together."""

    task_id: str
    state: str = "waiting"  # success, failed, running, up_for_retry, upstream_failed, skipped, removed, waiting
    start: dt.datetime | None = None
    end: dt.datetime | None = None
    mapped: int = 0  # instances of a mapped task (0: not mapped)
    done: int = 0  # of those, finished
    tries: int = 0  # the latest try number
    max_tries: int = 0  # retries allowed
    failed_map_index: int | None = None  # the first failed instance, for its log
    values: list[Any] = field(default_factory=list)  # return values, per map index
    figure: str = ""

    def seconds(self, now: dt.datetime) -> float | None:
        if self.start is None or self.state not in RAN:
            return None
        return ((self.end if self.state in FINISHED else None) or now).timestamp() - self.start.timestamp()

    def to_json(self) -> dict[str, Any]:
        return {"task_id": self.task_id, "state": self.state,
                "start": self.start.isoformat() if self.start else None,
                "end": self.end.isoformat() if self.end else None,
                "seconds": self.seconds(self.end) if self.end and self.state in FINISHED else None,
                "mapped": self.mapped, "tries": self.tries, "figure": self.figure, "value": self.values}


def _state(states: list[str | None]) -> str:
    if "failed" in states:
        return "failed"
    if "up_for_retry" in states:
        return "up_for_retry"
    if any(s in ACTIVE and s not in ("scheduled",) for s in states):
        return "running"
    if states and all(s in FINISHED for s in states):
        for state in ("upstream_failed", "removed"):
            if state in states:
                return state
        return "skipped" if all(s == "skipped" for s in states) else "success"
    return "running" if any(s in FINISHED for s in states) else "waiting"


def task_lines(task_ids: Sequence[str], rows: list[TaskInstanceState]) -> list[TaskLine]:
    """A line per task of the DAG, in `task_ids` order, from the run's task-instance rows."""
    by_task: dict[str, list[TaskInstanceState]] = {}
    for row in rows:
        by_task.setdefault(row.task_id, []).append(row)
    lines = []
    for task_id in task_ids:
        found = sorted(by_task.get(task_id, []), key=lambda r: r.map_index)
        mapped = [r for r in found if r.map_index >= 0]
        instances = mapped or found
        if not instances:
            lines.append(TaskLine(task_id))
            continue
        states = [r.state for r in instances]
        starts = [r.start for r in instances if r.start]
        ends = [r.end for r in instances if r.end]
        failed = [r.map_index for r in instances if r.state in ("failed", "up_for_retry")]
        line = TaskLine(task_id, _state(states), min(starts) if starts else None, max(ends) if ends else None,
                        mapped=len(mapped), done=sum(1 for s in states if s in FINISHED),
                        tries=max(r.try_number for r in instances), max_tries=max(r.max_tries for r in instances),
                        failed_map_index=failed[0] if failed else None,
                        values=[r.value for r in instances if r.state == "success"])
        line.figure = figure(line.values) if line.state == "success" else ""
        lines.append(line)
    return lines


def duration(seconds: float | None) -> str:
    if seconds is None:
        return ""
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def describe_state(line: TaskLine) -> str:
    text = WORDS.get(line.state, line.state)
    if line.state == "up_for_retry":
        text = f"try {line.tries} of {line.max_tries + 1} failed, will retry"
    elif line.state == "failed" and line.tries > 1:
        text = f"failed (try {line.tries} of {line.max_tries + 1})"
    if line.mapped and line.state in ("running", "up_for_retry"):
        text += f" ({line.done}/{line.mapped} done)"
    return text


def detail(line: TaskLine) -> str:
    """The figure column: the key figure when done, else what a mapped task has done so far."""
    if line.figure:
        return f"{line.mapped} mapped: {line.figure}" if line.mapped > 1 else line.figure
    return ""


def plain_line(line: TaskLine, name_width: int, now: dt.datetime) -> str:
    cells = [line.task_id.ljust(name_width), describe_state(line).ljust(15), duration(line.seconds(now)).rjust(10),
             detail(line)]
    return f" {SYMBOLS[line.state]} " + "  ".join(cells).rstrip()


class PlainView:
    """A line as each task ends (or fails and will retry): for pipes, CI logs and --verbose."""

    def __init__(self, terminal: Terminal):
        self.out = terminal.stream
        self._shown: set[tuple[str, str, int]] = set()
        self._lock = threading.Lock()

    def start(self, task_ids: Sequence[str]) -> None:
        self.width = max(map(len, task_ids), default=10)

    def update(self, lines: list[TaskLine]) -> None:
        now = dt.datetime.now(dt.UTC)
        with self._lock:
            for line in lines:
                key = (line.task_id, line.state, line.tries)
                if (line.state in FINISHED or line.state == "up_for_retry") and key not in self._shown:
                    self._shown.add(key)
                    self.out.write(plain_line(line, self.width, now) + "\n")
            self.out.flush()

    def stop(self, lines: list[TaskLine]) -> None:
        self.update(lines)


class LiveView:
    """Every task's line, redrawn in place twice a second (durations tick while a task runs)."""

    def __init__(self, terminal: Terminal):
        from rich.console import Console

        self.terminal = terminal
        self.console = Console(file=terminal.stream, force_terminal=True, width=terminal.width, highlight=False,
                               soft_wrap=False)
        self._lines: list[TaskLine] = []
        self._lock = threading.Lock()
        self._live: Any = None

    def _render(self) -> Any:
        from rich.console import Group
        from rich.text import Text

        now = dt.datetime.now(dt.UTC)
        with self._lock:
            lines = list(self._lines)
        self.console.width = self.terminal.current_width()  # a line wider than the screen would break the redraw
        cells = [(line.task_id, describe_state(line), duration(line.seconds(now))) for line in lines]
        name_w, state_w = (max((len(c[i]) for c in cells), default=1) for i in (0, 1))
        rows = []
        for line, (task_id, state, took) in zip(lines, cells):
            style = STYLES[line.state]
            text = Text.assemble(" ", (SYMBOLS[line.state], style), " ", task_id.ljust(name_w), "  ",
                                 (state.ljust(state_w), style), "  ", took.rjust(10), "  ", detail(line))
            text.truncate(self.console.width, overflow="ellipsis")  # one screen line each, or redraws break
            rows.append(text)
        return Group(*rows)

    def start(self, task_ids: Sequence[str]) -> None:
        from rich.live import Live

        self._lines = [TaskLine(t) for t in task_ids]
        self._live = Live(get_renderable=self._render, console=self.console, refresh_per_second=2,
                          redirect_stdout=False, redirect_stderr=False, transient=False)
        self._live.start()

    def update(self, lines: list[TaskLine]) -> None:
        with self._lock:
            self._lines = lines

    def stop(self, lines: list[TaskLine]) -> None:
        self.update(lines)
        if self._live is not None:
            self._live.stop()  # draws the final state once more and leaves it on the screen


def make_view(terminal: Terminal, verbose: bool) -> PlainView | LiveView:
    return LiveView(terminal) if terminal.is_tty and not verbose else PlainView(terminal)

"""A service whose main process died leaves its process group behind (found in the production walk-through,
2026-11-29: a Celery worker SIGKILLed mid-task left its pool process, `airflow celery worker ...`, parent 1, in the
dead worker's process group; `stack up` started a new worker beside it and `stack down` reported "was not running"
and left it). `stack down` and `stack up` now stop such leftovers (bert_pipeline/stack/processes.py `leftovers`)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from bert_pipeline.cli import main
from bert_pipeline.stack import processes, supervisor
from bert_pipeline.stack.state import DEFAULT_PORTS


def _group_members(pgid: int) -> list[int]:
    return [int(e) for e in os.listdir("/proc") if e.isdigit() and (processes.proc_stat(int(e)) or ("", 0, -1))[2] == pgid
            and processes.alive(int(e))]


@contextlib.contextmanager
def _dead_service(home: Path, name: str) -> Iterator[int]:
    """A recorded service whose main process was SIGKILLed and whose child lives on in its group, like a Celery
    worker and its pool process; yields the group's id."""
    leader = subprocess.Popen([sys.executable, "-c", "import subprocess, time; "
                               "subprocess.Popen(['sleep', '300']); time.sleep(300)"], start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while len(_group_members(leader.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        record = {"pid": leader.pid, "started": processes.start_time(leader.pid), "url": f"celery://{name}",
                  "log": str(home / "w.log")}
        state = home / "stack" / "state.json"
        state.parent.mkdir(parents=True, exist_ok=True)
        state.write_text(json.dumps({"ports": dict(DEFAULT_PORTS), "services": {name: record}}))
        os.kill(leader.pid, signal.SIGKILL)
        leader.wait()
        assert _group_members(leader.pid), "the child should outlive its main process"
        yield leader.pid
    finally:
        for pid in _group_members(leader.pid):
            os.kill(pid, signal.SIGKILL)


def test_down_stops_what_is_left_of_a_service_whose_main_process_died(tmp_path, capsys):
    home = tmp_path / "home"
    with _dead_service(home, "celery-worker-2") as group:
        assert main(["stack", "down", "--home", str(home)]) == 0
        time.sleep(0.5)
        assert _group_members(group) == []
    assert "celery-worker-2 stopped" in capsys.readouterr().out


def test_up_stops_a_dead_services_leftovers_before_starting_it_again(tmp_path):
    from bert_pipeline.stack.state import Stack

    home = tmp_path / "home"
    with _dead_service(home, "celery-worker") as group:
        stack = Stack(home).load()
        assert supervisor.stop_leftovers(stack, ["celery-worker", "scheduler"]) == ["celery-worker"]
        time.sleep(0.5)
        assert _group_members(group) == []
        assert supervisor.stop_leftovers(Stack(home).load(), ["celery-worker"]) == []  # nothing is left, nor recorded

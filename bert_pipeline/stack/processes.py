"""Services as process groups: each is started in a session of its own and stopped with its whole family.

A service's process family is its main process, its descendants and its process group, snapshotted before any
signal: children whose parent dies are re-parented to init and can no longer be found from the main process, and
some (Ray's raylet workers, Airflow's task processes) may have left the group.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from bert_core.errors import BertPipelineError

# How long a leader-first process (below) gets to stop its own children before its family is signalled too.
LEADER_GRACE_S = 6.0


@dataclass(frozen=True)
class StopTarget:
    pid: int
    started: int | None  # start time in clock ticks as recorded at start (None: unknown, pid trusted)
    grace_s: float  # seconds between SIGTERM and SIGKILL
    # The main process stops its own children in order when it gets SIGTERM: it is signalled alone first, and
    # the rest of its family only once it has ended or LEADER_GRACE_S (at most the grace) has passed.
    leader_first: bool = False
    # The signal a leader-first main process gets (PostgreSQL: SIGINT, its "fast" shutdown; on SIGTERM it waits
    # for every client to disconnect). Its family, when signalled, gets SIGTERM.
    stop_signal: int = signal.SIGTERM


def proc_stat(pid: int) -> tuple[str, int, int, int] | None:
    """(state, ppid, pgrp, start time in clock ticks) from /proc, or None when the process is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may itself contain spaces or parentheses.
    fields = raw[raw.rindex(")") + 2:].split()
    return fields[0], int(fields[1]), int(fields[2]), int(fields[19])


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks (what `alive` compares against), None when it is unknown."""
    stat = proc_stat(pid)
    return stat[3] if stat else None


def _reap(pid: int) -> None:
    # When this process spawned `pid` (tests call `up` and `down` in one process), its exit leaves a zombie
    # until waited for; not our child: nothing to do.
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def alive(pid: int, started: int | None = None) -> bool:
    """Whether `pid` runs and, when `started` is known, is still the process recorded (not a reused pid)."""
    _reap(pid)
    if Path("/proc").is_dir():
        stat = proc_stat(pid)
        if stat is None or stat[0] in ("Z", "X"):
            return False
        return started is None or stat[3] == started
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def family(pid: int) -> set[int]:
    """`pid`, its descendants and its process group (see the module's docstring)."""
    if not Path("/proc").is_dir():
        return {pid}
    children: dict[int, list[int]] = {}
    group = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        stat = proc_stat(int(entry.name))
        if stat is None:
            continue
        children.setdefault(stat[1], []).append(int(entry.name))
        if stat[2] == pid:
            group.add(int(entry.name))
    tree, todo = {pid}, [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in tree:
                tree.add(child)
                todo.append(child)
    return tree | group


def leftovers(pid: int, started: int | None) -> set[int]:
    """What is left of a recorded main process that died: its process group's members (a Celery worker killed
    mid-task left its pool process there, parent 1). Only when no process has the pid (the kernel gives a pid
    that is still a group's id to no new process, so the group is the dead process's own), and only members
    started after it."""
    if not Path("/proc").is_dir() or proc_stat(pid) is not None:
        return set()
    group = family(pid) - {pid}
    return {p for p in group if alive(p) and (started is None or (start_time(p) or 0) >= started)}


def signal_family(pids: set[int], pgid: int, sig: int) -> None:
    """`sig` to the process group `pgid` and to each of `pids` (those that left the group included)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def _append_header(log: Path, what: str):
    """`log` opened for appending (its folder made), after a header line naming what writes to it now."""
    log.parent.mkdir(parents=True, exist_ok=True)
    handle = open(log, "ab")  # the caller closes it (a `with` block)
    stamp = dt.datetime.now().astimezone().isoformat(timespec="seconds")
    handle.write(f"\n===== {stamp} bert-pipeline stack up: {what}\n".encode())
    handle.flush()
    return handle


def start(command: list[str], env: dict[str, str], cwd: Path, log: Path) -> subprocess.Popen:
    """Start `command` in a new session, its output appended to `log` after a header line naming it."""
    with _append_header(log, " ".join(command)) as handle:
        # A new session: stopping signals the whole group, and a Ctrl-C in the shell that ran `up` does not reach
        # the services.
        return subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=handle, stderr=subprocess.STDOUT,
                                env=env, cwd=cwd, start_new_session=True)


def run_logged(command: list[str], env: dict[str, str], cwd: Path, log: Path, timeout: float, what: str) -> None:
    """Run a one-shot command to its end (a service's set-up: initdb, `airflow db migrate`), its output appended to
    `log` after a header line; an error naming `what` and the log when it fails or outlasts `timeout`."""
    with _append_header(log, what) as handle:
        try:
            result = subprocess.run(command, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=handle,
                                    stderr=subprocess.STDOUT, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise BertPipelineError(f"{what} did not finish in {timeout:.0f} s; read {log}") from None
    if result.returncode != 0:
        raise BertPipelineError(f"{what} failed (exit code {result.returncode}); read {log}")


def stop_processes(targets: dict[str, StopTarget]) -> dict[str, float | None]:
    """Stop several processes at once: SIGTERM each one's family, SIGKILL what is left of it after its grace
    period (leader-first ones: see StopTarget). Returns name -> seconds it took, or None for one that was not
    running."""
    begin = time.monotonic()
    families = {name: family(t.pid) for name, t in targets.items() if alive(t.pid, t.started)}
    # A recorded main process that died may have left its group running: that is stopped too (and counts as
    # running, so `stack down` does not say "was not running" and leave it).
    families.update({name: left for name, t in targets.items() if name not in families
                     for left in [leftovers(t.pid, t.started)] if left})
    waiting_for_leader = set()
    for name, members in families.items():
        target = targets[name]
        if target.leader_first and alive(target.pid, target.started):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(target.pid, target.stop_signal)
            waiting_for_leader.add(name)
        else:
            signal_family(members, target.pid, signal.SIGTERM)
    took: dict[str, float | None] = {name: None for name in targets}
    killed: set[str] = set()
    while families:
        now = time.monotonic()
        for name, members in list(families.items()):
            target = targets[name]
            if name in waiting_for_leader and (not alive(target.pid)
                                               or now - begin > min(LEADER_GRACE_S, target.grace_s)):
                # What the main process left behind (or all of it, if it did not stop in time).
                signal_family({p for p in members if alive(p)}, target.pid, signal.SIGTERM)
                waiting_for_leader.discard(name)
            if not any(alive(p) for p in members):
                took[name] = now - begin
                del families[name]
            elif now - begin > target.grace_s and name not in killed:
                # Processes started meanwhile (e.g. a worker respawned during shutdown) are in the group.
                signal_family({p for p in members | family(target.pid) if alive(p)}, target.pid, signal.SIGKILL)
                killed.add(name)
            elif now - begin > target.grace_s + 10:
                raise BertPipelineError(f"{name}: processes {sorted(p for p in members if alive(p))} survive "
                                        "SIGKILL; stop them by hand")
        time.sleep(0.2)
    return took


def stop_process(target: StopTarget) -> bool:
    """One process with its family (see stop_processes); False when it was not running."""
    return stop_processes({"process": target})["process"] is not None

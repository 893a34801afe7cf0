"""One DAG run in this process, as `bert-pipeline demo` and `bert-pipeline run` start it: Airflow's dag.test() on
the embedded home (tasks in this process, local Ray, sqlite MLflow), with the run view on the terminal and
everything else in the run's log file.

The run's directory holds `run.log` (all output of the run) and `run.json` (the DAG run's id, state, conf, and
each task's state, times, key figure and return value), for a person and for tools such as the run report. It
is the run's work_dir when that is a local directory, else HOME/runs/<dag_id>/<UTC timestamp>.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bert_core.errors import BertPipelineError
from bert_pipeline.run_output import clean_line, output_to_log
from bert_pipeline.run_view import TaskLine, make_view, task_lines

RUN_LOG = "run.log"
RUN_RECORD = "run.json"
TAIL_LINES = 25  # of a failed task's log, shown on the terminal
TAILED_TASKS = 2  # at most this many failed tasks' tails


@dataclass
class DagRunResult:
    dag_id: str
    run_id: str
    state: str  # the DAG run's state: success, failed
    conf: dict[str, Any]
    run_dir: Path
    log_path: Path
    started_at: dt.datetime
    ended_at: dt.datetime
    tasks: list[TaskLine]
    report: str | None = None  # where the run's report.html is, or why there is none
    stopped_by: str | None = None  # the signal that stopped the run (SIGINT, SIGTERM), if one did

    @property
    def succeeded(self) -> bool:
        return self.state == "success"

    @property
    def outcome(self) -> str:
        """In words, for the command's last lines: finished, failed or stopped (by SIGINT/SIGTERM)."""
        if self.succeeded:
            return "finished"
        return f"stopped ({self.stopped_by})" if self.stopped_by else "failed"

    def task(self, task_id: str) -> TaskLine:
        return next(t for t in self.tasks if t.task_id == task_id)

    def to_json(self) -> dict[str, Any]:
        return {"dag_id": self.dag_id, "run_id": self.run_id, "state": self.state, "conf": self.conf,
                "run_dir": str(self.run_dir), "log": str(self.log_path),
                "started_at": self.started_at.isoformat(), "ended_at": self.ended_at.isoformat(),
                "seconds": (self.ended_at - self.started_at).total_seconds(), "stopped_by": self.stopped_by,
                "tasks": [t.to_json() for t in self.tasks]}


def conf_from(text: str | None = None, path: str | None = None) -> dict[str, Any]:
    """The run's conf: the JSON object in the file at `path`, then the one in `text` over it (--conf-file,
    --conf). Errors name the flag (and file), the line and column."""

    def parse(source: str, where: str) -> dict[str, Any]:
        try:
            value = json.loads(source)
        except json.JSONDecodeError as exc:
            raise BertPipelineError(f"{where}: not JSON: line {exc.lineno} column {exc.colno}: {exc.msg}") from None
        if not isinstance(value, dict):
            raise BertPipelineError(f"{where}: expected a JSON object of DAG params, e.g. "
                                    f"'{{\"num_steps\": 10}}', not a {type(value).__name__}")
        return value

    conf: dict[str, Any] = {}
    if path:
        try:
            source = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise BertPipelineError(f"--conf-file {path}: {exc.strerror or exc}") from None
        conf.update(parse(source, f"--conf-file {path}"))
    if text:
        conf.update(parse(text, "--conf"))
    return conf


def run_dir_for(home: Path, dag_id: str, conf: dict[str, Any], stamp: str) -> Path:
    """The run's work_dir when it is a local directory, else HOME/runs/<dag_id>/<stamp>."""
    from bert_core.io import storage

    work = (conf.get("work_dir") or "").strip()
    if work and not storage.is_s3(work):
        return Path(work).absolute()
    return home / "runs" / dag_id / stamp


def task_log_tail(log_path: Path, task_id: str, map_index: int | None, lines: int = TAIL_LINES) -> list[str]:
    """The last `lines` lines of one task's part of the run log: between dag.test()'s `starting task_id=...` and
    `end task task_id=...` lines for it (the last try), or the log's end when those are not found."""
    # Lines end at "\n" only: a progress bar's "\r" redraws stay on their line (clean_line keeps the last).
    with open(log_path, encoding="utf-8", errors="replace", newline="") as log:
        text = log.read().split("\n")
    index = -1 if map_index is None else map_index
    begin = re.compile(rf"starting task_id={re.escape(task_id)} map_index={index}\b")
    end = re.compile(rf"end task task_id={re.escape(task_id)} map_index={index}\b")
    starts = [i for i, line in enumerate(text) if begin.search(line)]
    if starts:
        first = starts[-1]
        last = next((i for i in range(first + 1, len(text)) if end.search(text[i])), len(text))
        text = text[first + 1:last]
    cleaned = [clean_line(line) for line in text]
    kept = [line for line in cleaned if line and not _bookkeeping(line)]
    return _shorten_tracebacks(kept)[-lines:]


# Lines that record only Airflow's own bookkeeping of the task (its execution API calls, log groups).
BOOKKEEPING = ("[airflow.api_fastapi.execution_api", "::group::", "::endgroup::", "[DAG TEST]")


def _bookkeeping(line: str) -> bool:
    # A task reading a mapped task's outputs walks them by index until the API answers 404, and Airflow's client
    # logs that end-of-list probe as "[error] XCom not found ... offset=N" (airflow.sdk.api.client
    # get_sequence_item): not an error of the task.
    return any(mark in line for mark in BOOKKEEPING) or ("XCom not found" in line and " offset=" in line)


CHAINED = ("The above exception was the direct cause of the following exception:",
           "During handling of the above exception, another exception occurred:")


def _shorten_tracebacks(lines: list[str]) -> list[str]:
    """Each Python traceback down to its frame count, its last frame (where the error was raised) and the
    exception line that follows; the whole traceback stays in the log. A chained traceback whose exception says
    what the one before it said (@bert_task re-raises a BertPipelineError as Airflow's AirflowFailException with
    its message) is left out: the message once, where it was raised."""
    out: list[str] = []
    i = 0
    while i < len(lines):
        if lines[i] in CHAINED and out and (end := _traceback_end(lines, i + 1)) is not None \
                and _message(lines[end]) == _message(out[-1]):
            i = end + 1
            continue
        if lines[i] != "Traceback (most recent call last):":
            out.append(lines[i])
            i += 1
            continue
        j = i + 1
        while j < len(lines) and lines[j].startswith(" "):
            j += 1
        frames = [k for k in range(i + 1, j) if lines[k].lstrip().startswith("File ")]
        out.append(f"Traceback: {len(frames)} frame(s) (all in the log), the last:")
        if frames:
            out += [line for line in lines[frames[-1]:j] if line.strip(" ^~")]
        i = j
    return out


def _traceback_end(lines: list[str], start: int) -> int | None:
    """The index of the exception line of the traceback that starts at `start` (after a chaining line)."""
    if start >= len(lines) or lines[start] != "Traceback (most recent call last):":
        return None
    j = start + 1
    while j < len(lines) and lines[j].startswith(" "):
        j += 1
    return j if j < len(lines) else None


def _message(exception_line: str) -> str:
    # "package.module.Error: message" -> "message"
    name, _, message = exception_line.partition(": ")
    return message if message and " " not in name else exception_line


def failure_text(result: DagRunResult) -> str:
    """What the terminal shows after a failed run: each failed task's last log lines, and the log file."""
    failed = [t for t in result.tasks if t.state == "failed"]
    lines = [""]
    if result.stopped_by:
        # Asked for: the failed tasks' tracebacks say only that (they stay in the log).
        lines += [f"Stopped by {result.stopped_by}: the task running failed without a retry, and no task started "
                  f"after it but the report. Failed: {', '.join(t.task_id for t in failed) or 'none'}.",
                  f"Full log: {result.log_path}"]
        return "\n".join(lines)
    if not failed:
        lines.append(f"{result.dag_id} ended {result.state}; no task failed (see the log).")
    for task in failed[:TAILED_TASKS]:
        where = f"{task.task_id}[{task.failed_map_index}]" if task.mapped else task.task_id
        lines.append(f"{where} failed. The end of its log:")
        lines += [f"  | {line}" for line in task_log_tail(result.log_path, task.task_id, task.failed_map_index)]
    if len(failed) > TAILED_TASKS:
        lines.append(f"... and {len(failed) - TAILED_TASKS} more failed task(s): "
                     + ", ".join(t.task_id for t in failed[TAILED_TASKS:]))
    lines.append(f"Full log: {result.log_path}")
    return "\n".join(lines)


def _write_record(result: DagRunResult) -> None:
    path = result.run_dir / RUN_RECORD
    with tempfile.NamedTemporaryFile("w", dir=result.run_dir, prefix=".run.json.", delete=False) as tmp:
        json.dump(result.to_json(), tmp, indent=2, default=str)
        tmp.write("\n")
    os.replace(tmp.name, path)


def _report(result: DagRunResult) -> str | None:
    """The line that says where the run's report.html is, or why there is none. The DAG's own `report` task
    (operators/report/task.py) built it, whatever the run's outcome; None for a DAG without one."""
    from operators.report.task import TASK_ID

    task = next((t for t in result.tasks if t.task_id == TASK_ID), None)
    if task is None:
        return None
    built = next((v for v in task.values if isinstance(v, dict) and v.get("report")), None)
    if task.state == "success" and built:
        return f"Report (open it in a browser): {built['report']}"
    # Its failure leaves the run's outcome alone (a teardown), so the failure excerpt does not show it: said here.
    return (f"No report: the {TASK_ID} task ended {task.state} (its part of {result.log_path} says why; "
            "`bert-pipeline report WORK_DIR` builds it again)")


def _ray_initialized() -> bool:
    ray = sys.modules.get("ray")
    return bool(ray is not None and ray.is_initialized())


class ConfRefused(BertPipelineError):
    """The conf names a key the DAG does not have, or a value its Params reject: no run was made."""


def check_conf(dag, conf: dict[str, Any]) -> None:
    """The conf checked as the run would check it, before there is a run: its keys against the DAG's Params and
    former names (the DAG's first task checks them too, but only once the run, its record and report exist), its
    values against the Params' schemas, as dag.test() / a trigger validates them. Raises ConfRefused."""
    import copy

    from airflow.sdk.exceptions import ParamValidationError

    from operators.params import ConfKeyError, check_conf_keys, former_conf_keys

    try:
        check_conf_keys(conf, (*dag.params, *former_conf_keys(dag.dag_id)), dag.dag_id)
    except ConfKeyError as exc:
        raise ConfRefused(str(exc)) from None
    params = copy.deepcopy(dag.params)
    try:
        for key, value in conf.items():
            if key in params:
                params[key] = value
        params.validate()
    except ParamValidationError as exc:
        # Airflow appends jsonschema's whole report (the Param's schema, its form section text included)
        # after the line that names the param, the value and what was expected.
        raise ConfRefused(f"{dag.dag_id}: the run did not start: ParamValidationError: conf: "
                          f"{str(exc).split(chr(10) * 2)[0]}") from None


@dataclass
class Stop:
    signal: str | None = None  # the name of the signal that asked the run to stop


@contextlib.contextmanager
def stop_on_signals(out) -> Iterator[Stop]:
    """Ctrl-C (SIGINT) or SIGTERM stops the run: the task running is interrupted and fails without a retry, the
    tasks after it fail before they start, and dag.test() returns a failed run, recorded as such in Airflow's
    database. Before, SIGINT failed the running task into a retry and the run went on; a second signal stops the
    process at once (the default handlers are back after the first)."""
    import signal
    import threading

    from operators.airflow_tasks import clear_stop, request_stop, stop_on_sigterm

    asked = Stop()
    if threading.current_thread() is not threading.main_thread():
        yield asked
        return

    def stop(signum, frame):
        name = asked.signal = signal.Signals(signum).name
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        stop_on_sigterm(signal.SIG_DFL)  # and in the tasks still to come (the report)
        out.write(f"{name}: stopping the run (the task running fails, no task starts but the run's report; again "
                  "to stop at once)\n")
        out.flush()
        if request_stop(name):
            raise KeyboardInterrupt(name)

    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    for s in before:
        signal.signal(s, stop)
    stop_on_sigterm(stop)  # each task puts it back: Airflow's task runner takes SIGTERM for every task it runs
    try:
        yield asked
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)
        clear_stop()  # else every task of a later run in this process would fail as stopped


def run_dag(dag_id: str, conf: dict[str, Any], run_dir: Path, home: str | os.PathLike | None = None,
            verbose: bool = False) -> DagRunResult:
    """Run `dag_id` once with `conf` (dag.test() on the embedded home at `home`), showing the run view; returns
    the result, also written to RUN_DIR/run.json. A failed run prints each failed task's log tail. Raises
    BertPipelineError when the run cannot start (a conf the DAG's Params reject, a DAG that does not load, a home
    the production stack is up on)."""
    from bert_pipeline.embedded_home import refuse_production_home

    refuse_production_home(Path(home) if home is not None else None, dag_id)
    created = not run_dir.exists()
    run_dir.mkdir(parents=True, exist_ok=True)
    log_path = run_dir / RUN_LOG
    try:
        return _run_dag(dag_id, conf, run_dir, log_path, home, verbose)
    except ConfRefused:
        # Refused before Airflow made a run of it: nothing is kept (no run dir, log or record).
        if created:
            shutil.rmtree(run_dir, ignore_errors=True)
        raise


def _run_dag(dag_id: str, conf: dict[str, Any], run_dir: Path, log_path: Path, home: str | os.PathLike | None,
             verbose: bool) -> DagRunResult:
    from bert_pipeline.dags_folder import load_dag
    from bert_pipeline.embedded_home import setup_home
    from bert_pipeline.run_state import RunWatch

    with output_to_log(log_path, echo=verbose) as terminal:
        out = terminal.stream
        ray_before = _ray_initialized()
        setup_home(home, serialize=False)  # dag.test() serializes the DAGs folder
        dag = load_dag(dag_id)  # imports Airflow, which reads the home set just now
        check_conf(dag, conf)
        out.write(f"{dag_id}: log {log_path}" + ("" if verbose else "   (--verbose: stream it here)") + "\n")
        out.flush()
        from airflow.models.dagrun import DagRun
        from airflow.sdk import timezone
        from airflow.utils.types import DagRunType

        when = timezone.utcnow()
        run_id = DagRun.generate_run_id(run_type=DagRunType.MANUAL, logical_date=when, run_after=when)
        out.write(f"{dag_id}: run {run_id}\n")
        task_ids = [t.task_id for t in dag.topological_sort()]
        view = make_view(terminal, verbose)
        view.start(task_ids)
        watch = RunWatch(dag_id, run_id, lambda rows: view.update(task_lines(task_ids, rows)))
        watch.start()
        error: Exception | None = None
        dag_run, asked = None, Stop()
        try:
            with stop_on_signals(out) as asked:
                dag_run = dag.test(run_after=when, logical_date=when, run_conf=conf)
        except Exception as exc:  # noqa: BLE001  (said on the terminal below; the traceback is in the log)
            import traceback

            traceback.print_exc()
            error = exc
        finally:
            rows = watch.stop()
            lines = task_lines(task_ids, rows or [])
            view.stop(lines)
        state = getattr(dag_run, "state", None) or "failed"
        state = str(getattr(state, "value", state))
        result = DagRunResult(dag_id, getattr(dag_run, "run_id", None) or run_id, state, conf, run_dir, log_path,
                              when, dt.datetime.now(dt.UTC), lines, stopped_by=asked.signal)
        _write_record(result)
        result.report = _report(result)
        if not ray_before and _ray_initialized():
            sys.modules["ray"].shutdown()  # the local Ray this run started; its goodbye goes to the log
        if error is not None:
            raise BertPipelineError(f"{dag_id}: the run did not start or finish: {type(error).__name__}: "
                                    f"{error} (log: {log_path})")
        if not result.succeeded:
            out.write(failure_text(result) + "\n")
    return result

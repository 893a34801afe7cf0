"""A stop of an in-process run (`bert-pipeline run`'s Ctrl-C or SIGTERM, operators.airflow_tasks.request_stop):
the task it interrupts fails for good (AirflowFailException: Airflow does not retry it), whatever the interrupted
work raised, and a task after it fails before its work starts. Before, the interrupted task was retried and the
run went on. (The whole path, signal to failed run, was walked with `bert-pipeline demo` and Ctrl-C during
pretraining: pretrain failed in one try, the run ended failed, exit status 1.)"""

import pytest
from airflow.sdk.exceptions import AirflowFailException

from operators import airflow_tasks


@pytest.fixture
def no_stop(monkeypatch):
    monkeypatch.setattr(airflow_tasks._Stop, "signal_name", None)
    monkeypatch.setattr(airflow_tasks._Stop, "in_task", False)


def test_a_stop_fails_the_running_task_and_every_task_after_it(no_stop):
    calls = []

    @airflow_tasks.bert_task
    def interrupted():
        assert airflow_tasks.request_stop("SIGINT")  # a task is running: the caller interrupts it
        calls.append("interrupted")
        raise KeyboardInterrupt

    @airflow_tasks.bert_task
    def aborted_ray_run():
        airflow_tasks.request_stop("SIGTERM")
        raise RuntimeError("the Ray run was aborted")  # what interrupted work may raise instead

    @airflow_tasks.bert_task
    def later():
        calls.append("later")

    with pytest.raises(AirflowFailException, match=r"stopped \(SIGINT\) while this task ran: not retried"):
        interrupted.function()
    assert not airflow_tasks.request_stop("SIGINT")  # between tasks: nothing to interrupt
    with pytest.raises(AirflowFailException, match=r"stopped \(SIGINT\) before this task started"):
        later.function()
    assert calls == ["interrupted"]

    @airflow_tasks.bert_task(runs_when_stopped=True)
    def report():  # the run's report shows how far a stopped run got
        calls.append("report")

    report.function()
    assert calls == ["interrupted", "report"]
    airflow_tasks._Stop.signal_name = None
    with pytest.raises(AirflowFailException, match=r"stopped \(SIGTERM\) while this task ran"):
        aborted_ray_run.function()


def test_without_a_stop_errors_keep_their_retry_policy(no_stop):
    @airflow_tasks.bert_task
    def transient():
        raise RuntimeError("S3 timed out")

    with pytest.raises(RuntimeError, match="S3 timed out"):  # retried by Airflow, as before
        transient.function()


STOPPED_DAG = '''
import time
from pathlib import Path

from airflow.sdk import dag

from operators.airflow_tasks import bert_task

MARKS = Path("MARKS_DIR")


@bert_task
def train():
    (MARKS / "started").touch()
    try:
        for _ in range(1200):  # two minutes of work, in small steps, whose own error handling swallows errors
            try:
                time.sleep(0.1)
            except Exception:
                pass
    except BaseException as exc:
        (MARKS / "interrupted_by").write_text(type(exc).__name__)
        raise
    return "not stopped"


@dag(schedule=None)
def stopped_by_airflow():
    train()


stopped_by_airflow()
'''


def test_a_task_airflow_ends_stops_its_work_at_once_and_fails(tmp_path):
    """Airflow's supervisor ends a running task with SIGTERM (the task marked failed or cleared in the UI, its
    heartbeat lost), and SIGKILL 5 s later. Its task runner's SIGTERM handler only calls the operator's on_kill, a
    no-op for TaskFlow tasks, so the step ran on until the SIGKILL and its MLflow run stayed RUNNING. Now the step
    is interrupted at once, by a BaseException its own `except Exception` does not take (the trackers end their
    MLflow run FAILED on it), and the try fails with a message that says why. The real supervisor runs the task
    here; the server's "marked failed" is the heartbeat's 409 (tests/operators/supervised_task.py)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from tests.operators.supervised_task import read_log
    from tests.paths import REPO

    marks, dags = tmp_path / "marks", tmp_path / "dags"
    marks.mkdir()
    dags.mkdir()
    (dags / "stopped_by_airflow.py").write_text(STOPPED_DAG.replace("MARKS_DIR", str(marks)))
    stop_file, log_path = tmp_path / "marked-failed", tmp_path / "task.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "RAY_ADDRESS", "MLFLOW_TRACKING"))}
    env.update(SUPERVISED_TASK_STOP_FILE=str(stop_file), AIRFLOW__WORKERS__MIN_HEARTBEAT_INTERVAL="1")
    supervisor = subprocess.Popen([sys.executable, "-m", "tests.operators.supervised_task", str(dags),
                                   "stopped_by_airflow.py", "stopped_by_airflow", "train", str(log_path)],
                                  cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 90
        while not (marks / "started").exists():
            assert supervisor.poll() is None and time.monotonic() < deadline, supervisor.communicate()[0][-3000:]
            time.sleep(0.2)
        stop_file.touch()
        out = supervisor.communicate(timeout=60)[0]
    finally:
        supervisor.kill()
    records = read_log(log_path)
    events = "\n".join(str(r["event"]) for r in records)
    assert "Server indicated the task shouldn't be running anymore" in events, out[-3000:]
    assert (marks / "interrupted_by").read_text() == "TaskTerminated", events
    errors = [e["exc_value"] for r in records for e in r.get("error_detail") or ()]
    assert any(e.startswith("stopped by SIGTERM while this task ran") for e in errors), records
    assert "not stopped" not in events
    # Ended by the SIGTERM, not by the SIGKILL that follows it when a task outlives it (supervise_task's result is
    # the task process's exit code: -9 then).
    assert supervisor.returncode != -signal.SIGKILL % 256, out[-3000:]
    assert "SIGKILL" not in out, out[-3000:]

"""MLflow runs a killed task process left RUNNING (operators.left_running): the try's tags on every run it starts,
and the runs ended KILLED by the task's next try and by the DAG run's report, under Airflow's own task supervisor
(tests/operators/supervised_task.py), the task process killed by SIGKILL as the OOM killer or a lost machine would."""

import datetime as dt
import json
import os
import subprocess
import sys
from types import SimpleNamespace

from bert_core.launch import ray_cluster
from operators import left_running, ray_jobs
from tests.paths import REPO

DAG_FILE = '''
import os
import signal
from pathlib import Path

from airflow.sdk import dag, get_current_context

from operators.airflow_tasks import bert_task
from operators.report import task as report_task

MARKS = Path("MARKS_DIR")


@bert_task
def train():
    from bert_core.io.tracking import build_tracker

    tracker = build_tracker(True, "TRACKING_URI", experiment="left-running")
    try_number = get_current_context()["ti"].try_number
    (MARKS / f"run-of-try{try_number}").write_text(tracker.run_id)
    if try_number == 1:
        os.kill(os.getpid(), signal.SIGKILL)  # what the OOM killer or a lost machine does: nothing ends the run
    tracker.end("FINISHED")
    return "trained"


@dag(schedule=None)
def bert_demo():  # a DAG id of the project's, for the report's run directory
    train()
    report_task.at_the_end()


bert_demo()
'''


def _supervised(tmp_path, task_id: str, try_number: int, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tests.operators.supervised_task", str(tmp_path / "dags"),
                           "bert_demo.py", "bert_demo", task_id, str(tmp_path / f"{task_id}.try{try_number}.log")],
                          cwd=REPO, env={**env, "SUPERVISED_TASK_TRY_NUMBER": str(try_number)},
                          capture_output=True, text=True, timeout=300)


def test_a_killed_trys_run_is_ended_killed_by_the_next_try_and_the_dag_runs_by_its_report(tmp_path):
    from mlflow import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    marks, dags = tmp_path / "marks", tmp_path / "dags"
    marks.mkdir()
    dags.mkdir()
    (dags / "bert_demo.py").write_text(DAG_FILE.replace("MARKS_DIR", str(marks)).replace("TRACKING_URI", uri))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "RAY_ADDRESS", "MLFLOW"))}
    env.update(MLFLOW_TRACKING_URI=uri, BERT_PIPELINE_HOME=str(tmp_path / "home"))
    client = MlflowClient(uri)

    first = _supervised(tmp_path, "train", 1, env)
    killed = (marks / "run-of-try1").read_text()
    run = client.get_run(killed)
    assert run.info.status == "RUNNING", first.stdout[-3000:] + first.stderr[-3000:]
    assert {k: run.data.tags.get(k) for k in left_running.TAGS} == {
        "airflow.dag_id": "bert_demo", "airflow.run_id": "manual__supervised", "airflow.task_id": "train",
        "airflow.map_index": "-1", "airflow.try_number": "1"}

    # Runs that are not train's earlier tries: another task's of the same DAG run, and one of another DAG run.
    experiment = run.info.experiment_id
    tags = dict(zip(left_running.TAGS, ("bert_demo", "manual__supervised", "segment", "-1", "1")))
    other_task = client.create_run(experiment, tags=tags).info.run_id
    other_run = client.create_run(experiment, tags={**tags, "airflow.run_id": "manual__another"}).info.run_id

    second = _supervised(tmp_path, "train", 2, env)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    run = client.get_run(killed)
    assert run.info.status == "KILLED"
    assert run.data.tags[left_running.REASON_TAG].startswith("train try 1 ended without ending this run")
    assert "ended KILLED by try 2 of the task" in run.data.tags[left_running.REASON_TAG]
    retried = client.get_run((marks / "run-of-try2").read_text())
    assert (retried.info.status, retried.data.tags["airflow.try_number"]) == ("FINISHED", "2")
    assert client.get_run(other_task).info.status == "RUNNING"  # its task may still be running
    # The killed try wrote no task record; its retry wrote one for it, for the report's timeline.
    tasks = tmp_path / "home" / "demo" / "manual__supervised" / "tasks"
    record = json.loads((tasks / "train.try1.json").read_text())
    assert (record["state"], record["duration_s"]) == ("killed", None)
    assert record["started_at"][:19] == dt.datetime.fromtimestamp(run.info.start_time / 1000, dt.UTC).isoformat()[:19]
    assert killed in record["error"]
    assert json.loads((tasks / "train.try2.json").read_text())["state"] == "success"

    report = _supervised(tmp_path, "report", 1, env)
    assert report.returncode == 0, report.stdout[-3000:] + report.stderr[-3000:]
    ended = client.get_run(other_task)
    assert ended.info.status == "KILLED"
    assert ended.data.tags[left_running.REASON_TAG].endswith("ended KILLED by the DAG run's report")
    assert client.get_run(other_run).info.status == "RUNNING"
    assert client.get_run(retried.info.run_id).info.status == "FINISHED"
    # The report shows both killed tries: segment's, whose try was the last, as why the run failed.
    from operators.report.collect import collect

    states = {(t["task_id"], t["try_number"]): t["state"] for t in collect(str(tasks.parent), uri)["tasks"]}
    assert {k: v for k, v in states.items() if k[0] != "report"} == {
        ("train", 1): "killed", ("train", 2): "success", ("segment", 1): "killed"}
    html = (tasks.parent / "report.html").read_text()
    assert "This run failed: segment: killed: no word from its process" in html
    assert "unknown" in html  # how long a killed try took


def test_the_tags_keep_what_the_environment_gave_and_go_with_the_task(monkeypatch):
    ti = SimpleNamespace(dag_id="d", run_id="manual__it's", task_id="t", map_index=None, try_number=3)
    monkeypatch.setenv(left_running.RUN_CONTEXT_ENV, json.dumps({"team": "nlp"}))
    with left_running.tagged_with_task(ti):
        tags = json.loads(os.environ[left_running.RUN_CONTEXT_ENV])
    assert tags == {"team": "nlp", "airflow.dag_id": "d", "airflow.run_id": "manual__it's", "airflow.task_id": "t",
                    "airflow.map_index": "-1", "airflow.try_number": "3"}
    assert json.loads(os.environ[left_running.RUN_CONTEXT_ENV]) == {"team": "nlp"}
    # A quote cannot be said in MLflow's filter: that tag is matched after the search.
    query, left = left_running._filter({"airflow.run_id": "manual__it's", "airflow.dag_id": "d"})
    assert query == "attributes.status = 'RUNNING' and tags.`airflow.dag_id` = 'd'"
    assert left == {"airflow.run_id": "manual__it's"}


def test_ray_workers_get_the_tags_and_ray_jobs_do_not():
    """A Ray Train or Tune worker dies with its driver, the task's process; a Ray job outlives the try that
    submitted it, and its retry attaches to it again: its runs must not look like a killed try's."""
    assert left_running.RUN_CONTEXT_ENV in ray_cluster.FORWARDED_ENV
    assert left_running.RUN_CONTEXT_ENV not in ray_jobs.FORWARDED_ENV

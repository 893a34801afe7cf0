"""@bert_task: retry policy on every DAG task, BertPipelineError fails without retries, S3 credentials from an
Airflow connection (masked), environment restored afterwards."""

from __future__ import annotations

import json
import os

import pytest

from bert_core.errors import BertPipelineError
from operators.airflow_tasks import RETRY_POLICY, bert_task, s3_credentials_from_connection
from tests.airflow_home import PIPELINES


def test_every_dag_task_retries_with_backoff():
    from airflow.dag_processing.dagbag import DagBag

    dags = DagBag(dag_folder=str(PIPELINES), safe_mode=False).dags
    assert len(dags) >= 4
    for dag_id, dag in dags.items():
        for t in dag.tasks:
            if t.task_id == "report":  # the run's report: built again by `bert-pipeline report`, not retried
                assert t.retries == 0 and t.is_teardown, dag_id
                continue
            assert t.retries == RETRY_POLICY["retries"], (dag_id, t.task_id)
            assert t.retry_exponential_backoff == RETRY_POLICY["retry_exponential_backoff"], (dag_id, t.task_id)


def test_pipeline_errors_fail_at_once_other_errors_retry():
    from airflow.sdk.exceptions import AirflowFailException

    @bert_task
    def verdict(params=None):
        raise BertPipelineError("shards: masked fraction 0.31 outside [0.13, 0.17]")

    @bert_task(multiple_outputs=True)
    def flaky() -> dict:
        raise ConnectionError("S3 endpoint reset the connection")

    with pytest.raises(AirflowFailException, match="masked fraction 0.31"):
        verdict.function(params={})
    with pytest.raises(ConnectionError):  # left to Airflow's retries
        flaky.function()
    assert verdict.function.__name__ == "verdict"


def test_s3_credentials_come_from_the_connection_and_are_masked(monkeypatch):
    from airflow.sdk._shared.secrets_masker import redact

    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AIRFLOW_CONN_BERT_S3", json.dumps({
        "conn_type": "aws", "login": "AKIDEXAMPLE", "password": "s3cr3t-value-0123",
        "extra": {"endpoint_url": "http://127.0.0.1:9000", "region_name": "eu-west-1"}}))
    monkeypatch.setenv("BERT_PIPELINE_AWS_CONN_ID", "bert_s3")
    with s3_credentials_from_connection():
        assert os.environ["AWS_ACCESS_KEY_ID"] == "AKIDEXAMPLE"
        assert os.environ["AWS_SECRET_ACCESS_KEY"] == "s3cr3t-value-0123"
        assert os.environ["AWS_ENDPOINT_URL"] == "http://127.0.0.1:9000"
        assert os.environ["AWS_DEFAULT_REGION"] == "eu-west-1"
        assert "s3cr3t-value-0123" not in str(redact("key s3cr3t-value-0123 in a log line"))
    assert "AWS_SECRET_ACCESS_KEY" not in os.environ and "AWS_ENDPOINT_URL" not in os.environ

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "FROM-ENV")  # the environment's own credentials win
    with s3_credentials_from_connection():
        assert "AWS_SECRET_ACCESS_KEY" not in os.environ
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.setenv("BERT_PIPELINE_AWS_CONN_ID", "no_such_connection")
    with s3_credentials_from_connection():  # no connection: nothing set, no error
        assert "AWS_ACCESS_KEY_ID" not in os.environ
    # ... and no trace of the lookup in the task's own error: it was raised "during handling" of the connection's
    # AirflowNotFoundException, and every failed task's excerpt led with "conn_id ... isn't defined".
    with pytest.raises(AttributeError) as raised, s3_credentials_from_connection():
        raise AttributeError("'str' object has no attribute 'get'")
    assert raised.value.__context__ is None


def test_each_task_try_is_recorded_in_its_run_directory(tmp_path, monkeypatch):
    """@bert_task records every try (state, start, end, error) under the run's work dir, for the run report's
    timeline; outside a task (or for another project's DAG) nothing is written, and a record that cannot be
    written never hides the task's own result."""
    from types import SimpleNamespace

    from operators import run_records

    def context(dag_id, task_id, map_index=-1, try_number=1, work_dir=str(tmp_path / "run")):
        ti = SimpleNamespace(dag_id=dag_id, run_id="manual__1", task_id=task_id, map_index=map_index,
                             try_number=try_number)
        return {"ti": ti, "params": {"work_dir": work_dir}}

    @bert_task
    def step(value: int) -> int:
        if value < 0:
            raise BertPipelineError("value must not be negative")
        return value * 2

    assert step.function(2) == 4 and not (tmp_path / "run").exists()  # not in a task: nothing recorded

    monkeypatch.setattr(run_records, "_airflow_context", lambda: context("bert_demo", "step"))
    assert step.function(3) == 6
    monkeypatch.setattr(run_records, "_airflow_context", lambda: context("bert_demo", "step", 1, 2))
    from airflow.sdk.exceptions import AirflowFailException

    with pytest.raises(AirflowFailException, match="must not be negative"):
        step.function(-1)
    records = {p.name: json.loads(p.read_text()) for p in (tmp_path / "run" / "tasks").iterdir()}
    assert set(records) == {"step.try1.json", "step-1.try2.json"}
    ok, failed = records["step.try1.json"], records["step-1.try2.json"]
    assert (ok["state"], ok["error"], ok["run_id"], ok["map_index"]) == ("success", None, "manual__1", -1)
    assert ok["started_at"] <= ok["finished_at"] and ok["duration_s"] >= 0
    assert failed["state"] == "failed" and "must not be negative" in failed["error"]

    monkeypatch.setattr(run_records, "_airflow_context", lambda: context("someone_elses_dag", "step"))
    assert step.function(1) == 2
    blocked = tmp_path / "file"
    blocked.write_text("a file where the run directory should be")
    monkeypatch.setattr(run_records, "_airflow_context",
                        lambda: context("bert_demo", "step", work_dir=str(blocked / "run")))
    assert step.function(5) == 10  # the record could not be written: a warning, not a failed task
    assert len(list((tmp_path / "run" / "tasks").iterdir())) == 2

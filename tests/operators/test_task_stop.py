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

"""`bert-pipeline run`'s signal handling around dag.test() (bert_pipeline.dag_run.stop_on_signals): a first
SIGINT or SIGTERM asks the run to stop (operators.airflow_tasks.request_stop) and interrupts a task that is
running; between tasks it interrupts nothing (dag.test() goes on, and each task after it fails before it starts);
a second signal stops at once; the handlers from before are back afterwards."""

import io
import os
import signal

import pytest

from bert_pipeline.dag_run import stop_on_signals
from operators import airflow_tasks


@pytest.fixture
def no_stop(monkeypatch):
    monkeypatch.setattr(airflow_tasks._Stop, "signal_name", None)
    monkeypatch.setattr(airflow_tasks._Stop, "in_task", False)


def test_a_first_signal_stops_the_run_and_a_second_the_process(no_stop, monkeypatch):
    out = io.StringIO()
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    with stop_on_signals(out) as asked:
        os.kill(os.getpid(), signal.SIGTERM)  # between tasks: recorded, nothing raised
        assert asked.signal == "SIGTERM"  # the run's record and last lines say so
        assert airflow_tasks._Stop.signal_name == "SIGTERM"
        assert "SIGTERM: stopping the run" in out.getvalue()
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # a second Ctrl-C stops at once
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
    assert {s: signal.getsignal(s) for s in before} == before
    assert airflow_tasks._Stop.signal_name is None

    monkeypatch.setattr(airflow_tasks._Stop, "in_task", True)
    with pytest.raises(KeyboardInterrupt), stop_on_signals(io.StringIO()):
        try:
            os.kill(os.getpid(), signal.SIGINT)  # a task is running: interrupted
        finally:
            assert airflow_tasks._Stop.signal_name == "SIGINT"
    assert {s: signal.getsignal(s) for s in before} == before
    assert airflow_tasks._Stop.signal_name is None  # a later run in this process starts afresh
    assert airflow_tasks._Stop.sigterm_handler is None

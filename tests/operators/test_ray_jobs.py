"""Steps submitted to a real Ray cluster (`ray start --head`) through the Ray Job Submission API: the task
waits and streams the job's log, returns the step's result, re-attaches on a retry, fails with the job's
error, and stops the job when it is killed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bert_core.errors import BertPipelineError
from bert_core.io import manifest
from operators import ray_jobs, step_runner
from operators import tasks as ops

REPO = Path(__file__).parents[2]
VOCAB = REPO / "tests" / "fixtures" / "vocab" / "uncased_L-12_H-768_A-12.vocab.txt"


# ---------------------------------------------------------------- no cluster needed

def test_submission_address_only_for_dashboard_urls(monkeypatch):
    monkeypatch.delenv(ray_jobs.IN_JOB_ENV, raising=False)
    for value, expected in (("", None), ("127.0.0.1:6379", None), ("ray://head:10001", None),
                            ("http://head:8265", "http://head:8265"), ("https://ray.example", "https://ray.example")):
        monkeypatch.setenv("RAY_ADDRESS", value)
        assert ray_jobs.submission_address() == expected, value
    monkeypatch.setenv(ray_jobs.IN_JOB_ENV, "1")  # inside a job: never submit again
    assert ray_jobs.submission_address() is None


def test_submission_id_is_stable_per_task_instance(monkeypatch):
    for key, value in (("AIRFLOW_CTX_DAG_ID", "bert_pretraining"), ("AIRFLOW_CTX_DAG_RUN_ID", "manual__2026"),
                       ("AIRFLOW_CTX_TASK_ID", "pretrain")):
        monkeypatch.setenv(key, value)
    first = ray_jobs.default_submission_id("pretrain")
    assert first == ray_jobs.default_submission_id("pretrain") and first.startswith("bert-bert_pretraining-pretrain-")
    monkeypatch.setenv("AIRFLOW_CTX_MAP_INDEX", "1")
    assert ray_jobs.default_submission_id("pretrain") != first  # mapped tasks get one job each
    monkeypatch.delenv("AIRFLOW_CTX_DAG_RUN_ID")
    assert ray_jobs.default_submission_id("x") != ray_jobs.default_submission_id("x")  # outside Airflow: unique


def test_entrypoint_round_trips_arguments_and_result(capsys):
    kwargs = {"inputs": ["it's a \"quoted\" path with spaces"], "n": 3}
    line = ray_jobs.entrypoint("make_shards", kwargs)
    import shlex

    assert shlex.split(line)[:4] == ["python", "-m", "operators.step_runner", "make_shards"]
    assert json.loads(shlex.split(line)[4]) == kwargs
    logs = f"noise\n{ray_jobs.RESULT_MARKER}{json.dumps({'a': 1})}\nlater noise\n"
    assert ray_jobs.parse_result(logs) == {"a": 1}
    with pytest.raises(BertPipelineError, match="no step result line"):
        ray_jobs.parse_result("just logs\n")
    assert step_runner.main(["segment", "{}"]) == 2  # only the cluster steps may run as jobs
    assert "usage" in capsys.readouterr().err


# ---------------------------------------------------------------- against a real cluster

@pytest.fixture()
def segmented(tmp_path) -> Path:
    """Segmented text (one sentence per line, a blank line between documents), written for this test."""
    docs = [["The river rises in the hills.", "It flows past three towns.", "Boats carry grain downstream.",
             "A bridge was built in the spring.", "Children cross it every morning."],
            ["The library opens at nine.", "Its reading room is quiet.", "Most visitors come for the maps.",
             "The maps show old roads.", "Some roads are gone now."]]
    path = tmp_path / "seg.txt"
    path.write_text("\n\n".join("\n".join(doc) for doc in docs) + "\n")
    return path


@pytest.mark.slow
def test_step_runs_as_a_job_and_a_retry_reattaches(ray_head, tmp_path, segmented, monkeypatch):
    for key, value in ray_head.env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("RAY_ADDRESS", ray_head.dashboard_url)
    for key, value in (("AIRFLOW_CTX_DAG_ID", "test_dag"), ("AIRFLOW_CTX_DAG_RUN_ID", f"run-{time.time_ns()}"),
                       ("AIRFLOW_CTX_TASK_ID", "make_shards")):
        monkeypatch.setenv(key, value)
    lines: list[str] = []
    monkeypatch.setattr(ray_jobs.log, "info", lambda msg, *args: lines.append(msg % args if args else msg))

    out = tmp_path / "shards"
    result = ops.make_shards(str(segmented), str(out), str(VOCAB),
                             {"max_seq_length": 32, "dupe_factor": 2})
    assert result == str(out)
    assert manifest.read(out)["step"] == "make-shards" and not manifest.verify_outputs(out)
    assert any(line.startswith("[ray job]") for line in lines)  # the job's log reached ours
    submitted = [line for line in lines if line.startswith("submitted make_shards as Ray job")]
    assert len(submitted) == 1

    # A retry of the same task instance finds the succeeded job: same result, nothing submitted again.
    from ray.job_submission import JobSubmissionClient

    client = JobSubmissionClient(ray_head.dashboard_url)
    jobs_before = len(client.list_jobs())
    assert ops.make_shards(str(segmented), str(out), str(VOCAB),
                             {"max_seq_length": 32, "dupe_factor": 2}) == str(out)
    assert len(client.list_jobs()) == jobs_before
    assert any("already SUCCEEDED" in line for line in lines)


@pytest.mark.slow
def test_failed_job_fails_the_task_with_its_error(ray_head, tmp_path, monkeypatch):
    for key, value in ray_head.env.items():
        monkeypatch.setenv(key, value)
    config = ray_jobs.JobConfig(ray_head.dashboard_url, f"test-fail-{time.time_ns()}", poll_interval=0.5)
    missing = tmp_path / "no-such-file.txt"
    with pytest.raises(BertPipelineError, match=r"(?s)FAILED.*no-such-file"):
        ray_jobs.run_step_as_job("make_shards", {"segmented": str(missing), "output": str(tmp_path / "o"),
                                                 "vocab": str(VOCAB)}, config)
    assert not (tmp_path / "o").exists()
    # The next try of the task starts a new attempt rather than re-attaching to the failed job.
    client_id, attached = ray_jobs._choose_submission(ray_jobs._client(ray_head.dashboard_url), config.submission_id)
    assert (client_id, attached) == (f"{config.submission_id}-attempt-2", False)


KILLABLE = """
import sys
from operators import ray_jobs
config = ray_jobs.JobConfig(sys.argv[1], sys.argv[2], poll_interval=0.5)
settings = {"model": "bert_2_64_2", "num_workers": 1, "num_steps": 100000, "batch_size": 4}
ray_jobs.run_step_as_job("pretrain", {"shards_dir": sys.argv[3], "output": sys.argv[4], "settings": settings,
                                      "vocab": sys.argv[5]}, config, echo=lambda line: print(line, flush=True))
"""


@pytest.mark.slow
def test_killed_task_stops_its_job(ray_head, tmp_path, segmented):
    from ray.job_submission import JobSubmissionClient

    shards = ops.make_shards(str(segmented), str(tmp_path / "shards"), str(VOCAB),
                             {"max_seq_length": 32, "dupe_factor": 2})
    submission_id = f"test-kill-{time.time_ns()}"
    env = dict(ray_head.env, MLFLOW_TRACKING_URI=f"sqlite:///{tmp_path / 'mlflow.db'}")
    waiter = subprocess.Popen([sys.executable, "-c", KILLABLE, ray_head.dashboard_url, submission_id, shards,
                               str(tmp_path / "model"), str(VOCAB)], env=env, cwd=REPO,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    client = JobSubmissionClient(ray_head.dashboard_url)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if ray_jobs._status(client, submission_id) == "RUNNING" and "step" in client.get_job_logs(submission_id):
                break
            assert waiter.poll() is None, waiter.communicate()[0][-3000:]
            time.sleep(0.5)
        else:
            pytest.fail("the job never started running")
        waiter.send_signal(signal.SIGTERM)  # what Airflow does to a task it kills
        output, _ = waiter.communicate(timeout=60)
        assert waiter.returncode != 0
        assert "terminated (SIGTERM)" in output
        deadline = time.monotonic() + 60
        while ray_jobs._status(client, submission_id) != "STOPPED" and time.monotonic() < deadline:
            time.sleep(0.5)
        assert ray_jobs._status(client, submission_id) == "STOPPED"
        assert not (tmp_path / "model" / "manifest.json").exists()
    finally:
        if waiter.poll() is None:
            os.kill(waiter.pid, signal.SIGKILL)
        client.stop_job(submission_id)

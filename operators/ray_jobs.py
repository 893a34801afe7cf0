"""Run a pipeline step on a Ray cluster through the Ray Job Submission API, and wait for it.

When RAY_ADDRESS is a dashboard URL (`http://head:8265`, the address `ray job submit` uses), the training
steps of the DAGs do not run in the Airflow worker: each becomes one Ray job whose entrypoint is
`python -m operators.step_runner STEP KWARGS_JSON`, i.e. the very task function the in-process path calls,
now running as the job's driver on the cluster (where Ray points RAY_ADDRESS at the cluster itself, so
Ray Train and Ray tasks spread over its nodes). The caller:

- streams the job's log into its own log (the Airflow task log) as it grows;
- fails, with the end of the job's log, when the job fails or is stopped;
- stops the job when it is itself killed (SIGTERM from Airflow, Ctrl-C) or interrupted;
- is idempotent across task retries: the submission id is derived from the Airflow task instance, so a
  retry re-attaches to a job that is still running (or already succeeded) instead of starting a second one,
  and starts a fresh attempt only after a failed or stopped one.

Paths in the step's arguments must be visible from the cluster (s3:// URIs or shared storage): the job's
result comes back through its log, not through the local filesystem. Credentials are not forwarded: the
cluster's nodes get them from their own environment or instance role.

No Airflow import here: tests and other orchestrators call `run_step_as_job` directly.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import shlex
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from bert_core.errors import BertPipelineError
from bert_core.launch import ray_cluster

log = logging.getLogger(__name__)

RESULT_MARKER = "BERT_PIPELINE_STEP_RESULT "
IN_JOB_ENV = "BERT_PIPELINE_IN_RAY_JOB"
# Environment the job's driver needs from the submitter (never credentials: the dashboard shows runtime envs):
# what every Ray worker gets from its driver, plus the home of the driver's embedded defaults and the task's
# Airflow context; but not the task try's MLflow tags (MLFLOW_RUN_CONTEXT): a job outlives its task's try, and a
# retry attaches to it again, so its runs must not be taken for ones a killed try left running
# (operators.left_running).
FORWARDED_ENV = (*(k for k in ray_cluster.FORWARDED_ENV if k != "MLFLOW_RUN_CONTEXT"), "BERT_PIPELINE_HOME",
                 "AIRFLOW_CTX_DAG_ID", "AIRFLOW_CTX_TASK_ID")
TERMINAL = {"SUCCEEDED", "FAILED", "STOPPED"}


def submission_address() -> str | None:
    """The Ray dashboard URL to submit jobs to, or None to run steps in this process.

    RAY_ADDRESS in its `http(s)://` form names a job server; in its GCS form (`host:6379`, `ray://...`) it names
    a cluster this process joins as a driver, which the steps themselves handle. Inside a submitted job the
    answer is always None, so a job never submits itself again."""
    address = os.environ.get("RAY_ADDRESS", "")
    if os.environ.get(IN_JOB_ENV) or not re.match(r"https?://", address):
        return None
    return address


@dataclass
class JobConfig:
    """How one step runs as a Ray job."""

    address: str
    submission_id: str
    entrypoint_num_cpus: float = 0  # the driver only coordinates; Ray Train workers reserve their own CPUs
    poll_interval: float = 2.0
    working_dir: str | None = None  # upload this directory (code not installed on the cluster); None: installed
    env: dict[str, str] = field(default_factory=dict)


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_")


def default_submission_id(step: str) -> str:
    """Stable per Airflow task instance (dag, run, task, map index), so retries find the job of an earlier try;
    outside Airflow, unique per call."""
    keys = [os.environ.get(k, "") for k in ("AIRFLOW_CTX_DAG_ID", "AIRFLOW_CTX_DAG_RUN_ID", "AIRFLOW_CTX_TASK_ID")]
    if not all(keys):
        return f"bert-{_safe(step)}-{os.getpid()}-{time.time_ns()}"
    digest = hashlib.sha256("/".join(keys + [os.environ.get("AIRFLOW_CTX_MAP_INDEX", "")]).encode()).hexdigest()
    return f"bert-{_safe(keys[0])}-{_safe(step)}-{digest[:16]}"


def entrypoint(step: str, kwargs: dict[str, Any]) -> str:
    return f"python -m operators.step_runner {shlex.quote(step)} {shlex.quote(json.dumps(kwargs, sort_keys=True))}"


def parse_result(logs: str) -> Any:
    """The step's return value: the JSON after the last result marker line of the job's log."""
    for line in reversed(logs.splitlines()):
        if line.startswith(RESULT_MARKER):
            return json.loads(line[len(RESULT_MARKER):])
    raise BertPipelineError("the Ray job succeeded but its log holds no step result line "
                            f"({RESULT_MARKER.strip()}); was it started by operators.step_runner?")


def _client(address: str):
    from ray.job_submission import JobSubmissionClient

    try:
        return JobSubmissionClient(address)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise BertPipelineError(f"RAY_ADDRESS={address}: cannot reach the Ray job server ({exc})") from exc


def _status(client, submission_id: str) -> str | None:
    """The job's status, or None when the cluster has no job with that id."""
    try:
        return str(client.get_job_info(submission_id).status)
    except RuntimeError as exc:  # the job API answers 404 for an unknown id
        if "404" in str(exc) or "does not exist" in str(exc).lower():
            return None
        raise


@contextlib.contextmanager
def _stop_on_termination(stop: Callable[[], None]) -> Iterator[None]:
    """While waiting, SIGTERM (how Airflow kills a task) stops the job first, then does what it did before."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGTERM)

    def handler(signum, frame):
        stop()
        if callable(previous):
            previous(signum, frame)
        raise BertPipelineError("terminated (SIGTERM) while waiting for the Ray job; the job was stopped")

    signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _choose_submission(client, base_id: str) -> tuple[str, bool]:
    """(submission id, already submitted?): re-attach to a pending/running/succeeded job of an earlier try;
    after failed/stopped attempts, the next free `-attempt-N` id."""
    attempt, submission_id = 1, base_id
    while True:
        status = _status(client, submission_id)
        if status is None:
            return submission_id, False
        if status not in ("FAILED", "STOPPED"):
            log.info("Ray job %s is already %s (an earlier try of this task): attaching to it", submission_id, status)
            return submission_id, True
        attempt += 1
        submission_id = f"{base_id}-attempt-{attempt}"


def run_step_as_job(step: str, kwargs: dict[str, Any], config: JobConfig,
                    echo: Callable[[str], None] | None = None) -> Any:
    """Submit `step(**kwargs)` as a Ray job, stream its log to `echo` (default: this module's logger), and return
    the step's result. Raises BertPipelineError when the job fails or is stopped; stops the job when this
    call is interrupted."""
    echo = echo or (lambda line: log.info("[ray job] %s", line))
    client = _client(config.address)
    submission_id, attached = _choose_submission(client, config.submission_id)
    if not attached:
        env = {k: os.environ[k] for k in FORWARDED_ENV if os.environ.get(k)}
        env.update(config.env)
        env[IN_JOB_ENV] = "1"
        runtime_env: dict[str, Any] = {"env_vars": env}
        if config.working_dir:
            runtime_env["working_dir"] = config.working_dir
        client.submit_job(entrypoint=entrypoint(step, kwargs), submission_id=submission_id, runtime_env=runtime_env,
                          entrypoint_num_cpus=config.entrypoint_num_cpus,
                          metadata={"step": step, "submitted_by": "bert-pipeline"})
        log.info("submitted %s as Ray job %s to %s", step, submission_id, config.address)

    def stop() -> None:
        with contextlib.suppress(Exception):
            if client.stop_job(submission_id):
                log.warning("stopped Ray job %s", submission_id)

    shown = 0
    finished = False
    try:
        with _stop_on_termination(stop):
            while True:
                status = _status(client, submission_id)
                logs = client.get_job_logs(submission_id)
                for line in logs[shown:].splitlines():
                    if not line.startswith(RESULT_MARKER):
                        echo(line)
                shown = len(logs)
                if status in TERMINAL:
                    finished = True
                    break
                time.sleep(config.poll_interval)
    finally:
        if not finished:
            stop()
    if status != "SUCCEEDED":
        info = client.get_job_info(submission_id)
        tail = "\n".join(logs.splitlines()[-20:])
        raise BertPipelineError(f"Ray job {submission_id} ({step}) {status}: {info.message or ''}\n{tail}".rstrip())
    return parse_result(logs)

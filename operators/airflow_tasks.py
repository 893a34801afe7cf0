"""`@bert_task`: Airflow's TaskFlow `@task` with the pipeline's policy, so every DAG behaves the same way.

- Transient failures (network, S3, a lost Ray node: any exception that is not a BertPipelineError) are
  retried with exponential backoff. Steps are idempotent (their manifests make a re-run of a finished step a
  no-op, and outputs are committed atomically), so a retry is always safe.
- A BertPipelineError is a verdict, not an accident (bad input, a failed validation gate, a regression): the
  task fails at once, without retries (AirflowFailException), with the error's one-line message.
- Each try is recorded in the run's directory (operators.run_records: state, start, end, error), for the run
  report's timeline.
- S3 credentials may come from an Airflow connection (`aws_default`, or the id in
  BERT_PIPELINE_AWS_CONN_ID; login = access key id, password = secret key, extras `endpoint_url` and
  `region_name`) when the environment has none. They are handed to boto3 through this task process's
  environment only while the task runs, and registered with Airflow's secret masker so they never appear in
  task logs.

The step functions themselves (operators.tasks, operators.nightly) know nothing about Airflow.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import logging
import os
from collections.abc import Callable, Iterator
from typing import Any

from airflow.sdk import task as airflow_task

from bert_core.errors import BertPipelineError
from operators.run_records import recorded

log = logging.getLogger(__name__)

RETRY_POLICY: dict[str, Any] = {
    "retries": 2,
    "retry_delay": dt.timedelta(seconds=30),
    "retry_exponential_backoff": 2.0,
    "max_retry_delay": dt.timedelta(minutes=10),
}
CONN_ID_ENV = "BERT_PIPELINE_AWS_CONN_ID"


@contextlib.contextmanager
def s3_credentials_from_connection() -> Iterator[None]:
    """While the block runs, AWS_* variables from the Airflow connection, unless the environment has its own."""
    if os.environ.get("AWS_ACCESS_KEY_ID") or os.environ.get("AWS_PROFILE"):
        yield
        return
    from airflow.sdk import BaseHook
    from airflow.sdk.exceptions import AirflowNotFoundException
    from airflow.sdk.log import mask_secret

    conn_id = os.environ.get(CONN_ID_ENV, "aws_default")
    try:
        conn = BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        yield
        return
    extra = conn.extra_dejson or {}
    values = {"AWS_ACCESS_KEY_ID": conn.login, "AWS_SECRET_ACCESS_KEY": conn.password,
              "AWS_SESSION_TOKEN": extra.get("aws_session_token"),
              "AWS_ENDPOINT_URL": os.environ.get("AWS_ENDPOINT_URL") or extra.get("endpoint_url"),
              "AWS_DEFAULT_REGION": os.environ.get("AWS_DEFAULT_REGION") or extra.get("region_name")}
    for secret in (conn.password, extra.get("aws_session_token")):
        if secret:
            mask_secret(secret)
    before = {k: os.environ.get(k) for k in values}
    os.environ.update({k: v for k, v in values.items() if v})
    log.info("S3 credentials from Airflow connection %r", conn_id)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def bert_task(python_callable: Callable | None = None, **task_kwargs: Any):
    """Use like `@task` (also `@bert_task(multiple_outputs=True)`, `.override(...)`, `.partial().expand()`)."""

    def decorate(fn: Callable) -> Any:
        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            from airflow.sdk.exceptions import AirflowFailException

            with s3_credentials_from_connection(), recorded():
                try:
                    return fn(*args, **kwargs)
                except BertPipelineError as exc:
                    raise AirflowFailException(str(exc)) from exc

        return airflow_task(run, **{**RETRY_POLICY, **task_kwargs})

    return decorate(python_callable) if python_callable is not None else decorate

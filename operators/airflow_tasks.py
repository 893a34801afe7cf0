"""`@bert_task`: Airflow's TaskFlow `@task` with the pipeline's policy, so every DAG behaves the same way.

- Transient failures (network, S3, a lost Ray node: any exception that is not a BertPipelineError) are
  retried with exponential backoff. Steps are idempotent (their manifests make a re-run of a finished step a
  no-op, and outputs are committed atomically), so a retry is always safe.
- A BertPipelineError is a verdict, not an accident (bad input, a failed validation gate, a regression): the
  task fails at once, without retries (AirflowFailException), with the error's one-line message.
- Tasks hand each other URIs, never local paths (operators.handoff): under a distributed executor (Celery,
  Kubernetes: Airflow's configured [core] executor) a run without a shared work dir fails in its first task;
  when the work dir is remote, a task whose return value (XCom) or an output manifest it names holds a local
  path fails, naming the task, the key and the path.
- SIGTERM while a task runs (how Airflow's supervisor ends a task marked failed or cleared, or one whose heartbeat
  is lost, and how a machine going away stops its processes) interrupts the step at once, as Ctrl-C would: its
  MLflow run ends FAILED, a Ray Train run it drives is aborted, and the try fails (retried if it has tries left)
  within the supervisor's 5 s before SIGKILL. Airflow's own handler only calls the operator's on_kill, a no-op
  for TaskFlow tasks, so the step ran on until the SIGKILL and left its MLflow run RUNNING. (Under
  `bert-pipeline run`, whose dag.test() runs every task in its process, the run's own handler takes SIGTERM and
  stops the whole run instead.)
- Each try is recorded in the run's directory (operators.run_records: state, start, end, error), for the run
  report's timeline.
- Each MLflow run a try starts is tagged with the try, and a retry first ends `KILLED` the runs an earlier try
  was killed before ending (operators.left_running).
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
from operators import handoff
from operators.run_records import recorded

log = logging.getLogger(__name__)

RETRY_POLICY: dict[str, Any] = {
    "retries": 2,
    "retry_delay": dt.timedelta(seconds=30),
    "retry_exponential_backoff": 2.0,
    "max_retry_delay": dt.timedelta(minutes=10),
}
CONN_ID_ENV = "BERT_PIPELINE_AWS_CONN_ID"
DEFAULT_CONN_ID = "aws_default"  # Airflow's own default id for AWS, which its S3 remote logging uses too


@contextlib.contextmanager
def s3_credentials_from_connection() -> Iterator[None]:
    """While the block runs, AWS_* variables from the Airflow connection, unless the environment has its own."""
    if os.environ.get("AWS_ACCESS_KEY_ID") or os.environ.get("AWS_PROFILE"):
        yield
        return
    from airflow.sdk import BaseHook
    from airflow.sdk.exceptions import AirflowNotFoundException
    from airflow.sdk.log import mask_secret

    conn_id = os.environ.get(CONN_ID_ENV, DEFAULT_CONN_ID)
    try:
        conn = BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        conn = None
    if conn is None:  # yielded outside the except: the task's own errors must not chain to the lookup's
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


def executor_setting() -> str:
    """Airflow's configured executor ([core] executor, e.g. CeleryExecutor), as this task process sees it."""
    from airflow.sdk import conf

    return conf.get("core", "executor", fallback="LocalExecutor") or "LocalExecutor"


def _current_context() -> Any | None:
    """The Airflow context of the task running in this process; None outside a task run (a test calling it)."""
    from airflow.sdk import get_current_context

    try:
        return get_current_context()
    except RuntimeError:
        return None


def running_task() -> tuple[str, str | None] | None:
    """("dag.task[map index]", the run's work_dir Param) of the task instance running in this process; None when
    the function is called outside a task run (a test calling it directly)."""
    context = _current_context()
    if context is None:
        return None
    ti = context.get("ti")
    label = f"{getattr(ti, 'dag_id', '?')}.{getattr(ti, 'task_id', '?')}"
    map_index = getattr(ti, "map_index", None)
    if map_index is not None and map_index >= 0:
        label += f"[{map_index}]"
    return label, (context.get("params") or {}).get("work_dir")


class _Stop:
    """A stop asked of an in-process run (Ctrl-C or SIGTERM of `bert-pipeline run`, whose dag.test() runs every
    task in its own main thread): the task running then ends at once, failed, not retried; each task after it
    fails before it starts (but the report, bert_task's runs_when_stopped), so the run ends failed instead of
    retrying a task the user stopped."""

    signal_name: str | None = None
    in_task = False
    # The SIGTERM handler of the process running the DAG run (bert_pipeline.dag_run.stop_on_signals), put back at
    # the start of each task: Airflow's task runner puts in its own for every task it runs (it calls the operator's
    # on_kill, a no-op for these tasks, and is never taken out), so a SIGTERM was ignored from the first task on.
    sigterm_handler: Callable | int | None = None


def request_stop(signal_name: str) -> bool:
    """Record the stop; True when one of our tasks is running now (the caller interrupts it)."""
    _Stop.signal_name = signal_name
    return _Stop.in_task


def clear_stop() -> None:
    """The run that asked for the stop has ended: later runs of this process start afresh."""
    _Stop.signal_name = None
    _Stop.sigterm_handler = None


def stop_on_sigterm(handler: Callable | int) -> None:
    """`handler` (or signal.SIG_DFL) takes SIGTERM in every task of the in-process DAG run (until clear_stop)."""
    _Stop.sigterm_handler = handler


class TaskTerminated(BaseException):
    """SIGTERM reached a task Airflow runs. A BaseException, as KeyboardInterrupt is: the interrupted work's
    `except Exception` does not take it for one of its own errors, and the step's MLflow run ends FAILED."""


TERMINATED_MESSAGE = ("stopped by SIGTERM while this task ran (Airflow sends it to a task marked failed or cleared, "
                      "or one whose heartbeat is lost; a machine that shuts down sends it to its processes): retried "
                      "if it has tries left")


def _terminate_task(signum, frame) -> None:
    import signal

    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM ends the process at once
    raise TaskTerminated(signal.Signals(signum).name)


@contextlib.contextmanager
def _sigterm_taken() -> Iterator[None]:
    """SIGTERM while the task runs: the handler of `bert-pipeline run` when it runs the DAG (put back, and left:
    Airflow's task runner puts in its own for every task, calling the operator's on_kill, a no-op here),
    else TaskTerminated raised in the task (Airflow's handler back after it)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    if _Stop.sigterm_handler is not None:
        signal.signal(signal.SIGTERM, _Stop.sigterm_handler)
        yield
        return
    before = signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, _terminate_task)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


@contextlib.contextmanager
def _runs_of_this_try() -> Iterator[None]:
    """The MLflow runs this try starts carry it (operators.left_running); a retry first ends those its earlier
    tries were killed before ending."""
    context = _current_context()
    ti = context.get("ti") if context is not None else None
    if getattr(ti, "try_number", None) is None:  # no task instance (a test's context), or one not yet tried
        yield
        return
    from operators import left_running

    if ti.try_number > 1:
        left_running.end_and_record(context, whole_run=False)
    with left_running.tagged_with_task(ti):
        yield


def _stopped_message(when: str) -> str:
    return f"the run was stopped ({_Stop.signal_name}) {when}: not retried"


def bert_task(python_callable: Callable | None = None, *, runs_when_stopped: bool = False, **task_kwargs: Any):
    """Use like `@task` (also `@bert_task(multiple_outputs=True)`, `.override(...)`, `.partial().expand()`).
    runs_when_stopped: the task still runs after a stop of the run (the report: a stopped run shows how far it
    got)."""

    def decorate(fn: Callable) -> Any:
        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            from airflow.sdk.exceptions import AirflowException, AirflowFailException

            if _Stop.signal_name and not runs_when_stopped:
                raise AirflowFailException(_stopped_message("before this task started"))
            running = running_task()
            with _sigterm_taken(), s3_credentials_from_connection(), recorded(), _runs_of_this_try():
                _Stop.in_task = True
                try:
                    if running is not None:
                        handoff.check_work_dir(running[1], executor_setting(), running[0])
                    result = fn(*args, **kwargs)
                    if running is not None:
                        handoff.check_handoff(result, running[1], running[0])
                    return result
                except BertPipelineError as exc:
                    if _Stop.signal_name:
                        raise AirflowFailException(_stopped_message("while this task ran")) from exc
                    raise AirflowFailException(str(exc)) from exc
                except KeyboardInterrupt as exc:
                    raise AirflowFailException(_stopped_message("while this task ran")) from exc
                except TaskTerminated as exc:
                    raise AirflowException(TERMINATED_MESSAGE) from exc
                except Exception as exc:
                    if _Stop.signal_name:  # what the interrupted work raised (a Ray run aborted, a closed pipe)
                        raise AirflowFailException(_stopped_message("while this task ran")) from exc
                    raise
                finally:
                    _Stop.in_task = False

        return airflow_task(run, **{**RETRY_POLICY, **task_kwargs})

    return decorate(python_callable) if python_callable is not None else decorate

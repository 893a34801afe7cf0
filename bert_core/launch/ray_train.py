"""Run a training step (pretraining, fine-tuning: a `StepSpec`) on Ray Train V2: a TorchTrainer with one
worker per GPU (or CPU process), DDP over NCCL (GPU) or gloo (CPU), checkpoints persisted to
RunConfig(storage_path) so every node sees them, and FailureConfig(max_failures) restarting the worker
group from the last checkpoint. `--num-workers MIN:MAX` makes the group elastic (Ray Train's
ScalingConfig(num_workers=(MIN, MAX))): it starts once MIN workers can be placed, grows when nodes join and
shrinks when they leave; bert_core.launch.ray_elastic logs each resize and bounds the wait for placement.

This is the only module that starts Ray Train. The driver (bert_core.launch.run.run_step, from the CLI, an
Airflow task or a `ray job submit` entrypoint) has checked the inputs (the step's Plan) and opened the MLflow
run; every worker runs the step's `work` function unchanged: Ray Train has set up torch.distributed, and
rank 0 logs into the driver's MLflow run and writes --output.

Ray Train V2 notes (Ray >= 2.43, default since 2.5x):
- `ray.train.report(metrics, checkpoint=...)` is a barrier: every worker calls it at the same steps;
  only rank 0 passes a checkpoint. Metrics without a checkpoint are not kept by Ray, so the
  training metrics go to MLflow and the final manifest comes back as the work function's return
  value (`Result.return_value`, rank 0's).
- A trainer created again with the same (storage_path, name) restores that run's checkpoints;
  `ray.train.get_checkpoint()` then returns the latest one. That is how a resumable step's `--resume`
  works here (pretraining). Steps that keep no checkpoints (fine-tuning) get a fresh name each run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
import math
import os
import shutil
import signal
import socket
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray
import ray.train
import torch
from ray.train import Checkpoint, CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
from ray.train.torch import TorchTrainer

from bert_core import logs
from bert_core.deploy.mlflow_model import pyfunc_spec
from bert_core.errors import BertPipelineError
from bert_core.io import storage
from bert_core.io.environment import env_default
from bert_core.io.tracking import NullTracker, Tracker, build_tracker, pipeline_home
from bert_core.launch import ray_logs
from bert_core.launch.ray_cluster import connect, on_local_instance, worker_env
from bert_core.launch.ray_elastic import NODE_CHECK_S, WorkerGroupWatch, placeable_workers
from bert_core.train.checkpointing import step_dir_name
from bert_core.train.step_spec import Plan, StepHook, StepSpec, Worker

log = logging.getLogger(__name__)


def run_name(spec: StepSpec, config: Any) -> str:
    """A resumable step's run name is stable per --output, so re-running the same command with --resume finds
    the run's checkpoints; other steps get a fresh name each run."""
    if spec.resumable:
        return getattr(config, "run_name", None) or f"{spec.name}-" + hashlib.sha256(config.output.encode()).hexdigest()[:12]
    task = getattr(config, "task", "")
    return "-".join(p for p in (spec.name, task.lower(), time.strftime("%Y%m%d-%H%M%S"), uuid.uuid4().hex[:6]) if p)


def storage_path(config: Any) -> str:
    """--storage; else, for an s3:// --output, `ray_results` beside it: every node sees it, and so does a retry
    of the run on another machine (an Airflow task retried on another worker resumes from its checkpoints);
    else $BERT_PIPELINE_HOME/ray_results."""
    if config.storage:
        return config.storage
    if storage.is_s3(config.output):
        bucket, key = storage.split_s3(config.output.rstrip("/"))
        parent = key.rsplit("/", 1)[0] if "/" in key else ""
        return storage.join(f"s3://{bucket}", *([parent] if parent else []), "ray_results")
    return str(pipeline_home() / "ray_results")


# How long workers hold after a drain notice before they stop waiting for Ray Train to replace the group: Ray
# restarts it when the drained node goes or at the deadline; a group still here well after that was not
# replaced (e.g. the drain was cancelled) and must not wait forever.
HOLD_AFTER_DEADLINE_S = 120.0
HOLD_WITHOUT_DEADLINE_S = 900.0


# A drain notice's last checkpoint is to be committed this long before the deadline: room for a slow step or
# checkpoint, and for a cloud that takes the machine a little early. Notices shorter than this plus one
# checkpoint get no training after the just-in-time checkpoint.
DRAIN_MARGIN_S = 10.0


def steps_before_deadline(deadline_s: float, now: float, step_s: float, checkpoint_s: float,
                          margin_s: float = DRAIN_MARGIN_S) -> int:
    """How many more steps of `step_s` fit before a checkpoint of `checkpoint_s` must start to end `margin_s`
    before the deadline (epoch seconds); one step is kept in reserve."""
    room = deadline_s - now - margin_s - checkpoint_s
    return max(0, int(room // max(step_s, 1e-3)) - 1)


def hold_limit(deadline_ms: int | None, now: float) -> float:
    """The time (time.time()) until which workers hold after a drain notice with this deadline."""
    if deadline_ms is None:
        return now + HOLD_WITHOUT_DEADLINE_S
    return max(now, deadline_ms / 1000) + HOLD_AFTER_DEADLINE_S


class RayPreemption:
    """Drain notices from Ray Train's preemption watcher, and room for a larger elastic group
    (bert_core.train.step_spec.Preemption; the latter: `grow_possible`, see bert_core.launch.ray_elastic).

    `ray.train.get_preemption_info()` is a barrier across the workers, so every worker asks after the same
    steps. After the just-in-time checkpoint the workers train on while the notice's deadline leaves room
    (`steps_before_deadline`: the last checkpoint committed DRAIN_MARGIN_S before it), checkpoint again and
    hold: Ray Train's controller restarts the group (from that checkpoint) when the drained node goes or its
    deadline passes (FailureConfig.preemption_grace_s later), charged to FailureConfig.max_preemption_failures
    (default: unlimited), not to --max-failures. A group that is not replaced by `hold_limit` fails instead, so
    Ray Train restarts it from the same checkpoint (charged to --max-failures): no step is lost either way, and
    nothing waits forever."""

    def __init__(self, max_workers: int = 1, resources: dict[str, float] | None = None) -> None:
        self.info: Any = None
        self.max_workers, self.resources = max_workers, dict(resources or {})
        self._checked = 0.0  # last node check (rank 0)
        self._told: int | None = None  # the larger size grow_possible last said yes for

    @property
    def may_grow(self) -> bool:
        return ray.train.get_context().get_world_size() < self.max_workers

    def grow_possible(self) -> bool:
        """Rank 0, at most every NODE_CHECK_S: True once the live, not draining nodes could hold a larger group
        (up to the maximum); Ray Train's elastic policy resizes at its next --resize-interval check."""
        context = ray.train.get_context()
        now = time.monotonic()
        if context.get_world_rank() != 0 or now - self._checked < NODE_CHECK_S:
            return False
        self._checked = now
        world = context.get_world_size()
        fits = min(placeable_workers(self.resources), self.max_workers)
        if fits <= world:
            self._told = None
            return False
        if fits == self._told:
            return False
        self._told = fits
        log.warning("%d workers fit on the cluster now (the group has %d): checkpointing, so that Ray Train's "
                    "resize continues from here", fits, world)
        return True

    def noticed(self, step: int) -> bool:
        self.info = ray.train.get_preemption_info()
        return self.info is not None

    def steps_left(self, step_seconds: float, checkpoint_seconds: float) -> int:
        info = self.info
        left = (0 if info.deadline_ms is None else
                steps_before_deadline(info.deadline_ms / 1000, time.time(), step_seconds, checkpoint_seconds))
        if left and ray.train.get_context().get_world_rank() == 0:
            log.warning("drain notice for node %s (deadline in %.0f s): training on for about %d steps (%.2f s "
                        "each), then one more checkpoint (the last took %.1f s) %.0f s before the deadline",
                        ", ".join(n[:8] for n in info.preempted_node_ids), info.deadline_ms / 1000 - time.time(),
                        left, step_seconds, checkpoint_seconds, DRAIN_MARGIN_S)
        return left

    def hold(self, step: int) -> None:
        info = self.info
        limit = hold_limit(info.deadline_ms, time.time())
        nodes = ", ".join(n[:8] for n in info.preempted_node_ids)
        if ray.train.get_context().get_world_rank() == 0:
            left = ("no deadline" if info.deadline_ms is None
                    else f"deadline in {info.deadline_ms / 1000 - time.time():.0f} s")
            log.warning("step %d: drain notice for node %s (ranks %s, %s): checkpoint of step %d committed; "
                        "waiting for Ray Train to restart the group without that node", step, nodes,
                        info.preempted_ranks, left, step)
        while time.time() < limit:  # normally ended by the controller, which stops these workers
            time.sleep(1.0)
        raise RuntimeError(f"step {step}: node {nodes} had a drain notice, but the worker group was not replaced "
                           f"in time (deadline + {HOLD_AFTER_DEADLINE_S:.0f} s, or {HOLD_WITHOUT_DEADLINE_S:.0f} s "
                           f"without one); failing so that Ray Train restarts the group from the step-{step} checkpoint")


class RayCheckpointStore:
    """Checkpoints reported to Ray Train, which copies them to storage_path/<run name>/step-N.

    The controller registers a reported checkpoint asynchronously; a worker that dies in between
    would restart the run from the previous checkpoint (or from scratch). Every worker therefore
    waits until the checkpoint is committed: once `save` returns, a failure resumes from it.
    """

    def save(self, step: int, write: Callable[[Path], None] | None, metrics: dict[str, float]) -> None:
        if write is None:
            ray.train.report(metrics, checkpoint=None)
        else:
            with tempfile.TemporaryDirectory(prefix="bert-ckpt-") as tmp:
                write(Path(tmp))
                ray.train.report(metrics, checkpoint=Checkpoint.from_directory(tmp),
                                 checkpoint_dir_name=step_dir_name(step))
        ray.train.get_all_reported_checkpoints(consistency_mode=ray.train.CheckpointConsistencyMode.COMMITTED)


def _worker_setup(payload: dict[str, Any], use_gpu: bool) -> tuple[torch.device, Tracker]:
    """Logging, this worker's device and its tracker: rank 0 logs into the driver's MLflow run."""
    logs.configure()  # under an Airflow task, info lines on stdout: Ray re-prints stderr where Airflow sees errors
    device = torch.device("cpu")
    if use_gpu:
        device = ray.train.torch.get_device()
        torch.cuda.set_device(device)
    tracker: Tracker = NullTracker()
    if ray.train.get_context().get_world_rank() == 0 and payload["mlflow_run_id"]:
        tracker = build_tracker(True, payload["tracking_uri"], run_id=payload["mlflow_run_id"], pyfunc=pyfunc_spec)
    return device, tracker


def _worker(payload: dict[str, Any]) -> dict[str, Any]:
    """The function every worker runs: the step's `work`, with a checkpoint Ray restored (resumable steps)."""
    spec: StepSpec = payload["spec"]
    config = spec.config_type(**payload["config"])
    device, tracker = _worker_setup(payload, config.use_gpu)
    # Set after a worker failure, or when resuming the named run.
    checkpoint = ray.train.get_checkpoint() if spec.resumable else None
    with contextlib.ExitStack() as local_copy:
        resume_dir = restore_checkpoint(checkpoint, local_copy) if checkpoint else None
        if spec.resumable and (resume_dir is not None or config.resume in ("latest", "auto")):
            config = dataclasses.replace(config, resume=None)  # Ray's checkpoint is the one to resume from
        preemption = RayPreemption(**payload["group"]) if spec.resumable else None
        worker = Worker(device, RayCheckpointStore() if spec.resumable else None, resume_dir=resume_dir,
                        resume_source=checkpoint_uri(checkpoint) if checkpoint else None,
                        resume_done=local_copy.close, hooks=payload["hooks"], preemption=preemption)
        try:
            return spec.work(config, payload["plan"], tracker, worker)
        finally:
            if spec.resumable:
                # Workers of a group Ray Train killed while they were still reading their copy may have been
                # alive when this group's workers looked at the start; they are gone by now.
                sweep_restored_copies()


# <tmp>/bert-resume-<host>-<pid>-*: a worker's local copy of the checkpoint it resumes from.
RESTORE_PREFIX = "bert-resume-"


def restore_checkpoint(checkpoint: Checkpoint, cleanup: contextlib.ExitStack) -> Path:
    """A directory holding `checkpoint`: its own path on a shared disk, else a download into this process's
    temporary directory, deleted by `cleanup` (the step closes it once it has read the files).

    Not Checkpoint.as_directory: its download lives for the whole `with` and is deleted by the last process on
    the node to leave it, so a killed worker's copy stays on the disk for good, and Ray Train kills every worker
    of a group it restarts: one checkpoint left per surviving worker per lost node (a BERT-large checkpoint
    with its optimizer state is 4 GB). Copies of workers killed before they had read theirs are deleted by the
    next resumable worker on the node, when it starts and when it ends (sweep_restored_copies)."""
    if getattr(checkpoint.filesystem, "type_name", "local") == "local" and Path(checkpoint.path).is_dir():
        return Path(checkpoint.path)
    sweep_restored_copies()
    local = Path(tempfile.mkdtemp(prefix=f"{_restore_prefix()}{os.getpid()}-", dir=tempfile.gettempdir()))
    cleanup.callback(shutil.rmtree, local, ignore_errors=True)
    checkpoint.to_directory(str(local))
    return local


def sweep_restored_copies() -> None:
    """Delete this node's checkpoint copies whose process is gone (killed before it had read its copy)."""
    prefix = _restore_prefix()
    for stale in Path(tempfile.gettempdir()).glob(f"{prefix}*"):
        pid = stale.name[len(prefix):].split("-")[0]
        if pid.isdigit() and not _process_alive(int(pid)):
            log.info("deleting %s (a checkpoint copy of process %s, which is gone)", stale, pid)
            shutil.rmtree(stale, ignore_errors=True)


def _restore_prefix() -> str:
    """The copies' name up to the pid. The host name is in it: pods sharing a node's /tmp (a hostPath) share no
    pid namespace, and a pid says whether a copy's process is alive only on the host that named it."""
    return f"{RESTORE_PREFIX}{socket.gethostname()}-"


def _process_alive(pid: int) -> bool:
    """Whether `pid` runs; a zombie does not (a killed raylet's workers are reparented to a PID 1 that, in a
    container, may never reap them)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):  # no /proc (macOS): os.kill's answer stands
        return True
    return state not in ("Z", "X")


def checkpoint_uri(checkpoint: Any) -> str:
    """Where a Ray Train checkpoint lives, as a URI another machine can read: s3://bucket/key on S3 (Ray keeps
    the path without its scheme beside a pyarrow filesystem), else its path on the shared storage."""
    filesystem = getattr(checkpoint.filesystem, "type_name", "local")
    path = str(checkpoint.path)
    return path if filesystem == "local" or "://" in path else f"{filesystem}://{path.lstrip('/')}"


def _root_error(exc: BaseException) -> BaseException:
    """The user-level exception inside Ray's wrappers (WorkerGroupError -> RayTaskError -> cause)."""
    failures = getattr(exc, "worker_failures", None)
    if failures:
        exc = failures[min(failures)]
    exc = getattr(exc, "controller_failure", None) or exc
    while getattr(exc, "cause", None) is not None and exc.cause is not exc:
        exc = exc.cause
    return exc


# Ray Train starts a PreemptionWatcher actor for each worker group: it relays a node's drain notice to
# ray.train.get_preemption_info(), which RayPreemption asks. Ray creates it restartable (max_restarts=-1) with the
# workers' actor handles as constructor arguments, and Ray core logs an error for any such actor when it is
# created ("... has constructor arguments in the object store and max_restarts > 0", ray-project/ray#53727).
# The watcher is only of use to a resumable step (the others keep no checkpoint to save on a notice) on a
# cluster whose nodes can be drained; the local instance connect() starts is this machine alone, and if its only
# node went, the driver would go with it. So it runs where it can act, and nowhere else (a value of
# PREEMPTION_WATCHER_ENV the user set wins). On a cluster the error line stays: the handles it warns about belong
# to the worker group, which outlives the watcher (Ray Train kills the watcher before replacing the group).
PREEMPTION_WATCHER_ENV = "RAY_TRAIN_ENABLE_PREEMPTION_WATCHER"


@contextlib.contextmanager
def preemption_watcher(enabled: bool):
    """While the block runs, Ray Train starts the preemption watcher only when `enabled` (it reads the variable
    when fit() creates its controller, and passes it on to it)."""
    with contextlib.nullcontext() if enabled else env_default(PREEMPTION_WATCHER_ENV, "0"):
        yield


# How long Ray Train waits for one attempt to place and start the worker group (its default 60 s); the controller
# reads it from the driver's environment when fit() creates it.
START_TIMEOUT_ENV = "RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S"
RAY_START_ATTEMPT_S = 60.0
# An attempt also starts the workers once placed (imports, the process group): seconds, tens on a loaded machine.
MIN_START_ATTEMPT_S = 30.0


def start_attempt_s(placement_timeout: float) -> float:
    """Ray Train's attempt length that divides --placement-timeout into whole attempts of at most its default
    (and at least MIN_START_ATTEMPT_S): the timeout is checked as each attempt fails (WorkerGroupWatch), so with
    60 s attempts a `--placement-timeout 90` failed at 120 s; with 45 s attempts it fails at 90."""
    return max(MIN_START_ATTEMPT_S, placement_timeout / math.ceil(placement_timeout / RAY_START_ATTEMPT_S))


# How long a SIGTERM waits for Ray Train's graceful abort ("a few seconds") before it is passed on regardless.
ABORT_WAIT_S = 10.0


@contextlib.contextmanager
def _signals_passed_on():
    """fit() puts Ray Train's SIGINT handler in place (it aborts the run gracefully) and leaves it there after
    the run, bound to the finished run's controller: the process's own handler (the CLI's KeyboardInterrupt,
    `bert-pipeline run`'s stop of the whole DAG run) never saw a Ctrl-C again, and one during fit() became a
    failed step that Airflow retried. After fit() the handler from before is back, and a SIGINT Ray Train took
    is delivered to it.

    SIGTERM (`kill`, `ray job stop`, Airflow ending a task, a spot node's shutdown) reached only the process's own
    handler, which interrupted the driver and left the Ray run going on a joined cluster. During fit() it aborts
    the Ray run as Ctrl-C does, and is then delivered to the handler from before (the default one ends the
    process). The abort waits at most ABORT_WAIT_S: a SIGTERM to the whole process group (`timeout`, a service
    manager's stop) also ends the local Ray's own processes, and Ray Train's abort then waited for a cluster that
    was gone until Ray's GCS client gave up 60 s later and ended the process, with no record of the stop."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before, before_term = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    terms: list[int] = []  # SIGTERMs whose abort fit() saw through: passed on after it
    aborts: list[int] = []  # SIGTERMs given to Ray Train's SIGINT handler (it counts each as a SIGINT)

    def pass_on_now() -> None:
        signal.signal(signal.SIGTERM, before_term)
        signal.raise_signal(signal.SIGTERM)

    def on_sigterm(signum, frame):
        ray_trains = signal.getsignal(signal.SIGINT)
        if ray_trains is not before and callable(ray_trains):
            log.warning("SIGTERM: aborting the Ray Train run, then passing the signal on")
            aborts.append(signum)
            if _aborted_within(ray_trains, frame, ABORT_WAIT_S):
                terms.append(signum)  # passed on after fit()
                return
            log.warning("the Ray Train run did not confirm its abort within %g s (a SIGTERM to the whole process "
                        "group reaches the local Ray's own processes too): passing the signal on now", ABORT_WAIT_S)
        pass_on_now()  # also where fit() has no run to abort yet

    signal.signal(signal.SIGTERM, on_sigterm)
    try:
        yield
    finally:
        handler = signal.getsignal(signal.SIGINT)
        if handler is not before:
            signal.signal(signal.SIGINT, before)
        if signal.getsignal(signal.SIGTERM) is on_sigterm:
            signal.signal(signal.SIGTERM, before_term)
        if handler is not before and _sigints_taken(handler) > len(aborts):
            signal.raise_signal(signal.SIGINT)
        if terms and signal.getsignal(signal.SIGTERM) is before_term:
            signal.raise_signal(signal.SIGTERM)


def _aborted_within(ray_trains: Callable, frame, seconds: float) -> bool:
    """Run Ray Train's SIGINT handler (its graceful abort: a call to the run's controller) in a thread of its own;
    whether it returned within `seconds`. Its sys.exit, its way of saying the controller is gone already (a SIGTERM
    to the whole process group reaches the local Ray's own processes too), counts as returned."""
    done = threading.Event()

    def abort() -> None:
        try:
            ray_trains(signal.SIGINT, frame)
        except SystemExit:
            pass
        finally:
            done.set()

    threading.Thread(target=abort, name="ray-train-abort", daemon=True).start()
    return done.wait(seconds)


def _sigints_taken(handler) -> int:
    """How many SIGINTs Ray Train's handler (a closure counting them in `sigint_count`) took; 0 for another."""
    code, cells = getattr(handler, "__code__", None), getattr(handler, "__closure__", None) or ()
    names = dict(zip(code.co_freevars, cells)) if code is not None else {}
    try:
        return int(names["sigint_count"].cell_contents)
    except (KeyError, ValueError, TypeError):
        return 0


@dataclass
class _Job:
    name: str  # the Ray run's name under storage
    storage: str
    min_workers: int  # below max_workers: an elastic group
    max_workers: int
    use_gpu: bool
    placement_timeout: float
    resize_interval: float | None  # elastic groups only (pretraining's --resize-interval)
    max_failures: int
    keep_checkpoints: int | None
    step: str
    resumable: bool  # takes drain notices (RayPreemption): a checkpoint to save before a node goes

    def scaling(self) -> ScalingConfig:
        if self.elastic:
            return ScalingConfig(num_workers=(self.min_workers, self.max_workers), use_gpu=self.use_gpu,
                                 resources_per_worker=self.resources(),
                                 elastic_resize_monitor_interval_s=self.resize_interval)
        return ScalingConfig(num_workers=self.max_workers, use_gpu=self.use_gpu, resources_per_worker=self.resources())

    @property
    def elastic(self) -> bool:
        return self.min_workers < self.max_workers

    def resources(self) -> dict[str, float]:
        return {"GPU": 1.0} if self.use_gpu else {"CPU": 1.0}

    def describe(self) -> str:
        if self.elastic:
            return f"{self.min_workers} to {self.max_workers} workers (elastic)"
        return f"{self.max_workers} worker(s)"


def _tracking_payload(tracker: Tracker) -> dict[str, Any]:
    return {"mlflow_run_id": tracker.run_id, "tracking_uri": getattr(tracker, "tracking_uri", None)}


def _fit(worker: Callable[[dict[str, Any]], Any], payload: dict[str, Any], job: _Job) -> Any:
    """Start (or attach to) Ray, run `worker` on every worker of a TorchTrainer, return rank 0's result.
    A BertPipelineError raised on a worker comes back as one (the user's mistake, said once)."""
    connect(local_cpus=max(job.max_workers, os.cpu_count() or 1))  # locally, enough CPUs for one worker each
    env = worker_env()
    payload = {**payload, "group": {"max_workers": job.max_workers, "resources": job.resources()}}
    watch = WorkerGroupWatch(job.step, job.min_workers, job.resources(), job.placement_timeout,
                             payload.get("tracking_uri"), payload.get("mlflow_run_id"), elastic=job.elastic,
                             max_workers=job.max_workers)
    trainer = TorchTrainer(
        worker,
        train_loop_config=payload,
        scaling_config=job.scaling(),
        run_config=RunConfig(
            name=job.name,
            storage_path=job.storage,
            failure_config=FailureConfig(max_failures=job.max_failures),
            checkpoint_config=CheckpointConfig(num_to_keep=job.keep_checkpoints),
            worker_runtime_env={"env_vars": env},
            callbacks=[watch, *ray_logs.callbacks()],
        ),
    )
    log.info("Ray Train: %s%s, run %r under %s", job.describe(), " on GPUs" if job.use_gpu else "",
             job.name, job.storage)
    try:
        with (preemption_watcher(job.resumable and not on_local_instance()),
              env_default(START_TIMEOUT_ENV, f"{start_attempt_s(job.placement_timeout):g}"), _signals_passed_on()):
            result = trainer.fit()
    except ray.train.TrainingFailedError as exc:
        root_error = _root_error(exc)
        if isinstance(root_error, BertPipelineError):
            raise BertPipelineError(str(root_error)) from exc
        raise
    if result.return_value is None:
        raise BertPipelineError(f"Ray run {job.name!r} finished without a result from rank 0")
    return result.return_value


def check_run_state(spec: StepSpec, config: Any) -> None:
    """A resumable step's Ray run under --storage continues only with --resume, and --resume needs one."""
    if not spec.resumable:
        return
    name, root = run_name(spec, config), storage_path(config)
    previous = storage.exists(storage.join(root, name))
    if previous and not config.resume:
        raise BertPipelineError(f"Ray run {name!r} already has state under {root}: pass --resume to continue it, "
                                "or --run-name NAME (or another --output) to start a new run")
    if config.resume == "latest" and not previous:
        raise BertPipelineError(f"--resume: no Ray run {name!r} under {root} (give the --storage and "
                                "--run-name/--output of the interrupted run)")


def fit(spec: StepSpec, config: Any, plan: Plan, tracker: Tracker, name: str,
        hooks: tuple[StepHook, ...] = ()) -> dict[str, Any]:
    """Run the step on Ray Train (config absolutized, run state checked by the caller: run_step); rank 0 logs
    into `tracker`'s run, which stays open. Returns the output manifest."""
    payload = {"spec": spec, "config": dataclasses.asdict(config), "plan": plan, "hooks": tuple(hooks),
               **_tracking_payload(tracker)}
    low, high = config.workers()
    job = _Job(name, storage_path(config), max(1, low), max(1, high), config.use_gpu, config.placement_timeout,
               getattr(config, "resize_interval", None), getattr(config, "max_failures", 0),
               getattr(config, "keep_checkpoints", 0) or None, spec.name, spec.resumable)
    return _fit(_worker, payload, job)

"""What Ray Train's controller does with the worker group, said once per event, and a bound on waiting for it.

`WorkerGroupWatch` is a Ray Train V2 controller callback (RunConfig(callbacks=[...]); it runs inside the
controller actor, whose log Ray forwards to the driver). Ray itself does the scheduling: a fixed
ScalingConfig(num_workers=N) or an elastic one (num_workers=(MIN, MAX)), restarts from the latest
checkpoint after a failure, and its preemption watcher for drained nodes. This module only

- logs every change of the worker group's size as one line: "pretrain step 12: world size 2 -> 1 (worker
  rank 1 on node 3f2a.. died: ...)"; the step is the checkpoint the new group continues from (the last one
  reported), and records it in the run's MLflow run: the metric `world_size` at that step and a tag
  `resize.N` holding the line. A group restarted at the same size after a failure is one line too
  ("pretrain step 150: restarting the group of 2 worker(s) (...)", tag `restart.N`), and a group that cannot
  be placed yet one line saying what is missing and when the run gives up ("waiting for 2 worker(s) of
  {CPU: 1}, 1 placeable now; the run fails in 240 s ..."); Ray's retries of the same placement after its
  worker-group startup timeout are not resizes and say nothing more;
- fails the run when fewer than the minimum number of workers could be placed for longer than
  --placement-timeout, with one line naming what is missing, instead of Ray's wait that never ends;
- keeps Ray 2.60's elastic policy from acting on a stale view of the cluster. The policy sizes the group from
  Ray Data's AutoscalingCoordinator, which refreshes its view of the nodes every 20 s, and the policy reads
  it one call late: right after a node is lost it restarts the group at the old size, whose placement then
  waits for Ray's 60 s worker-group startup timeout; right after a node joins it may start smaller than it
  could. So when the controller is about to place a group, this asks the coordinator to recompute (its own
  `recompute` option), and a decision for more workers than the live, not draining nodes can hold is
  turned back with Ray's retryable WorkerGroupStartupFailedError: the controller decides again a second
  later, on the fresh view. Ray still makes every decision; this only refuses one it cannot carry out.
  While an elastic group runs, the same refresh is asked for as soon as the live nodes could hold another
  number of workers than the group has (checked every few seconds): a node that joins (or comes back) is
  then in the view the policy reads at its next --resize-interval check, not up to 20 s later.

Growing is Ray's own resize: every --resize-interval seconds the elastic policy of a running group counts the
workers the cluster could hold; when that differs from the group's size, the controller stops the group and
starts one of the new size, which resumes from the latest reported checkpoint. Ray 2.60 gives a running group
no notice before a resize (unlike a drain), so the workers look themselves: rank 0 checks the nodes as often as
the controller does and, once a larger group fits, the group checkpoints at the next step boundary
(ray_train.RayPreemption.grow_possible); the resize then redoes only the steps since that checkpoint, not
those since the last periodic one.

The controller calls `after_controller_state_update` on every iteration of its loop (every few tenths of a
second), also when the state did not change, which is what makes the timeout check possible here.
"""

from __future__ import annotations

import logging
import math
import socket
import time
from typing import Any

import ray
from ray.train.v2._internal.exceptions import (
    WorkerGroupStartupFailedError,
    WorkerHealthCheckFailedError,
    WorkerHealthCheckTimeoutError,
)
from ray.train.v2._internal.execution.callback import ControllerCallback, ReportCallback
from ray.train.v2._internal.execution.controller.state import (
    InitializingState,
    PreemptingState,
    ReschedulingState,
    ResizingState,
    RestartingState,
    RunningState,
    SchedulingState,
)

from bert_core.errors import BertPipelineError

log = logging.getLogger(__name__)

# How often a running elastic group below its maximum compares the placeable workers with its size (a
# ray.nodes() call): the controller, to refresh the elastic policy's view, and rank 0, to checkpoint before
# the resize (bert_core.launch.ray_train.RayPreemption.grow_possible).
NODE_CHECK_S = 2.0

# States in which the controller is waiting for a worker group to be placed (or to start).
_WAITING = (InitializingState, RestartingState, ReschedulingState, SchedulingState, ResizingState)


class PlacementTimeoutError(BertPipelineError):
    """Fewer than the minimum number of workers could be placed for longer than --placement-timeout."""


_WORKER_LOST = (WorkerHealthCheckFailedError, WorkerHealthCheckTimeoutError)


def _first_line(error: BaseException | None, limit: int = 200) -> str:
    text = str(error or "").strip().splitlines()
    line = next((t.strip() for t in text if t.strip() and not t.startswith("Training failed")), "") or repr(error)
    return line if len(line) <= limit else line[:limit - 3] + "..."


def describe_failure(error: BaseException) -> str:
    """Why a worker group stopped, in a few words: the failed ranks and the first line of the first error."""
    preemption = getattr(error, "preemption_info", None)
    if preemption is not None:
        nodes = ", ".join(n[:8] for n in preemption.preempted_node_ids)
        return f"node {nodes} drained (ranks {preemption.preempted_ranks} left with it)"
    failures: dict[int, BaseException] = getattr(error, "worker_failures", None) or {}
    if failures:
        ranks = sorted(failures)
        # A lost node fails its workers' health checks, and the other workers then fail in their next collective
        # ("gloo ... Connection closed by peer"): the health check says what happened, whichever rank it was.
        lost = [r for r in ranks if isinstance(failures[r], _WORKER_LOST)]
        return f"worker rank {', '.join(map(str, ranks))} failed: {_first_line(failures[(lost or ranks)[0]])}"
    return _first_line(getattr(error, "controller_failure", None) or error)


# A node whose raylet is gone (its machine vanished, or the process was killed) stays alive in the GCS until its
# health checks have failed (~15 s with Ray's defaults), while the workers on it fail within a second or two. So a
# node counts as live only when its raylet also accepts a TCP connection at NodeManagerAddress:NodeManagerPort
# within RAYLET_PROBE_S: a killed raylet's port refuses at once, a vanished machine's times out.
RAYLET_PROBE_S = 1.0
# How long a group's placement waits for the GCS to mark dead the nodes whose raylets no longer answer, before
# Ray's elastic policy decides again (it sizes groups from the GCS's view of the nodes).
GCS_CATCH_UP_S = 45.0


def raylet_answers(node: dict[str, Any]) -> bool:
    """Whether the node's raylet accepts a TCP connection (True when ray.nodes() names no address for it)."""
    host, port = node.get("NodeManagerAddress"), node.get("NodeManagerPort")
    if not host or not port:
        return True
    try:
        socket.create_connection((host, int(port)), timeout=RAYLET_PROBE_S).close()
        return True
    except OSError:
        return False


def _own_node_id() -> str | None:
    """This process's node, when it is connected to Ray (asking the runtime context otherwise starts a local Ray)."""
    if not ray.is_initialized():
        return None
    try:
        return ray.get_runtime_context().get_node_id()
    except Exception:
        return None


def placeable_workers(resources: dict[str, float], probe: bool = True) -> int:
    """How many workers needing `resources` fit on the cluster's live nodes that are not draining (their total
    resources). With `probe`, a node the GCS still lists as alive but whose raylet does not answer counts as
    lost; without, this is the GCS's (and Ray's elastic policy's) view."""
    try:
        draining = set(ray._private.state.state.get_draining_nodes())
    except Exception:  # an older GCS without the call: count every live node
        draining = set()
    live = [n for n in ray.nodes() if n.get("Alive") and n.get("NodeID") not in draining]
    if probe:
        answers = {n.get("NodeID"): raylet_answers(n) for n in live}
        if answers.get(_own_node_id(), True):  # else this node cannot reach its own raylet's address: no probing
            live = [n for n in live if answers[n.get("NodeID")]]
    count = 0
    for node in live:
        have = node.get("Resources", {})
        count += min((int(have.get(k, 0.0) // v) for k, v in resources.items() if v > 0), default=0)
    return count


def refresh_cluster_view() -> None:
    """Make Ray Data's AutoscalingCoordinator (what the elastic policy sizes groups from) look at the nodes now,
    not at its next 20 s tick. No coordinator yet (a fixed-size run): nothing to do."""
    try:
        coordinator = ray.get_actor("AutoscalingCoordinator", namespace="AutoscalingCoordinator")
        ray.get(coordinator.get_reserved_resources.remote("bert-pipeline-refresh", recompute=True), timeout=10)
    except Exception as exc:
        log.debug("no AutoscalingCoordinator to refresh: %s", exc)


def format_resources(resources: dict[str, float]) -> str:
    return "{" + ", ".join(f"{k}: {v:g}" for k, v in sorted(resources.items())) + "}"


class WorkerGroupWatch(ControllerCallback, ReportCallback):
    """Logs worker-group resizes (driver log and MLflow) and bounds the wait for placement; see the module doc."""

    RUNNING_CHECK_S = NODE_CHECK_S

    def __init__(self, step_name: str, min_workers: int, resources: dict[str, float], placement_timeout_s: float,
                 tracking_uri: str | None = None, mlflow_run_id: str | None = None, elastic: bool = False,
                 max_workers: int | None = None):
        self.step_name, self.min_workers, self.resources = step_name, min_workers, dict(resources)
        self.max_workers = max_workers if max_workers is not None else min_workers
        self.placement_timeout_s = placement_timeout_s
        self.tracking_uri, self.mlflow_run_id = tracking_uri, mlflow_run_id
        self.world = 0  # size of the group that last ran
        self.step: int | None = None  # the last step a checkpoint was reported at
        self.why = "start"
        self.waiting_since: float | None = None
        self.resizes = 0
        self.restarts = 0
        self.ran = False  # whether the group last scheduled reached RunningState (Ray may time out starting it)
        self._told_wait: tuple[int, int] | None = None  # (wanted, placeable) of the last "waiting for" line
        self.elastic = elastic  # a MIN:MAX group: Ray's elastic policy decides its size
        self._refreshed = 0.0
        self._checked = 0.0  # last placeable-workers check of a running group
        self._refreshed_for: int | None = None  # the worker count the last running-group refresh was for
        self._client: Any = None

    # -- Ray Train hooks (run in the controller actor)

    def after_report(self, training_report: Any, metrics: list[dict[str, Any]]) -> None:
        steps = [m["step"] for m in metrics if isinstance(m, dict) and isinstance(m.get("step"), int)]
        if steps:
            self.step = max(steps)

    def after_controller_state_update(self, previous_state: Any, current_state: Any) -> None:
        if isinstance(current_state, (RestartingState, ReschedulingState)) and current_state is not previous_state:
            if self.ran or self.why == "resources changed":  # else: a retry of a group that never started; the
                self.why = describe_failure(current_state.training_failed_error)  # failure that lost the last one
        elif isinstance(current_state, PreemptingState) and not isinstance(previous_state, PreemptingState):
            info = current_state.preemption_info
            left = "" if info.deadline_ms is None else f", deadline in {info.deadline_ms / 1000 - time.time():.0f} s"
            nodes = ", ".join(n[:8] for n in info.preempted_node_ids)
            self._say(f"drain notice for node {nodes} (ranks {info.preempted_ranks}{left}): Ray Train restarts "
                      "the group without it when the node goes or the deadline passes")
        elif isinstance(current_state, ResizingState) and not isinstance(previous_state, ResizingState):
            self.why = f"resources for {current_state.scaling_decision.num_workers} workers are available"
        if isinstance(current_state, (InitializingState, RestartingState, ReschedulingState)):
            now = time.monotonic()
            if current_state is not previous_state or now - self._refreshed > 2.0:
                refresh_cluster_view()
                self._refreshed = now
        elif isinstance(current_state, RunningState) and self.elastic:
            self._watch_running_group()
        if isinstance(current_state, SchedulingState) and not isinstance(previous_state, SchedulingState):
            wanted = current_state.scaling_decision.num_workers
            placeable = placeable_workers(self.resources)
            if wanted > placeable >= self.min_workers and self.elastic:
                self._await_gcs(placeable)
                log.info("%s: Ray decided on %d workers from a stale view of the cluster (%d placeable now): "
                         "deciding again", self.step_name, wanted, placeable)
                raise WorkerGroupStartupFailedError(f"{wanted} workers wanted, {placeable} placeable now")
            self._resized(wanted)
            if wanted > placeable:
                self._waiting(wanted, placeable)
        self._check_placement(current_state)

    # -- helpers

    def _await_gcs(self, placeable: int) -> None:
        """Wait (at most GCS_CATCH_UP_S) until the GCS no longer counts more workers than the nodes whose raylets
        answer hold: a node lost a moment ago is still alive there, and Ray's elastic policy, which decides again
        once this turns its decision back, would size the group to include it again. Waiting here costs the seconds
        the GCS takes to notice the loss, not Ray's 60 s worker-group startup timeout at the old size."""
        deadline = time.monotonic() + GCS_CATCH_UP_S
        while placeable_workers(self.resources, probe=False) > placeable and time.monotonic() < deadline:
            time.sleep(1.0)
        refresh_cluster_view()

    def _watch_running_group(self) -> None:
        """Refresh the elastic policy's view once the live nodes could hold another number of workers than the
        running group has (a node joined or came back; or left without failing the group)."""
        now = time.monotonic()
        if now - self._checked < self.RUNNING_CHECK_S:
            return
        self._checked = now
        fits = min(placeable_workers(self.resources), self.max_workers)
        if fits != self.world and fits >= self.min_workers and fits != self._refreshed_for:
            refresh_cluster_view()
            self._refreshed_for = fits  # once per change, not every check
            log.info("%s: the live nodes hold %d workers, the group has %d: Ray Train resizes it at its next "
                     "--resize-interval check", self.step_name, fits, self.world)
        elif fits == self.world:
            self._refreshed_for = None

    def _at(self) -> str:
        return f"step {self.step}" if self.step is not None else "start"

    def _resized(self, new: int) -> None:
        """A group of `new` workers is about to be placed. Only a change of size is a resize (a line, a
        `resize.N` tag, the `world_size` metric). A group of the same size again is a restart after a failure
        (a line and a `restart.N` tag), or, when the previous group never started (Ray's worker-group startup
        timed out: too few resources), another try at the same placement: nothing new to say, the "waiting
        for" line has said what is missing."""
        old, why, ran = self.world, self.why, self.ran
        at = self._at()
        self.world, self.ran = new, False
        if new == old and why not in ("start", "resources changed"):  # the failure stays the reason until a group runs
            if ran:
                self.restarts += 1
                self._say(f"{at}: restarting the group of {new} worker(s) ({why})", tag=f"restart.{self.restarts}")
            return
        self.why = "resources changed"
        if old == 0 and why == "start":
            self._say(f"{at}: world size {new} (minimum {self.min_workers})", level=logging.INFO)
        elif new != old:
            self.resizes += 1
            self._say(f"{at}: world size {old} -> {new} ({why})", tag=f"resize.{self.resizes}")
        else:
            return
        self._record(new)

    def _waiting(self, wanted: int, placeable: int) -> None:
        """One line when a group cannot be placed yet, saying what is missing and when the run gives up (Ray's
        own wait says nothing until its 60 s worker-group startup timeout, then repeats a traceback)."""
        if self._told_wait == (wanted, placeable):
            return
        self._told_wait = (wanted, placeable)
        waited = time.monotonic() - self.waiting_since if self.waiting_since is not None else 0.0
        left = max(0.0, self.placement_timeout_s - waited)
        self._say(f"{self._at()}: waiting for {wanted} worker(s) of {format_resources(self.resources)}, "
                  f"{placeable} placeable now; the run fails in {math.ceil(left)} s (--placement-timeout "
                  f"{self.placement_timeout_s:g}) unless nodes with these resources join")

    def _say(self, text: str, level: int = logging.WARNING, tag: str | None = None) -> None:
        line = f"{self.step_name} {text}"
        log.log(level, "%s", line)
        if tag:
            self._mlflow(lambda c: c.set_tag(self.mlflow_run_id, tag, line[:5000]))

    def _record(self, world: int) -> None:
        self._mlflow(lambda c: c.log_metric(self.mlflow_run_id, "world_size", float(world), step=self.step or 0))

    def _mlflow(self, call) -> None:
        if not self.mlflow_run_id:
            return
        try:
            if self._client is None:
                import mlflow

                self._client = mlflow.MlflowClient(self.tracking_uri)
            call(self._client)
        except Exception as exc:  # the run goes on without the record; say so once per event
            log.warning("could not record the worker group change in MLflow run %s: %s", self.mlflow_run_id, exc)

    def _check_placement(self, state: Any) -> None:
        if isinstance(state, RunningState) or isinstance(state, PreemptingState):
            self.waiting_since, self._told_wait = None, None
            self.ran = True
            return
        if not isinstance(state, _WAITING):
            return
        now = time.monotonic()
        if self.waiting_since is None:
            self.waiting_since = now
            return
        waited = now - self.waiting_since
        if waited < self.placement_timeout_s:
            return
        placeable = placeable_workers(self.resources)
        remedy = ("add nodes with these resources or lower the minimum of --num-workers" if placeable < self.min_workers
                  else "the live nodes have room, so other work holds the resources")
        line = (f"{self.step_name}: {self.min_workers} worker(s) of {format_resources(self.resources)} wanted, "
                f"{placeable} placeable for {math.floor(waited)} s (--placement-timeout "
                f"{self.placement_timeout_s:g}): {remedy}")
        self._say(line.split(": ", 1)[1], level=logging.ERROR, tag="placement_timeout")
        raise PlacementTimeoutError(line)

"""A running elastic group asks Ray's elastic policy to look at the nodes again once they could hold another number
of workers than the group has (WorkerGroupWatch), so a node that joins is seen at the next resize check rather
than at the AutoscalingCoordinator's next 20 s tick. The grow itself runs on a real cluster in
test_ray_multinode.py; this checks when the refresh is asked for, without one."""

from ray.train.v2._internal.execution.controller.state import RunningState

from bert_core.launch import ray_elastic
from bert_core.launch.ray_elastic import WorkerGroupWatch


def _watch(monkeypatch, placeable: list[int], elastic: bool = True) -> tuple[WorkerGroupWatch, list[int]]:
    refreshed: list[int] = []
    monkeypatch.setattr(ray_elastic, "placeable_workers", lambda resources, probe=True: placeable[0])
    monkeypatch.setattr(ray_elastic, "refresh_cluster_view", lambda: refreshed.append(placeable[0]))
    watch = WorkerGroupWatch("pretrain", 1, {"CPU": 1.0}, 60.0, elastic=elastic, max_workers=2 if elastic else 1)
    watch.RUNNING_CHECK_S = 0.0
    watch.world = 1
    return watch, refreshed


def _tick(watch: WorkerGroupWatch) -> None:
    running = RunningState()
    watch.after_controller_state_update(running, running)


def test_a_node_joining_a_running_elastic_group_refreshes_the_view_once(monkeypatch):
    placeable = [1]
    watch, refreshed = _watch(monkeypatch, placeable)
    _tick(watch)
    assert refreshed == []  # the group has what the nodes hold
    placeable[0] = 3  # two nodes joined: more than the maximum of 2
    _tick(watch)
    _tick(watch)
    assert refreshed == [3]  # once per change, not on every check
    placeable[0] = 1  # one left again before Ray resized
    _tick(watch)
    assert refreshed == [3]  # back to the group's size: nothing to tell
    placeable[0] = 2
    _tick(watch)
    assert refreshed == [3, 2]


def test_a_fixed_group_never_refreshes(monkeypatch):
    placeable = [3]
    watch, refreshed = _watch(monkeypatch, placeable, elastic=False)
    _tick(watch)
    assert refreshed == []


# -- what the watch says while a group is restarted or cannot be placed (the controller's states, driven here as Ray's
# controller drives them; the walk that found it: a worker node's raylet SIGKILLed under a fixed group of 2 on a
# loopback cluster, which logged "world size 2 -> 2" and a resize.N tag for each of Ray's 60 s startup retries)

from ray.train.v2._internal.execution.controller.state import (  # noqa: E402
    InitializingState,
    ReschedulingState,
    RestartingState,
    SchedulingState,
)
from ray.train.v2._internal.execution.scaling_policy.scaling_policy import ResizeDecision  # noqa: E402


class _Failed(Exception):
    def __init__(self, message: str, ranks: tuple[int, ...] = ()):
        super().__init__(message)
        self.worker_failures = {rank: RuntimeError(message) for rank in ranks}


class _Client:
    def __init__(self):
        self.tags: dict[str, str] = {}
        self.world_size: list[tuple[int, float]] = []

    def set_tag(self, run_id, key, value):
        self.tags[key] = value

    def log_metric(self, run_id, key, value, step=0):
        self.world_size.append((step, value))


class _Driver:
    """Feeds the watch the controller's state updates; `placeable[0]` is what the nodes hold."""

    def __init__(self, monkeypatch, watch: WorkerGroupWatch, placeable: list[int]):
        monkeypatch.setattr(ray_elastic, "placeable_workers", lambda resources, probe=True: placeable[0])
        monkeypatch.setattr(ray_elastic, "refresh_cluster_view", lambda: None)
        self.watch, self.state = watch, None
        watch.mlflow_run_id, watch._client = "run", _Client()
        self.lines: list[str] = []
        monkeypatch.setattr(ray_elastic.log, "log", lambda level, fmt, line: self.lines.append(line))

    def to(self, state) -> None:
        self.watch.after_controller_state_update(self.state, state)
        self.state = state

    def schedule(self, workers: int) -> None:
        self.to(SchedulingState(ResizeDecision(num_workers=workers, resources_per_worker={"CPU": 1.0})))


STARTUP_TIMEOUT = "The worker group startup timed out after 60.0 seconds waiting for 2 workers."


def test_a_fixed_group_restarted_after_a_node_loss_is_no_resize_and_says_what_it_waits_for(monkeypatch):
    placeable = [2]
    watch = WorkerGroupWatch("pretrain", 2, {"CPU": 1.0}, 300.0)
    run = _Driver(monkeypatch, watch, placeable)
    run.to(InitializingState())
    run.schedule(2)
    run.to(RunningState())
    watch.after_report(None, [{"step": 150}])
    run.to(RestartingState(_Failed("A worker health check failed.", ranks=(0, 1))))
    run.schedule(2)  # the lost node is not marked dead yet: Ray tries, and times out 60 s later
    placeable[0] = 1
    for _ in range(3):  # Ray's retries of the same placement, each after its startup timeout
        run.to(ReschedulingState(_Failed(STARTUP_TIMEOUT)))
        run.schedule(2)
    placeable[0] = 2  # the node is back
    run.to(ReschedulingState(_Failed(STARTUP_TIMEOUT)))
    run.schedule(2)
    run.to(RunningState())

    assert run.lines[0] == "pretrain start: world size 2 (minimum 2)"
    assert run.lines[1] == ("pretrain step 150: restarting the group of 2 worker(s) (worker rank 0, 1 failed: "
                            "A worker health check failed.)")
    assert len(run.lines) == 3, run.lines  # the waiting line once, however often Ray tries again
    assert run.lines[2].startswith("pretrain step 150: waiting for 2 worker(s) of {CPU: 1}, 1 placeable now; the "
                                   "run fails in "), run.lines
    assert run.lines[2].endswith(" s (--placement-timeout 300) unless nodes with these resources join")
    client = watch._client
    assert not [k for k in client.tags if k.startswith("resize.")], client.tags  # the size never changed
    assert client.tags["restart.1"] == run.lines[1]
    assert client.world_size == [(0, 2.0)]


def test_more_workers_than_the_cluster_holds_are_waited_for_with_one_line(monkeypatch):
    watch = WorkerGroupWatch("pretrain", 3, {"CPU": 1.0}, 90.0)
    run = _Driver(monkeypatch, watch, [2])
    run.to(InitializingState())
    run.schedule(3)
    run.to(ReschedulingState(_Failed(STARTUP_TIMEOUT)))
    run.schedule(3)
    assert run.lines[0] == "pretrain start: world size 3 (minimum 3)"
    assert run.lines[1:] == ["pretrain start: waiting for 3 worker(s) of {CPU: 1}, 2 placeable now; the run fails "
                             "in 90 s (--placement-timeout 90) unless nodes with these resources join"], run.lines
    assert list(watch._client.tags) == []


def test_a_group_that_shrinks_is_still_a_resize(monkeypatch):
    placeable = [2]
    watch = WorkerGroupWatch("pretrain", 1, {"CPU": 1.0}, 300.0, elastic=True, max_workers=2)
    run = _Driver(monkeypatch, watch, placeable)
    run.to(InitializingState())
    run.schedule(2)
    run.to(RunningState())
    watch.after_report(None, [{"step": 10}])
    placeable[0] = 1
    run.to(RestartingState(_Failed("A worker health check failed.", ranks=(1,))))
    run.schedule(1)
    run.to(RunningState())
    assert run.lines[1] == "pretrain step 10: world size 2 -> 1 (worker rank 1 failed: A worker health check failed.)"
    assert watch._client.tags == {"resize.1": run.lines[1]}
    assert watch._client.world_size == [(0, 2.0), (10, 1.0)]


def test_an_elastic_group_whose_first_restart_never_starts_shrinks_for_the_failure_that_lost_the_node(monkeypatch):
    """Right after a node loss Ray's view still holds the lost node: the group is restarted at 2, times out, and then
    shrinks. The resize names the worker failure, not Ray's startup timeout."""
    placeable = [2]
    watch = WorkerGroupWatch("pretrain", 1, {"CPU": 1.0}, 300.0, elastic=True, max_workers=2)
    run = _Driver(monkeypatch, watch, placeable)
    run.to(InitializingState())
    run.schedule(2)
    run.to(RunningState())
    watch.after_report(None, [{"step": 150}])
    run.to(RestartingState(_Failed("A worker health check failed.", ranks=(0, 1))))
    run.schedule(2)
    placeable[0] = 1
    run.to(ReschedulingState(_Failed(STARTUP_TIMEOUT)))
    run.schedule(1)
    run.to(RunningState())
    assert run.lines[1:] == [
        "pretrain step 150: restarting the group of 2 worker(s) (worker rank 0, 1 failed: A worker health check "
        "failed.)",
        "pretrain step 150: world size 2 -> 1 (worker rank 0, 1 failed: A worker health check failed.)"]
    assert watch._client.world_size == [(0, 2.0), (150, 1.0)]


# -- a node whose raylet is gone counts as lost at once, not when the GCS has noticed (~15 s later)

import socket  # noqa: E402

import pytest  # noqa: E402
from ray.train.v2._internal.exceptions import WorkerGroupStartupFailedError  # noqa: E402


def test_a_node_whose_raylet_does_not_answer_is_not_placeable(monkeypatch):
    listening = socket.socket()
    listening.bind(("127.0.0.1", 0))
    listening.listen()
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))  # bound, not listening: connections are refused, as a killed raylet's port
    nodes = [{"NodeID": node, "Alive": True, "Resources": {"CPU": 1.0}, "NodeManagerAddress": "127.0.0.1",
              "NodeManagerPort": sock.getsockname()[1]} for node, sock in (("a", listening), ("b", closed))]
    nodes.append({"NodeID": "head", "Alive": True, "Resources": {}})
    monkeypatch.setattr(ray_elastic.ray, "nodes", lambda: nodes)
    monkeypatch.setattr(ray_elastic.ray._private.state.state, "get_draining_nodes", lambda: {})
    try:
        monkeypatch.setattr(ray_elastic, "_own_node_id", lambda: "head")
        assert ray_elastic.placeable_workers({"CPU": 1.0}) == 1
        assert ray_elastic.placeable_workers({"CPU": 1.0}, probe=False) == 2  # the GCS's view
        # A node that cannot reach its own raylet's address (a machine whose external address it cannot reach from
        # itself) cannot tell lost nodes from unreachable ones: it takes the GCS's view.
        monkeypatch.setattr(ray_elastic, "_own_node_id", lambda: "b")
        assert ray_elastic.placeable_workers({"CPU": 1.0}) == 2
    finally:
        listening.close()
        closed.close()


def test_a_stale_elastic_decision_waits_for_the_gcs_to_see_the_loss_then_decides_again(monkeypatch):
    """The lost node's raylet is gone but the GCS lists it for a few more seconds: the watch turns Ray's decision
    for 2 workers back once the GCS agrees, so that Ray decides again on a view without the node (not on the same
    stale one, and not after its 60 s startup timeout at the old size)."""
    gcs = [2]
    polls: list[int] = []
    clock = [0.0]

    def placeable(resources, probe=True):
        if probe:
            return 1
        polls.append(gcs[0])
        return gcs[0]

    def sleep(seconds):
        clock[0] += seconds
        if clock[0] >= 3:
            gcs[0] = 1  # the health checks have failed: the GCS marks the node dead

    monkeypatch.setattr(ray_elastic, "placeable_workers", placeable)
    monkeypatch.setattr(ray_elastic, "refresh_cluster_view", lambda: None)
    monkeypatch.setattr(ray_elastic.time, "sleep", sleep)
    watch = WorkerGroupWatch("pretrain", 1, {"CPU": 1.0}, 300.0, elastic=True, max_workers=2)
    watch.world, watch.ran = 2, True
    with pytest.raises(WorkerGroupStartupFailedError):
        watch.after_controller_state_update(
            RestartingState(_Failed("A worker health check failed.", ranks=(1,))),
            SchedulingState(ResizeDecision(num_workers=2, resources_per_worker={"CPU": 1.0})))
    assert polls == [2, 2, 2, 1]


def test_a_lost_worker_is_named_by_its_health_check_not_by_the_survivors_collective_error():
    """Walked: rank 1's node lost; rank 0 failed too, in its next all-reduce. The line named rank 0's gloo error."""
    from ray.train.v2._internal.exceptions import WorkerHealthCheckFailedError

    error = _Failed("")
    error.worker_failures = {
        0: RuntimeError("[gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:50891."),
        1: WorkerHealthCheckFailedError("A worker health check failed.\nWorker info: ...", RuntimeError("gone"))}
    assert ray_elastic.describe_failure(error) == "worker rank 0, 1 failed: A worker health check failed."

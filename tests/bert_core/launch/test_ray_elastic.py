"""A running elastic group asks Ray's elastic policy to look at the nodes again once they could hold another number
of workers than the group has (WorkerGroupWatch), so a node that joins is seen at the next resize check rather
than at the AutoscalingCoordinator's next 20 s tick. The grow itself runs on a real cluster in
test_ray_multinode.py; this checks when the refresh is asked for, without one."""

from ray.train.v2._internal.execution.controller.state import RunningState

from bert_core.launch import ray_elastic
from bert_core.launch.ray_elastic import WorkerGroupWatch


def _watch(monkeypatch, placeable: list[int], elastic: bool = True) -> tuple[WorkerGroupWatch, list[int]]:
    refreshed: list[int] = []
    monkeypatch.setattr(ray_elastic, "placeable_workers", lambda resources: placeable[0])
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

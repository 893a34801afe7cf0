"""Under a drain notice the workers train on while the deadline leaves room (steps_before_deadline), and a notice
that never leads to a restart must not hold them forever (RayPreemption.hold); an elastic group below its maximum
hears once that a larger group fits (RayPreemption.grow_possible)."""

from types import SimpleNamespace

import pytest
import ray.train

from bert_core.launch import ray_train
from bert_core.launch.ray_train import (
    DRAIN_MARGIN_S,
    HOLD_AFTER_DEADLINE_S,
    HOLD_WITHOUT_DEADLINE_S,
    RayPreemption,
    hold_limit,
    steps_before_deadline,
)


def test_steps_before_deadline_leave_the_margin_and_one_checkpoint():
    # 120 s notice (AWS), steps of 0.5 s, a checkpoint of 4 s: (120 - 10 - 4) / 0.5 = 212 steps, one kept back.
    assert steps_before_deadline(1120.0, 1000.0, 0.5, 4.0) == 211
    assert DRAIN_MARGIN_S == 10.0
    # A short notice, or a slow checkpoint: no training after the just-in-time checkpoint.
    assert steps_before_deadline(1012.0, 1000.0, 0.5, 4.0) == 0
    assert steps_before_deadline(1030.0, 1000.0, 1.0, 25.0) == 0
    assert steps_before_deadline(990.0, 1000.0, 0.5, 1.0) == 0  # the deadline already past
    assert steps_before_deadline(1030.0, 1000.0, 0.0, 1.0) > 0  # an unmeasured step time does not divide by 0


def test_a_notice_without_deadline_leaves_no_step(monkeypatch):
    preemption = RayPreemption()
    preemption.info = SimpleNamespace(deadline_ms=None, preempted_node_ids=["abcdef0123"], preempted_ranks=[1])
    assert preemption.steps_left(0.5, 2.0) == 0


def test_hold_limit_follows_the_deadline():
    assert hold_limit(None, 1000.0) == 1000.0 + HOLD_WITHOUT_DEADLINE_S
    assert hold_limit(1_030_000, 1000.0) == 1030.0 + HOLD_AFTER_DEADLINE_S
    assert hold_limit(900_000, 1000.0) == 1000.0 + HOLD_AFTER_DEADLINE_S  # a deadline already past


@pytest.mark.timeout(30)  # a hold without a bound would spin on the fake clock forever
def test_hold_gives_up_with_an_error_when_the_group_is_not_replaced(monkeypatch):
    clock = {"now": 1000.0}
    monkeypatch.setattr(ray_train.time, "time", lambda: clock["now"])
    monkeypatch.setattr(ray_train.time, "sleep", lambda s: clock.__setitem__("now", clock["now"] + s))
    monkeypatch.setattr(ray.train, "get_context", lambda: SimpleNamespace(get_world_rank=lambda: 0))
    preemption = RayPreemption()
    preemption.info = SimpleNamespace(deadline_ms=1_010_000, preempted_node_ids=["abcdef0123"], preempted_ranks=[1])
    with pytest.raises(RuntimeError, match="step 7: node abcdef01 had a drain notice.*step-7 checkpoint"):
        preemption.hold(7)
    assert clock["now"] >= 1010.0 + HOLD_AFTER_DEADLINE_S  # it held until the limit, not less


def test_a_larger_group_is_announced_once_per_change_on_rank_0(monkeypatch):
    clock, placeable, context = {"now": 100.0}, [1], {"rank": 0}
    monkeypatch.setattr(ray_train.time, "monotonic", lambda: clock["now"])
    monkeypatch.setattr(ray_train, "placeable_workers", lambda resources: placeable[0])
    monkeypatch.setattr(ray.train, "get_context", lambda: SimpleNamespace(
        get_world_rank=lambda: context["rank"], get_world_size=lambda: 1))
    preemption = RayPreemption(max_workers=2, resources={"CPU": 1.0})
    assert preemption.may_grow and not RayPreemption(max_workers=1).may_grow

    def asked() -> bool:
        clock["now"] += ray_train.NODE_CHECK_S
        return preemption.grow_possible()

    assert not asked()  # one node: the group has what fits
    placeable[0] = 3
    assert asked()  # a node came back (capped at the maximum of 2)
    assert not asked()  # said once
    placeable[0] = 1
    assert not asked()
    placeable[0] = 2
    assert asked()  # a new change
    placeable[0] = 1
    asked()
    placeable[0] = 2
    assert not preemption.grow_possible()  # checked less than NODE_CHECK_S ago
    context["rank"] = 1
    assert not asked()  # only rank 0 looks

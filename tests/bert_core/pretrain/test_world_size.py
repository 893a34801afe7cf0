"""The optimization does not depend on the number of workers (ARCHITECTURE §9): 1, 2 and 3 workers at one
global batch (uneven with 3; empty shares with more workers than sequences) end with the same weights,
and a run checkpointed on 2 workers and resumed on 3 ends with the weights of an uninterrupted run.

The workers are real processes joined by a torch.distributed gloo group on loopback, as under torchrun.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.distributed as torch_dist
import torch.multiprocessing as mp

from bert_core.launch.ports import free_ports
from bert_core.model.weights import read_state_dict
from bert_core.pretrain.step import PretrainConfig, pretrain
from tests.synthetic_shards import tiny_model_config, write_shards

STEPS = 6


class FailEverywhereAtStep:
    """After optimizer step `step`, on every worker: the whole group stops, as when its nodes go away."""

    def __init__(self, step: int):
        self.step = step

    def __call__(self, step: int, resumed: bool) -> None:
        if step == self.step and not resumed:
            raise RuntimeError(f"injected stop at step {step}")


def _worker(rank: int, world: int, port: int, config: PretrainConfig, stop_at: int | None) -> None:
    torch.set_num_threads(1)
    torch_dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        hooks = [FailEverywhereAtStep(stop_at)] if stop_at else []
        try:
            result = pretrain(config, hooks=hooks)
        except RuntimeError as exc:
            if stop_at is None or "injected stop" not in str(exc):
                raise
            return
        assert result["training"]["world_size"] == world
    finally:
        torch_dist.destroy_process_group()


def run_workers(world: int, config: PretrainConfig, stop_at: int | None = None) -> None:
    """`pretrain(config)` on `world` gloo worker processes; raises if any worker fails."""
    mp.start_processes(_worker, args=(world, free_ports()[0], config, stop_at), nprocs=world, join=True,
                       start_method="spawn")


def _weights(directory: Path) -> dict[str, torch.Tensor]:
    return read_state_dict(directory / "model.safetensors")


def _assert_same_weights(got: Path, expected: Path) -> None:
    a, b = _weights(got), _weights(expected)
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=1e-4, atol=1e-6, msg=lambda m, n=name: f"{n}: {m}")


@pytest.fixture(scope="module")
def make(tmp_path_factory):
    root = tmp_path_factory.mktemp("world")
    data = write_shards(root / "shards", num_shards=2, per_shard=24, max_seq_length=32)
    model = tiny_model_config(root / "tiny.json")  # dropout off: the RNG of a worker count does not matter

    def config(name: str, **overrides) -> PretrainConfig:
        base = dict(data=str(data), output=str(root / name), model=str(model), batch_size=8, num_steps=STEPS,
                    lr=1e-3, optimizer="adamw", log_interval=1, ckpt_interval=0, progress=False, tracking=False,
                    eval_max_batches=2, dtype="float32")  # compared across world sizes: float32, on any CPU
        return PretrainConfig(**{**base, **overrides})

    return root, config


def test_one_two_and_three_workers_take_the_same_steps(make):
    root, config = make
    pretrain(config("w1"))
    for world in (2, 3):  # 8 sequences on 3 workers: shares of 3, 3 and 2
        run_workers(world, config(f"w{world}"))
        _assert_same_weights(root / f"w{world}", root / "w1")


def test_more_workers_than_sequences(make):
    """A global batch of 2 on 3 workers: one worker's share is empty; it still joins every all-reduce."""
    root, config = make
    pretrain(config("b2-w1", batch_size=2, num_steps=3))
    run_workers(3, config("b2-w3", batch_size=2, num_steps=3))
    _assert_same_weights(root / "b2-w3", root / "b2-w1")


def test_checkpoint_on_two_workers_resume_on_three(make):
    root, config = make
    pretrain(config("straight"))
    resized = config("resized", ckpt_interval=3, ckpt_dir=str(root / "resized-ckpt"))
    run_workers(2, resized, stop_at=4)  # steps 1-4 on 2 workers; step 3's checkpoint survives
    assert (root / "resized-ckpt" / "latest").read_text().strip() == "step-00000003"
    assert not (root / "resized").exists()
    run_workers(3, config("resized", ckpt_interval=3, ckpt_dir=str(root / "resized-ckpt"), resume="latest"))
    _assert_same_weights(root / "resized", root / "straight")

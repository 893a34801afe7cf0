"""Which steps a training run took, when, and on how many workers: a step hook (bert_core.train.step_spec.StepHook)
for runs whose workers may die or be replaced, and the reader of its records.

Rank 0 writes one small object per optimizer step under a prefix (an s3:// URI on a cluster, whose nodes share no
disk): `<step>-<unique>` holding the world size, the wall-clock time and the worker-group attempt (a token drawn
once per worker process, so a restarted group, even at the same size and step, is told apart). A redone step
appears once per attempt that ran it. The multi-node tests read the steps (tests/bert_core/launch/
test_ray_multinode.py), the elastic-recovery benchmark the whole timeline (evaluation.elastic_recovery).
"""

from __future__ import annotations

import json
import time
import uuid

from bert_core.io import storage
from bert_core.train import dist


class RecordSteps:
    """Rank 0 writes {"world", "time", "attempt"} for every optimizer step under `prefix` (see the module doc)."""

    def __init__(self, prefix: str):
        self.prefix = prefix
        self._attempt: str | None = None  # drawn in the worker process, at its first step

    def __call__(self, step: int, resumed: bool) -> None:
        if dist.rank() != 0:
            return
        if self._attempt is None:
            self._attempt = uuid.uuid4().hex[:8]
        record = {"world": dist.world_size(), "time": time.time(), "attempt": self._attempt}
        storage.write_text(storage.join(self.prefix, f"{step:05d}-{uuid.uuid4().hex[:8]}"), json.dumps(record))


def recorded_timeline(prefix: str) -> list[dict]:
    """Every step record under `prefix` as {"step", "world", "time", "attempt"}, in the order they were written."""
    records = []
    for name in storage.list_files(prefix):
        record = json.loads(storage.read_text(storage.join(prefix, name)))
        records.append({"step": int(name.split("-")[0]), **record})
    return sorted(records, key=lambda r: (r["time"], r["step"]))


def recorded_steps(prefix: str) -> list[tuple[int, int]]:
    """(step, world size) of every recorded step, in step order (a redone step appears once per attempt)."""
    return sorted((r["step"], r["world"]) for r in recorded_timeline(prefix))


def step_recorded(prefix: str, step: int) -> bool:
    """Whether any attempt has recorded `step` yet (one small listing, whatever the number of records)."""
    bucket_prefix = storage.join(prefix, f"{step:05d}-")
    if storage.is_s3(prefix):
        bucket, key = storage.split_s3(bucket_prefix)
        listed = storage.s3_client().list_objects_v2(Bucket=bucket, Prefix=key, MaxKeys=1)
        return bool(listed.get("KeyCount"))
    return any(storage.local_path(prefix).glob(f"{step:05d}-*"))

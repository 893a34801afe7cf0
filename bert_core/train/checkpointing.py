"""Training checkpoints: what a run needs to continue exactly where it stopped.

A checkpoint is a directory `step-NNNNNNNN/` holding
- `config.json` + `model.safetensors`: a model directory (from_pretrained loads it as is);
- `training_state.pt`: optimizer, scheduler and loss-scaler state, the step, the data position and
  every worker's RNG states (python, numpy, torch, CUDA).
Only plain containers and tensors go into `training_state.pt`, so it loads with
`torch.load(weights_only=True)`: a checkpoint is data, never code.

`LocalCheckpointStore` writes them under a directory or s3:// prefix: each checkpoint appears
atomically (bert_core.io.storage.atomic_output_dir), then the `latest` file is updated to name it,
so a run killed mid-save resumes from the previous complete checkpoint. Under Ray Train the
launcher's store reports them to Ray instead (RunConfig.storage_path).
"""

from __future__ import annotations

import logging
import random
import re
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch

from bert_core.errors import BertPipelineError
from bert_core.io import storage

log = logging.getLogger(__name__)

TRAINING_STATE = "training_state.pt"
LATEST = "latest"
_STEP_DIR = re.compile(r"^step-(\d+)$")


def step_dir_name(step: int) -> str:
    return f"step-{step:08d}"


# --------------------------------------------------------------------------- RNG state


def capture_rng() -> dict[str, Any]:
    """This process's RNG states as tensors and lists (weights_only-loadable)."""
    version, internal, gauss = random.getstate()
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    state: dict[str, Any] = {
        "python": [version, list(internal), gauss],
        "numpy": [kind, torch.from_numpy(keys.astype(np.int64)), int(pos), int(has_gauss), float(cached)],
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict[str, Any]) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


# --------------------------------------------------------------------------- files


def write_training_state(directory: Path, state: dict[str, Any]) -> None:
    torch.save(state, directory / TRAINING_STATE)


def read_training_state(directory: Path) -> dict[str, Any]:
    path = directory / TRAINING_STATE
    if not path.is_file():
        raise BertPipelineError(f"{directory}: not a training checkpoint (no {TRAINING_STATE})")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # truncated or foreign files surface as many exception types
        raise BertPipelineError(f"{path}: cannot read the training state ({type(exc).__name__}: {exc})") from None


class CheckpointStore(Protocol):
    """Where checkpoints go. `save` is called on every worker with the same step; `write` fills a
    directory on the worker that writes (rank 0) and is None elsewhere."""

    def save(self, step: int, write: Callable[[Path], None] | None, metrics: dict[str, float]) -> None: ...


class LocalCheckpointStore:
    """Checkpoints under a local directory or s3:// prefix, with a `latest` pointer and pruning."""

    def __init__(self, root: str, keep: int = 3, rank: int = 0):
        self.root = root
        self.keep = keep
        self.rank = rank

    def save(self, step: int, write: Callable[[Path], None] | None, metrics: dict[str, float]) -> None:
        if self.rank != 0 or write is None:
            return
        name = step_dir_name(step)
        with storage.atomic_output_dir(storage.join(self.root, name), overwrite=True) as tmp:
            write(tmp)
        self._write_latest(name)
        log.info("step %d: checkpoint saved to %s", step, storage.join(self.root, name))
        self._prune()

    def _write_latest(self, name: str) -> None:
        if storage.is_s3(self.root):
            with tempfile.TemporaryDirectory() as tmp:
                (Path(tmp) / LATEST).write_text(name + "\n")
                storage.upload_file(Path(tmp) / LATEST, storage.join(self.root, LATEST))
            return
        root = storage.local_path(self.root)
        tmp = root / f".{LATEST}.tmp"
        tmp.write_text(name + "\n")
        tmp.replace(root / LATEST)

    def _prune(self) -> None:
        if self.keep <= 0 or storage.is_s3(self.root):
            return  # s3: leave retention to the bucket's lifecycle rules
        root = storage.local_path(self.root)
        steps = sorted((p for p in root.iterdir() if _STEP_DIR.match(p.name) and p.is_dir()), key=lambda p: p.name)
        for old in steps[:-self.keep]:
            shutil.rmtree(old, ignore_errors=True)

    def latest(self) -> str | None:
        """URI of the newest complete checkpoint, or None."""
        if not storage.exists(self.root):
            return None
        if storage.is_s3(self.root):
            if not storage.exists(storage.join(self.root, LATEST)):
                return None
            with tempfile.TemporaryDirectory() as tmp:
                storage.download_file(storage.join(self.root, LATEST), Path(tmp) / LATEST)
                return storage.join(self.root, (Path(tmp) / LATEST).read_text().strip())
        root = storage.local_path(self.root)
        pointer = root / LATEST
        if pointer.is_file():
            return str(root / pointer.read_text().strip())
        # No pointer (e.g. copied by hand): the highest complete step directory.
        steps = sorted(p for p in root.iterdir() if _STEP_DIR.match(p.name) and (p / TRAINING_STATE).is_file())
        return str(steps[-1]) if steps else None


def local_checkpoint(uri: str) -> Path:
    """A local directory with the checkpoint's files (s3 checkpoints are fetched into the cache)."""
    path = storage.local_dir(uri)
    if not path.is_dir():
        raise BertPipelineError(f"{uri}: no such checkpoint directory")
    return path

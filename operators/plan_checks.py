"""Checks a DAG's plan makes before any work starts, shared by the DAGs: a model's position limit, GPUs."""

from __future__ import annotations

import json
import os
from pathlib import Path


def max_positions(model: str) -> int | None:
    """max_position_embeddings of a local model directory (None when it cannot be read here)."""
    for name in ("config.json", "bert_config.json"):
        path = Path(model) / name
        if path.is_file():
            try:
                return int(json.loads(path.read_text()).get("max_position_embeddings"))
            except (ValueError, TypeError):
                return None
    return None


def check_gpu(where: str) -> None:
    """use_gpu needs a GPU here, or a Ray cluster (RAY_ADDRESS) that has them."""
    import torch

    from bert_core.errors import BertPipelineError

    if not torch.cuda.is_available() and not os.environ.get("RAY_ADDRESS"):
        raise BertPipelineError(f"{where}: use_gpu is set, but this machine has no GPU and RAY_ADDRESS names no "
                                "cluster")

"""Checks a DAG's plan makes before any work starts, shared by the DAGs: a model's position limit, GPUs."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
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


def check_inputs(where: str, param: str, patterns: Sequence[str]) -> None:
    """Text inputs (paths, globs, directories, s3:// URIs) that match files now, before any task reads them."""
    from bert_core.data.text_inputs import resolve_inputs
    from bert_core.errors import BertPipelineError

    try:
        resolve_inputs(list(patterns))
    except BertPipelineError as exc:
        raise BertPipelineError(f"{where}: {param}: {exc}") from None


def check_file(where: str, param: str, path: str) -> None:
    """A file a later task reads (a vocab.txt): there now, local or on S3."""
    from bert_core.errors import BertPipelineError
    from bert_core.io import storage

    if not storage.exists(path):
        raise BertPipelineError(f"{where}: {param}: no such file {path}")

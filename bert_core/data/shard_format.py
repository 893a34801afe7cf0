"""Pretraining shards on disk: `part-NNNNN.npz` with the keys, shapes and dtypes of ARCHITECTURE §5.

Shards are uncompressed zip archives of .npy arrays, readable with `np.load`. They are written
here rather than with `np.savez` because savez stamps each member with the current time, and the
same seed and input must give byte-identical files: every member gets a fixed date and mode.
"""

from __future__ import annotations

import os
import re
import zipfile
from pathlib import Path

import numpy as np

from bert_core.errors import BertPipelineError

# key -> (dtype, dims) where dims name the axes: N instances, T max sequence length, P max predictions.
SCHEMA: dict[str, tuple[np.dtype, tuple[str, ...]]] = {
    "input_ids": (np.dtype(np.int32), ("N", "T")),
    "segment_ids": (np.dtype(np.int8), ("N", "T")),
    "valid_lengths": (np.dtype(np.int32), ("N",)),
    "masked_lm_positions": (np.dtype(np.int32), ("N", "P")),
    "masked_lm_ids": (np.dtype(np.int32), ("N", "P")),
    "masked_lm_weights": (np.dtype(np.float32), ("N", "P")),
    "next_sentence_labels": (np.dtype(np.int8), ("N",)),
}
KEYS = tuple(SCHEMA)
SHARD_PATTERN = re.compile(r"^part-(\d{5,})\.npz$")
_FIXED_DATE = (1980, 1, 1, 0, 0, 0)  # the earliest date a zip entry can hold


def shard_name(index: int) -> str:
    return f"part-{index:05d}.npz"


def schema_problems(arrays: dict[str, np.ndarray]) -> list[str]:
    """What makes `arrays` not a shard: missing/extra keys, wrong dtypes, inconsistent shapes."""
    problems = []
    missing = [k for k in KEYS if k not in arrays]
    extra = sorted(set(arrays) - set(KEYS))
    if missing:
        problems.append(f"missing keys {missing}")
    if extra:
        problems.append(f"unexpected keys {extra}")
    sizes: dict[str, int] = {}
    for key, (dtype, dims) in SCHEMA.items():
        if key not in arrays:
            continue
        array = arrays[key]
        if array.dtype != dtype:
            problems.append(f"{key} has dtype {array.dtype}, expected {dtype}")
        if array.ndim != len(dims):
            problems.append(f"{key} has {array.ndim} dimensions, expected {len(dims)} ({', '.join(dims)})")
            continue
        for dim, size in zip(dims, array.shape):
            if sizes.setdefault(dim, size) != size:
                problems.append(f"{key} has {dim}={size}, other arrays have {dim}={sizes[dim]}")
    return problems


def write_shard(path: str | os.PathLike, arrays: dict[str, np.ndarray]) -> Path:
    """Write one shard deterministically (same arrays -> same bytes)."""
    problems = schema_problems(arrays)
    if problems:
        raise BertPipelineError(f"{path}: not a valid shard: {'; '.join(problems)}")
    path = Path(path)
    with zipfile.ZipFile(path, mode="w", compression=zipfile.ZIP_STORED, allowZip64=True) as archive:
        for key in KEYS:
            info = zipfile.ZipInfo(f"{key}.npy", date_time=_FIXED_DATE)
            info.compress_type = zipfile.ZIP_STORED
            info.external_attr = 0o644 << 16
            with archive.open(info, mode="w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.ascontiguousarray(arrays[key]), allow_pickle=False)
    return path


def read_shard(path: str | os.PathLike, check: bool = True) -> dict[str, np.ndarray]:
    """All arrays of a shard; with `check`, an error naming the shard when it does not fit the schema."""
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {key: data[key] for key in data.files}
    except (OSError, ValueError, zipfile.BadZipFile) as exc:
        raise BertPipelineError(f"{path}: not a readable .npz shard ({exc})") from None
    if check:
        problems = schema_problems(arrays)
        if problems:
            raise BertPipelineError(f"{path}: not a valid shard: {'; '.join(problems)}")
    return arrays


def list_shards(directory: str | os.PathLike) -> list[Path]:
    directory = Path(directory)
    return sorted(p for p in directory.iterdir() if SHARD_PATTERN.match(p.name))


def num_instances(arrays: dict[str, np.ndarray]) -> int:
    return int(arrays["input_ids"].shape[0])

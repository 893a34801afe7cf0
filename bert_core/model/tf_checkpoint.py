"""Read Google's TensorFlow BERT checkpoints without TensorFlow, and map them to HF BERT names.

A TF V2 checkpoint ("tensor bundle") is ``PREFIX.index`` plus ``PREFIX.data-NNNNN-of-MMMMM``:

- ``.index`` is a LevelDB-format SSTable: data blocks of prefix-compressed key/value entries with
  restart points, an index block pointing at them, and a 48-byte footer. Each block is followed by a
  compression byte and a masked CRC32C. TF writes it uncompressed.
- Its keys are variable names; each value is a ``BundleEntryProto`` (dtype, shape, shard_id, offset,
  size, crc32c). The empty key holds the ``BundleHeaderProto`` (num_shards, endianness, version).
- Tensors are raw little-endian arrays at ``offset`` in data shard ``shard_id``.

The protobuf messages are decoded by hand (only varint, fixed and length-delimited fields occur), so
converting a checkpoint needs numpy only. Format references: tensorflow/core/util/tensor_bundle/
tensor_bundle.{h,cc,proto}, tensorflow/core/lib/io/{format,block}.cc (LevelDB table format).
"""

from __future__ import annotations

import logging
import os
import re
import struct
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

import numpy as np

from bert_core.errors import BertPipelineError, CheckpointMismatchError

log = logging.getLogger(__name__)

# --------------------------------------------------------------------------------------------------
# CRC32C (Castagnoli), masked the way LevelDB/TF store it.

_CRC32C_POLY = 0x82F63B78  # reversed Castagnoli polynomial
_MASK_DELTA = 0xA282EAD8


def _make_crc_table() -> list[int]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ _CRC32C_POLY if c & 1 else c >> 1
        table.append(c)
    return table


_CRC_TABLE = _make_crc_table()


def _crc32c_pure(data: bytes | memoryview) -> int:
    crc = 0xFFFFFFFF
    table = _CRC_TABLE
    for byte in bytes(data):
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def _fast_crc32c() -> Any:
    """A C implementation when one happens to be installed (the pure one runs at a few MB/s)."""
    try:
        import google_crc32c  # type: ignore[import-not-found]

        return lambda data: google_crc32c.value(bytes(data))
    except ImportError:
        pass
    try:
        import crc32c  # type: ignore[import-not-found]

        return lambda data: crc32c.crc32c(bytes(data))
    except ImportError:
        return None


def crc32c(data: bytes | memoryview, *, fast: bool = False) -> int:
    """CRC32C of ``data``; ``fast`` uses google_crc32c/crc32c if installed, else the pure version."""
    impl = _fast_crc32c() if fast else None
    return impl(data) if impl is not None else _crc32c_pure(data)


def masked_crc32c(data: bytes | memoryview, *, fast: bool = False) -> int:
    # LevelDB/TF store CRCs rotated and offset so that a CRC of data that embeds CRCs stays robust.
    crc = crc32c(data, fast=fast)
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + _MASK_DELTA) & 0xFFFFFFFF


# --------------------------------------------------------------------------------------------------
# Minimal protobuf wire-format decoding.


def _read_varint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    result = 0
    shift = 0
    while True:
        if pos >= len(buf):
            raise ValueError("truncated varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def _decode_message(buf: bytes | memoryview) -> dict[int, list[int | bytes]]:
    """Field number -> values: ints for varint/fixed fields, bytes for length-delimited ones."""
    fields: dict[int, list[int | bytes]] = {}
    pos = 0
    while pos < len(buf):
        tag, pos = _read_varint(buf, pos)
        number, wire_type = tag >> 3, tag & 7
        value: int | bytes
        if wire_type == 0:
            value, pos = _read_varint(buf, pos)
        elif wire_type == 1:
            (value,) = struct.unpack_from("<Q", buf, pos)
            pos += 8
        elif wire_type == 2:
            length, pos = _read_varint(buf, pos)
            if pos + length > len(buf):
                raise ValueError("truncated length-delimited field")
            value = bytes(buf[pos : pos + length])
            pos += length
        elif wire_type == 5:
            (value,) = struct.unpack_from("<I", buf, pos)
            pos += 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wire_type}")
        fields.setdefault(number, []).append(value)
    return fields


def _int(fields: dict[int, list[int | bytes]], number: int, default: int = 0) -> int:
    values = fields.get(number)
    if not values:
        return default
    value = values[-1]  # protobuf: the last occurrence of a scalar field wins
    assert isinstance(value, int)
    return value - (1 << 64) if value >= 1 << 63 else value  # int32/int64 are two's complement


# --------------------------------------------------------------------------------------------------
# The tensor bundle.

# tensorflow/core/framework/types.proto DataType -> (TF dtype name, numpy little-endian dtype).
# bfloat16 has no numpy dtype: it is read as its raw uint16 bits and widened to float32 (exact).
_DTYPES: dict[int, tuple[str, str]] = {
    1: ("float32", "<f4"),
    2: ("float64", "<f8"),
    3: ("int32", "<i4"),
    4: ("uint8", "u1"),
    5: ("int16", "<i2"),
    6: ("int8", "i1"),
    7: ("string", ""),
    8: ("complex64", "<c8"),
    9: ("int64", "<i8"),
    10: ("bool", "?"),
    14: ("bfloat16", "<u2"),
    17: ("uint16", "<u2"),
    18: ("complex128", "<c16"),
    19: ("float16", "<f2"),
    22: ("uint32", "<u4"),
    23: ("uint64", "<u8"),
}

_NUMPY_DTYPES = dict(_DTYPES.values())

_TABLE_MAGIC = 0xDB4775248B80FB57
_FOOTER_SIZE = 48
_BLOCK_TRAILER_SIZE = 5


class VariableInfo(NamedTuple):
    """Where one variable lives. ``dtype`` is TF's dtype name (``float32``, ``bfloat16``, ``int64``...)."""

    dtype: str
    shape: tuple[int, ...]
    shard_id: int
    offset: int
    size: int
    crc32c: int  # masked CRC32C of the tensor bytes, as TF stores it (0 if absent)


def _read_block(data: bytes, offset: int, size: int, path: str) -> memoryview:
    end = offset + size
    if offset < 0 or end + _BLOCK_TRAILER_SIZE > len(data):
        raise BertPipelineError(f"{path}: block at {offset} runs past the end of the file (truncated?)")
    compression = data[end]
    if compression != 0:
        kind = "snappy" if compression == 1 else f"type {compression}"
        raise BertPipelineError(
            f"{path}: block at {offset} is {kind}-compressed; only uncompressed index files "
            "(what TensorFlow writes) are supported"
        )
    (stored,) = struct.unpack_from("<I", data, end + 1)
    # The index file is small (KBs), so checking its blocks is always affordable.
    if masked_crc32c(memoryview(data)[offset : end + 1]) != stored:
        raise BertPipelineError(f"{path}: checksum mismatch in block at {offset} (corrupt file)")
    return memoryview(data)[offset:end]


def _block_entries(block: memoryview) -> Iterator[tuple[bytes, memoryview]]:
    """Yield (key, value) from one block, undoing LevelDB's key prefix compression."""
    if len(block) < 4:
        raise ValueError("block too small")
    (num_restarts,) = struct.unpack_from("<I", block, len(block) - 4)
    entries_end = len(block) - 4 - 4 * num_restarts
    if entries_end < 0:
        raise ValueError("bad restart array")
    pos = 0
    key = b""
    while pos < entries_end:
        shared, pos = _read_varint(block, pos)
        non_shared, pos = _read_varint(block, pos)
        value_len, pos = _read_varint(block, pos)
        if shared > len(key) or pos + non_shared + value_len > entries_end:
            raise ValueError("bad block entry")
        key = key[:shared] + bytes(block[pos : pos + non_shared])
        pos += non_shared
        yield key, block[pos : pos + value_len]
        pos += value_len


def _read_table(path: str) -> Iterator[tuple[bytes, memoryview]]:
    """All (key, value) pairs of an SSTable file, in key order."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < _FOOTER_SIZE or struct.unpack_from("<Q", data, len(data) - 8)[0] != _TABLE_MAGIC:
        raise BertPipelineError(f"{path} is not a TensorFlow checkpoint index (no SSTable footer)")
    footer = memoryview(data)[len(data) - _FOOTER_SIZE :]
    try:
        _meta_offset, pos = _read_varint(footer, 0)  # metaindex: unused by TF bundles
        _meta_size, pos = _read_varint(footer, pos)
        index_offset, pos = _read_varint(footer, pos)
        index_size, pos = _read_varint(footer, pos)
        index_block = _read_block(data, index_offset, index_size, path)
        for _last_key, handle in _block_entries(index_block):
            block_offset, hpos = _read_varint(handle, 0)
            block_size, _ = _read_varint(handle, hpos)
            yield from _block_entries(_read_block(data, block_offset, block_size, path))
    except ValueError as exc:
        if isinstance(exc, BertPipelineError):
            raise
        raise BertPipelineError(f"{path}: malformed checkpoint index ({exc})") from exc


def _parse_entry(name: str, value: memoryview) -> VariableInfo:
    entry = _decode_message(value)
    if entry.get(7):
        # Partitioned variables (tf.compat.v1.fixed_size_partitioner): stored as slices under
        # separate keys. Google's BERT checkpoints never use them.
        raise BertPipelineError(f"variable {name!r} is partitioned into slices, which is not supported")
    dtype_enum = _int(entry, 1)
    if dtype_enum not in _DTYPES:
        raise BertPipelineError(f"variable {name!r} has unsupported TF dtype enum {dtype_enum}")
    dims = []
    for shape_bytes in entry.get(2, []):
        assert isinstance(shape_bytes, bytes)
        for dim_bytes in _decode_message(shape_bytes).get(2, []):
            assert isinstance(dim_bytes, bytes)
            dims.append(_int(_decode_message(dim_bytes), 1))
    return VariableInfo(
        dtype=_DTYPES[dtype_enum][0],
        shape=tuple(dims),
        shard_id=_int(entry, 3),
        offset=_int(entry, 4),
        size=_int(entry, 5),
        crc32c=_int(entry, 6),
    )


def normalize_prefix(path: str | os.PathLike[str]) -> str:
    """Accept ``PREFIX``, ``PREFIX.index``, a data shard path, or a directory holding one checkpoint."""
    path = os.fspath(path)
    if os.path.isdir(path):
        indexes = sorted(f for f in os.listdir(path) if f.endswith(".index"))
        if len(indexes) != 1:
            found = ", ".join(indexes) or "none"
            raise FileNotFoundError(
                f"{path} is a directory; expected exactly one checkpoint *.index in it (found: {found}); "
                "pass the checkpoint prefix, e.g. DIR/bert_model.ckpt"
            )
        return os.path.join(path, indexes[0][: -len(".index")])
    if path.endswith(".index"):
        return path[: -len(".index")]
    return re.sub(r"\.data-\d{5}-of-\d{5}$", "", path)


class TFCheckpointReader(Mapping[str, np.ndarray]):
    """Lazy reader of a TF V2 checkpoint: a mapping name -> array that reads a tensor when asked.

    ``variables`` holds every variable's metadata without reading any tensor data. Arrays come back
    in their own dtype, except bfloat16 (no numpy dtype), which is widened to float32 exactly.
    ``verify=True`` checks each tensor's CRC32C (pure Python unless google_crc32c/crc32c is installed,
    so slow for a 400 MB checkpoint; TF itself checks only on request too).
    """

    def __init__(self, prefix: str | os.PathLike[str], *, verify: bool = False) -> None:
        self.prefix = normalize_prefix(prefix)
        self.verify = verify
        index_path = self.prefix + ".index"
        if not os.path.isfile(index_path):
            raise FileNotFoundError(
                f"no TensorFlow checkpoint at {self.prefix!r}: {index_path} does not exist "
                "(expected PREFIX.index and PREFIX.data-00000-of-00001, e.g. bert_model.ckpt)"
            )
        header: dict[int, list[int | bytes]] | None = None
        variables: dict[str, VariableInfo] = {}
        for key, value in _read_table(index_path):
            if key == b"":
                header = _decode_message(value)
            elif key.startswith(b"\x00"):
                continue  # keys of individual slices of partitioned variables (see _parse_entry)
            else:
                name = key.decode("utf-8")
                variables[name] = _parse_entry(name, value)
        if header is None:
            raise BertPipelineError(f"{index_path} has no bundle header: not a TF V2 checkpoint index")
        self.num_shards = _int(header, 1, default=1)
        if _int(header, 2) != 0:
            raise BertPipelineError(f"{index_path}: big-endian checkpoints are not supported")
        self.variables = variables

    def __getitem__(self, name: str) -> np.ndarray:
        return self.read(name)

    def __iter__(self) -> Iterator[str]:
        return iter(self.variables)

    def __len__(self) -> int:
        return len(self.variables)

    def shard_path(self, shard_id: int) -> str:
        return f"{self.prefix}.data-{shard_id:05d}-of-{self.num_shards:05d}"

    def read(self, name: str) -> np.ndarray:
        info = self.variables.get(name)
        if info is None:
            raise KeyError(name)
        if info.dtype == "string":
            raise BertPipelineError(f"variable {name!r} is a string tensor; only numeric tensors are read")
        np_dtype = np.dtype(_NUMPY_DTYPES[info.dtype])
        count = int(np.prod(info.shape, dtype=np.int64))
        if info.size != count * np_dtype.itemsize:
            raise BertPipelineError(
                f"variable {name!r}: {info.size} bytes stored for shape {info.shape} {info.dtype} (corrupt index)"
            )
        path = self.shard_path(info.shard_id)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"checkpoint data file {path} is missing (needed for {name!r})")
        array = np.empty(info.shape, dtype=np_dtype)
        raw = memoryview(array.reshape(-1)).cast("B")  # read straight into the array: no extra copy
        with open(path, "rb") as f:
            f.seek(info.offset)
            got = f.readinto(raw)
        if got != info.size:
            raise BertPipelineError(f"{path} is truncated: cannot read {name!r}")
        if self.verify and info.crc32c and masked_crc32c(raw, fast=True) != info.crc32c:
            raise BertPipelineError(f"variable {name!r}: checksum mismatch in {path} (corrupt file)")
        if info.dtype == "bfloat16":
            # bfloat16 is the top half of a float32: widening is a shift, and exact.
            return (array.astype(np.uint32) << 16).view(np.float32)
        return array.astype(np_dtype.newbyteorder("="), copy=False)  # native order (a no-op on x86/ARM)


def list_variables(prefix: str | os.PathLike[str]) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Name -> (TF dtype name, shape) for every variable, without reading tensor data."""
    return {name: (v.dtype, v.shape) for name, v in TFCheckpointReader(prefix).variables.items()}


def load_variables(prefix: str | os.PathLike[str], *, verify: bool = False) -> dict[str, np.ndarray]:
    """Every variable as a numpy array (see TFCheckpointReader for dtypes)."""
    reader = TFCheckpointReader(prefix, verify=verify)
    return {name: reader.read(name) for name in reader.variables}


# --------------------------------------------------------------------------------------------------
# Google BERT names -> HF BERT names.

_OPTIMIZER_SUFFIXES = ("/adam_m", "/adam_v")


def is_skipped_variable(name: str) -> bool:
    """Training state that is not part of the model: Adam slots and the step counter."""
    return name == "global_step" or name.endswith(_OPTIMIZER_SUFFIXES)


# Sub-module paths inside one encoder layer.
_LAYER_MODULES = (
    "attention/self/query",
    "attention/self/key",
    "attention/self/value",
    "attention/output/dense",
    "intermediate/dense",
    "output/dense",
)
_LAYER_NORMS = ("attention/output/LayerNorm", "output/LayerNorm")


class _Target(NamedTuple):
    hf_name: str
    shape: tuple[int, ...] | None  # expected HF shape; None: checked by the caller (task heads)
    transpose: bool


def _expected_targets(config: Any) -> dict[str, _Target]:
    """Every Google variable name BERT checkpoints use (backbone, pretraining, SQuAD and classifier
    heads), with its HF name and expected HF shape."""
    h = int(config.hidden_size)
    i = int(config.intermediate_size)
    dense_shapes = {
        "attention/self/query": (h, h),
        "attention/self/key": (h, h),
        "attention/self/value": (h, h),
        "attention/output/dense": (h, h),
        "intermediate/dense": (i, h),
        "output/dense": (h, i),
    }
    targets: dict[str, _Target] = {}

    def dense(tf_scope: str, hf_scope: str, out_in: tuple[int, int]) -> None:
        # TF kernels are [in, out]; torch Linear weights are [out, in].
        targets[f"{tf_scope}/kernel"] = _Target(f"{hf_scope}.weight", out_in, True)
        targets[f"{tf_scope}/bias"] = _Target(f"{hf_scope}.bias", (out_in[0],), False)

    def layer_norm(tf_scope: str, hf_scope: str) -> None:
        targets[f"{tf_scope}/gamma"] = _Target(f"{hf_scope}.weight", (h,), False)
        targets[f"{tf_scope}/beta"] = _Target(f"{hf_scope}.bias", (h,), False)

    emb = {
        "word_embeddings": int(config.vocab_size),
        "position_embeddings": int(config.max_position_embeddings),
        "token_type_embeddings": int(config.type_vocab_size),
    }
    for name, rows in emb.items():  # embedding tables are [rows, hidden] in both: no transpose
        targets[f"bert/embeddings/{name}"] = _Target(f"bert.embeddings.{name}.weight", (rows, h), False)
    layer_norm("bert/embeddings/LayerNorm", "bert.embeddings.LayerNorm")
    for n in range(int(config.num_hidden_layers)):
        tf_layer, hf_layer = f"bert/encoder/layer_{n}", f"bert.encoder.layer.{n}"
        for module in _LAYER_MODULES:  # same sub-module paths in both, '/' -> '.'
            dense(f"{tf_layer}/{module}", f"{hf_layer}.{module.replace('/', '.')}", dense_shapes[module])
        for module in _LAYER_NORMS:
            layer_norm(f"{tf_layer}/{module}", f"{hf_layer}.{module.replace('/', '.')}")
    dense("bert/pooler/dense", "bert.pooler.dense", (h, h))
    dense("cls/predictions/transform/dense", "cls.predictions.transform.dense", (h, h))
    layer_norm("cls/predictions/transform/LayerNorm", "cls.predictions.transform.LayerNorm")
    targets["cls/predictions/output_bias"] = _Target("cls.predictions.bias", (int(config.vocab_size),), False)
    # Google stores these output layers as [out, hidden] already (tf.matmul(..., transpose_b=True)).
    targets["cls/seq_relationship/output_weights"] = _Target("cls.seq_relationship.weight", (2, h), False)
    targets["cls/seq_relationship/output_bias"] = _Target("cls.seq_relationship.bias", (2,), False)
    targets["cls/squad/output_weights"] = _Target("qa_outputs.weight", (2, h), False)
    targets["cls/squad/output_bias"] = _Target("qa_outputs.bias", (2,), False)
    # run_classifier.py: [num_labels, hidden]; num_labels is not in bert_config.json, checked below.
    targets["output_weights"] = _Target("classifier.weight", None, False)
    targets["output_bias"] = _Target("classifier.bias", None, False)
    return targets


def _object_checkpoint_hint(names: Any) -> str:
    if any(n == "_CHECKPOINTABLE_OBJECT_GRAPH" or "/.ATTRIBUTES/" in n for n in names):
        return (
            " This is a TF2 object-based checkpoint (tf.train.Checkpoint / Keras); only TF1 name-based "
            "checkpoints as released by google-research/bert (tf.compat.v1.train.Saver) are supported."
        )
    return ""


def convert_tf_state(variables: Mapping[str, np.ndarray], config: Any) -> dict[str, np.ndarray]:
    """Map a Google BERT checkpoint's variables to HF BERT parameter names and layouts.

    ``variables`` may be a lazy TFCheckpointReader: optimizer slots are skipped without being read.
    ``config`` needs vocab_size, hidden_size, intermediate_size, num_hidden_layers,
    max_position_embeddings and type_vocab_size. The backbone (``bert/...``) must be complete; the
    heads (pretraining, SQuAD, classifier) are converted when present. The MLM decoder weight and bias
    are not emitted: HF ties them to the word embeddings and ``cls.predictions.bias``.
    Raises CheckpointMismatchError for an unknown variable, a wrong shape or a missing backbone one.
    """
    targets = _expected_targets(config)
    state: dict[str, np.ndarray] = {}
    skipped = 0
    for name in variables:
        if is_skipped_variable(name):
            skipped += 1
            continue
        target = targets.get(name)
        if target is None:
            raise CheckpointMismatchError(
                f"unknown variable {name!r} in the checkpoint: not a Google BERT variable for a model "
                f"with {config.num_hidden_layers} layers{_object_checkpoint_hint(variables)}"
            )
        array = variables[name]
        if array.ndim == 2 and target.transpose:
            array = np.ascontiguousarray(array.T)
        expected = target.shape
        if expected is None:  # classifier: [num_labels, hidden] and [num_labels]
            expected = (
                (array.shape[0], int(config.hidden_size)) if name == "output_weights" else array.shape[:1]
            )
        if tuple(array.shape) != tuple(expected):
            shown = array.shape[::-1] if target.transpose and array.ndim == 2 else array.shape
            want = expected[::-1] if target.transpose else expected
            raise CheckpointMismatchError(
                f"variable {name!r} has shape {list(shown)} but the BERT config expects {list(want)}"
            )
        state[target.hf_name] = array
    if "classifier.weight" in state or "classifier.bias" in state:
        w, b = state.get("classifier.weight"), state.get("classifier.bias")
        if w is None or b is None or b.shape != (w.shape[0],):
            raise CheckpointMismatchError(
                "classifier variables 'output_weights' and 'output_bias' must both be present, "
                f"shaped [num_labels, hidden] and [num_labels] (got {None if w is None else list(w.shape)} "
                f"and {None if b is None else list(b.shape)})"
            )
    missing = [
        name for name, t in targets.items() if t.hf_name.startswith("bert.") and t.hf_name not in state
    ]
    if missing:
        shown = ", ".join(repr(m) for m in missing[:5]) + (
            f" and {len(missing) - 5} more" if len(missing) > 5 else ""
        )
        raise CheckpointMismatchError(
            f"the checkpoint lacks {len(missing)} BERT variable(s) the config requires: {shown}"
            f"{_object_checkpoint_hint(variables)}"
        )
    if skipped:
        log.info("skipped %d optimizer/training-state variables (adam_m, adam_v, global_step)", skipped)
    return state

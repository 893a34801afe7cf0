"""Running an export directory's graph (`bert-pipeline export`): `ExportedModel` feeds it any number of rows of any
length up to the export's sequence length, on ONNX Runtime (.onnx) or torch (.pt2), with its own session
options and, for a graph with both axes dynamic, rows run in groups of similar length (concurrently when the
groups keep every thread busy). What serving, batch predict, the export's evaluation and its parity check call.
"""

from __future__ import annotations

import json
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from bert_core.errors import BertPipelineError

INPUT_NAMES = ["input_ids", "token_type_ids", "attention_mask"]
# Tasks whose outputs have a sequence axis (axis 1): cut back when run() pads the sequence.
PER_TOKEN_TASKS = ("question_answering", "token_classification")


def _row_lengths(mask: np.ndarray) -> np.ndarray:
    """Each row's length up to its last attended position (0 for a row with no attended position)."""
    attended = mask != 0
    return np.where(attended.any(1), mask.shape[1] - np.argmax(attended[:, ::-1], axis=1), 0)


_MAX_GROUP_ROWS = 64


def _length_groups(lengths: np.ndarray, waste: float = 0.1, max_rows: int = _MAX_GROUP_ROWS) -> list[np.ndarray]:
    """Row indices in groups of similar length: sorted by length, a group closes when the next row would
    make its padded size more than `waste` over its real tokens, or at max_rows rows. (On SST-2 dev,
    batches of 32 in file order are 49% padding; grouped, ONNX Runtime served them 1.8x faster.)"""
    order = np.argsort(lengths, kind="stable")
    groups, current, real = [], [], 0
    for i in order:
        size = max(int(lengths[i]), 1)
        if current and (size * (len(current) + 1) > (1 + waste) * (real + size) or len(current) == max_rows):
            groups.append(np.array(current))
            current, real = [], 0
        current.append(i)
        real += size
    groups.append(np.array(current))
    return groups


def _groups_balance(costs: list[int], workers: int, slack: float = 0.25) -> bool:
    """Whether length groups of these costs (rows x length) keep `workers` single-threaded runners busy: the
    longest runner, groups dealt costliest first to the least loaded, within `slack` of an even share.
    (Groups are never split to make them balance: an INT8 graph quantises each group's activations as a
    whole, so its answers would then depend on the machine's core count.)"""
    if workers < 2 or len(costs) < 2:
        return False
    loads = [0] * workers
    for cost in sorted(costs, reverse=True):
        loads[loads.index(min(loads))] += cost
    return max(loads) <= (1 + slack) * sum(costs) / workers


def _physical_cores() -> int:
    """Physical cores this process may use: ONNX Runtime's own default for its intra-op threads."""
    import psutil

    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(usable, psutil.cpu_count(logical=False) or usable))


def session_options(threads: int | None = None, spin: bool = True):
    """ONNX Runtime session options for an export's graph: `threads` intra-op threads (None: its own choice),
    idle threads spin-waiting (its default) or sleeping (spin=False); warnings only."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    if threads:
        options.intra_op_num_threads = threads
    if not spin:
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return options


# export.json's `max_seq_length` was `seq_length` in exports made before 2026-11 (registered models have them).
_DEPRECATED_SEQ_LENGTH = "seq_length"


def _renamed_meta(meta: dict) -> dict:
    """export.json with the length under its current name."""
    if _DEPRECATED_SEQ_LENGTH not in meta:
        return meta
    meta = dict(meta)
    meta.setdefault("max_seq_length", meta.pop(_DEPRECATED_SEQ_LENGTH))
    return meta


class ExportedModel:
    """Runs an export directory's graph: ONNX Runtime for .onnx, torch for .pt2."""

    def __init__(self, directory: str | Path, meta: dict | None = None, threads: int | None = None,
                 spin: bool = True):
        """threads: the cores a call may use (default: one per physical core the process may run on, as
        `taskset` or a cgroup's cpuset leaves them). A call runs on ONNX Runtime with that many intra-op
        threads. A batch whose rows run in several length groups (see run()) runs them side by side instead,
        one per thread on a single-threaded session of the same graph, when they keep every thread busy: small
        groups split badly over intra-op threads (2 cores, batch 32, SST-2 dev: INT8 1.84x our eager PyTorch
        instead of 1.46x; docs/benchmarks-serving.md). At most `threads` threads compute at any time.
        spin=False: idle ONNX Runtime threads sleep instead of spin-waiting for the next call (its default
        spins, which holds the cores a while after each call: lower latency for a server, CPU taken from
        anything else)."""
        if threads is not None and threads < 1:
            raise BertPipelineError(f"threads: expected a number of threads >= 1 (or None for one per core), got {threads}")
        self.directory = Path(directory)
        self.threads = threads
        self.spin = spin
        self.workers = threads or _physical_cores()
        if meta is None:
            try:
                meta = json.loads((self.directory / "export.json").read_text())
            except FileNotFoundError:
                raise BertPipelineError(f"{directory}: not an export directory (no export.json)") from None
        self.meta = _renamed_meta(meta)
        self._sessions: dict[tuple[bool, bool], object] = {}
        self._lock = threading.Lock()

    def _session(self, quantized: bool, single_thread: bool = False):
        """The graph's session (made on first use): `threads` intra-op threads, or one (single_thread)."""
        key = (quantized, single_thread)
        with self._lock:  # one session per key, also when length groups ask for it concurrently
            if key not in self._sessions:
                self._sessions[key] = self._load(quantized, 1 if single_thread else self.workers)
        return self._sessions[key]

    def _load(self, quantized: bool, threads: int | None):
        if self.meta["format"] == "pt2":
            import torch

            return torch.export.load(str(self.directory / self.meta["graph"])).module()
        import onnxruntime as ort

        name = self.meta["quantized_graph"] if quantized else self.meta["graph"]
        if name is None:
            raise BertPipelineError(f"{self.directory}: this export has no quantised graph")
        return ort.InferenceSession(str(self.directory / name), session_options(threads, self.spin),
                                    providers=["CPUExecutionProvider"])

    def run(self, input_ids: np.ndarray, token_type_ids: np.ndarray, attention_mask: np.ndarray,
            quantized: bool = False, group_by_length: bool = True) -> list[np.ndarray]:
        """The graph's outputs (export.json's `outputs`, in order) for [batch, seq] inputs: any number of
        rows (split/padded to a static batch size as needed) of any length up to the export's max_seq_length
        (a --dynamic-seq graph runs at that length; a static one gets padding columns, mask 0, and its
        per-token outputs are cut back to the length given).

        With both axes dynamic (--dynamic-batch --dynamic-seq), rows are run in groups of similar length,
        each group cut to its longest row (up to the last position its mask attends to), so the padding of
        a batch costs nothing, as in the PyTorch model; per-token outputs past a row's last attended
        position are then 0 (not computed). group_by_length=False runs the batch as given, in one call."""
        arrays = [np.asarray(a).astype(np.int64, copy=False) for a in (input_ids, token_type_ids, attention_mask)]
        if arrays[0].ndim != 2 or any(a.shape != arrays[0].shape for a in arrays):
            raise BertPipelineError("input_ids, token_type_ids and attention_mask must be [batch, seq] arrays of one "
                                    f"shape, got {[a.shape for a in arrays]}")
        n, length = arrays[0].shape
        limit = self.meta["max_seq_length"]
        if length > limit:
            raise BertPipelineError(f"sequence length {length} is over this export's max_seq_length {limit}: "
                                    "truncate the input or export with a larger --max-seq-length")
        per_token = self.meta["task"] in PER_TOKEN_TASKS
        if group_by_length and n and self.meta["batch_size"] == "dynamic" and self.meta.get("dynamic_seq"):
            return self._run_grouped(arrays, quantized, per_token)
        if length < limit and not self.meta.get("dynamic_seq"):
            arrays = [np.pad(a, ((0, 0), (0, limit - length))) for a in arrays]
        fixed = self.meta["batch_size"]
        chunk = n if fixed == "dynamic" else fixed
        outputs: list[list[np.ndarray]] = []
        for start in range(0, n, max(chunk, 1)):
            parts = [a[start:start + chunk] for a in arrays]
            real = len(parts[0])
            if fixed != "dynamic" and real < fixed:
                parts = [np.concatenate([p, np.repeat(p[-1:], fixed - real, axis=0)]) for p in parts]
            outputs.append([o[:real, :length] if per_token else o[:real] for o in self._forward(parts, quantized)])
        return [np.concatenate([o[i] for o in outputs]) for i in range(len(outputs[0]))]

    def _run_grouped(self, arrays: list[np.ndarray], quantized: bool, per_token: bool) -> list[np.ndarray]:
        n, length = arrays[0].shape
        lengths = _row_lengths(arrays[2])
        if n <= _MAX_GROUP_ROWS and lengths.min() == length:  # nothing to cut (e.g. one row): one call
            return self._forward(arrays, quantized)
        groups = _length_groups(lengths)
        cuts = [min(length, max(2, int(lengths[rows].max()))) for rows in groups]  # the graph's seq axis starts at 2
        costs = [len(rows) * cut for rows, cut in zip(groups, cuts)]
        concurrent = self.meta["format"] != "pt2" and _groups_balance(costs, self.workers)

        def forward(i: int) -> list[np.ndarray]:
            return self._forward([a[groups[i], :cuts[i]] for a in arrays], quantized, single_thread=concurrent)

        if concurrent:
            order = sorted(range(len(groups)), key=lambda i: -costs[i])  # costliest first: threads finish together
            with ThreadPoolExecutor(self.workers, thread_name_prefix="export-group") as pool:
                outs = dict(zip(order, pool.map(forward, order)))
        else:
            outs = {i: forward(i) for i in range(len(groups))}
        result: list[np.ndarray] = []
        for i, rows in enumerate(groups):
            cut, out = cuts[i], outs[i]
            if not result:
                result = [np.zeros((n, length, *o.shape[2:]) if per_token else (n, *o.shape[1:]), o.dtype)
                          for o in out]
            for full, part in zip(result, out):
                if per_token:
                    full[rows, :cut] = part
                else:
                    full[rows] = part
        return result

    def _forward(self, parts: list[np.ndarray], quantized: bool, single_thread: bool = False) -> list[np.ndarray]:
        session = self._session(quantized, single_thread)
        if self.meta["format"] == "pt2":
            import torch

            with torch.no_grad():
                out = session(*(torch.from_numpy(p) for p in parts))
            out = [out] if isinstance(out, torch.Tensor) else list(out)
            return [o.numpy() for o in out]
        return session.run(None, dict(zip(INPUT_NAMES, parts)))

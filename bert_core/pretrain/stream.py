"""The pretraining data stream: shards (ARCHITECTURE §5) -> per-worker MLM+NSP batches.

Design:
- One global stream of *global* batches (the batch of all workers together) that depends only on
  (seed, epoch, global batch size, bucketing), never on the number of workers: worker r of W takes
  the r-th contiguous share of each global batch, split as np.array_split does (the first
  len % W workers take one row more; a worker's share may be empty when a batch has fewer rows
  than workers). So 2 or 3 workers see exactly the rows 1 worker sees, and a run can resume (or an
  elastic group resize) to any number of workers at the same data position.
  Every worker reads every shard it needs (a shard is a few MB against minutes of compute) but
  only materialises its own rows.
- Per epoch the shard order is shuffled with (seed, epoch); inside a shard the instances are shuffled
  with (seed, epoch, shard). With --num-buckets, instances go to length buckets (bucket k holds
  lengths up to ceil(T (k+1) / num_buckets)) and batches are cut per bucket, then the shard's batches
  are shuffled, as GluonNLP's FixedBucketSampler does (one bucket: kept in order, so that the micro-batches
  of accumulate x B are exactly the halves of a 2B batch). A bucket's remainder carries over to the next
  shard (the bounded buffer: < num_buckets global batches); what remains at the end of an epoch
  is dropped (a different remainder every epoch).
- With --use-avg-len the batch size counts tokens: a bucket with key length L gets
  floor(batch_size / L) sequences per global batch (at least 1), whatever the number of workers.
- Memory: one shard's arrays at a time plus the carried rows. The batch plan only needs each shard's
  `valid_lengths`, so counting an epoch's batches and skipping to a resume position read no token data.
- Each batch is trimmed to its longest sequence and its largest number of real predictions.
"""

from __future__ import annotations

import fnmatch
import glob
import json
import logging
import math
import os
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from bert_core.errors import BertPipelineError
from bert_core.io import storage

log = logging.getLogger(__name__)

# ARCHITECTURE §5: key -> number of dimensions.
SHARD_KEYS = {
    "input_ids": 2, "segment_ids": 2, "valid_lengths": 1, "masked_lm_positions": 2,
    "masked_lm_ids": 2, "masked_lm_weights": 2, "next_sentence_labels": 1,
}
MANIFEST = "manifest.json"


# --------------------------------------------------------------------------- finding shards


def _split_glob(uri: str) -> tuple[str, str]:
    """'s3://b/p/part-*.npz' -> ('s3://b/p', 'part-*.npz'); a prefix without wildcards -> (prefix, '*.npz')."""
    first = min((i for i, c in enumerate(uri) if c in "*?["), default=-1)
    if first < 0:
        return uri.rstrip("/"), "*.npz"
    cut = uri.rfind("/", 0, first)
    return uri[:cut], uri[cut + 1:]


def resolve_shards(spec: str) -> list[Path]:
    """Local shard files for a glob, a directory or an s3:// prefix/glob; comma-separated lists allowed.

    s3 shards are fetched into the local cache (bert_core.io.storage.local_dir: ETag-checked, written
    under temporary names) so every worker on a node shares one copy.
    """
    return [path for _, path in resolve_shard_uris(spec)]


def resolve_shard_uris(spec: str) -> list[tuple[str, Path]]:
    """(URI, local file) of each shard of `spec` (resolve_shards): an s3:// shard's URI is its object's, not the
    path of its cached copy, which differs from one machine (or HOME) to the next."""
    found_all: list[tuple[str, Path]] = []
    for part in [p.strip() for p in spec.split(",") if p.strip()]:
        if storage.is_s3(part):
            prefix, pattern = _split_glob(part)
            root = storage.local_dir(prefix)
            found = sorted((storage.source_uri(p), p) for p in root.rglob("*")
                           if p.is_file() and fnmatch.fnmatch(str(p.relative_to(root)), pattern))
        else:
            local = storage.local_path(part)
            if local.is_dir():
                files = sorted(local.glob("*.npz"))
            else:
                files = sorted(Path(p) for p in glob.glob(str(local), recursive=True))
            found = [(str(p), p) for p in files]
        found = [(uri, p) for uri, p in found if p.suffix == ".npz"]
        if not found:
            raise BertPipelineError(f"no shards match {part!r} (expected part-NNNNN.npz files from "
                                    "`bert-pipeline make-shards`)")
        found_all.extend(found)
    if not found_all:
        raise BertPipelineError(f"no shards match {spec!r}")
    return found_all


def _manifest_vocab_size(manifest: dict) -> int | None:
    """The vocabulary size make-shards recorded: `vocab.size` (its manifest), else a `vocab_size` field."""
    vocab = manifest.get("vocab")
    candidates = [vocab.get("size"), vocab.get("vocab_size")] if isinstance(vocab, dict) else []
    candidates += [manifest.get("vocab_size"), (manifest.get("config") or {}).get("vocab_size")]
    return next((v for v in candidates if isinstance(v, int) and not isinstance(v, bool)), None)


class ShardSet:
    """The shards of one `--data` spec, with their manifest(s) when present."""

    def __init__(self, spec: str):
        self.spec = spec
        resolved = resolve_shard_uris(spec)
        self.uris = [uri for uri, _ in resolved]  # what the manifest of a step using them names
        self.paths = [path for _, path in resolved]
        self._headers: dict[int, tuple[int, int, int]] = {}
        self.manifests: dict[Path, dict] = {}
        for directory in sorted({p.parent for p in self.paths}):
            path = directory / MANIFEST
            if path.is_file():
                try:
                    self.manifests[path] = json.loads(path.read_text(encoding="utf-8"))
                except json.JSONDecodeError as exc:
                    raise BertPipelineError(f"{path}: not valid JSON ({exc.msg})") from None

    def __len__(self) -> int:
        return len(self.paths)

    def header(self, index: int) -> tuple[int, int, int]:
        """(N, T, P) from the .npy headers, without reading the arrays."""
        if index not in self._headers:
            path = self.paths[index]
            try:
                with zipfile.ZipFile(path) as archive:
                    shapes = {}
                    for key in ("input_ids", "masked_lm_positions"):
                        with archive.open(f"{key}.npy") as member:
                            major, _ = np.lib.format.read_magic(member)
                            read = (np.lib.format.read_array_header_1_0 if major == 1
                                    else np.lib.format.read_array_header_2_0)
                            shapes[key] = read(member)[0]
            except (KeyError, OSError, ValueError, zipfile.BadZipFile) as exc:
                raise BertPipelineError(f"{path}: not a pretraining shard ({exc})") from None
            (n, t), (_, p) = shapes["input_ids"], shapes["masked_lm_positions"]
            self._headers[index] = (n, t, p)
        return self._headers[index]

    def lengths(self, index: int) -> np.ndarray:
        path = self.paths[index]
        try:
            with np.load(path, allow_pickle=False) as data:
                return np.asarray(data["valid_lengths"], dtype=np.int64)
        except (KeyError, OSError, ValueError, zipfile.BadZipFile) as exc:
            raise BertPipelineError(f"{path}: not a pretraining shard ({exc})") from None

    def load(self, index: int, vocab_size: int | None = None) -> dict[str, np.ndarray]:
        path = self.paths[index]
        try:
            with np.load(path, allow_pickle=False) as data:
                arrays = {key: data[key] for key in SHARD_KEYS if key in data.files}
        except (OSError, ValueError, zipfile.BadZipFile) as exc:
            raise BertPipelineError(f"{path}: not a readable .npz shard ({exc})") from None
        missing = [k for k in SHARD_KEYS if k not in arrays]
        bad = [f"{k} has {arrays[k].ndim} dims" for k, nd in SHARD_KEYS.items() if k in arrays
               and arrays[k].ndim != nd]
        if missing or bad or len({len(a) for a in arrays.values()}) > 1:
            raise BertPipelineError(f"{path}: not a pretraining shard: missing keys {missing}, {bad}, "
                                    f"or arrays with different numbers of instances")
        if vocab_size is not None:
            check_ids_in_vocab(path, arrays, vocab_size)
        return arrays

    def manifest_vocab_size(self) -> int | None:
        sizes = {s for s in (_manifest_vocab_size(m) for m in self.manifests.values()) if s is not None}
        return max(sizes) if sizes else None

    def sha256(self) -> dict[str, str]:
        """URI -> sha256 of every shard (an s3:// shard by its object's URI, so a run on another machine finds
        the same inputs): from the make-shards manifest's `outputs` where it lists the shard (that manifest is
        the contract), hashing the file otherwise."""
        from bert_core.io.manifest import sha256_file

        known: dict[Path, str] = {}
        for mpath, manifest in self.manifests.items():
            for entry in manifest.get("outputs", []) or []:
                if isinstance(entry, dict) and "path" in entry and "sha256" in entry:
                    known[(mpath.parent / entry["path"]).resolve()] = entry["sha256"]
        return {uri: known.get(p.resolve()) or sha256_file(p) for uri, p in zip(self.uris, self.paths)}


def check_ids_in_vocab(path: Path | str, arrays: dict[str, np.ndarray], vocab_size: int) -> None:
    top = max(int(arrays["input_ids"].max(initial=0)), int(arrays["masked_lm_ids"].max(initial=0)))
    if top >= vocab_size:
        raise BertPipelineError(f"{path}: token id {top} is outside the model's vocabulary (vocab_size="
                                f"{vocab_size}); these shards were made with a different vocab.txt")


def check_vocab(shards: ShardSet, vocab_size: int) -> None:
    """Fail before training when the shards cannot fit the model's vocabulary: the manifest's vocab size
    when make-shards recorded one, else the token ids of the first shard (later shards are checked
    as they are read)."""
    recorded = shards.manifest_vocab_size()
    if recorded is not None:
        if recorded > vocab_size:
            where = ", ".join(str(p) for p in shards.manifests)
            raise BertPipelineError(f"{where}: shards were made with a vocabulary of {recorded} tokens but the "
                                    f"model has vocab_size={vocab_size}; use the model's vocab.txt or a "
                                    f"model config with vocab_size={recorded}")
        return
    shards.load(0, vocab_size)


# --------------------------------------------------------------------------- batching plan


@dataclass(frozen=True)
class StreamConfig:
    batch_size: int  # of all workers together (the global batch): sequences, or tokens with use_avg_len
    seed: int = 0
    num_buckets: int = 1
    use_avg_len: bool = False

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise BertPipelineError(f"--batch-size must be positive, got {self.batch_size}")
        if self.num_buckets < 1:
            raise BertPipelineError(f"--num-buckets must be positive, got {self.num_buckets}")


def bucket_keys(max_seq_length: int, num_buckets: int) -> np.ndarray:
    """Upper length bound of each bucket: evenly spaced up to T."""
    return np.array([math.ceil(max_seq_length * (i + 1) / num_buckets) for i in range(num_buckets)])


def global_batch_size(cfg: StreamConfig, key_len: int) -> int:
    """Sequences per global batch of a bucket with key length `key_len`: never depends on the worker count."""
    if not cfg.use_avg_len:
        return cfg.batch_size
    return max(1, cfg.batch_size // max(1, key_len))


def worker_share(num_rows: int, rank: int, world: int) -> slice:
    """Worker `rank`'s contiguous rows of a global batch of `num_rows`, split as np.array_split does:
    the first num_rows % world workers take one row more; a share is empty when num_rows < world."""
    per, extra = divmod(num_rows, world)
    start = rank * per + min(rank, extra)
    return slice(start, start + per + (rank < extra))


class _Planner:
    """The deterministic sequence of global batches of one epoch, as (shard index, row) pairs."""

    def __init__(self, shards: ShardSet, cfg: StreamConfig, epoch: int):
        self.shards, self.cfg, self.epoch = shards, cfg, epoch
        self.order = np.random.default_rng([cfg.seed, epoch]).permutation(len(shards))
        self.pending: list[np.ndarray] = [np.zeros((0, 2), np.int64) for _ in range(cfg.num_buckets)]

    def pending_rows(self) -> np.ndarray:
        return np.concatenate(self.pending)

    def events(self) -> Iterator[tuple[str, int, np.ndarray | None]]:
        """('shard', position in the epoch order, None) then that shard's ('batch', -, [GB, 2] rows)."""
        cfg = self.cfg
        for position, shard in enumerate(self.order):
            shard = int(shard)
            yield "shard", position, None
            lengths = self.shards.lengths(shard)
            _, max_seq_length, _ = self.shards.header(shard)
            rng = np.random.default_rng([cfg.seed, self.epoch, shard])
            perm = rng.permutation(len(lengths))
            keys = bucket_keys(max_seq_length, cfg.num_buckets)
            bucket_of = np.searchsorted(keys, lengths[perm], side="left").clip(0, cfg.num_buckets - 1)
            batches = []
            for b in range(cfg.num_buckets):
                rows = perm[bucket_of == b]
                items = np.stack([np.full(len(rows), shard), rows], axis=1)
                pool = np.concatenate([self.pending[b], items])
                size = global_batch_size(cfg, int(keys[b]))
                full = len(pool) // size
                batches.extend(pool[i * size:(i + 1) * size] for i in range(full))
                self.pending[b] = pool[full * size:]
            # Shuffle the batches so buckets interleave. With one bucket the instances are already
            # shuffled, and keeping the cut order makes accumulate x B cut exactly what 2B cuts.
            order = rng.permutation(len(batches)) if cfg.num_buckets > 1 else range(len(batches))
            for i in order:
                yield "batch", position, batches[i]


# --------------------------------------------------------------------------- batches


def make_batch(arrays: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
    """Stacked shard rows -> model inputs, trimmed to the longest sequence and the most predictions."""
    lengths = arrays["valid_lengths"].astype(np.int64)
    t = max(1, int(lengths.max(initial=0)))
    weights = arrays["masked_lm_weights"]
    real = weights > 0
    # Last real prediction slot + 1 (Google's format front-packs real predictions; this is safe either way).
    last = np.where(real.any(1), real.shape[1] - np.argmax(real[:, ::-1], axis=1), 0)
    p = max(1, int(last.max(initial=0)))
    mask = (np.arange(t)[None, :] < lengths[:, None]).astype(np.int64)
    return {
        "input_ids": torch.from_numpy(arrays["input_ids"][:, :t].astype(np.int64)),
        "token_type_ids": torch.from_numpy(arrays["segment_ids"][:, :t].astype(np.int64)),
        "attention_mask": torch.from_numpy(mask),
        "masked_lm_positions": torch.from_numpy(arrays["masked_lm_positions"][:, :p].astype(np.int64)),
        "masked_lm_ids": torch.from_numpy(arrays["masked_lm_ids"][:, :p].astype(np.int64)),
        "masked_lm_weights": torch.from_numpy(weights[:, :p].astype(np.float32)),
        "next_sentence_labels": torch.from_numpy(arrays["next_sentence_labels"].astype(np.int64)),
    }


def _no_rows() -> dict[str, np.ndarray]:
    """A batch of zero shard rows (make_batch gives it one padding column)."""
    return {key: np.zeros((0, 1)[:dims], np.float32 if key == "masked_lm_weights" else np.int64)
            for key, dims in SHARD_KEYS.items()}


def num_tokens(batch: dict[str, torch.Tensor]) -> int:
    return int(batch["attention_mask"].sum())


class PretrainStream:
    """Endless per-worker iterator of training batches over epochs, with an exact, resumable position."""

    def __init__(self, shards: ShardSet, cfg: StreamConfig, rank: int = 0, world_size: int = 1,
                 vocab_size: int | None = None):
        if not 0 <= rank < world_size:
            raise BertPipelineError(f"rank {rank} is not in [0, {world_size})")
        self.shards, self.cfg, self.rank, self.world = shards, cfg, rank, world_size
        self.vocab_size = vocab_size
        self.epoch = 0
        self.batches_done = 0  # global batches of `epoch` already yielded
        self._shard_position = 0
        self._shard_offset = 0
        self._iter: Iterator[dict[str, torch.Tensor]] | None = None

    # -- position

    def position(self) -> dict[str, int | str]:
        """Where the next batch comes from. (epoch, batches) is what resuming needs; the shard position,
        file and batch offset inside that shard are for people reading a checkpoint."""
        shard = ""
        if self._shard_position < len(self.shards):
            order = np.random.default_rng([self.cfg.seed, self.epoch]).permutation(len(self.shards))
            shard = self.shards.paths[int(order[self._shard_position])].name
        return {"epoch": self.epoch, "batches": self.batches_done, "shard": self._shard_position,
                "shard_file": shard, "offset": self._shard_offset}

    def set_position(self, epoch: int, batches: int) -> None:
        self.epoch, self.batches_done = int(epoch), int(batches)
        self._iter = None

    def batches_in_epoch(self, epoch: int) -> int:
        """Exact number of global batches of an epoch (reads only valid_lengths)."""
        planner = _Planner(self.shards, self.cfg, epoch)
        return sum(1 for kind, _, _ in planner.events() if kind == "batch")

    # -- iteration

    def __iter__(self) -> PretrainStream:
        return self

    def __next__(self) -> dict[str, torch.Tensor]:
        while True:
            if self._iter is None:
                self._iter = self._epoch(self.epoch, skip=self.batches_done)
            try:
                batch = next(self._iter)
            except StopIteration:
                if self.batches_done == 0:
                    raise BertPipelineError(
                        f"{self.shards.spec}: not enough instances for one global batch of "
                        f"{self.cfg.batch_size} {'tokens' if self.cfg.use_avg_len else 'sequences'}") from None
                self.epoch, self.batches_done, self._iter = self.epoch + 1, 0, None
                continue
            self.batches_done += 1
            return batch

    def _rank_rows(self, rows: np.ndarray) -> np.ndarray:
        return rows[worker_share(len(rows), self.rank, self.world)]

    def _epoch(self, epoch: int, skip: int) -> Iterator[dict[str, torch.Tensor]]:
        planner = _Planner(self.shards, self.cfg, epoch)
        current: int | None = None  # shard index whose arrays `arrays` holds (loaded lazily)
        arrays: dict[str, np.ndarray] | None = None
        carried: dict[tuple[int, int], dict[str, np.ndarray]] = {}  # rows of earlier shards still pending
        for kind, position, rows in planner.events():
            if kind == "shard":
                if arrays is not None:
                    # Keep the rows of the finished shard that later batches will use; drop the rest.
                    pend = planner.pending_rows()
                    for k, row in pend[pend[:, 0] == current]:
                        carried[(int(k), int(row))] = {key: a[row] for key, a in arrays.items()}
                current = int(planner.order[position])
                arrays = None
                self._shard_position, self._shard_offset = position, 0
                continue
            self._shard_offset += 1
            if skip > 0:
                skip -= 1
                continue
            mine = self._rank_rows(rows)
            if len(mine):
                if arrays is None and (mine[:, 0] == current).any():
                    arrays = self.shards.load(current, self.vocab_size)
                self._fill_carried(mine, current, planner, carried)
                batch = make_batch(self._gather(mine, current, arrays, carried))
            else:
                # More workers than rows: this worker still steps (an empty batch: zero loss, zero
                # gradient), so that it takes part in every gradient all-reduce.
                batch = make_batch(_no_rows())
            for k, row in rows:  # other workers' carried rows of this batch are not needed any more
                carried.pop((int(k), int(row)), None)
            yield batch
        self._shard_position, self._shard_offset = len(self.shards), 0

    def _fill_carried(self, mine: np.ndarray, current: int | None, planner: _Planner,
                      carried: dict[tuple[int, int], dict[str, np.ndarray]]) -> None:
        """After skipping to a resume position, rows of earlier shards were never read: read each such
        shard once and keep every row of it that is still needed."""
        missing = {int(k) for k, row in mine if k != current and (int(k), int(row)) not in carried}
        if not missing:
            return
        needed = np.concatenate([mine, planner.pending_rows()])
        for shard in sorted(missing):
            data = self.shards.load(shard, self.vocab_size)
            for k, row in needed[needed[:, 0] == shard]:
                carried[(int(k), int(row))] = {key: a[row] for key, a in data.items()}

    @staticmethod
    def _gather(mine: np.ndarray, current: int | None, arrays: dict[str, np.ndarray] | None,
                carried: dict[tuple[int, int], dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
        """This worker's rows, from the current shard's arrays or the carried rows, in plan order."""
        here = mine[:, 0] == current
        other = [carried.pop((int(k), int(r))) for k, r in mine[~here]]
        out = {}
        for key in SHARD_KEYS:
            if arrays is not None:
                dtype, tail = arrays[key].dtype, arrays[key].shape[1:]
            else:
                dtype, tail = np.asarray(other[0][key]).dtype, np.shape(other[0][key])
            buf = np.empty((len(mine), *tail), dtype=dtype)
            if here.any():
                buf[here] = arrays[key][mine[here, 1]]
            if other:
                buf[~here] = np.stack([row[key] for row in other])
            out[key] = buf
        return out


def eval_batches(shards: ShardSet, batch_size: int, rank: int = 0, world_size: int = 1,
                 max_batches: int = 0, vocab_size: int | None = None) -> Iterator[dict[str, torch.Tensor]]:
    """Every instance once, in file order; worker r takes rows r, r+W, ... of each shard. Length-sorted
    inside each shard so that trimming removes most padding."""
    emitted = 0
    for index in range(len(shards)):
        arrays = shards.load(index, vocab_size)
        rows = np.arange(len(arrays["valid_lengths"]))[rank::world_size]
        rows = rows[np.argsort(arrays["valid_lengths"][rows], kind="stable")]
        for start in range(0, len(rows), batch_size):
            if max_batches and emitted >= max_batches:
                return
            pick = rows[start:start + batch_size]
            yield make_batch({k: a[pick] for k, a in arrays.items()})
            emitted += 1


def majority_baseline(shards: ShardSet, max_shards: int = 2) -> tuple[float, float]:
    """(masked-LM, NSP) accuracy of always answering the most frequent masked token / next-sentence label,
    over the first `max_shards` shards: what "at chance" means for these data."""
    counts: dict[int, float] = {}
    total, random_next, sequences = 0.0, 0, 0
    for index in range(min(len(shards), max_shards)):
        arrays = shards.load(index)
        ids, weights = arrays["masked_lm_ids"].ravel(), arrays["masked_lm_weights"].ravel()
        real = weights > 0
        for token, weight in zip(*np.unique(ids[real], return_counts=True)):
            counts[int(token)] = counts.get(int(token), 0.0) + float(weight)
        total += float(real.sum())
        random_next += int(arrays["next_sentence_labels"].sum())
        sequences += len(arrays["next_sentence_labels"])
    mlm = max(counts.values()) / total if total else 0.0
    nsp = max(random_next, sequences - random_next) / sequences if sequences else 0.5
    return mlm, nsp


def recorded_vocab(shards: ShardSet) -> Path | None:
    """The vocab.txt the shards were made with, from the make-shards manifest (`vocab.uri`), when it is
    still there with the recorded sha256: the model directory should carry the vocabulary of its data."""
    from bert_core.io.manifest import sha256_file

    for manifest in shards.manifests.values():
        vocab = manifest.get("vocab")
        if not isinstance(vocab, dict) or not vocab.get("uri"):
            continue
        uri = str(vocab["uri"])
        try:
            local = storage.local_file(uri)
        except Exception as exc:  # a moved or unreadable vocab only costs the fallback
            log.warning("%s: cannot read the shards' vocab (%s)", uri, exc)
            continue
        if local.is_file() and (not vocab.get("sha256") or sha256_file(local) == vocab["sha256"]):
            return local
    return None


def data_dir_files(shards: ShardSet, name: str) -> Path | None:
    """A file (e.g. vocab.txt) that make-shards left next to the shards, if any."""
    for directory in sorted({p.parent for p in shards.paths}):
        if (directory / name).is_file():
            return directory / name
    return None


def describe(shards: ShardSet) -> str:
    return f"{len(shards)} shard(s) from {shards.spec}" + (
        f" ({os.path.commonpath([str(p.parent) for p in shards.paths])})" if shards.paths else "")

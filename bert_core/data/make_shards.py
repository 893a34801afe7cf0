"""The `make-shards` step: segmented text + vocab -> `part-NNNNN.npz` shards + manifest.json.

Streaming: each input file is read as a stream and cut into units of at most `chunk_documents`
documents / `chunk_chars` characters (a short last unit is merged into the one before it, so no
unit is a lone document); at most a few units are in flight at any time and their instances go
through a bounded shuffle buffer into shards. Memory therefore depends on the unit and buffer
sizes, not on the corpus.

Parallel: units are independent (bert_core.data.instances), so they run inline (one worker), in a
process pool (--workers N) or as Ray tasks (when RAY_ADDRESS is set, or `backend="ray"` with Ray
already initialised). Results are consumed in unit order and the shuffle buffer has its own seeded
generator, so the shards are byte-identical whatever the backend and the number of workers.

Atomic and idempotent: shards and manifest are written into a temporary directory that is renamed
into place at the end (a killed run leaves only a hidden `.NAME.tmp-*` directory, never shards that
look complete); a second run with the same config and inputs is a no-op; an output directory holding
shards made differently is an error unless overwrite is asked for.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import json
import logging
import os
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bert_core.data import shard_format as shards
from bert_core.data.instances import ShardConfig, UnitResult, Vocab, build_unit, is_heldout
from bert_core.data.text_inputs import SEGMENTED_REMEDY, iter_lines, resolve_inputs
from bert_core.errors import BertPipelineError
from bert_core.io import manifest, storage

log = logging.getLogger(__name__)

STEP = "make-shards"
BACKENDS = ("auto", "inline", "process", "ray")
# (vocab file, config, workers, stats) -> a context manager yielding units -> results in unit order.
OpenRemote = Callable[..., contextlib.AbstractContextManager]

Unit = tuple[int, int, list[list[str]]]  # (file index, chunk index, documents as lists of lines)


@dataclass
class RunStats:
    """Counters for the log, the manifest and the tests (e.g. the streaming bound)."""

    units: int = 0
    documents: int = 0
    tokens: int = 0
    instances: int = 0
    random_next: int = 0
    masked: int = 0
    peak_documents_held: int = 0  # documents read but not yet handed back as instances
    documents_held: int = 0
    other_side_documents: int = 0  # documents of the other side of a held-out split (skipped)

    def hold(self, n: int) -> None:
        self.documents_held += n
        self.peak_documents_held = max(self.peak_documents_held, self.documents_held)


# --------------------------------------------------------------------------------------------
# Reading units
# --------------------------------------------------------------------------------------------


def _looks_like_json(line: str) -> bool:
    if not line.startswith(("{", "[")):
        return False
    try:
        return isinstance(json.loads(line), (dict, list))
    except ValueError:
        return False


def iter_documents(path: Path, uri: str) -> Iterator[list[str]]:
    """Documents of a segmented file as stripped lines; blank lines separate documents (Google's format).

    A file whose first text line is a JSON object or array (a manifest, JSONL not yet segmented) is an
    error naming it: read as text it would become plausible-looking training data."""
    document: list[str] = []
    first = True
    for lineno, line in enumerate(iter_lines(path, uri, remedy=SEGMENTED_REMEDY), start=1):
        line = line.strip()
        if first and line:
            first = False
            if _looks_like_json(line):
                raise BertPipelineError(
                    f"{uri}: line {lineno} is JSON, not segmented text: make-shards reads one sentence per line "
                    "with blank lines between documents (run `bert-pipeline segment` first; it reads JSONL "
                    "with a `text` field)")
        if line:
            document.append(line)
        elif document:
            yield document
            document = []
    if document:
        yield document


def iter_units(files: list[tuple[str, Path]], config: ShardConfig, stats: RunStats) -> Iterator[Unit]:
    """Units of every file, in order. A short last unit of a file is merged into the one before, so
    the random next sentence of a file's last documents is drawn from many documents, not a handful."""
    for file_index, (uri, path) in enumerate(files):
        pending: list[list[str]] | None = None
        current: list[list[str]] = []
        chars = 0
        chunk_index = 0
        other_side = 0
        for document in iter_documents(path, uri):
            if config.split != "all" and is_heldout(document, config.holdout_fraction) != (config.split == "heldout"):
                stats.other_side_documents += 1
                other_side += 1
                continue
            current.append(document)
            stats.hold(1)
            chars += sum(len(line) for line in document)
            if len(current) >= config.chunk_documents or chars >= config.chunk_chars:
                if pending is not None:
                    yield file_index, chunk_index, pending
                    chunk_index += 1
                pending, current, chars = current, [], 0
        small = len(current) < config.chunk_documents // 2 and chars < config.chunk_chars // 2
        if pending is not None and current and small:
            pending.extend(current)
            current = []
        for chunk in (pending, current):
            if chunk:
                yield file_index, chunk_index, chunk
                chunk_index += 1
        if pending is None and not current and other_side:
            log.info("%s: none of its %d document(s) is on the %s side of the hold-out split", uri, other_side,
                     config.split)
        elif pending is None and not current:
            log.warning("%s: no documents (empty input)", uri)


# --------------------------------------------------------------------------------------------
# Running units: inline, process pool, Ray
# --------------------------------------------------------------------------------------------

_WORKER: dict[str, Any] = {}


def _worker_context(vocab_file: str, do_lower_case: bool):
    key = (vocab_file, do_lower_case)
    if _WORKER.get("key") != key:
        from bert_core.model.tokenization import BertTokenizer

        tokenizer = BertTokenizer(vocab_file, do_lower_case=do_lower_case)
        _WORKER.update(key=key, tokenizer=tokenizer, vocab=Vocab.from_dict(tokenizer.vocab))
    return _WORKER["tokenizer"], _WORKER["vocab"]


def _init_process(vocab_file: str, do_lower_case: bool) -> None:
    # Units already run in parallel: the tokenizer's own thread pool would only oversubscribe the cores.
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    os.environ["RAYON_NUM_THREADS"] = "1"
    _worker_context(vocab_file, do_lower_case)


def run_unit(vocab_file: str, do_lower_case: bool, config: ShardConfig, unit: Unit) -> UnitResult:
    tokenizer, vocab = _worker_context(vocab_file, do_lower_case)
    return build_unit(tokenizer, vocab, config, *unit)


def _run_unit_in_process(args: tuple[str, bool, ShardConfig, Unit]) -> UnitResult:
    return run_unit(*args)


def ordered(submit: Callable[[Unit], Any], wait: Callable[[Any], UnitResult], units: Iterable[Unit],
             window: int, stats: RunStats) -> Iterator[UnitResult]:
    """Results in unit order with at most `window` units in flight (that bounds the memory)."""
    in_flight: collections.deque = collections.deque()
    for unit in units:
        in_flight.append((len(unit[2]), submit(unit)))
        if len(in_flight) >= window:
            held, handle = in_flight.popleft()
            result = wait(handle)
            stats.documents_held -= held
            yield result
    while in_flight:
        held, handle = in_flight.popleft()
        result = wait(handle)
        stats.documents_held -= held
        yield result


def choose_backend(backend: str, workers: int) -> str:
    if backend not in BACKENDS:
        raise BertPipelineError(f"make-shards: backend must be one of {BACKENDS}, not {backend!r}")
    if backend != "auto":
        return backend
    if os.environ.get("RAY_ADDRESS"):
        return "ray"
    return local_backend(workers)


def local_backend(workers: int) -> str:
    """The backend on this machine alone: processes for more than one worker, where this process may start them
    (a daemonic one may not: a Celery prefork task), else inline; the shards are the same either way."""
    return "process" if workers > 1 and not _in_daemon_process() else "inline"


def _in_daemon_process() -> bool:
    """True in a daemonic multiprocessing child (a Celery prefork worker runs its tasks in one), which
    Python forbids to start processes of its own."""
    import multiprocessing

    return multiprocessing.current_process().daemon


@contextlib.contextmanager
def open_executor(vocab_file: Path, config: ShardConfig, workers: int, backend: str, stats: RunStats,
                  remote: OpenRemote | None = None):
    """A function running units -> results in unit order, on the chosen backend ("ray": `remote`'s).

    Process workers start from a fresh interpreter (forkserver where the platform has it, else spawn),
    never by forking the caller: a caller inside an Airflow task has other threads running (a lock
    one of them holds stays held forever in a forked child) and Airflow's SIGTERM handler, which
    ignores the signal in any process but the task's own, so a stuck forked worker could be neither
    used nor terminated (seen: make-shards hanging at the pool's exit after a `dag.test` in the same
    process). Like spawn, forkserver imports the caller's main module in each worker, so a script
    calling this needs the usual `if __name__ == "__main__":` guard.
    """
    args = (str(vocab_file), config.do_lower_case, config)
    if backend == "inline":
        def run_inline(units: Iterable[Unit]) -> Iterator[UnitResult]:
            for unit in units:
                result = run_unit(*args, unit)
                stats.documents_held -= len(unit[2])
                yield result

        yield run_inline
        return
    if backend == "process":
        import multiprocessing

        if _in_daemon_process():
            raise BertPipelineError("make-shards: backend 'process' cannot start worker processes from a daemonic "
                                    "process (a Celery prefork worker's task runs in one); use backend 'inline', "
                                    "or 'ray' with RAY_ADDRESS set")
        method = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
        pool = multiprocessing.get_context(method).Pool(workers, initializer=_init_process, initargs=args[:2])
        try:
            # One unit more than workers in flight keeps them all busy; more would only hold finished
            # results in memory.
            yield lambda units: ordered(
                lambda unit: pool.apply_async(_run_unit_in_process, ((*args, unit),)),
                lambda handle: handle.get(), units, workers + 1, stats)
        except BaseException:
            pool.terminate()
            raise
        else:
            # Workers leave on the pool's end-of-work message rather than by signal.
            pool.close()
        finally:
            pool.join()
        return
    if remote is None:
        raise BertPipelineError("make-shards: the ray backend runs through bert_core.launch.ray_shards, which "
                                "sends the units to the cluster")
    with remote(vocab_file, config, workers, stats) as run_units:
        yield run_units


# --------------------------------------------------------------------------------------------
# Writing shards through a bounded shuffle buffer
# --------------------------------------------------------------------------------------------


class ShardWriter:
    """Mixes instances of consecutive units in a buffer of `shuffle_buffer` and writes full shards.

    Deterministic: the buffer has its own generator seeded from the run's seed, and it sees the units
    in unit order.
    """

    def __init__(self, directory: Path, config: ShardConfig) -> None:
        self.directory = directory
        self.config = config
        self.rng = np.random.Generator(np.random.PCG64([config.random_seed, 0x5BE2D]))
        self.pending: list[dict[str, np.ndarray]] = []
        self.pending_rows = 0
        self.written: list[dict[str, Any]] = []

    def add(self, arrays: dict[str, np.ndarray]) -> None:
        rows = shards.num_instances(arrays)
        if not rows:
            return
        self.pending.append(arrays)
        self.pending_rows += rows
        if self.pending_rows >= self.config.shuffle_buffer + self.config.instances_per_shard:
            self._flush(final=False)

    def close(self) -> list[dict[str, Any]]:
        self._flush(final=True)
        return self.written

    def _flush(self, final: bool) -> None:
        """Write full shards of randomly chosen buffered rows, keeping `shuffle_buffer` rows (none if final)."""
        if not self.pending_rows:
            return
        per_shard = self.config.instances_per_shard
        keep = 0 if final else self.config.shuffle_buffer
        n_out = self.pending_rows if final else ((self.pending_rows - keep) // per_shard) * per_shard
        order = self.rng.permutation(self.pending_rows)
        starts = np.cumsum([0] + [shards.num_instances(a) for a in self.pending])
        for start in range(0, n_out, per_shard):
            self._write(self._gather(order[start: min(start + per_shard, n_out)], starts))
        rest = self._gather(order[n_out:], starts) if n_out < self.pending_rows else None
        self.pending = [rest] if rest is not None else []
        self.pending_rows -= n_out

    def _gather(self, rows: np.ndarray, starts: np.ndarray) -> dict[str, np.ndarray]:
        """Buffered rows by global index, without first concatenating the whole buffer."""
        source = np.searchsorted(starts, rows, side="right") - 1
        local = rows - starts[source]
        # Which output rows come from which buffered array, worked out once for all the keys.
        parts = []
        for index in range(len(self.pending)):
            where = np.flatnonzero(source == index)
            parts.append((index, where, local[where]))
        out = {}
        for key in shards.KEYS:
            first = self.pending[0][key]
            column = np.empty((len(rows), *first.shape[1:]), dtype=first.dtype)
            for index, where, taken in parts:
                column[where] = self.pending[index][key][taken]
            out[key] = column
        return out

    def _write(self, arrays: dict[str, np.ndarray]) -> None:
        name = shards.shard_name(len(self.written))
        shards.write_shard(self.directory / name, arrays)
        self.written.append({
            "path": name,
            "instances": shards.num_instances(arrays),
            "sha256": manifest.sha256_file(self.directory / name),
        })


# --------------------------------------------------------------------------------------------
# The step
# --------------------------------------------------------------------------------------------


def _config_differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    keys = sorted(set(old) | set(new))
    return [f"{k}: {old.get(k)!r} there, {new.get(k)!r} now" for k in keys if old.get(k) != new.get(k)]


def _check_existing_output(output: str, config: ShardConfig, inputs: dict[str, str], overwrite: bool) -> bool:
    """True when output already holds exactly this result; an error when it holds other shards."""
    if storage.is_s3(output):
        return False
    out = storage.local_path(output)
    if manifest.is_up_to_date(out, STEP, config, inputs):
        return True
    if overwrite or not (out / manifest.MANIFEST).is_file():
        return False
    try:
        old = manifest.read(out)
    except BertPipelineError:
        return False
    if old.get("step") != STEP:
        return False
    new_config = manifest.build(STEP, config, {}, out, [], manifest.now())["config"]
    differences = _config_differences(old["config"], new_config)
    if not differences:
        old_inputs = {i["uri"]: i["sha256"] for i in old["inputs"]}
        differences = [f"input {uri} differs or is new" for uri in inputs if old_inputs.get(uri) != inputs[uri]]
        differences += [f"input {uri} is not given now" for uri in old_inputs if uri not in inputs]
        differences = differences or ["its shards do not match its manifest"]
    raise BertPipelineError(
        f"{out} holds shards made from a different configuration or input ({'; '.join(differences[:5])}); "
        "pass --overwrite to replace them, or choose another --output"
    )


def rates(stats: RunStats, seconds: float) -> str:
    """The progress bar's postfix: documents, instances and tokens per second since the start."""
    seconds = max(seconds, 1e-9)
    return (f"{stats.documents / seconds:,.0f} doc/s, {stats.instances / seconds:,.0f} inst/s, "
            f"{stats.tokens / seconds:,.0f} tok/s")


def _progress(enabled: bool | None):
    from tqdm import tqdm

    # disable=None: a bar on a terminal only, so that logs (Airflow, Ray) do not fill with redraws.
    return tqdm(unit=" doc", desc="make-shards", disable=None if enabled is None else not enabled,
                mininterval=1.0, dynamic_ncols=True)


# A vocab is judged cased when more than this fraction of its tokens that hold letters with case hold an
# upper-case one: Google's cased vocab 31%, its uncased 0, its Chinese (uncased) 0.05% ('<S>', '<T>').
CASED_VOCAB_FRACTION = 0.01
CASING_MIN_TOKENS = 50  # fewer tokens with letters than this: too few to judge


def check_vocab_casing(vocab_file: str, vocab: dict[str, int], do_lower_case: bool) -> None:
    """--cased (or its absence) agrees with the vocab. Lower-cased text never produces a cased vocab's
    capitalised tokens, and cased text against an uncased vocab turns capitalised words into [UNK] (8% of
    the tokens of ordinary English prose): both give shards that are silently wrong. Google's script
    trusts the flag; we check it from the tokens themselves, which works for any vocab."""
    learned = [t for t in vocab if not (t.startswith("[") and t.endswith("]"))]
    with_case = [t for t in learned if any(c.lower() != c.upper() for c in t)]
    if len(with_case) < CASING_MIN_TOKENS:
        return
    upper = sum(1 for t in with_case if any(c != c.lower() for c in t))
    cased = upper > CASED_VOCAB_FRACTION * len(with_case)
    if cased and do_lower_case:
        raise BertPipelineError(
            f"--vocab {vocab_file} is a cased vocab ({upper} of its {len(with_case)} tokens with letters have "
            "upper-case ones) but the text would be lower-cased, so those tokens are never used; pass --cased, "
            "or give an uncased vocab")
    if not cased and not do_lower_case:
        raise BertPipelineError(
            f"--vocab {vocab_file} is an uncased vocab ({upper} of its {len(with_case)} tokens with letters have "
            "upper-case ones) but --cased keeps the text's case, so capitalised words become [UNK]; leave out "
            "--cased, or give a cased vocab (build-vocab --cased)")


def make_shards(inputs: list[str], output: str, vocab_file: str, config: ShardConfig | None = None,
                workers: int = 1, backend: str = "auto", overwrite: bool = False,
                progress: bool | None = None, stats: RunStats | None = None,
                remote: OpenRemote | None = None, empty_side_ok: bool = False) -> dict[str, Any]:
    """Run the step; return its manifest. `progress`: True/False, or None for a bar only on a terminal.
    `remote` runs the units of the "ray" backend (bert_core.launch.ray_shards passes it).

    `empty_side_ok` (with a held-out split, config.split "train" or "heldout"): inputs that have documents, none
    of them on this side of the split, give an output with no shard whose manifest says so (`empty_side`, totals
    with 0 instances and the documents of the other side) instead of an error. For a caller that makes one
    input file's side at a time and judges the whole corpus itself: a one-document file whose document is held
    out has an empty training side, which is no fault of the run's."""
    config = config or ShardConfig()
    config.check()
    if workers < 1:
        raise BertPipelineError("make-shards: workers must be at least 1")
    backend = choose_backend(backend, workers)
    stats = stats if stats is not None else RunStats()
    started = manifest.now()
    clock = time.perf_counter()

    vocab_path = storage.local_file(vocab_file)
    from bert_core.model.tokenization import load_vocab

    try:
        vocab_dict = load_vocab(vocab_path)
        vocab = Vocab.from_dict(vocab_dict)
    except BertPipelineError as exc:
        raise BertPipelineError(f"--vocab {vocab_file}: {exc}") from None
    check_vocab_casing(vocab_file, vocab_dict, config.do_lower_case)
    vocab_sha = manifest.sha256_file(vocab_path)
    uris = resolve_inputs(inputs)
    files = [(uri, storage.local_file(uri)) for uri in uris]
    hashes = {uri: manifest.sha256_file(path) for uri, path in files}
    vocab_uri = vocab_file if storage.is_s3(vocab_file) else str(vocab_path.absolute())
    hashes_with_vocab = {**hashes, f"vocab:{vocab_uri}": vocab_sha}
    if _check_existing_output(output, config, hashes_with_vocab, overwrite):
        log.info("%s already holds these shards (same config, inputs and vocab): nothing to do", output)
        return manifest.read(storage.local_path(output))

    log.info("make-shards: %d input file(s), backend %s, %d worker(s)", len(files), backend, workers)
    with (storage.atomic_output_dir(output, overwrite=overwrite) as tmp,
          open_executor(vocab_path, config, workers, backend, stats, remote) as run_units,
          _progress(progress) as bar):
        writer = ShardWriter(tmp, config)
        for result in run_units(iter_units(files, config, stats)):
            arrays = result.arrays
            stats.units += 1
            stats.documents += result.documents
            stats.tokens += result.tokens
            stats.instances += shards.num_instances(arrays)
            stats.random_next += int(arrays["next_sentence_labels"].sum())
            stats.masked += int(arrays["masked_lm_weights"].sum())
            writer.add(arrays)
            bar.update(result.documents)
            bar.set_postfix_str(rates(stats, time.perf_counter() - clock), refresh=False)
        written = writer.close()
        empty_side = None
        if not written and empty_side_ok and config.split != "all" and stats.other_side_documents \
                and not stats.documents:
            empty_side = (f"none of the {stats.other_side_documents} document(s) of the inputs is on the "
                          f"{config.split} side of the held-out split (holdout_fraction {config.holdout_fraction}): "
                          "no shard")
            log.warning("make-shards: %s", empty_side)
        elif not written:
            named = f"{', '.join(uris[:3])}{', ...' if len(uris) > 3 else ''}"
            if config.split == "heldout" and stats.other_side_documents:
                raise BertPipelineError(
                    f"make-shards: the held-out fraction {config.holdout_fraction} selected none of the "
                    f"{stats.other_side_documents} document(s) of {named}; raise --holdout-fraction or give more "
                    "documents")
            if config.split == "train" and stats.other_side_documents:  # else: no document at all (below)
                raise BertPipelineError(f"make-shards: every document of {named} was held out; lower "
                                        "--holdout-fraction")
            raise BertPipelineError(f"make-shards: no instances: the inputs ({named}) hold no text")
        elapsed = time.perf_counter() - clock
        totals = {key: value for key, value in dataclasses.asdict(stats).items()
                  if key not in ("documents_held", "peak_documents_held")}
        # The writer hashed each shard as it wrote it; manifest.build would read them all again.
        result_manifest = manifest.build(
            STEP, config, hashes_with_vocab, tmp, [], started,
            extra={
                "vocab": {"uri": vocab_uri, "sha256": vocab_sha, "size": max(vocab_dict.values()) + 1,
                          "cls_id": vocab.cls_id, "sep_id": vocab.sep_id, "mask_id": vocab.mask_id,
                          "pad_id": vocab_dict.get("[PAD]")},
                "seed": config.random_seed,
                "shards": written,
                "totals": totals,
                "semantics": "Google create_pretraining_data.py per unit of documents; random next "
                             "sentence drawn from the same unit (see bert_core.data.instances)",
                **({"empty_side": empty_side} if empty_side else {}),
            },
        )
        result_manifest["outputs"] = [{"path": w["path"], "sha256": w["sha256"]} for w in written]
        manifest.write(result_manifest, tmp)
    log.info(
        "make-shards: %d documents, %d tokens -> %d instances in %d shard(s) in %.1f s (%.0f tokens/s, "
        "%.0f instances/s); random next %.1f%%, %.2f predictions per instance",
        stats.documents, stats.tokens, stats.instances, len(written), elapsed, stats.tokens / elapsed,
        stats.instances / elapsed, 100 * stats.random_next / max(stats.instances, 1),
        stats.masked / max(stats.instances, 1),
    )
    return result_manifest


def heldout_output_for(output: str) -> str:
    """Where the held-out shards of `output` go by default: a sibling directory, OUTPUT-heldout (not inside
    OUTPUT, where `--data OUTPUT` would read them as training data)."""
    return output.rstrip("/") + "-heldout"


def heldout_config(config: ShardConfig) -> ShardConfig:
    """The held-out side: one masking pass (evaluation needs no duplicates) over the held-out documents."""
    return dataclasses.replace(config, split="heldout", dupe_factor=1)


def _overlap(a: str, b: str) -> bool:
    """Whether output directories `a` and `b` are the same or one is inside the other. A held-out directory
    inside --output was made first, then the training side refused the non-empty --output (and with
    --overwrite would have replaced it, held-out shards and all)."""
    if storage.is_s3(a) or storage.is_s3(b):
        pa, pb = a.rstrip("/") + "/", b.rstrip("/") + "/"
        return pa.startswith(pb) or pb.startswith(pa)
    pa, pb = storage.local_path(a).resolve(), storage.local_path(b).resolve()
    return pa == pb or pa in pb.parents or pb in pa.parents


def make_split_shards(inputs: list[str], output: str, vocab_file: str, config: ShardConfig,
                      holdout_output: str | None = None, **kwargs: Any) -> dict[str, Any]:
    """make-shards with a held-out split by document: training shards in `output`, held-out shards (one
    masking pass, random next sentences from held-out documents only) in `holdout_output`.

    The held-out side runs first: it is small, and a fraction that selects no document fails before the
    long training side starts. Returns the training side's manifest with `heldout` (output, instances).
    """
    if config.holdout_fraction <= 0.0:
        raise BertPipelineError("make_split_shards: holdout_fraction must be above 0")
    holdout_output = holdout_output or heldout_output_for(output)
    if _overlap(holdout_output, output):
        raise BertPipelineError(
            f"--holdout-output {holdout_output} and --output {output} overlap (the same directory, or one inside "
            "the other): each side's output replaces its whole directory, so one would hold or delete the other's "
            "shards; give two separate directories (default: OUTPUT-heldout)")
    kwargs.pop("stats", None)
    held = make_shards(inputs, holdout_output, vocab_file, heldout_config(config), **kwargs)
    train = make_shards(inputs, output, vocab_file, dataclasses.replace(config, split="train"), **kwargs)
    held_totals = held.get("totals", {})
    train["heldout"] = {"output": holdout_output, "instances": held_totals.get("instances"),
                        "documents": held_totals.get("documents")}
    log.info("held out %s document(s) (%s instances) in %s", held_totals.get("documents"),
             held_totals.get("instances"), holdout_output)
    return train

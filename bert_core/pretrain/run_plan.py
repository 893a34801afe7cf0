"""What one pretraining run reads and writes, resolved once where the run starts and handed down.

`plan_run(config)` checks the flags, finds the shards (an s3:// spec is fetched into the local cache), reads
their manifests, resolves the starting weights and the architecture, says where the output and the
checkpoints go, and, given the device the run computes on, resolves its precision (`--dtype auto`: the
device's, agreed by all workers; bert_core.train.precision). The step's helpers take the `RunPlan` instead of
re-resolving the same URIs from the config. It is made once per process that runs the step: the launcher's
check on the driver, and each worker (a worker on another node needs its own local copies of s3 inputs).
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from bert_core.errors import BertPipelineError
from bert_core.io import storage
from bert_core.model import zoo
from bert_core.model.config import BertConfig
from bert_core.model.weights import find_model_files, resolve_model_dir
from bert_core.pretrain.config import PretrainConfig
from bert_core.pretrain.stream import ShardSet, check_vocab
from bert_core.train import dist
from bert_core.train.precision import PrecisionChoice, agreed, resolve_precision

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunPlan:
    config: PretrainConfig
    shards: ShardSet
    eval_shards: ShardSet | None
    model_config: BertConfig  # the architecture this run trains
    pretrained_dir: Path | None  # local directory of the starting weights (None: from scratch)
    pretrained_weights: Path | None  # their weights file, an input of the run like the shards
    output: str  # the model directory to create, local or s3://
    output_local: Path | None  # its local path (None for s3://)
    checkpoint_root: str
    # The compute precision, resolved for the device the steps run on; None in a driver's check (plan_run
    # without a device), which runs no step.
    precision: PrecisionChoice | None = None

    def shard_sets(self) -> list[ShardSet]:
        return [self.shards] + ([self.eval_shards] if self.eval_shards is not None else [])

    def check_data_fits_model(self) -> None:
        """The shards' token ids and lengths fit the model's vocabulary and positions."""
        for shards in self.shard_sets():
            check_vocab(shards, self.model_config.vocab_size)
            _, seq_len, _ = shards.header(0)
            if seq_len > self.model_config.max_position_embeddings:
                raise BertPipelineError(f"{shards.paths[0]}: sequences of length {seq_len} exceed the model's "
                                        f"max_position_embeddings ({self.model_config.max_position_embeddings})")


    def check_vocab_file(self) -> None:
        """--vocab names a vocab.txt that exists, fits the model's vocab_size and, when the shards' make-shards
        manifest records the vocab they were made with, is that vocab: the output directory carries it, so a
        wrong file would give a model whose token ids mean other words. Checked before training."""
        vocab = self.config.vocab
        if not vocab:
            return
        expected = "the WordPiece vocab.txt the shards were made with (make-shards --vocab), one token per line"
        if storage.is_s3(vocab):
            if not storage.exists(vocab):
                raise BertPipelineError(f"--vocab {vocab}: no such object; expected {expected}")
            return
        path = storage.local_path(vocab)
        if not path.is_file():
            raise BertPipelineError(f"--vocab {vocab}: no such file; expected {expected}")
        with open(path, "rb") as f:
            data = f.read()
        size = data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)
        if size > self.model_config.vocab_size:
            raise BertPipelineError(f"--vocab {vocab}: {size} tokens, more than the model's vocab_size "
                                    f"({self.model_config.vocab_size}); expected {expected}")
        digest = hashlib.sha256(data).hexdigest()
        for shards in self.shard_sets():
            for where, recorded in shards.manifests.items():
                made_with = recorded.get("vocab") if isinstance(recorded, dict) else None
                if isinstance(made_with, dict) and made_with.get("sha256") and made_with["sha256"] != digest:
                    raise BertPipelineError(
                        f"--vocab {vocab} (sha256 {digest[:12]}) is not the vocab the shards were made with: {where} "
                        f"records {made_with.get('uri')} (sha256 {str(made_with['sha256'])[:12]}); give that file, "
                        "or leave --vocab out to use it")


def is_config_file(spec: str) -> bool:
    """--model names a CONFIG_JSON file (not an architecture name)."""
    return spec.endswith(".json") or (not storage.is_s3(spec) and storage.local_path(spec).is_file())


def model_config_from(spec: str) -> BertConfig:
    """--model: a CONFIG_JSON file, or a zoo / bert_LAYERS_HIDDEN_HEADS architecture name."""
    if is_config_file(spec):
        return BertConfig.from_json_file(storage.local_path(spec))
    return zoo.architecture_config(spec)


def sized_to_vocab(model_config: BertConfig, shard_sets: list[ShardSet], say: bool = True) -> BertConfig:
    """An architecture named by --model (not a CONFIG_JSON, which says its own vocab_size) trained from scratch
    gets the vocabulary size of the vocab its shards were made with, as the make-shards manifest records it:
    a `build-vocab` vocab of 8,000 tokens under bert_base_uncased's 30,522 would give a softmax over 22,522 ids
    that never occur, and a model directory whose vocab.txt and config.json disagree. Shards without a
    recorded size keep the architecture's."""
    sizes = {s for s in (shards.manifest_vocab_size() for shards in shard_sets) if s is not None}
    if not sizes or max(sizes) == model_config.vocab_size:
        return model_config
    if say:
        log.info("vocab_size %d: the vocab the shards were made with (the architecture's default is %d)",
                 max(sizes), model_config.vocab_size)
    return model_config.replace(vocab_size=max(sizes))


def _shards(flag: str, spec: str) -> ShardSet:
    """The shards of --data or --data-eval; an error names the flag as well as the path."""
    try:
        return ShardSet(spec)
    except BertPipelineError as exc:
        raise BertPipelineError(f"{flag}: {exc}") from exc


def _shards_casing(shard_sets: list[ShardSet]) -> bool | None:
    """The `do_lower_case` the shards' make-shards manifests record (None when none does); training and
    evaluation shards tokenized with different casings are an error: one model cannot match both."""
    recorded = {}
    for shards in shard_sets:
        for where, meta in shards.manifests.items():
            value = (meta.get("config") or {}).get("do_lower_case") if isinstance(meta, dict) else None
            if isinstance(value, bool):
                recorded[where] = value
    if len(set(recorded.values())) > 1:
        listed = "; ".join(f"{where}: do_lower_case {value}" for where, value in recorded.items())
        raise BertPipelineError(f"the shards were tokenized with different casings ({listed}); make them all "
                                "with the same vocab and make-shards --cased setting")
    return next(iter(recorded.values()), None)


def _with_shards_casing(model_config: BertConfig, shard_sets: list[ShardSet], pretrained: str | None,
                        say: bool = True) -> BertConfig:
    """The model directory records the casing its tokenizer must use (finetune, embed and serving read it),
    so it is the casing the shards were tokenized with: a model trained on `make-shards --cased` shards was
    written as lower-casing (the zoo's default) and every later step lower-cased its input. Weights already
    trained with the other casing cannot continue on these shards."""
    casing = _shards_casing(shard_sets)
    if casing is None or model_config.do_lower_case == casing:
        return model_config
    if pretrained and model_config.do_lower_case is not None:
        raise BertPipelineError(
            f"--pretrained {pretrained} is a {'lower-casing' if model_config.do_lower_case else 'cased'} model "
            f"(do_lower_case {model_config.do_lower_case}) but the shards were made "
            f"{'without' if casing else 'with'} make-shards --cased (do_lower_case {casing}); make the shards "
            "with the model's casing and vocab")
    if say:
        log.info("do_lower_case %s, as the shards were tokenized (--model's config says %s)", casing,
                 model_config.do_lower_case)
    return model_config.replace(do_lower_case=casing)


def plan_run(config: PretrainConfig, device: torch.device | str | None = None) -> RunPlan:
    """The run's plan; with the `device` its steps run on (every worker gives its own), also its precision.
    All workers must call it with a device together: they agree on one precision."""
    config.validate()
    pretrained_dir = pretrained_weights = None
    if config.pretrained:
        pretrained_dir = resolve_model_dir(config.pretrained)
        config_file, pretrained_weights = find_model_files(pretrained_dir)
        model_config = BertConfig.from_json_file(config_file)
    else:
        model_config = model_config_from(config.model)
    shards = _shards("--data", config.data)
    eval_shards = _shards("--data-eval", config.data_eval) if config.data_eval else None
    shard_sets = [shards] + ([eval_shards] if eval_shards else [])
    # What the plan chose for the model is said once a run: by the plan that trains (a device; on Ray, rank 0's
    # worker), not again by a launcher's check before it (the same process when the run is not on Ray).
    say = device is not None and dist.rank() == 0
    if not config.pretrained and not is_config_file(config.model):
        model_config = sized_to_vocab(model_config, shard_sets, say=say)
    model_config = _with_shards_casing(model_config, shard_sets, pretrained=config.pretrained, say=say)
    return RunPlan(config=config, shards=shards, eval_shards=eval_shards,
                   model_config=model_config, pretrained_dir=pretrained_dir, pretrained_weights=pretrained_weights,
                   output=config.output,
                   output_local=None if storage.is_s3(config.output) else storage.local_path(config.output),
                   checkpoint_root=config.checkpoint_root(),
                   precision=None if device is None else agreed(dist.all_gather_objects(
                       resolve_precision(config.dtype, device))))

"""Reading and writing model directories: `config.json` + `model.safetensors` + `vocab.txt`.

Loading is strict by default. Every parameter of the target model must come from the checkpoint,
except a head that is new by design (e.g. `classifier.*` when fine-tuning a pretrained encoder):
those are listed as newly initialised. Missing encoder weights, mis-shaped tensors and weights
that belong to a different architecture are errors that name the keys; nothing loads halfway.
"""

from __future__ import annotations

import logging
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from bert_core.errors import BertPipelineError, CheckpointMismatchError, ModelNotFoundError
from bert_core.io import storage
from bert_core.model import zoo
from bert_core.model.config import BertConfig

log = logging.getLogger(__name__)

# Parts of a BERT checkpoint that a class may legitimately not use (another task's head, the pooler).
_OPTIONAL_PREFIXES = ("bert.pooler.", "cls.", "classifier.", "qa_outputs.")
# Of those, what a pretrained checkpoint always carries and an encoder or a task head has no place for by
# design: the pretraining heads (MLM + NSP) and, for the heads without one, the pooler. Dropping them is what
# loading a pretrained model for a task or for embeddings means, so it is not reported; any other unused
# weight (a head trained for another task) is a warning.
_DROPPED_BY_DESIGN = ("cls.", "bert.pooler.")
# Keys that are not parameters: HF's position-id buffer, and the decoder bias HF duplicates.
_NON_PARAMETERS = ("bert.embeddings.position_ids", "cls.predictions.decoder.bias")
_TIED = ("cls.predictions.decoder.weight",)


@dataclass
class LoadReport:
    source: str
    newly_initialized: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)

    def log(self) -> None:
        if self.newly_initialized:
            log.info("%s: newly initialised (not in the checkpoint, train them): %s", self.source,
                     _summarize(self.newly_initialized))
        dropped = [k for k in self.ignored if k.startswith(_DROPPED_BY_DESIGN)]
        if dropped:
            log.debug("%s: pretraining heads / pooler not used by this model (as designed): %s", self.source,
                      _summarize(dropped))
        if self.unexpected_unused:
            log.warning("%s: checkpoint weights not used by this model (a head trained for another task?): %s",
                        self.source, _summarize(self.unexpected_unused))

    @property
    def unexpected_unused(self) -> list[str]:
        """The unused checkpoint weights that are not BERT's pretraining heads or pooler."""
        return [k for k in self.ignored if not k.startswith(_DROPPED_BY_DESIGN)]


def _summarize(keys: list[str], limit: int = 8) -> str:
    shown = ", ".join(keys[:limit])
    return shown + (f" ... and {len(keys) - limit} more" if len(keys) > limit else "")


def find_model_files(directory: Path) -> tuple[Path, Path]:
    """(config file, weights file) of a model directory, or an error naming what is missing."""
    config = next((directory / n for n in zoo.CONFIG_FILES if (directory / n).is_file()), None)
    weights = next((directory / n for n in zoo.WEIGHT_FILES if (directory / n).is_file()), None)
    missing = []
    if config is None:
        missing.append(" or ".join(zoo.CONFIG_FILES))
    if weights is None:
        missing.append(" or ".join(zoo.WEIGHT_FILES))
    if missing:
        raise ModelNotFoundError(f"{directory}: not a model directory, missing {' and '.join(missing)}"
                                 + ("; a Google TF checkpoint converts with `bert-pipeline convert-tf-checkpoint`"
                                    if any(directory.glob("*.ckpt*.index")) else ""))
    return config, weights


def resolve_model_dir(name_or_path: str) -> Path:
    """A local model directory for a path, file:// or s3:// URI, or zoo name."""
    text = str(name_or_path)
    if storage.is_s3(text):
        return storage.local_dir(text)
    path = storage.local_path(text)
    if path.exists():
        if not path.is_dir():
            raise BertPipelineError(f"{path}: expected a model directory, got a file")
        return path
    entry = zoo.lookup(text)
    if entry is not None:
        return resolve_model_dir(zoo.resolve_pretrained(entry))
    if "/" in text or os.sep in text:
        raise ModelNotFoundError(f"{text}: no such model directory")
    raise ModelNotFoundError(zoo.unknown_model_message(text))


def read_state_dict(weights: Path) -> dict[str, torch.Tensor]:
    try:
        if weights.suffix == ".safetensors":
            return load_file(str(weights))
        state = torch.load(str(weights), map_location="cpu", weights_only=True)
    except Exception as exc:  # corrupt or truncated files surface as many exception types
        raise CheckpointMismatchError(f"{weights}: cannot read weights ({type(exc).__name__}: {exc})") from None
    if isinstance(state, dict) and "model" in state and isinstance(state["model"], dict):
        state = state["model"]
    if not isinstance(state, dict):
        raise CheckpointMismatchError(f"{weights}: expected a state dict, got {type(state).__name__}")
    return state


def normalize_keys(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Map the key spellings found in the wild onto the head-model layout (`bert.` + encoder keys).

    - pytorch-pretrained-bert wrote LayerNorm.gamma/beta; HF writes weight/bias.
    - An encoder-only checkpoint (HF `BertModel`) has no `bert.` prefix; a head checkpoint has it.
    """
    out = {}
    bare = not any(k.startswith("bert.") for k in state)
    for key, tensor in state.items():
        key = key.replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta", "LayerNorm.bias")
        if bare and key.split(".", 1)[0] in ("embeddings", "encoder", "pooler"):
            key = "bert." + key
        out[key] = tensor
    if "cls.predictions.bias" not in out and "cls.predictions.decoder.bias" in out:
        out["cls.predictions.bias"] = out["cls.predictions.decoder.bias"]
    return out


def load_state_into(model: torch.nn.Module, state: dict[str, torch.Tensor], source: str) -> LoadReport:
    """Copy `state` into `model` after checking that it fits; see the module docstring for the rules."""
    own = model.state_dict()
    # Compare in the head-model namespace, so BertModel (whose keys lack `bert.`) follows the same rules.
    prefix = "" if any(k.startswith("bert.") for k in own) else "bert."
    expected = {prefix + k: v for k, v in own.items() if prefix + k not in _TIED}
    state = normalize_keys(state)
    report = LoadReport(storage.source_uri(source))  # a cached copy of an s3:// model is named by its URI
    new_heads = getattr(model, "new_head_prefixes", ())
    missing, unexpected, mis_shaped = [], [], []
    for key, param in expected.items():
        if key not in state:
            (report.newly_initialized if key.startswith((*new_heads, "bert.pooler.")) else missing).append(key)
        elif tuple(state[key].shape) != tuple(param.shape):
            mis_shaped.append(f"{key}: checkpoint {tuple(state[key].shape)} vs model {tuple(param.shape)}")
    for key in state:
        if key in expected or key in _TIED or key in _NON_PARAMETERS:
            continue
        (report.ignored if key.startswith(_OPTIONAL_PREFIXES) else unexpected).append(key)
    problems = []
    if mis_shaped:
        problems.append(f"{len(mis_shaped)} tensor(s) with the wrong shape ({_summarize(mis_shaped, 5)})")
    if missing:
        problems.append(f"{len(missing)} weight(s) missing from the checkpoint ({_summarize(missing)})")
    if unexpected:
        problems.append(f"{len(unexpected)} checkpoint weight(s) this architecture has no place for "
                        f"({_summarize(unexpected)})")
    if problems:
        raise CheckpointMismatchError(f"{report.source}: weights do not fit the model config: " + "; ".join(problems)
                                      + ". Is config.json the one these weights were trained with?")
    with torch.no_grad():
        for key, param in expected.items():
            if key in state:
                param.copy_(state[key].to(param.dtype))
    model.tie_weights()
    report.log()
    return report


_ARCH_FIELDS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")


def _check_zoo_architecture(name: str, config: BertConfig, directory: Path) -> None:
    """A zoo name must load the architecture it names, not whatever was put in its directory."""
    entry = None if storage.is_s3(name) or storage.local_path(name).exists() else zoo.lookup(name)
    if entry is None:
        return
    want = entry.config()
    diffs = [f"{f}={getattr(config, f)} (expected {getattr(want, f)})" for f in _ARCH_FIELDS
             if getattr(config, f) != getattr(want, f)]
    if diffs:
        raise CheckpointMismatchError(f"{directory} is registered as {name!r} ({entry.architecture}, "
                                      f"{entry.dataset}) but holds another model: {', '.join(diffs)}")


def load_pretrained(model_cls, name_or_path: str, directory: Path | None = None, **config_overrides: Any):
    """`directory`: where `name_or_path` was already resolved to (a caller that planned its run)."""
    directory = directory if directory is not None else resolve_model_dir(name_or_path)
    config_file, weights = find_model_files(directory)
    config = BertConfig.from_json_file(config_file)
    _check_zoo_architecture(str(name_or_path), config, directory)
    if config.do_lower_case is None:
        config = config.replace(do_lower_case=_casing_from_tokenizer_config(directory))
    if config_overrides:
        config = config.replace(**config_overrides)
    model = model_cls(config)
    model.load_report = load_state_into(model, read_state_dict(weights), str(name_or_path))
    vocab = directory / "vocab.txt"
    model.vocab_file = str(vocab) if vocab.is_file() else None
    model.eval()
    return model


def _casing_from_tokenizer_config(directory: Path) -> bool | None:
    import json

    path = directory / "tokenizer_config.json"
    if path.is_file():
        try:
            value = json.loads(path.read_text(encoding="utf-8")).get("do_lower_case")
        except json.JSONDecodeError:
            return None
        return bool(value) if value is not None else None
    return None


def save_state_dict(state: dict[str, torch.Tensor], config: BertConfig, out_dir: str | os.PathLike,
                    vocab_file: str | os.PathLike | None = None) -> None:
    """Write config.json + model.safetensors (+ vocab.txt) into an existing directory.

    Tied tensors are written once: safetensors refuses shared storage, and loaders re-tie them.
    """
    out = Path(out_dir)
    tensors = {k: v.detach().contiguous().cpu() for k, v in state.items() if k not in _TIED}
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    # safetensors creates the file 0600 whatever the umask: a model readable by its owner only, beside a
    # config.json and vocab.txt everyone could read. It gets the mode of any file the user writes.
    (out / "model.safetensors").chmod(0o666 & ~storage.current_umask())
    config.save(out / "config.json")
    if vocab_file is not None:
        shutil.copyfile(vocab_file, out / "vocab.txt")


def save_pretrained(model: torch.nn.Module, out_dir: str, vocab_file: str | None = None,
                    overwrite: bool = True) -> None:
    """Save a model directory atomically (local path or s3:// URI)."""
    vocab = vocab_file or getattr(model, "vocab_file", None)
    with storage.atomic_output_dir(out_dir, overwrite=overwrite) as tmp:
        save_state_dict(model.state_dict(), model.config, tmp, vocab)

"""BERT architecture configuration, read from and written to HF `config.json` or Google `bert_config.json`."""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bert_core.errors import BertPipelineError

ACTIVATIONS = ("gelu", "gelu_new", "gelu_pytorch_tanh", "relu", "silu", "swish", "tanh")

# Keys HF writes that say nothing about a BERT encoder's numerics; accepted and dropped.
_IGNORED_KEYS = {
    "architectures", "model_type", "transformers_version", "gradient_checkpointing", "use_cache",
    "torch_dtype", "dtype", "output_past", "directionality", "pooler_fc_size", "pooler_num_attention_heads",
    "pooler_num_fc_layers", "pooler_size_per_head", "pooler_type", "bos_token_id", "eos_token_id",
    "_name_or_path", "return_dict", "output_hidden_states", "output_attentions", "tie_word_embeddings",
    "chunk_size_feed_forward", "add_cross_attention", "tokenizer_class", "finetuning_task",
}


@dataclass
class BertConfig:
    """The BERT encoder's shape and regularisation; field names are those of both HF and Google configs."""

    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    initializer_range: float = 0.02
    # Google's code hard-codes 1e-12; HF stores it.
    layer_norm_eps: float = 1e-12
    pad_token_id: int = 0
    # Task heads.
    num_labels: int = 2
    problem_type: str | None = None  # "regression" | "single_label_classification" | None (inferred)
    classifier_dropout: float | None = None
    id2label: dict[int, str] | None = None
    # Tokenizer casing travels with the model so a model dir is self-describing.
    do_lower_case: bool | None = None
    extra: dict[str, Any] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        def need(cond: bool, msg: str) -> None:
            if not cond:
                raise BertPipelineError(f"invalid BERT config: {msg}")

        for name in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                     "intermediate_size", "max_position_embeddings", "type_vocab_size", "num_labels"):
            value = getattr(self, name)
            need(isinstance(value, int) and not isinstance(value, bool) and value > 0,
                 f"{name} must be a positive integer, got {value!r}")
        need(self.hidden_size % self.num_attention_heads == 0,
             f"hidden_size ({self.hidden_size}) must be a multiple of num_attention_heads "
             f"({self.num_attention_heads})")
        need(self.hidden_act in ACTIVATIONS, f"hidden_act {self.hidden_act!r} is not one of {ACTIVATIONS}")
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
            value = getattr(self, name)
            need(0.0 <= value < 1.0, f"{name} must be in [0, 1), got {value!r}")
        need(self.problem_type in (None, "regression", "single_label_classification",
                                   "multi_label_classification"),
             f"problem_type {self.problem_type!r} is not supported")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "<dict>") -> BertConfig:
        data = dict(data)
        if data.get("model_type", "bert") not in ("bert",):
            raise BertPipelineError(f"{source}: model_type {data['model_type']!r} is not a BERT model")
        if data.get("position_embedding_type", "absolute") != "absolute":
            raise BertPipelineError(
                f"{source}: position_embedding_type {data['position_embedding_type']!r} is not supported "
                "(only BERT's absolute position embeddings)")
        if data.get("is_decoder"):
            raise BertPipelineError(f"{source}: is_decoder=true is not supported (BERT is an encoder)")
        data.pop("position_embedding_type", None)
        data.pop("is_decoder", None)
        known = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        kwargs = {k: v for k, v in data.items() if k in known}
        extra = {k: v for k, v in data.items() if k not in known and k not in _IGNORED_KEYS
                 and k not in ("label2id",)}
        if kwargs.get("id2label") is not None:
            kwargs["id2label"] = {int(k): str(v) for k, v in kwargs["id2label"].items()}
            # HF writes num_labels only implicitly, through id2label.
            kwargs.setdefault("num_labels", len(kwargs["id2label"]))
        missing = [k for k in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads")
                   if k not in kwargs]
        if missing:
            raise BertPipelineError(f"{source}: not a BERT config, missing field(s) {', '.join(missing)}")
        try:
            return cls(**kwargs, extra=extra)
        except BertPipelineError as exc:
            raise BertPipelineError(f"{source}: {exc}") from None
        except TypeError as exc:
            raise BertPipelineError(f"{source}: {exc}") from None

    @classmethod
    def from_json_file(cls, path: str | os.PathLike) -> BertConfig:
        """Read an HF `config.json` or a Google `bert_config.json` (same field names, fewer of them)."""
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise FileNotFoundError(f"{path}: config file not found") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise BertPipelineError(f"{path}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
        if not isinstance(data, dict):
            raise BertPipelineError(f"{path}: expected a JSON object with BERT config fields")
        return cls.from_dict(data, source=str(path))

    def to_dict(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "extra"}
        data.update(self.extra)
        return data

    def to_hf_dict(self) -> dict[str, Any]:
        """The HF `config.json` layout: loadable by transformers' BertConfig as well as ours."""
        data = self.to_dict()
        for key in ("id2label", "problem_type", "classifier_dropout", "do_lower_case"):
            if data[key] is None:
                del data[key]
        if self.id2label is not None:
            data["id2label"] = {str(k): v for k, v in self.id2label.items()}
            data["label2id"] = {v: k for k, v in self.id2label.items()}
        data["model_type"] = "bert"
        data["position_embedding_type"] = "absolute"
        return data

    def to_google_dict(self) -> dict[str, Any]:
        keys = ("attention_probs_dropout_prob", "hidden_act", "hidden_dropout_prob", "hidden_size",
                "initializer_range", "intermediate_size", "max_position_embeddings", "num_attention_heads",
                "num_hidden_layers", "type_vocab_size", "vocab_size")
        return {k: getattr(self, k) for k in keys}

    def save(self, path: str | os.PathLike, google_format: bool = False) -> None:
        data = self.to_google_dict() if google_format else self.to_hf_dict()
        Path(path).write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")

    def replace(self, **overrides: Any) -> BertConfig:
        known = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise BertPipelineError(f"unknown config field(s): {', '.join(unknown)}; "
                                    f"known: {', '.join(sorted(known - {'extra'}))}")
        if "id2label" in overrides and overrides["id2label"] is not None and "num_labels" not in overrides:
            overrides["num_labels"] = len(overrides["id2label"])
        return dataclasses.replace(self, **overrides)

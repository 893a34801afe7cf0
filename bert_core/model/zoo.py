"""The model zoo: names people use for BERT models -> architecture, casing, vocab, and where weights live.

GluonNLP names a model by architecture (`bert_12_768_12`: layers_hidden_heads) and pretraining
dataset (`book_corpus_wiki_en_uncased`, ...); HF/Google users know aliases (`bert-base-uncased`).
Both resolve to one `ZooEntry`. There is no download: weights are read from the model store
(`BERT_MODEL_STORE`, a local directory or s3:// prefix), one directory per model named by its alias.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from bert_core.errors import BertPipelineError, ModelNotFoundError
from bert_core.io import storage
from bert_core.model.config import BertConfig

ARCHITECTURES = {
    "bert_12_768_12": dict(num_hidden_layers=12, hidden_size=768, num_attention_heads=12, intermediate_size=3072),
    "bert_24_1024_16": dict(num_hidden_layers=24, hidden_size=1024, num_attention_heads=16, intermediate_size=4096),
}

# dataset -> (vocab size, lower-cased, the Google release the vocab comes from)
DATASETS = {
    "book_corpus_wiki_en_uncased": (30522, True, "uncased_L-12_H-768_A-12"),
    "book_corpus_wiki_en_cased": (28996, False, "cased_L-12_H-768_A-12"),
    "wiki_multilingual_uncased": (105879, True, "multilingual_L-12_H-768_A-12"),
    "wiki_multilingual_cased": (119547, False, "multi_cased_L-12_H-768_A-12"),
    "wiki_cn_cased": (21128, False, "chinese_L-12_H-768_A-12"),
}

# alias -> (architecture, dataset). Only combinations Google released exist.
ALIASES = {
    "bert-base-uncased": ("bert_12_768_12", "book_corpus_wiki_en_uncased"),
    "bert-base-cased": ("bert_12_768_12", "book_corpus_wiki_en_cased"),
    "bert-large-uncased": ("bert_24_1024_16", "book_corpus_wiki_en_uncased"),
    "bert-large-cased": ("bert_24_1024_16", "book_corpus_wiki_en_cased"),
    "bert-base-multilingual-uncased": ("bert_12_768_12", "wiki_multilingual_uncased"),
    "bert-base-multilingual-cased": ("bert_12_768_12", "wiki_multilingual_cased"),
    "bert-base-chinese": ("bert_12_768_12", "wiki_cn_cased"),
}

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
CONFIG_FILES = ("config.json", "bert_config.json")

_GENERIC_ARCH = re.compile(r"^bert_(\d+)_(\d+)_(\d+)$")


@dataclass(frozen=True)
class ZooEntry:
    name: str  # the alias; also the model's directory name in the store
    architecture: str
    dataset: str
    vocab_size: int
    do_lower_case: bool
    google_release: str

    def config(self) -> BertConfig:
        return BertConfig(vocab_size=self.vocab_size, do_lower_case=self.do_lower_case,
                          **ARCHITECTURES[self.architecture])


def model_store() -> str:
    return os.environ.get("BERT_MODEL_STORE", str(Path.home() / ".bert-pipeline" / "models"))


def entries() -> list[ZooEntry]:
    out = []
    for alias, (arch, dataset) in ALIASES.items():
        vocab, lower, release = DATASETS[dataset]
        out.append(ZooEntry(alias, arch, dataset, vocab, lower, release))
    return out


def lookup(name: str) -> ZooEntry | None:
    """Resolve an alias, `ARCH_DATASET` or `ARCH/DATASET`; None when the name is not a zoo name."""
    key = name.strip()
    if key in ALIASES:
        arch, dataset = ALIASES[key]
    else:
        match = re.match(r"^(bert_\d+_\d+_\d+)[_/:](.+)$", key)
        if not match or match.group(2) not in DATASETS:
            return None
        arch, dataset = match.groups()
        if arch not in ARCHITECTURES:
            return None
        if (arch, dataset) not in ALIASES.values():
            valid = ", ".join(f"{a}_{d}" for a, d in ALIASES.values())
            raise BertPipelineError(f"{name}: Google released no {arch} model on {dataset}; released: {valid}")
    for entry in entries():
        if (entry.architecture, entry.dataset) == (arch, dataset):
            return entry
    return None


def architecture_config(name: str) -> BertConfig:
    """A config to train from scratch: a zoo name, or any `bert_LAYERS_HIDDEN_HEADS` (uncased English vocab)."""
    entry = lookup(name)
    if entry is not None:
        return entry.config()
    if name in ARCHITECTURES:
        return BertConfig(**ARCHITECTURES[name], do_lower_case=True)
    match = _GENERIC_ARCH.match(name)
    if match:
        layers, hidden, heads = map(int, match.groups())
        return BertConfig(num_hidden_layers=layers, hidden_size=hidden, num_attention_heads=heads,
                          intermediate_size=4 * hidden, do_lower_case=True)
    raise BertPipelineError(unknown_model_message(name))


def unknown_model_message(name: str) -> str:
    return (f"unknown model {name!r}: not a directory and not a zoo name. Zoo names: "
            f"{', '.join(ALIASES)}; architectures: {', '.join(ARCHITECTURES)} (or bert_LAYERS_HIDDEN_HEADS), "
            f"optionally with a dataset ({', '.join(DATASETS)}), e.g. bert_12_768_12_wiki_cn_cased")


def model_location(entry: ZooEntry) -> str:
    return storage.join(model_store(), entry.name)


def resolve_pretrained(entry: ZooEntry) -> str:
    """Where the entry's files are; a ModelNotFoundError saying exactly what to put where otherwise."""
    where = model_location(entry)
    if storage.exists(where):
        present = set(storage.list_files(where))
        if present & set(CONFIG_FILES) and present & set(WEIGHT_FILES):
            return where
    raise ModelNotFoundError(
        f"model {entry.name!r} ({entry.architecture}, {entry.dataset}) is not in the model store: put "
        f"config.json (or Google's bert_config.json), model.safetensors (or pytorch_model.bin) and vocab.txt "
        f"in {where}/ — e.g. convert Google's {entry.google_release} release with `bert-pipeline "
        f"convert-tf-checkpoint CKPT_PREFIX bert_config.json {where}` — or point BERT_MODEL_STORE "
        f"(now {model_store()}) at a store that has it. Nothing is downloaded from the network.")

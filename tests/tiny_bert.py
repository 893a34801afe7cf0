"""A tiny random BERT model directory (2 layers, hidden 32) with the real uncased vocab: fine-tuning tests
that check plumbing rather than learning run on it in a fraction of MiniLM's time."""

from __future__ import annotations

from pathlib import Path

import torch

from tests.paths import FIXTURES

VOCAB = FIXTURES / "vocab" / "uncased_L-12_H-768_A-12.vocab.txt"


def write_tiny_bert(out_dir: Path, dropout: float = 0.0, seed: int = 0) -> Path:
    """config.json + model.safetensors + vocab.txt; dropout off by default, so runs are deterministic."""
    from bert_core.model.config import BertConfig
    from bert_core.model.modeling import BertForPreTraining

    config = BertConfig(vocab_size=sum(1 for _ in VOCAB.open(encoding="utf-8")), hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=64, max_position_embeddings=128,
                        hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout)
    torch.manual_seed(seed)
    BertForPreTraining(config).save_pretrained(str(out_dir), vocab_file=str(VOCAB))
    return out_dir

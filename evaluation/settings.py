"""Defaults of the judgments, each written once: the throughput benchmark's run and the nightly's settings.

`python -m evaluation.model_throughput` takes its flags' defaults from `ThroughputRun`; the
`bert_nightly_regression` DAG's Params and operators.nightly take theirs from `NIGHTLY`. Torch-free, so a DAG
file can read it when Airflow parses it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from evaluation.regression import Tolerances


@dataclass(frozen=True)
class ThroughputRun:
    """One run of the throughput benchmark (evaluation.model_throughput): which architectures, how measured.

    configs: zoo architecture names, `bert_LAYERS_HIDDEN_HEADS` (bert_6_384_12 is MiniLM's size,
    bert_12_768_12 BERT-base's). Real lengths in a batch are uniform in
    [max_seq_length / 4, max_seq_length].
    device None: cuda when available, else cpu. threads 0: torch's default.
    """

    configs: tuple[str, ...] = ("bert_6_384_12", "bert_12_768_12")
    modes: tuple[str, ...] = ("train", "infer")
    batch_size: int = 16
    max_seq_length: int = 128
    steps: int = 6
    warmup: int = 2
    device: str | None = None
    dtype: str = "float32"
    threads: int = 0


@dataclass(frozen=True)
class NightlyDefaults:
    """What `bert_nightly_regression` runs when its Params are left alone: the tolerances of the regression
    judgment, and a small throughput run (MiniLM's size only, one warm-up step) that fits a night's budget."""

    tolerances: Tolerances = field(default_factory=Tolerances)
    throughput: ThroughputRun = field(default_factory=lambda: ThroughputRun(configs=("bert_6_384_12",), warmup=1))


NIGHTLY = NightlyDefaults()

"""Defaults of the judgments, each written once: the benchmarks' runs and the nightly's settings.

`python -m evaluation.model_throughput`, `evaluation.pretrain_throughput` and `evaluation.pretrain_convergence`
take their flags' defaults from `ThroughputRun`, `PretrainThroughputRun` and `ConvergenceRun`; the
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
class PretrainThroughputRun:
    """One run of the pretraining-step benchmark (evaluation.pretrain_throughput): our MLM+NSP step against
    transformers' BertForPreTraining, interleaved step by step. Batches: `batch_size` sequences, 90% of them
    `max_seq_length` long, 15% of the tokens masked, at most `max_predictions` per sequence. dtype: both
    systems' autocast (auto: the device's, as `pretrain --dtype auto` resolves it). threads 0: torch's default.
    repeats: runs of each config one after another, each with a fresh pair of models; on a shared 2-core CPU one
    run's ratio can differ from the next's by 20% (docs/benchmarks-pretrain.md), so a claim rests on the median
    of several."""

    configs: tuple[str, ...] = ("bert_4_256_4", "bert_6_384_12")
    batch_size: int = 16
    max_seq_length: int = 128
    max_predictions: int = 20
    steps: int = 6
    warmup: int = 2
    dtype: str = "auto"
    threads: int = 0
    repeats: int = 1


@dataclass(frozen=True)
class ConvergenceRun:
    """One model size of the time-to-accuracy benchmark (evaluation.pretrain_convergence): ours from scratch on its
    defaults against transformers' BertForPreTraining at the best learning rate of `peer_lrs`, on the same shards,
    batches, steps and held-out documents, each system in `dtype` (auto: the device's) on `threads` torch threads.

    The corpus is segmented and sharded at `max_seq_length` with `max_predictions` masked positions, `dupe_factor`
    masking passes, `holdout_fraction` of the documents held out; every `eval_every` steps both are scored on
    `eval_batches` held-out batches. `seeds`: ours runs once per seed; `peer_seeds` (empty: the same): the peer's
    lr grid runs at the first, its best lr at every one. `device`: cpu, or cuda (both systems on the current GPU)."""

    config: str = "bert_2_128_2"
    steps: int = 800
    batch_size: int = 32
    max_seq_length: int = 64
    max_predictions: int = 10
    dupe_factor: int = 5
    holdout_fraction: float = 0.1
    eval_every: int = 100
    eval_batches: int = 20
    peer_lrs: tuple[float, ...] = (1e-3, 2e-3, 4e-3)
    seeds: tuple[int, ...] = (0,)
    peer_seeds: tuple[int, ...] = ()
    dtype: str = "auto"
    threads: int = 1
    device: str = "cpu"


@dataclass(frozen=True)
class NightlyDefaults:
    """What `bert_nightly_regression` runs when its Params are left alone: the tolerances of the regression
    judgment, and speed runs that fit a night's budget on 2 CPU cores: the fine-tuning throughput at MiniLM's
    size (one warm-up step), the pretraining step at BERT-base size (seq 128, 20 masked positions), and the time
    to accuracy at the small size (L2/H128, 400 steps, the peer at 2e-3, its best of the benchmark's grid).
    The speed ratios are judged against their median over the last `speed_reference_nights` good nights
    (evaluation.regression.median_reference); quality against the last good night."""

    tolerances: Tolerances = field(default_factory=Tolerances)
    speed_reference_nights: int = 5
    throughput: ThroughputRun = field(default_factory=lambda: ThroughputRun(configs=("bert_6_384_12",), warmup=1))
    pretrain_throughput: PretrainThroughputRun = field(default_factory=lambda: PretrainThroughputRun(
        configs=("bert_12_768_12",), steps=3, warmup=1))
    convergence: ConvergenceRun = field(default_factory=lambda: ConvergenceRun(steps=400, peer_lrs=(2e-3,)))


NIGHTLY = NightlyDefaults()

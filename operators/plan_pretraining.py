"""bert_pretraining's plan: the whole run resolved and checked in its first task, before any work.

The plan (`PretrainingPlan`, JSON on XCom) holds the inputs, the vocab, every output location and, per phase,
the make-shards and pretrain settings; the later tasks read their piece of it and never look at the conf
again, so what the plan says is what runs.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from operators.locations import default_model_dir, demo_data, run_dir
from operators.params import flags_as_params
from operators.plan_checks import check_file, check_gpu, check_inputs, max_positions

DAG_ID = "bert_pretraining"


@dataclass(frozen=True)
class PhasePlan:
    """One pretraining phase: its shards and its training (each phase after the first starts from the
    previous one's output)."""

    name: str  # "" in a one-phase run, whose outputs keep the one-phase layout
    index: int
    shards: dict[str, Any]  # ShardConfig settings
    pretrain: dict[str, Any]  # PretrainConfig settings; a later phase's `pretrained` is the previous output
    shards_dir: str  # one shard directory per segmented file below it
    heldout_dir: str
    output: str

    def shard_dir(self, segmented_file: str) -> str:
        """Shards of one segmented file: <shards_dir>/<file stem>."""
        return f"{self.shards_dir}/{Path(segmented_file).stem}"


@dataclass(frozen=True)
class PretrainingPlan:
    work_dir: str
    inputs: list[str]
    vocab: str
    segmented: str
    registry: str
    phases: list[PhasePlan]

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PretrainingPlan:
        return cls(**{**data, "phases": [PhasePlan(**phase) for phase in data["phases"]]})


def phase_dir(work: str, phase: str, kind: str) -> str:
    """<work>/<kind> for a one-phase run (the layout of every run before phases), <work>/<kind>/<phase> else."""
    return f"{work}/{kind}/{phase}" if phase else f"{work}/{kind}"


def plan(params: dict[str, Any], run_id: str | None, shard_settings: tuple[str, ...],
         pretrain_settings: tuple[str, ...], declared: tuple[str, ...] = ()) -> PretrainingPlan:
    """The run's inputs, vocab, work dir and phases; their settings checked before any work starts: an
    impossible combination (both model and pretrained, a batch that does not split over the workers, a GPU
    setting without a GPU, no held-out split for the promotion gate) fails this first task, naming the param."""
    from operators.params import check_conf_keys

    if declared:
        check_conf_keys(params, declared, DAG_ID)
    work = run_dir(DAG_ID, params, run_id)
    phases = _phases(params, work, shard_settings, pretrain_settings)
    positions = None  # later phases keep the first phase's model, and its position limit
    for phase in phases:
        where = f"{DAG_ID} params" if not phase.name else f"{DAG_ID} phases[{phase.index}]"
        positions = check_phase(where, phase.shards, phase.pretrain, positions, first=phase.index == 0)
    vocab = params.get("vocab") or str(Path(default_model_dir()) / "vocab.txt")
    inputs = list(params.get("inputs") or [demo_data("corpus")])
    check_inputs(f"{DAG_ID} params", "inputs", inputs)
    check_file(f"{DAG_ID} params", "vocab", vocab)
    return PretrainingPlan(work_dir=work, inputs=inputs, vocab=vocab,
                           segmented=f"{work}/segmented", registry=f"{work}/registry", phases=phases)


def _phases(params: dict[str, Any], work: str, shard_settings: tuple[str, ...],
            pretrain_settings: tuple[str, ...]) -> list[PhasePlan]:
    """params["phases"] is a list of objects, each overriding the form's make-shards and pretrain settings for
    one phase (BERT's recipe: seq 128 for 90% of the steps, then seq 512 with its own shards for the rest);
    each phase after the first starts from the previous phase's weights. None or []: one phase, the form's
    settings. Errors name `phases[i].<key>`."""
    from bert_core.errors import BertPipelineError
    from operators.params import settings_from

    given = params.get("phases") or []
    if not isinstance(given, list) or not all(isinstance(p, dict) for p in given):
        raise BertPipelineError("phases: expected a list of objects, e.g. [{\"max_seq_length\": 128, "
                                "\"num_steps\": 900}, {\"max_seq_length\": 512, \"num_steps\": 100}]")
    allowed = set(shard_settings) | set(pretrain_settings)
    phases: list[PhasePlan] = []
    for index, overrides in enumerate(given or [{}]):
        unknown = sorted(set(overrides) - allowed)
        if unknown:
            raise BertPipelineError(f"phases[{index}].{unknown[0]}: not a make-shards or pretrain setting of this "
                                    f"DAG (known: {', '.join(sorted(allowed))})")
        if index > 0 and ({"model", "pretrained"} & set(overrides)):
            raise BertPipelineError(f"phases[{index}]: a later phase starts from the previous phase's weights; "
                                    "set model/pretrained only on phases[0] or the form")
        merged = {**params, **overrides}
        pretrain = settings_from(merged, pretrain_settings)
        if phases:
            pretrain.pop("model", None)
            pretrain["pretrained"] = phases[-1].output
        name = f"phase{index + 1}" if given else ""
        phases.append(PhasePlan(name=name, index=index, shards=settings_from(merged, shard_settings),
                                pretrain=pretrain, shards_dir=phase_dir(work, name, "shards"),
                                heldout_dir=phase_dir(work, name, "shards-heldout"),
                                output=phase_dir(work, name, "pretrained")))
    return phases


def check_phase(where: str, shard_settings: dict[str, Any], pretrain_settings: dict[str, Any],
                positions: int | None = None, first: bool = True, pretrain_prefix: str = "") -> int | None:
    """Checks one phase's settings as the steps will build their configs; returns the model's position limit
    (`positions`: the previous phase's, for the phases after the first). Errors name the Params (the pretraining
    ones with `pretrain_prefix`, as the demo's form has them)."""
    from bert_core.data.instances import ShardConfig
    from bert_core.errors import BertPipelineError
    from bert_core.io import storage
    from bert_core.pretrain.config import PretrainConfig

    names = {**{f: f for f in shard_settings}, **{f: pretrain_prefix + f for f in pretrain_settings}}
    try:
        shards = ShardConfig(**shard_settings)
        shards.check()
        config = PretrainConfig(data="<shards>", output="<work_dir>/pretrained", **pretrain_settings)
        config.validate()
    except BertPipelineError as exc:
        raise BertPipelineError(f"{where}: {flags_as_params(str(exc), names)}") from None
    if first and config.pretrained:
        positions = max_positions(config.pretrained)
    spec = config.model
    if positions is None and spec and not (spec.endswith(".json") or storage.is_s3(spec)
                                           or storage.local_path(spec).is_file()):
        # A name (not a config file): it must be a zoo or bert_LAYERS_HIDDEN_HEADS name, or pretrain fails later.
        from bert_core.model.zoo import architecture_config

        try:
            positions = architecture_config(spec).max_position_embeddings
        except BertPipelineError as exc:
            raise BertPipelineError(f"{where}: {pretrain_prefix}model: {exc}") from None
    if positions is not None and shards.max_seq_length > positions:
        raise BertPipelineError(f"{where}: max_seq_length {shards.max_seq_length} is longer than the model's "
                                f"{positions} positions")
    if not shards.holdout_fraction > 0:
        raise BertPipelineError(f"{where}: holdout_fraction must be above 0: the promotion gate "
                                "scores the model on held-out documents")
    if config.use_gpu:
        check_gpu(where)
    return positions

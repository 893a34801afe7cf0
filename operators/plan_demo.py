"""bert_demo's plan: the whole demo run resolved and checked in its first task.

The demo runs make-shards, pretrain and fine-tuning in one DAG, so its Params are the library's config fields
with a prefix per step where two steps share a field name (`pretrain_num_workers`, `finetune_num_workers`);
`DemoValues` are the demo's own small values, written once (the DAG's Params and the plan both read them).
The plan (`DemoPlan`, JSON on XCom) holds every location and every step's settings; the later tasks read
their piece of it and never look at the conf again.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from operators.locations import default_model_dir, demo_data, run_dir
from operators.plan_checks import check_file, check_inputs
from operators.plan_finetune import FinetuneTaskPlan, check_task
from operators.plan_pretraining import check_phase

DAG_ID = "bert_demo"
# Param prefixes: the shard settings have none (as in bert_pretraining); SQuAD's own values win over
# fine-tuning's for the squad task.
PRETRAIN, FINETUNE, SQUAD = "pretrain_", "finetune_", "squad_"
# Conf keys the demo shipped (the README documents pretrain_steps) before its Params were generated.
RENAMED = {"pretrain_steps": "pretrain_num_steps", "pretrain_workers": "pretrain_num_workers",
           "finetune_workers": "finetune_num_workers"}
TASKS = {"sst-2": "sst2", "squad": "squad"}  # the fine-tuned tasks and their bundled data


@dataclass(frozen=True)
class DemoValues:
    """The demo's own values per step (field -> value): its Params and their defaults."""

    shards: dict[str, Any]  # ShardConfig fields
    pretrain: dict[str, Any]  # PretrainConfig fields
    finetune: dict[str, Any]  # FinetuneConfig fields, both tasks
    squad: dict[str, Any]  # FinetuneConfig fields, SQuAD's own
    pretrain_also: tuple[str, ...] = ()  # PretrainConfig fields in the form at the library's defaults

    @property
    def pretrain_fields(self) -> tuple[str, ...]:
        """The pretraining Params, in form order: the demo's values, then the library defaults it offers."""
        return (*self.pretrain, *self.pretrain_also)


@dataclass(frozen=True)
class DemoPlan:
    work_dir: str
    corpus: str
    vocab: str
    segmented: str
    shards: dict[str, Any]  # ShardConfig settings, both sides of the held-out split
    shards_dir: str
    heldout_dir: str
    pretrain: dict[str, Any]  # PretrainConfig settings
    pretrained: str
    registry: str
    summary: str
    finetune: dict[str, FinetuneTaskPlan]  # task -> its plan

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> DemoPlan:
        return cls(**{**data, "finetune": {task: FinetuneTaskPlan.from_json(spec)
                                           for task, spec in data["finetune"].items()}})


def plan(params: dict[str, Any], run_id: str | None, values: DemoValues, declared: tuple[str, ...] = (),
         defaults: dict[str, Any] | None = None) -> DemoPlan:
    """The demo run's locations (empty params: the bundled data and the MiniLM model) and every step's
    settings, checked as the steps will build their configs; conf keys not among `declared` (the DAG's
    Params) are an error, the deprecated names (RENAMED) a warning."""
    from bert_core.io import storage
    from operators.params import check_conf_keys, former_conf_keys, renamed_params, settings_from

    params = renamed_params(params, RENAMED, defaults or {}, DAG_ID)
    if declared:
        check_conf_keys(params, (*declared, *former_conf_keys(DAG_ID)), DAG_ID)
    work = run_dir(DAG_ID, params, run_id)
    model = params.get("model") or default_model_dir()
    shards = settings_from(params, tuple(values.shards))
    pretrain = settings_from(params, values.pretrain_fields, PRETRAIN)
    check_phase(f"{DAG_ID} params", shards, pretrain, pretrain_prefix=PRETRAIN)
    corpus = params.get("corpus") or demo_data("corpus")
    check_inputs(f"{DAG_ID} params", "corpus", [corpus])
    vocab = params.get("vocab") or storage.join(model, "vocab.txt")
    check_file(f"{DAG_ID} params", "vocab", vocab)
    finetune = settings_from(params, tuple(values.finetune), FINETUNE)
    own = {"squad": settings_from(params, tuple(values.squad), SQUAD)}
    tasks = {}
    for task, data in TASKS.items():
        tasks[task] = FinetuneTaskPlan(task=task, data_dir=demo_data(data), model=model,
                                       output=f"{work}/finetune-{task}", evaluation=f"{work}/evaluate-{task}",
                                       registry=f"{work}/registry", settings={**finetune, **own.get(task, {})})
        check_task(tasks[task], {**{f: FINETUNE + f for f in finetune}, **{f: SQUAD + f for f in own.get(task, {})}})
    return DemoPlan(work_dir=work, corpus=corpus, vocab=vocab, segmented=f"{work}/segmented",
                    shards=shards, shards_dir=f"{work}/shards", heldout_dir=f"{work}/shards-heldout",
                    pretrain=pretrain, pretrained=f"{work}/pretrained", registry=f"{work}/registry",
                    summary=f"{work}/demo_summary.json", finetune=tasks)

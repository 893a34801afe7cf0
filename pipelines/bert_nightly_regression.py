"""bert_nightly_regression: every night, the pinned benchmark suite over the model registry.

plan (champion + newest candidate of each registered task model) -> evaluate each on the pinned dev data
(mapped) and run the throughput benchmark -> compare with the last good night and with the champions ->
Markdown report + plots logged to MLflow (experiment `bert-nightly`); the run fails on a regression.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import Param, dag

from bert_core.options import Form
from evaluation.settings import NIGHTLY
from operators import locations, nightly
from operators.airflow_tasks import bert_task
from operators.params import NIGHTLY_MODELS, THROUGHPUT, TOLERANCES, in_sections, renamed_params, section

PARAMS = in_sections({
    "models": Param([], type="array", description="Registered models to benchmark (e.g. bert-sst-2); empty: every "
                    "registered task model that has pinned data and a champion.", section=section(NIGHTLY_MODELS)),
    "data": Param({}, type="object", description="Task -> pinned dev data directory (local or s3://); empty: the "
                  "bundled demo data (sst-2, squad). Its files' sha256 are recorded each night.",
                  section=section(NIGHTLY_MODELS)),
    "work_dir": Param(None, type=["null", "string"], description="Where the night's outputs go; empty: "
                      "$BERT_PIPELINE_HOME/nightly/<run id>.", section=section(Form.STORAGE)),
    "quality_tolerance": Param(NIGHTLY.tolerances.quality, type="number", minimum=0, description="Relative drop "
                               "of a dev metric that counts as a regression (0.01 = 1% of the reference value).",
                               section=section(TOLERANCES)),
    "throughput_tolerance": Param(NIGHTLY.tolerances.throughput, type="number", minimum=0, description="Relative "
                                  "drop of the ours/transformers throughput ratio that counts as a regression.",
                                  section=section(TOLERANCES)),
    "throughput_configs": Param(list(NIGHTLY.throughput.configs), type="array", description="Architectures for "
                                "the throughput benchmark, as zoo names bert_LAYERS_HIDDEN_HEADS (bert_6_384_12: "
                                "MiniLM's size; bert_12_768_12: BERT-base); empty: skip.",
                                section=section(THROUGHPUT)),
    "throughput_steps": Param(NIGHTLY.throughput.steps, type="integer", minimum=1,
                              description="Measured steps per model and mode.", section=section(THROUGHPUT)),
    "throughput_batch_size": Param(NIGHTLY.throughput.batch_size, type="integer", minimum=1,
                                   description="Sequences per benchmark batch.", section=section(THROUGHPUT)),
    "throughput_max_seq_length": Param(NIGHTLY.throughput.max_seq_length, type="integer", minimum=8,
                                       description="Padded benchmark sequence length (`throughput_seq_len`, its "
                                                   "former name, is still accepted in a conf, with a warning).",
                                       section=section(THROUGHPUT)),
})
# Conf keys the form shipped under another name: still accepted, with a warning.
RENAMED = {"throughput_seq_len": "throughput_max_seq_length"}


@dag(dag_id="bert_nightly_regression", schedule="@daily", start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
     catchup=False, max_active_runs=1, params=PARAMS, tags=["bert", "nightly"], doc_md=__doc__)
def bert_nightly_regression():
    @bert_task
    def work_dir(params=None, run_id=None) -> str:
        return locations.run_dir("bert_nightly_regression", params, run_id)

    @bert_task
    def plan(params=None) -> list[dict]:
        return nightly.plan(params)

    @bert_task
    def evaluate(spec: dict, work_dir: str) -> dict:
        return nightly.evaluate_version(spec, work_dir)

    @bert_task
    def throughput(work_dir: str, params=None) -> dict:
        params = renamed_params(params, RENAMED, {name: param.value for name, param in PARAMS.items()},
                                "bert_nightly_regression")
        if not params["throughput_configs"]:
            return {}
        return nightly.throughput(work_dir, list(params["throughput_configs"]), params["throughput_steps"],
                                  params["throughput_batch_size"], params["throughput_max_seq_length"])

    # none_failed: a registry with no benchmarked model maps `evaluate` to nothing (skipped); the night still
    # reports the throughput comparison.
    @bert_task(trigger_rule="none_failed")
    def compare_and_report(evaluated: list[dict], speed: dict, work_dir: str, params=None) -> dict:
        return nightly.compare_and_report(list(evaluated), speed, work_dir, params["quality_tolerance"],
                                          params["throughput_tolerance"])

    work = work_dir()
    evaluated = evaluate.partial(work_dir=work).expand(spec=plan())
    compare_and_report(evaluated, throughput(work), work)


bert_nightly_regression()

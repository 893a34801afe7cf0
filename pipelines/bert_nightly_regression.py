"""bert_nightly_regression: every night, the pinned benchmark suite over the model registry.

plan (champion + newest candidate of each registered task model) -> evaluate each on the pinned dev data
(mapped), run the fine-tuning throughput benchmark, and the pretraining speed benchmarks (the step at BERT-base
size; the time to the peer's held-out accuracy at the small size) -> compare with the last good night (the
speed ratios with their median over the last few) and with the champions -> Markdown report + plots logged to
MLflow (experiment `bert-nightly`); the run fails on a regression.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import Param, dag

from bert_core.options import Form
from evaluation.settings import NIGHTLY
from operators import locations, nightly
from operators.airflow_tasks import bert_task
from operators.params import (
    NIGHTLY_MODELS,
    THROUGHPUT,
    TIME_TO_ACCURACY,
    TOLERANCES,
    check_conf_keys,
    former_conf_keys,
    in_sections,
    renamed_params,
    section,
)

PARAMS = in_sections({
    # Nullable, so that the form does not mark them required: empty means all of them.
    "models": Param([], type=["null", "array"], description="Registered models to benchmark (e.g. bert-sst-2); "
                    "empty: every registered task model that has pinned data and a champion.",
                    section=section(NIGHTLY_MODELS)),
    "data": Param({}, type=["null", "object"], description="Task -> pinned dev data directory (local or s3://); "
                  "empty: the bundled demo data (sst-2, squad). Its files' sha256 are recorded each night.",
                  section=section(NIGHTLY_MODELS)),
    "work_dir": Param(None, type=["null", "string"], description="Where the night's outputs go; empty: "
                      "$BERT_PIPELINE_HOME/nightly/<run id>.", section=section(Form.STORAGE)),
    "quality_tolerance": Param(NIGHTLY.tolerances.quality, type="number", minimum=0, description="Relative drop "
                               "of a dev metric that counts as a regression (0.01 = 1% of the reference value).",
                               section=section(TOLERANCES)),
    "throughput_tolerance": Param(NIGHTLY.tolerances.throughput, type="number", minimum=0, description="Relative "
                                  "drop of the ours/transformers throughput ratio that counts as a regression.",
                                  section=section(TOLERANCES)),
    "speed_reference_nights": Param(NIGHTLY.speed_reference_nights, type="integer", minimum=1,
                                    description="The speed ratios are compared with their median over this many "
                                                "last good nights (one night's ratio moves with the machine's "
                                                "load); quality with the last good night.",
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
    "time_to_accuracy_tolerance": Param(NIGHTLY.tolerances.time_to_accuracy, type="number", minimum=0,
                                        description="Relative drop of the time-to-accuracy ratio that counts as a "
                                                    "regression.", section=section(TOLERANCES)),
    "pretrain_step_configs": Param(list(NIGHTLY.pretrain_throughput.configs), type="array", description="Architectures "
                                   "for the pretraining-step benchmark (evaluation.pretrain_throughput: our MLM+NSP "
                                   "step against transformers' BertForPreTraining, each in its best precision here); "
                                   "empty: skip.", section=section(THROUGHPUT)),
    "pretrain_step_steps": Param(NIGHTLY.pretrain_throughput.steps, type="integer", minimum=1,
                                 description="Measured pretraining steps per model.",
                                 section=section(THROUGHPUT)),
    "pretrain_step_batch_size": Param(NIGHTLY.pretrain_throughput.batch_size, type="integer", minimum=1,
                                      description="Sequences per pretraining-step batch.",
                                      section=section(THROUGHPUT)),
    "pretrain_step_max_seq_length": Param(NIGHTLY.pretrain_throughput.max_seq_length, type="integer", minimum=8,
                                          description="Pretraining-step sequence length (90% of sequences fill it).",
                                          section=section(THROUGHPUT)),
    "pretrain_step_max_predictions": Param(NIGHTLY.pretrain_throughput.max_predictions, type="integer", minimum=1,
                                           description="Masked positions per sequence of the pretraining step.",
                                           section=section(THROUGHPUT)),
    "convergence_config": Param(NIGHTLY.convergence.config, type=["null", "string"], description="Architecture "
                                "for the time-to-accuracy benchmark (evaluation.pretrain_convergence: ours from "
                                "scratch on its defaults against transformers at its best lr of "
                                "convergence_peer_lrs, to the peer's final held-out masked-LM accuracy); empty: skip.",
                                    section=section(TIME_TO_ACCURACY)),
    "convergence_corpus": Param(None, type=["null", "string"], description="Raw text for the time-to-accuracy "
                                "benchmark (file or directory, documents separated by blank lines; a tenth held out "
                                "by document); empty: the bundled demo corpus (tiny: a smoke figure; pin a real "
                                "corpus, e.g. WikiText-2, for a meaningful one).",
                                    section=section(TIME_TO_ACCURACY)),
    "convergence_vocab": Param(None, type=["null", "string"], description="vocab.txt for its shards and models; "
                               "empty: the default model's (MiniLM's uncased vocabulary).",
                                   section=section(TIME_TO_ACCURACY)),
    "convergence_steps": Param(NIGHTLY.convergence.steps, type="integer", minimum=1,
                               description="Optimizer steps of each time-to-accuracy run.",
                               section=section(TIME_TO_ACCURACY)),
    "convergence_batch_size": Param(NIGHTLY.convergence.batch_size, type="integer", minimum=1,
                                    description="Sequences per time-to-accuracy step.",
                                    section=section(TIME_TO_ACCURACY)),
    "convergence_max_seq_length": Param(NIGHTLY.convergence.max_seq_length, type="integer", minimum=8,
                                        description="Shard sequence length of the time-to-accuracy runs.",
                                        section=section(TIME_TO_ACCURACY)),
    "convergence_max_predictions": Param(NIGHTLY.convergence.max_predictions, type="integer", minimum=1,
                                         description="Masked positions per sequence of the time-to-accuracy runs.",
                                         section=section(TIME_TO_ACCURACY)),
    "convergence_dupe_factor": Param(NIGHTLY.convergence.dupe_factor, type="integer", minimum=1,
                                     description="Masking passes over the time-to-accuracy training documents.",
                                     section=section(TIME_TO_ACCURACY)),
    "convergence_eval_every": Param(NIGHTLY.convergence.eval_every, type="integer", minimum=1,
                                    description="Held-out evaluation every N steps (the curve the time is read from).",
                                    section=section(TIME_TO_ACCURACY)),
    "convergence_eval_batches": Param(NIGHTLY.convergence.eval_batches, type="integer", minimum=0,
                                      description="Held-out batches per evaluation (0: all).",
                                      section=section(TIME_TO_ACCURACY)),
    "convergence_peer_lrs": Param(list(NIGHTLY.convergence.peer_lrs), type="array", description="Learning rates "
                                  "of the transformers peer (its best is compared).",
                                      section=section(TIME_TO_ACCURACY)),
})
# The convergence_* Params that are evaluation.settings.ConvergenceRun fields (the others pick its data).
CONVERGENCE_FIELDS = ("steps", "batch_size", "max_seq_length", "max_predictions", "dupe_factor", "eval_every",
                      "eval_batches", "peer_lrs")


@dag(dag_id="bert_nightly_regression", schedule="@daily", start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
     catchup=False, max_active_runs=1, params=PARAMS, tags=["bert", "nightly"], doc_md=__doc__)
def bert_nightly_regression():
    # The first task checks the conf, as the other DAGs' `plan` does: a misspelt tolerance would otherwise be
    # ignored and the night judged on the default; and its values, which the speed tasks would otherwise refuse
    # only after minutes of benchmarks.
    @bert_task
    def work_dir(params=None, run_id=None) -> str:
        check_conf_keys(params, (*PARAMS, *former_conf_keys("bert_nightly_regression")), "bert_nightly_regression")
        nightly.check_conf(params)
        return locations.run_dir("bert_nightly_regression", params, run_id)

    @bert_task
    def plan(params=None) -> list[dict]:
        return nightly.plan(params)

    @bert_task
    def evaluate(spec: dict, work_dir: str) -> dict:
        return nightly.evaluate_version(spec, work_dir)

    @bert_task
    def throughput(work_dir: str, params=None) -> dict:
        params = renamed_params(params, nightly.RENAMED, {name: param.value for name, param in PARAMS.items()},
                                "bert_nightly_regression")
        if not params["throughput_configs"]:
            return {}
        return nightly.throughput(work_dir, list(params["throughput_configs"]), params["throughput_steps"],
                                  params["throughput_batch_size"], params["throughput_max_seq_length"])

    @bert_task
    def pretrain_speed(work_dir: str, params=None) -> dict:
        speed = {}
        if params["pretrain_step_configs"]:
            speed.update(nightly.pretrain_step_speed(
                work_dir, list(params["pretrain_step_configs"]), params["pretrain_step_steps"],
                params["pretrain_step_batch_size"], params["pretrain_step_max_seq_length"],
                params["pretrain_step_max_predictions"]))
        if params["convergence_config"]:
            settings = {"config": params["convergence_config"],
                        **{name: params[f"convergence_{name}"] for name in CONVERGENCE_FIELDS}}
            speed.update(nightly.time_to_accuracy(work_dir, settings, params["convergence_corpus"],
                                                  params["convergence_vocab"]))
        return speed

    # none_failed: a registry with no benchmarked model maps `evaluate` to nothing (skipped); the night still
    # reports the speed comparisons.
    @bert_task(trigger_rule="none_failed")
    def compare_and_report(evaluated: list[dict], speed: dict, pretraining: dict, work_dir: str, params=None) -> dict:
        params = renamed_params(params, nightly.RENAMED, {name: param.value for name, param in PARAMS.items()},
                                "bert_nightly_regression")
        # How each speed figure was measured: a night measured otherwise is no reference for it.
        settings = {"throughput": {k: params[f"throughput_{k}"] for k in ("steps", "batch_size", "max_seq_length")},
                    "pretrain_step": {k: params[f"pretrain_step_{k}"]
                                      for k in ("steps", "batch_size", "max_seq_length", "max_predictions")},
                    "time_to_accuracy": {k: params[f"convergence_{k}"]
                                         for k in (*CONVERGENCE_FIELDS, "corpus", "vocab")}}
        return nightly.compare_and_report(list(evaluated), {**speed, **pretraining}, work_dir,
                                          params["quality_tolerance"], params["throughput_tolerance"],
                                          params["time_to_accuracy_tolerance"], params["speed_reference_nights"],
                                          settings)

    work = work_dir()
    evaluated = evaluate.partial(work_dir=work).expand(spec=plan())
    compare_and_report(evaluated, throughput(work), pretrain_speed(work), work)


bert_nightly_regression()

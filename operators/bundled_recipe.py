"""The settings measured to pretrain a model that learns on the bundled demo corpus (bert_core/demo_data/corpus:
225 generated documents, 15,000 words), shared by the two DAGs that default to that corpus: bert_demo and
bert_pretraining (its `inputs` left empty).

500 steps of bert_2_128_2 at a global batch of 32 on 2 workers, on shards of 64 tokens with 10 masked positions
and 5 masking passes, a tenth of the documents held out: held-out masked-LM accuracy 0.231 / 0.224 / 0.231 / 0.236
over seeds 0-3 (README, 2026-11-27; 53 held-out sequences, 428 masked tokens; always the most frequent masked
token scores 0.136, the promotion floor is 0.186). bert_2_64_2 on it: 0.187-0.206, one seed at the floor; 100
steps of bert_2_128_2 at batch 64 on 128-token shards (bert_pretraining's defaults before 2026-11-28): at chance.
tests/pipelines/test_demo_defaults.py checks the demo's figure clears the floor."""

from __future__ import annotations

SHARDS = {"max_seq_length": 64, "max_predictions_per_seq": 10, "dupe_factor": 5, "holdout_fraction": 0.1}
PRETRAIN = {"model": "bert_2_128_2", "num_workers": 2, "num_steps": 500, "batch_size": 32}

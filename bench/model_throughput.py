"""Training-step and inference throughput of bert_core's BERT against transformers' BertModel.

The documented command; the code is the installed module `bert_pipeline.bench.model_throughput` (the
nightly regression runs it from an installed package, without this checkout). `--help` has the details.

    python bench/model_throughput.py --out-json bench-results/model_throughput.json
"""

from __future__ import annotations

from bert_pipeline.bench.model_throughput import main

if __name__ == "__main__":
    main(command="bench/model_throughput.py")

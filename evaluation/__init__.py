"""What judges models: the nightly regression judgment, re-scoring a registered model, every benchmark.

A layer of its own between operators/ (which calls it from Airflow tasks) and bert_core/ (the library it
measures): `evaluation` imports bert_core and never operators, pipelines or the app.

- regression: what counts as a quality or speed regression (Tolerances), and the nightly's report
- settings: the defaults written once (the throughput run's sizes, the nightly's tolerances and sizes)
- rescore: score a local model directory on pinned dev data (metrics + the data's sha256)
- default_inputs: the benchmarks' default model and shared data sets (a missing one names its flag)
- benchmarks, each run as `python -m evaluation.<name>` (installed or from a checkout; `--help` has the
  details): model_throughput, pretrain_throughput, pretrain_convergence, make_shards, finetune_accuracy,
  serving_latency, embedding_throughput, model_parity (forward and backward against transformers on a
  device: a GPU's kernels are not the CPU's); with their helpers squad_synthetic (a templated SQuAD set)
  and tf1_compat_run (runs Google's TF1 scripts under TensorFlow 2)
"""

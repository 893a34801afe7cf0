"""Benchmarks that ship with the installed package (run as `python -m bert_pipeline.bench.<name>`).

Only those that installed code runs live here: `model_throughput` is run by the `bert_nightly_regression`
DAG (operators/nightly.py). The checkout's bench/ keeps the documented commands (bench/model_throughput.py
is a thin wrapper of this module) and the benchmarks that only a checkout runs.
"""

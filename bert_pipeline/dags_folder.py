"""Where the DAG files are: the installed `pipelines` package, which both `bert-pipeline demo` and the stack's
Airflow use as their DAGs folder. Found without importing it (importing a DAG module imports Airflow)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from bert_core.errors import BertPipelineError


def pipelines_dir() -> Path:
    spec = importlib.util.find_spec("pipelines")
    if spec is None or not spec.submodule_search_locations:
        raise BertPipelineError("the `pipelines` package (the DAG files) is not importable: install the project "
                                "with `pip install -e .`")
    return Path(next(iter(spec.submodule_search_locations)))


def dag_ids() -> list[str]:
    """The DAGs in the folder, without importing them: each DAG file is named for its dag_id and defines a
    function of that name (pipelines/bert_demo.py: `def bert_demo()`)."""
    return sorted(p.stem for p in pipelines_dir().glob("*.py") if not p.stem.startswith("_"))


def load_dag(dag_id: str):
    """A fresh DAG object of `dag_id` (importing its module imports Airflow: set its home first)."""
    import importlib

    if dag_id not in dag_ids():
        raise BertPipelineError(f"no DAG {dag_id!r} in {pipelines_dir()}: one of {', '.join(dag_ids())}")
    module = importlib.import_module(f"pipelines.{dag_id}")
    factory = getattr(module, dag_id, None)
    if not callable(factory):
        raise BertPipelineError(f"pipelines/{dag_id}.py defines no DAG function {dag_id}()")
    return factory()

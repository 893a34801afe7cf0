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

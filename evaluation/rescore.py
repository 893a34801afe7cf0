"""Re-score a model directory on pinned dev data: how the nightly regression measures a registered model.

Fine-tuning's own evaluation code (bert_core.finetune.evaluate: same features, prediction files and official
scorers as `bert-pipeline finetune`), on a local model directory; where the model came from (the MLflow
registry) is operators.nightly's business. The sha256 of each gold dev file scored comes back with the
metrics: a night whose pinned data changed must not be compared with one whose data did not.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any


def dev_files_sha256(task: str, data_dir: str, version_2: bool = False) -> dict[str, str]:
    """sha256 of each gold dev file of `task` in `data_dir` (local or s3://), by file name: the data's pin.
    `version_2`: SQuAD's, which picks the dev file scored (a 2.0 model's pinned data has dev-v2.0.json)."""
    from bert_core.io import manifest, storage
    from bert_core.tasks import catalog as tasks

    info = tasks.get(task)
    local = storage.local_dir(data_dir)
    pins = {}
    for split in info.eval_splits(version_2):
        if not split.gold:
            continue
        path = tasks.find_file(local, split.files, split.name, info, required=split.required)
        if path is not None:
            pins[path.name] = manifest.sha256_file(path)
    return pins


def rescore(model_dir: str | Path, task: str, data_dir: str, out: str,
            settings: dict[str, Any] | None = None) -> dict[str, Any]:
    """Dev metrics of `model_dir` (a fine-tuned model directory) on `task`'s dev data in `data_dir`.

    `settings`: the feature settings it was fine-tuned with (bert_core.finetune.evaluate.FEATURE_FIELDS; none:
    the task's defaults). The prediction files and metrics.json go to `out` (a directory or s3:// prefix,
    replaced whole). Returns {"metrics": {name: value}, "data_sha256": {dev file name: sha256}}.
    """
    from bert_core.finetune.evaluate import evaluate_model
    from bert_core.io import storage

    pins = dev_files_sha256(task, data_dir, bool((settings or {}).get("version_2")))
    with tempfile.TemporaryDirectory(prefix="bert-rescore-") as scratch:
        metrics = evaluate_model(model_dir, task, data_dir, settings, out_dir=scratch)
        with storage.atomic_output_dir(out, overwrite=True) as dest:
            for path in Path(scratch).iterdir():
                (dest / path.name).write_bytes(path.read_bytes())
    return {"metrics": metrics, "data_sha256": pins}

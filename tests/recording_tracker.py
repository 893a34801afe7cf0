"""A Tracker that keeps what a step logs, for assertions instead of an MLflow store."""

from __future__ import annotations

from bert_core.io.tracking import Tracker


class RecordingTracker(Tracker):
    run_id = "recording"

    def __init__(self):
        self.metrics: list[tuple[int, dict]] = []
        self.params, self.tags, self.artifacts, self.models = {}, {}, [], []

    def log_params(self, params):
        self.params.update(params)

    def log_metrics(self, metrics, step):
        self.metrics.append((step, dict(metrics)))

    def log_artifact(self, path, artifact_path=None):
        self.artifacts.append(str(path))

    def log_model_dir(self, model_dir, name="model"):
        self.models.append(sorted(p.name for p in model_dir.iterdir()))

    def set_tags(self, tags):
        self.tags.update(tags)

    def losses(self) -> list[float]:
        return [m["loss"] for _, m in self.metrics if "learning_rate" in m]

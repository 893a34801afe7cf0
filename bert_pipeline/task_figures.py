"""Each task's key figure for the run view, from its return value (XCom): shards and instances, steps and
held-out accuracy, dev metric, the registry's decision.

Recognized by the value's shape (the operators' return values), not by task id, so any DAG's tasks get theirs:
a mapped task's values are combined (shard counts added up) or listed. Output directories are described from
their manifest.json when it is on this machine; an s3:// output is named, not read (the view must not wait on
the network or borrow a task's credentials).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from operators.nightly import SPEED_KEYS  # the nightly's speed figures: ratios of ours to transformers

log = logging.getLogger(__name__)

# Metric names as a person says them (anything else keeps its name).
WORDS = {"mlm_accuracy": "masked-LM", "nsp_accuracy": "NSP", "exact_match": "EM"}


def number(value: Any) -> str:
    """A metric as read: 3 significant digits (0.201, 0.9, 88.2, 4.89)."""
    return f"{value:.3g}" if isinstance(value, int | float) else str(value)


def metrics_text(metrics: dict[str, Any], keys: list[str] | None = None) -> str:
    """`name value` pairs; a metric with a `<name>_chance` companion gets `(chance c)`; companions and
    `_over_chance` differences are not listed on their own."""
    keys = keys or sorted(k for k in metrics if not k.endswith(("_chance", "_over_chance")))
    parts = []
    for key in keys:
        if key not in metrics:
            continue
        text = f"{WORDS.get(key, key)} {number(metrics[key])}"
        if f"{key}_chance" in metrics:
            text += f" (chance {number(metrics[f'{key}_chance'])})"
        parts.append(text)
    return ", ".join(parts)


def _manifest(path: str) -> dict[str, Any] | None:
    from bert_core.io import manifest, storage

    if storage.is_s3(path):
        return None
    try:
        return manifest.read(path)
    except Exception:  # noqa: BLE001  (no manifest, not a directory: described by its path alone)
        return None


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}" if n == 1 else f"{n:,} {word}s"


def _output(path: str) -> str:
    found = _manifest(path)
    totals = (found or {}).get("totals", {})
    step = (found or {}).get("step")
    if step == "segment":
        return f"{_plural(totals.get('documents', 0), 'document')}, {_plural(totals.get('sentences', 0), 'sentence')}"
    if step == "make-shards":
        return f"{_plural(len(found.get('shards', [])), 'shard')}, {_plural(totals.get('instances', 0), 'instance')}"
    return path


def _shards_total(paths: list[str]) -> str | None:
    found = [_manifest(p) for p in paths]
    if not all(m and m.get("step") == "make-shards" for m in found):
        return None
    shards = sum(len(m.get("shards", [])) for m in found)
    instances = sum(m.get("totals", {}).get("instances", 0) for m in found)
    return f"{_plural(shards, 'shard')}, {_plural(instances, 'instance')}"


def _decision(v: dict[str, Any]) -> str:
    head = f"{v['name']} v{v['candidate']}"
    if v.get("promoted") is None:
        return f"{head} registered"
    if v["promoted"]:
        return f"{head} -> champion"
    return f"{head} not promoted: {(v.get('reasons') or ['see its registry report'])[0]}"


def _pretrained(v: dict[str, Any]) -> str:
    steps = f"{v['steps']} steps; " if v.get("steps") else ""
    on = "held-out " if v.get("metrics_on") == "held-out" else f"on {v.get('metrics_on', 'training data')}: "
    return steps + on + metrics_text(v["metrics"], ["mlm_accuracy", "nsp_accuracy"])


def _finetuned(v: dict[str, Any]) -> str:
    from bert_core.tasks import catalog

    metrics = v["metrics"]
    try:
        main = catalog.get(v["task"]).main_metric
    except Exception:  # noqa: BLE001  (a task name this version does not know)
        main = None
    # Then SQuAD's other gate metric (1.1's exact_match, 2.0's exact): the decision line may name it, and sorted
    # 2.0 names put HasAns_* before it.
    keys = [k for k in (main, "exact_match", "exact") if k in metrics]
    keys += sorted(k for k in metrics if k not in keys and not k.endswith(("_chance", "_over_chance")))
    return f"{v['task']} dev {metrics_text(metrics, keys[:3])}"


def _nightly_version(v: dict[str, Any]) -> str:
    return f"{v['name']} v{v['version']} ({v.get('role', 'version')}): {metrics_text(v['metrics'])}"


def _summary(v: dict[str, Any]) -> str:
    models = v["models"]
    promoted = sum(1 for m in models if m.get("promoted"))
    return f"{_plural(len(models), 'model')} registered, {promoted} promoted to champion"


def _nightly_result(v: dict[str, Any]) -> str:
    # Where the night's report is: `run` prints a report line only for a DAG with a `report` task.
    where = f"; report: {v['report']}" if v.get("report") else ""
    if v["status"] == "passed":
        return f"passed{where}"
    return f"{v['status']}: {', '.join(v.get('regressions', []))}{where}"


def _speed(v: dict[str, Any]) -> str:
    return "ours / transformers: " + ", ".join(f"{k.removeprefix('throughput/')} {number(r)}x" for k, r in v.items())


# (recognizer, describer), first match wins.
SHAPES: list[tuple[Callable[[Any], bool], Callable[[Any], str]]] = [
    (lambda v: isinstance(v, dict) and {"name", "candidate", "promoted"} <= v.keys(), _decision),
    (lambda v: isinstance(v, dict) and isinstance(v.get("models"), list), _summary),
    (lambda v: isinstance(v, dict) and "metrics" in v and "metrics_on" in v, _pretrained),
    (lambda v: isinstance(v, dict) and "metrics" in v and {"name", "version"} <= v.keys(), _nightly_version),
    (lambda v: isinstance(v, dict) and "metrics" in v and "task" in v, _finetuned),
    (lambda v: isinstance(v, dict) and {"instances", "validation"} <= v.keys(),
     lambda v: f"{v['instances']:,} instances: all expectations met"),
    (lambda v: isinstance(v, dict) and {"status", "regressions"} <= v.keys(), _nightly_result),
    (lambda v: isinstance(v, dict) and "work_dir" in v, lambda v: f"outputs under {v['work_dir']}"),
    (lambda v: isinstance(v, dict) and "report" in v and "mlflow_run_id" in v,
     lambda v: "report.html" + (", logged to MLflow (bert-runs)" if v["mlflow_run_id"] else "")),
    (lambda v: isinstance(v, dict) and v and all(str(k).startswith(SPEED_KEYS) for k in v), _speed),
    # The nightly's plan (a champion and its candidate share a task) before fine-tuning's (a task each).
    (lambda v: isinstance(v, list) and v and all(isinstance(x, dict) and "role" in x for x in v),
     lambda v: f"{_plural(len(v), 'model version')} to score: "
               + ", ".join(f"{x.get('name', '?')} v{x.get('version', '?')} ({x['role']})" for x in v)),
    (lambda v: isinstance(v, list) and v and all(isinstance(x, dict) and "task" in x for x in v),
     lambda v: f"{_plural(len(v), 'task')}: {', '.join(x['task'] for x in v)}"),
    (lambda v: isinstance(v, list) and v and all(isinstance(x, dict) and {"index", "pretrain"} <= x.keys() for x in v),
     lambda v: _plural(len(v), "pretraining phase")),
    # An empty list or dict: the nightly's plan with no model to score ("0 files" before), a speed task skipped.
    (lambda v: v == [], lambda v: "nothing to do (an empty list)"),
    (lambda v: v == {}, lambda v: "skipped: nothing to run"),
    (lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
     lambda v: _plural(len(v), "file")),
    (lambda v: isinstance(v, list) and all(isinstance(x, dict) for x in v), lambda v: _plural(len(v), "item")),
    (lambda v: isinstance(v, str), _output),
]


def describe(value: Any) -> str:
    """One return value in a few words ('' when its shape is not known)."""
    try:
        for matches, text in SHAPES:
            if matches(value):
                return text(value)
    except Exception as exc:  # noqa: BLE001  (the view never fails on a figure)
        log.debug("no figure for %r: %s", value, exc)
    return ""


def figure(values: list[Any]) -> str:
    """A task's key figure from its instances' return values (one, or one per map index, in order)."""
    values = [v for v in values if v is not None]
    if not values:
        return ""
    if len(values) == 1:
        return describe(values[0])
    if all(isinstance(v, str) for v in values):
        total = _shards_total(values)
        if total:
            return total
    return "; ".join(text for text in map(describe, values) if text)

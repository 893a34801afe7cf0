"""Named fine-tuning presets: the per-task settings of published BERT setups, and their search protocol.

A preset gives FinetuneConfig values per task (tasks it does not name get its `common` values) and,
optionally, a hyperparameter grid: the values a search tries per task (bert_core.launch.ray_tune).
What a run uses is layered: the caller's base settings, then the preset's values for the task, then the
caller's per-task overrides (`settings_for`). ("Preset", not "recipe": the pretraining recipe is the lr rule
of bert_core/pretrain/recipe.py.)

- `gluonnlp`: the commands of GluonNLP's BERT fine-tuning scripts (scripts/bert: finetune_classifier.py,
  finetune_squad.py) for BERT-base: their defaults (BERTAdam, lr 5e-5, batch 32, 3 epochs, max_seq_length
  128 (their max_len), epsilon 1e-6, warmup 0.1) and per-task commands: MRPC and RTE batch 32 / 3 epochs /
  lr 2e-5; SST-2 batch 16 / 4 epochs / lr 2e-5; MNLI max_seq_length 80 and epsilon 1e-8; XNLI batch 32 /
  3 epochs / lr 2e-5; SQuAD 1.1 Adam, batch 12, lr 3e-5, 2 epochs, max_seq_length 384; SQuAD 2.0 the same
  with null-score threshold -2.0.
- `bert-paper`: Devlin et al. (2019), appendix A.3 and section 4: batch 32, 3 epochs, max_seq_length 128
  (SQuAD 384), BERT's Adam with warmup over 10% of the steps, the learning rate picked on dev among {5e-5, 4e-5, 3e-5, 2e-5};
  SQuAD 1.1 3 epochs / lr 5e-5 / batch 32; SQuAD 2.0 2 epochs / lr 5e-5 / batch 48. Small data sets vary
  by several points between random restarts, so the search also tries 3 seeds for RTE, MRPC, CoLA and
  STS-B (the paper: "several random restarts"; three is our choice). Without a search, GLUE tasks take
  lr 2e-5 (Google's run_classifier.py example).
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from typing import Any

from bert_core.errors import BertPipelineError

log = logging.getLogger(__name__)

NONE = "none"
# `search: "preset"` runs the preset's grid; "recipe" is the name the bert_finetune form shipped with.
SEARCH_PRESET = "preset"
DEPRECATED_SEARCH = "recipe"
SEARCHABLE = ("lr", "seed", "epochs", "batch_size", "warmup_ratio", "weight_decay", "null_score_diff_threshold")


@dataclass(frozen=True)
class FinetunePreset:
    name: str
    source: str
    common: dict[str, Any]
    per_task: dict[str, dict[str, Any]] = field(default_factory=dict)
    search: dict[str, list[Any]] = field(default_factory=dict)  # every task
    search_per_task: dict[str, dict[str, list[Any]]] = field(default_factory=dict)  # added for these tasks

    def settings(self, task: str) -> dict[str, Any]:
        return {**self.common, **self.per_task.get(task, {})}

    def grid(self, task: str) -> dict[str, list[Any]]:
        return {**self.search, **self.search_per_task.get(task, {})}


_SEEDS = [1, 2, 3]
PRESETS: dict[str, FinetunePreset] = {
    "gluonnlp": FinetunePreset(
        "gluonnlp", "GluonNLP scripts/bert (finetune_classifier.py, finetune_squad.py), BERT-base commands",
        common={"optimizer": "bertadam", "lr": 5e-5, "batch_size": 32, "epochs": 3, "max_seq_length": 128,
                "adam_eps": 1e-6, "warmup_ratio": 0.1},
        per_task={
            "mrpc": {"batch_size": 32, "epochs": 3, "lr": 2e-5},
            "rte": {"batch_size": 32, "epochs": 3, "lr": 2e-5},
            "sst-2": {"batch_size": 16, "epochs": 4, "lr": 2e-5},
            "mnli": {"max_seq_length": 80, "adam_eps": 1e-8},
            "xnli": {"batch_size": 32, "epochs": 3, "lr": 2e-5},
            "squad": {"optimizer": "adamw", "batch_size": 12, "lr": 3e-5, "epochs": 2, "max_seq_length": 384,
                      "doc_stride": 128},
        }),
    "bert-paper": FinetunePreset(
        "bert-paper", "Devlin et al., BERT (NAACL 2019), section 4 and appendix A.3",
        common={"optimizer": "bertadam", "lr": 2e-5, "batch_size": 32, "epochs": 3, "max_seq_length": 128,
                "warmup_ratio": 0.1, "weight_decay": 0.01},
        per_task={"squad": {"lr": 5e-5, "batch_size": 32, "epochs": 3, "max_seq_length": 384, "doc_stride": 128}},
        search={"lr": [5e-5, 4e-5, 3e-5, 2e-5]},
        search_per_task={task: {"seed": _SEEDS} for task in ("rte", "mrpc", "cola", "sts-b")}),
}


def names() -> tuple[str, ...]:
    return (NONE, *PRESETS)


def get(name: str | None) -> FinetunePreset | None:
    if name in (None, "", NONE):
        return None
    if name not in PRESETS:
        raise BertPipelineError(f"unknown fine-tuning preset {name!r}; known: {', '.join(names())}")
    return PRESETS[name]


def _squad_v2(preset: FinetunePreset | None, version_2: bool) -> dict[str, Any]:
    """SQuAD 2.0 differs from 1.1 in both presets."""
    if preset is None or not version_2:
        return {}
    if preset.name == "gluonnlp":
        return {"null_score_diff_threshold": -2.0}
    return {"epochs": 2, "batch_size": 48}


def settings_for(task: str, base: dict[str, Any], preset: str | None = None,
                 overrides: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """A task's FinetuneConfig values: `base` < the preset's values for the task < `overrides[task]`.
    Every key is checked against FinetuneConfig's fields; errors name the key and where it came from. The
    deprecated `max_len` in `base` or `overrides` is read as it was meant for the task (renamed_settings)."""
    from bert_core.finetune.config import FinetuneConfig, renamed_settings
    from bert_core.tasks import catalog

    kind = catalog.get(task).kind
    chosen = get(preset)
    settings = renamed_settings(base, kind, f"settings of {task}")
    if chosen is not None:
        settings.update(chosen.settings(task))
    task_overrides = renamed_settings((overrides or {}).get(task, {}), kind, f"overrides.{task}")
    if task == "squad":
        settings.update(_squad_v2(chosen, bool(task_overrides.get("version_2", settings.get("version_2")))))
    settings.update(task_overrides)
    fields = {f.name for f in dataclasses.fields(FinetuneConfig)} - {"task", "data_dir", "model", "output"}
    for key in task_overrides:
        if key not in fields:
            raise BertPipelineError(f"overrides.{task}.{key}: not a fine-tuning setting (known: "
                                    f"{', '.join(sorted(fields))})")
    return settings


def per_task_search(search: Any) -> dict[str, Any] | None:
    """`search` naming tasks (e.g. {"sst-2": {"lr": [5e-5, 3e-5]}, "rte": "preset"}), as canonical task name ->
    that task's search; None when `search` is one search for every task."""
    from bert_core.tasks import catalog as tasks

    if not isinstance(search, dict) or not search:
        return None
    named = {}
    for key, value in search.items():
        try:
            named[tasks.get(key).name] = value
        except BertPipelineError:
            return None
    return named


def grid_for(task: str, search: str | dict[str, Any] | None, preset: str | None = None) -> dict[str, list[Any]]:
    """The hyperparameter grid of a task: `search` "preset" -> the preset's grid; a dict of settings -> that grid
    (the same for every task); a dict of task names -> each named task's own search (either form), no search for
    the others; None/{} -> no search. Values are checked: lists of at least one value of settings a search may
    vary."""
    per_task = per_task_search(search)
    if per_task is not None:
        from bert_core.tasks import catalog as tasks

        name = tasks.get(task).name
        return _grid(task, per_task.get(name), preset, f"search.{name}")
    return _grid(task, search, preset, "search")


def _grid(task: str, search: str | dict[str, list[Any]] | None, preset: str | None, where: str
          ) -> dict[str, list[Any]]:
    if not search:
        return {}
    if search == DEPRECATED_SEARCH:
        log.warning("%s: %r is deprecated; write %r", where, DEPRECATED_SEARCH, SEARCH_PRESET)
        search = SEARCH_PRESET
    if search == SEARCH_PRESET:
        chosen = get(preset)
        if chosen is None or not chosen.grid(task):
            raise BertPipelineError(f"{where}: 'preset' needs a preset with a search protocol (bert-paper), "
                                    f"not {preset or NONE!r}")
        return chosen.grid(task)
    if not isinstance(search, dict):
        raise BertPipelineError(f"{where}: expected 'preset' or an object such as {{\"lr\": [5e-5, 3e-5]}}, got "
                                f"{search!r}")
    for key, values in search.items():
        if key not in SEARCHABLE:
            raise BertPipelineError(f"{where}.{key}: not a setting a search varies ({', '.join(SEARCHABLE)})")
        if not isinstance(values, list) or not values:
            raise BertPipelineError(f"{where}.{key}: expected a non-empty list of values, got {values!r}")
    return {k: list(v) for k, v in search.items()}

"""bert_finetune's plan: one `FinetuneTaskPlan` per task, resolved and checked in the DAG's first task.

Each task's plan (JSON on XCom, one mapped task each) holds its data, model, output locations, its settings
(the form's < the named preset's values for the task < the conf's `overrides`) and its search grid; the later
tasks run exactly that and never look at the conf again.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from operators.locations import default_model_dir, demo_data, run_dir
from operators.params import flags_as_params
from operators.plan_checks import check_gpu, max_positions

DAG_ID = "bert_finetune"
# Conf keys the form shipped under another name: still accepted, with a warning.
RENAMED = {"recipe": "preset"}


@dataclass(frozen=True)
class FinetuneTaskPlan:
    task: str
    data_dir: str
    model: str
    output: str
    evaluation: str
    registry: str
    settings: dict[str, Any]  # FinetuneConfig fields
    search: dict[str, list[Any]] = dataclasses.field(default_factory=dict)  # empty: no search
    max_concurrent_trials: int = 0

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> FinetuneTaskPlan:
        return cls(**{f.name: data[f.name] for f in dataclasses.fields(cls) if f.name in data})


def plan(params: dict[str, Any], run_id: str | None, settings: tuple[str, ...],
         declared: tuple[str, ...] = (), defaults: dict[str, Any] | None = None) -> list[FinetuneTaskPlan]:
    """One task plan per entry of params["tasks"] (task -> data dir; empty: the bundled demo set). Everything is
    checked here, before any work: unknown conf keys (`declared`: the DAG's Params; `defaults`: their
    values, for the deprecated names), override keys, search grids, each task's config, its data files, the
    model's length limits and GPU settings; an error names the param."""
    from bert_core.errors import BertPipelineError
    from bert_core.finetune import presets
    from bert_core.finetune.config import DEPRECATED_MAX_LEN
    from bert_core.tasks import catalog as tasks
    from operators.params import check_conf_keys, former_conf_keys, renamed_params, settings_from

    params = renamed_params(params, RENAMED, defaults or {}, DAG_ID)
    if declared:
        check_conf_keys(params, (*declared, *former_conf_keys(DAG_ID)), DAG_ID)
    work = run_dir(DAG_ID, params, run_id)
    model = params.get("model") or default_model_dir()
    bundled = {"sst-2": demo_data("sst2"), "squad": demo_data("squad")}
    overrides = params.get("overrides") or {}
    if not isinstance(overrides, dict) or not all(isinstance(v, dict) for v in overrides.values()):
        raise BertPipelineError("overrides: expected an object of task -> {setting: value}, e.g. "
                                '{"mrpc": {"lr": 3e-5, "epochs": 5}}')
    overrides = {tasks.get(t).name: v for t, v in overrides.items()}
    requested = {tasks.get(t).name: d for t, d in (params.get("tasks") or {}).items()}
    for where, named in (("overrides", overrides), ("search", presets.per_task_search(params.get("search")) or {})):
        stray = sorted(set(named) - set(requested))
        if stray:
            raise BertPipelineError(f"{where}: {', '.join(stray)} not among the run's tasks ({', '.join(requested)})")
    # The form's deprecated `max_len` (max_seq_length of classification/NER only) is read per task by settings_for.
    base = settings_from(params, (*settings, DEPRECATED_MAX_LEN))
    planned = []
    for name, data_dir in requested.items():
        if not data_dir and name not in bundled:
            raise BertPipelineError(f"tasks: give a data directory for {name!r} (bundled data: sst-2, squad)")
        task = FinetuneTaskPlan(
            task=name, data_dir=data_dir or bundled[name], model=model, output=f"{work}/finetune-{name}",
            evaluation=f"{work}/evaluate-{name}", registry=f"{work}/registry",
            settings=presets.settings_for(name, base, params.get("preset"), overrides),
            search=presets.grid_for(name, params.get("search"), params.get("preset")),
            max_concurrent_trials=int(params.get("max_concurrent_trials") or 0))
        check_task(task)
        planned.append(task)
    if not planned:
        raise BertPipelineError("tasks: name at least one task")
    return planned


def _version_hint(info, data: Path, config) -> str:
    """A SQuAD dir with only the other version's train file: say which version_2 reads it (a 2.0 dir with the
    form's default version_2 false was refused naming only the 1.1 files)."""
    from bert_core.tasks.squad import other_version_present

    found = other_version_present(data, info.train_files, bool(config.version_2)) if info.kind == "squad" else []
    if not found:
        return ""
    value = "false" if config.version_2 else "true"
    overrides = json.dumps({info.name: {"version_2": not config.version_2}})
    return f"; found {found[0]}: set version_2 {value} (for this task only: overrides {overrides})"


def check_task(plan: FinetuneTaskPlan, names: dict[str, str] | None = None) -> None:
    """The task's config as the step will build it, its files and the model's limits, checked now. `names`: the
    Param that sets each setting, for the errors (default: the setting's own name, as bert_finetune's form has)."""
    from bert_core.errors import BertPipelineError
    from bert_core.finetune.config import FinetuneConfig
    from bert_core.io import storage
    from bert_core.tasks import catalog as tasks
    from bert_core.tasks import squad as squad_files
    from operators.params import known_settings

    task = plan.task
    where = f"task {task}"
    try:
        config = FinetuneConfig(task=task, data_dir=plan.data_dir, model=plan.model, output=plan.output,
                                **known_settings(FinetuneConfig, plan.settings, f"{where} settings",
                                                 exclude=("task", "data_dir", "model", "output")))
        config.validate()
    except (BertPipelineError, TypeError) as exc:
        named = names if names is not None else {f: f for f in plan.settings}
        raise BertPipelineError(f"{where}: {flags_as_params(str(exc), named)}") from None
    if plan.search and config.num_workers != 1:
        raise BertPipelineError(f"{where}: a search runs one worker per trial (trials run in parallel); set "
                                f"num_workers 1, not {config.num_workers}")
    info = tasks.get(task)
    if not storage.is_s3(config.data_dir):
        data = Path(config.data_dir)
        if not data.is_dir():
            raise BertPipelineError(f"tasks.{task}: data directory {config.data_dir} does not exist")
        if info.kind == "squad":
            candidates = list(squad_files.version_files(info.train_files, bool(config.version_2)))
        else:
            candidates = list(info.train_candidates(config.language or "zh"))
        if config.train_file is None and not any((data / name).is_file() for name in candidates):
            raise BertPipelineError(f"tasks.{task}: {config.data_dir} has no training file (looked for "
                                    f"{', '.join(candidates)}){_version_hint(info, data, config)}")
    if not storage.is_s3(config.model) and not storage.local_path(config.model).exists():
        # Fine-tuning starts from weights: a bare architecture name (bert_2_64_2) is no model here, and a path that
        # is not there would fail only in the mapped task.
        from bert_core.model import zoo

        if zoo.lookup(config.model) is None:
            raise BertPipelineError(f"model: {zoo.unknown_model_message(config.model)}"
                                    if "/" not in config.model else f"model: no such model directory {config.model}")
    limit = max_positions(config.model)
    if limit is not None and config.max_seq_length > limit:
        raise BertPipelineError(f"{where}: max_seq_length {config.max_seq_length} is longer than the model's {limit} "
                                f"positions (max_position_embeddings of {config.model})")
    if config.use_gpu:
        check_gpu(where)

"""Airflow Params generated from a step's config fields (bert_core.options.option): the same default, type,
choices and help the CLI shows, so a DAG's trigger form cannot drift from the library (no second copy of a
default in a DAG file), and a run's conf is checked against the same config before any work starts.

The trigger forms read like a recipe: every Param is in a section (Airflow's Param `section`), taken from its
field's `section` (bert_core.options.Form), and `in_sections` orders a DAG's Params by SECTIONS. Airflow 3's
form shows a section only as its title (a collapsible header, no description field), so the title carries the
section's sentence."""

from __future__ import annotations

import dataclasses
import difflib
import logging
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

from bert_core.errors import BertPipelineError
from bert_core.options import Form, option_default, option_types

log = logging.getLogger(__name__)

# The nightly regression's own sections (its Params are not config fields).
NIGHTLY_MODELS, TOLERANCES, THROUGHPUT = "models and data", "regression tolerances", "throughput benchmark"
TIME_TO_ACCURACY = "time-to-accuracy benchmark"
# Section -> the title its form shows (the section's name and a sentence), in the order the forms show them.
SECTIONS: dict[str, str] = {
    Form.DATA: "Data — what the run reads, and how the text becomes training examples",
    NIGHTLY_MODELS: "Models and data — which registered models are scored again, on which pinned dev data",
    Form.MODEL: "Model — the architecture to train, or the weights to start from",
    Form.OPTIMIZATION: "Optimization — how long and how fast it learns: steps or epochs, batch, optimizer, "
                       "learning rate",
    Form.SQUAD: "SQuAD — how long contexts are read in windows and answers picked (SQuAD tasks only)",
    TOLERANCES: "Regression tolerances — how far a figure may fall below its reference before the night fails",
    THROUGHPUT: "Throughput benchmarks — our inference and pretraining-step speed against transformers', measured in "
                "the same run",
    TIME_TO_ACCURACY: "Time-to-accuracy benchmark — pretraining from scratch, ours on its defaults against "
                      "transformers at its best learning rate, timed to the peer's final held-out accuracy",
    Form.SCALE: "Precision and scale — number format, workers and GPUs, and what happens when a node fails",
    Form.STORAGE: "Storage and tracking — where outputs and checkpoints go, how the run is checked",
}

_JSON_TYPES = {"int": "integer", "float": "number", "str": "string", "bool": "boolean"}


def section(name: str) -> str:
    """The form title of section `name` (a key of SECTIONS), for a Param's `section=`."""
    if name not in SECTIONS:
        raise BertPipelineError(f"no trigger-form section {name!r}; the sections are {', '.join(SECTIONS)}")
    return SECTIONS[name]


def in_sections(params: dict[str, Any]) -> dict[str, Any]:
    """A DAG's Params ordered by section (SECTIONS' order; within one, as given): Airflow's form shows the
    sections in the order of their first Param. A Param outside SECTIONS is an error naming it."""
    order = list(SECTIONS.values())
    for name, param in params.items():
        title = param.schema.get("section")
        if title not in order:
            raise BertPipelineError(f"Param {name!r}: section {title!r} is not a trigger-form section "
                                    f"(operators.params.SECTIONS)")
    return dict(sorted(params.items(), key=lambda item: order.index(item[1].schema["section"])))


# Flags of the library's help texts and errors that name what a DAG provides itself (no Param sets them).
DAG_PROVIDED = {"data_eval": "the held-out shards", "output": "output", "data_dir": "the task's data directory",
                "data": "the shards"}


def flags_as_params(message: str, names: Mapping[str, str]) -> str:
    """The library's help texts and errors name its command-line flags (`--num-workers: expected ...`); a DAG's
    form has Params (`pretrain_num_workers`) instead: `names` maps a config field to the Param that sets it."""
    def param(match: re.Match) -> str:
        return names.get(match.group(1).replace("-", "_"), match.group(0))

    return re.sub(r"(?<![\w-])--([a-z][a-z0-9-]*)(?![\w])", param, message)


def config_params(config_cls: type, names: Sequence[str], defaults: dict[str, Any] | None = None,
                  notes: dict[str, str] | None = None, prefix: str = "", label: str = "") -> dict[str, Any]:
    """Params for the fields `names` of `config_cls`, in that order. `defaults`: the DAG's own choice for a few
    of them (e.g. a small model for a first run), said in the description. `notes`: a sentence added to a
    field's description (e.g. what an empty value comes to with the DAG's defaults). `prefix` and `label`: for
    a DAG that runs two steps with fields of the same name (the demo's `pretrain_num_workers` and
    `finetune_num_workers`), the Param is `prefix + field` and its description starts with `label`."""
    from airflow.sdk import Param

    fields = {f.name: f for f in dataclasses.fields(config_cls)}
    defaults = defaults or {}
    params: dict[str, Any] = {}
    # The help texts name flags (--batch-size); the form names this form's Params, or the setting.
    flag_names = {**{field: prefix + field if field in names else field for field in fields}, **DAG_PROVIDED}
    for name in names:
        if name not in fields:
            raise BertPipelineError(f"{config_cls.__name__} has no field {name!r}")
        field = fields[name]
        meta = field.metadata
        if meta.get("section") is None:
            raise BertPipelineError(f"{config_cls.__name__}.{name} has no trigger-form section: give its "
                                    "option(...) a section=Form.<...>")
        bases, nullable = option_types(field)
        kinds = list(dict.fromkeys(_JSON_TYPES.get(base, "string") for base in bases))
        library_default = option_default(field)
        library_default = None if library_default is dataclasses.MISSING else library_default
        default = defaults.get(name, library_default)
        nullable = nullable or default is None
        if meta.get("negate") and not meta.get("switch_help"):
            raise BertPipelineError(f"{config_cls.__name__}.{name}: its help describes {meta['negate']}; give its "
                                    "option(...) a switch_help saying what the field means when on")
        # A negated flag's help describes the flag (--cased: keep case); the form's switch is the field itself.
        helped = meta["switch_help"] if meta.get("negate") else meta.get("help", "")
        description = (f"{label}: " if label else "") + helped
        description += "." if description and not description.endswith(".") else ""
        if meta.get("default_help") and name not in defaults:
            description += f" Empty: {meta['default_help']}."
        elif name in defaults and library_default is None and not meta.get("default_help"):
            description += " (No library default.)"
        elif name in defaults:  # a computed library default (None) is said as its help says it
            shown = meta["default_help"] if library_default is None and meta.get("default_help") else library_default
            description += f" (Library default: {shown}.)"
        if notes and name in notes:
            description += f" {notes[name]}"
        description = flags_as_params(description, flag_names)
        types = kinds + ["null"] if nullable else kinds
        schema: dict[str, Any] = {"type": types if len(types) > 1 else types[0]}
        if meta.get("choices") is not None:
            schema["enum"] = list(meta["choices"]) + ([None] if nullable else [])
        params[prefix + name] = Param(default, description=description[:1].upper() + description[1:],
                                      section=section(meta["section"]), **schema)
    return params


def settings_from(params: dict[str, Any], names: Sequence[str], prefix: str = "") -> dict[str, Any]:
    """The run's values of `names` (Params `prefix + name`; a conf may leave a nullable Param at None: the
    library's default)."""
    return {name: params[prefix + name] for name in names if params.get(prefix + name) is not None}


def known_settings(config_cls: type, settings: dict[str, Any] | None, what: str,
                   exclude: tuple[str, ...] = ()) -> dict[str, Any]:
    """`settings`, checked to be fields of `config_cls`: a misspelt one is an error naming it and the known ones."""
    settings = dict(settings or {})
    known = {f.name for f in dataclasses.fields(config_cls)} - set(exclude)
    unknown = sorted(set(settings) - known)
    if unknown:
        raise BertPipelineError(f"{what}: unknown {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    return settings


def renamed_params(params: dict[str, Any], renamed: Mapping[str, str], defaults: Mapping[str, Any],
                   dag_id: str) -> dict[str, Any]:
    """`params` with each deprecated key (`renamed`: old -> current name, for keys that shipped in a DAG's form)
    moved to its current name, with a warning. A conf giving both, with different values (the current one not
    left at its default), is an error: which one was meant cannot be told."""
    params = dict(params)
    for old, new in renamed.items():
        if old not in params:
            continue
        value = params.pop(old)
        log.warning("%s conf: %r is deprecated; write %r", dag_id, old, new)
        if params.get(new, defaults.get(new)) not in (defaults.get(new), value):
            raise BertPipelineError(f"{dag_id} conf: {old} (the deprecated name of {new}) is {value!r} and {new} is "
                                    f"{params[new]!r}; give {new} only")
        params[new] = value
    return params


def _close_param(key: str, declared: Sequence[str]) -> str | None:
    """The declared Param `key` is most likely a misspelling of, if any: compared on what follows the words they
    share (pretrain_lr is not pretrain_model; pretrain_step is pretrain_num_steps)."""
    def likeness(name: str) -> float:
        shared = os.path.commonprefix([key, name])
        cut = shared.rfind("_") + 1
        return difflib.SequenceMatcher(None, key[cut:], name[cut:]).ratio()

    best = max(declared, key=likeness, default=None)
    return best if best is not None and likeness(best) >= 0.6 else None


class ConfKeyError(BertPipelineError):
    """A run's conf names a key that is not among the DAG's Params (nor a former name of one)."""


def former_conf_keys(dag_id: str) -> tuple[str, ...]:
    """The conf keys `dag_id` still reads besides its Params: the names its form shipped under before, read with a
    warning. The DAG's first task and `bert-pipeline run` (before it starts a run) check a conf against these."""
    from bert_core.finetune.config import DEPRECATED_MAX_LEN
    from operators import nightly, plan_demo, plan_finetune

    return {"bert_demo": tuple(plan_demo.RENAMED), "bert_finetune": (*plan_finetune.RENAMED, DEPRECATED_MAX_LEN),
            "bert_nightly_regression": tuple(nightly.RENAMED)}.get(dag_id, ())


def check_conf_keys(params: dict[str, Any], declared: Sequence[str], dag_id: str) -> None:
    """A run's conf may only name the DAG's Params: Airflow adds any other key to `params` silently, so a
    misspelt setting would be ignored and the run would go on with the default."""
    unknown = sorted(set(params) - set(declared))
    if unknown:
        guesses = {key: _close_param(key, declared) for key in unknown}
        named = ", ".join(f"{key} (did you mean {guesses[key]}?)" if guesses[key] else key for key in unknown)
        raise ConfKeyError(f"{dag_id} conf: unknown param(s) {named}; the DAG's params are "
                                f"{', '.join(sorted(declared))}")

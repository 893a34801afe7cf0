"""Airflow Params generated from a step's config fields (bert_core.options.option): the same default, type,
choices and help the CLI shows, so a DAG's trigger form cannot drift from the library (no second copy of a
default in a DAG file), and a run's conf is checked against the same config before any work starts."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from bert_core.errors import BertPipelineError
from bert_core.options import option_default, option_type

_JSON_TYPES = {"int": "integer", "float": "number", "str": "string", "bool": "boolean"}


def config_params(config_cls: type, names: Sequence[str], defaults: dict[str, Any] | None = None,
                  notes: dict[str, str] | None = None) -> dict[str, Any]:
    """Params for the fields `names` of `config_cls`, in that order. `defaults`: the DAG's own choice for a few
    of them (e.g. a small model for a first run), said in the description. `notes`: a sentence added to a
    field's description (e.g. what an empty value comes to with the DAG's defaults)."""
    from airflow.sdk import Param

    fields = {f.name: f for f in dataclasses.fields(config_cls)}
    defaults = defaults or {}
    params: dict[str, Any] = {}
    for name in names:
        if name not in fields:
            raise BertPipelineError(f"{config_cls.__name__} has no field {name!r}")
        field = fields[name]
        meta = field.metadata
        base, nullable = option_type(field)
        kind = _JSON_TYPES.get(base, "string")
        library_default = option_default(field)
        library_default = None if library_default is dataclasses.MISSING else library_default
        default = defaults.get(name, library_default)
        nullable = nullable or default is None
        description = meta.get("help", "")
        description += "." if description and not description.endswith(".") else ""
        if meta.get("default_help") and name not in defaults:
            description += f" Empty: {meta['default_help']}."
        elif name in defaults:
            description += f" (Library default: {library_default}.)"
        if notes and name in notes:
            description += f" {notes[name]}"
        schema: dict[str, Any] = {"type": [kind, "null"] if nullable else kind}
        if meta.get("choices") is not None:
            schema["enum"] = list(meta["choices"]) + ([None] if nullable else [])
        params[name] = Param(default, description=description[:1].upper() + description[1:], **schema)
    return params


def settings_from(params: dict[str, Any], names: Sequence[str]) -> dict[str, Any]:
    """The run's values of `names` (a conf may leave a nullable Param at None: the library's default)."""
    return {name: params[name] for name in names if name in params and params[name] is not None}


def check_conf_keys(params: dict[str, Any], declared: Sequence[str], dag_id: str) -> None:
    """A run's conf may only name the DAG's Params: Airflow adds any other key to `params` silently, so a
    misspelt setting would be ignored and the run would go on with the default."""
    unknown = sorted(set(params) - set(declared))
    if unknown:
        raise BertPipelineError(f"{dag_id} conf: unknown param(s) {', '.join(unknown)}; the DAG's params are "
                                f"{', '.join(sorted(declared))}")

"""Airflow Params generated from a step's config fields (bert_core.options.option): the same default, type,
choices and help the CLI shows, so a DAG's trigger form cannot drift from the library (no second copy of a
default in a DAG file), and a run's conf is checked against the same config before any work starts."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from bert_core.errors import BertPipelineError

_JSON_TYPES = {"int": "integer", "float": "number", "str": "string", "bool": "boolean"}


def _field_type(field: dataclasses.Field) -> tuple[str, bool]:
    text = field.type if isinstance(field.type, str) else getattr(field.type, "__name__", str(field.type))
    parts = [p.strip() for p in text.split("|")]
    base = next((p for p in parts if p != "None"), "str")
    return _JSON_TYPES.get(base, "string"), "None" in parts


def _default(field: dataclasses.Field) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return field.default_factory()  # type: ignore[misc]
    return None


def config_params(config_cls: type, names: Sequence[str], defaults: dict[str, Any] | None = None) -> dict[str, Any]:
    """Params for the fields `names` of `config_cls`, in that order. `defaults`: the DAG's own choice for a few
    of them (e.g. a small model for a first run), said in the description."""
    from airflow.sdk import Param

    fields = {f.name: f for f in dataclasses.fields(config_cls)}
    defaults = defaults or {}
    params: dict[str, Any] = {}
    for name in names:
        if name not in fields:
            raise BertPipelineError(f"{config_cls.__name__} has no field {name!r}")
        field = fields[name]
        meta = field.metadata
        kind, nullable = _field_type(field)
        default = defaults.get(name, _default(field))
        nullable = nullable or default is None
        description = meta.get("help", "")
        if meta.get("default_help") and name not in defaults:
            description += f" Empty: {meta['default_help']}."
        elif name in defaults:
            description += f" (Library default: {_default(field)}.)"
        schema: dict[str, Any] = {"type": [kind, "null"] if nullable else kind}
        if meta.get("choices") is not None:
            schema["enum"] = list(meta["choices"]) + ([None] if nullable else [])
        params[name] = Param(default, description=description[:1].upper() + description[1:], **schema)
    return params


def settings_from(params: dict[str, Any], names: Sequence[str]) -> dict[str, Any]:
    """The run's values of `names` (a conf may leave a nullable Param at None: the library's default)."""
    return {name: params[name] for name in names if name in params and params[name] is not None}

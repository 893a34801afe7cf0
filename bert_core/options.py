"""`option(...)`: a config field that carries its command-line flag and help with it.

The step configs (PretrainConfig, FinetuneConfig, ExportConfig, ...) are composed from small typed pieces
(OptimizerConfig, SquadOptions, RayTrainConfig, TrackingConfig); each field's default is written once, here
in the library; the CLI generates its flags (bert_pipeline/commands/config_flags.py) and the DAGs their Params
(operators/params.py) from the fields, so a flag, a Param, their default and help cannot drift apart, and a
setting means the same thing in every command and DAG.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

_UNSET: Any = dataclasses.MISSING


class Form:
    """The sections of the DAGs' trigger forms: a field's `section` says where the Param generated from it goes
    (operators/params.py gives each section its title and sentence, and orders the forms by them)."""

    DATA = "data"
    MODEL = "model"
    OPTIMIZATION = "optimization"
    SQUAD = "SQuAD"
    SCALE = "precision and scale"
    STORAGE = "storage and tracking"


def option(default: Any = _UNSET, help: str = "", *, default_factory: Any = _UNSET, group: str | None = None,
           flag: str | None = None, aliases: Sequence[str] = (), deprecated: Sequence[str] = (),
           choices: Sequence[Any] | None = None, metavar: str | None = None, default_help: str | None = None,
           negate: str | None = None, exclusive: str | None = None, positional: bool = False, const: Any = None,
           cli: bool = True, section: str | None = None, switch_help: str | None = None) -> Any:
    """A dataclass field with its flag's description.

    help: the flag's help (the default is appended, or `default_help` when the default is computed);
    group: the --help section; flag/aliases: the flag's name (default --field-name) and older names kept
    working; deprecated: older names kept working with a warning and left out of --help (a flag renamed
    after it shipped); negate: for a True-by-default bool, the flag that turns it off (e.g. --no-tracking),
    which `help` then describes, and switch_help what the field itself means when on (a DAG form's switch);
    exclusive: fields sharing this name are mutually exclusive (required when none has a default);
    positional: an argument, not a flag; const: the value of the flag given without one (an optional value);
    cli=False: not a flag at all (set by code); section: the trigger-form section (a `Form` value) of the DAG
    Param generated from the field (operators/params.py).
    """
    metadata = {"help": help, "group": group, "flag": flag, "aliases": tuple(aliases),
                "deprecated": tuple(deprecated), "choices": choices, "metavar": metavar,
                "default_help": default_help, "negate": negate, "exclusive": exclusive, "positional": positional,
                "const": const, "cli": cli, "section": section, "switch_help": switch_help}
    if default_factory is not _UNSET:
        return dataclasses.field(default_factory=default_factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def option_like(config_cls: type, name: str, default: Any, default_help: str | None = None) -> Any:
    """`config_cls`'s option `name` with another default: a step that composes a shared piece (e.g. fine-tuning's
    lr 2e-5 in OptimizerConfig, whose own default is None: the pretraining recipe's rule) keeps its flag and help."""
    parent = {f.name: f for f in dataclasses.fields(config_cls)}[name]
    meta = dict(parent.metadata)
    meta["default_help"] = default_help
    return dataclasses.field(default=default, metadata=meta)


def option_default(field: dataclasses.Field) -> Any:
    """The field's default (a default_factory called), or dataclasses.MISSING for a required field."""
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return field.default_factory()  # type: ignore[misc]
    return dataclasses.MISSING


def option_type(field: dataclasses.Field) -> tuple[str, bool]:
    """('int', True) for `int | None`: the base type's name and whether None is allowed (annotations are
    strings under `from __future__ import annotations`). For a union (`int | str`) the first type."""
    kinds, nullable = option_types(field)
    return kinds[0], nullable


def option_types(field: dataclasses.Field) -> tuple[list[str], bool]:
    """(['int', 'str'], False) for `int | str`: every base type's name and whether None is allowed."""
    text = field.type if isinstance(field.type, str) else getattr(field.type, "__name__", str(field.type))
    parts = [p.strip() for p in text.split("|")]
    return [p for p in parts if p != "None"] or ["str"], "None" in parts

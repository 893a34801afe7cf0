"""Command-line flags generated from a step's config dataclass (fields made with bert_core.options.option).

`add_config_arguments(parser, Config)` adds one flag per field, with the field's default, type, choices and
help; `config_from_args(Config, args)` builds the config back. Nothing about a flag is written here or in the
command modules, so a default, a flag and its help are written once, next to the field they set.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
from typing import Any

from bert_core.options import option_default, option_type, option_types

log = logging.getLogger(__name__)

_TYPES = {"int": int, "float": float, "str": str}
# The MLflow store a command uses when it names none, in the words of every --tracking-uri help
# (bert_core.io.tracking.default_tracking_uri, after bert_pipeline.embedded_home.use_stack_mlflow).
HOME_MLFLOW = ("$MLFLOW_TRACKING_URI, else the MLflow server of a stack up on $BERT_PIPELINE_HOME, else "
               "sqlite:///$BERT_PIPELINE_HOME/mlflow.db")


class _DeprecatedName(argparse.Action):
    """A flag's former name (option(deprecated=...)): sets the same field, with a warning naming the new flag."""

    def __init__(self, *args: Any, current: str, **kwargs: Any) -> None:
        self.current = current
        super().__init__(*args, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        log.warning("%s is deprecated; write %s", option_string, self.current)
        setattr(namespace, self.dest, values)


def _int_or_str(value: str) -> int | str:
    """For an `int | str` field (e.g. --num-workers 4 or MIN:MAX): an int when the value is one."""
    try:
        return int(value)
    except ValueError:
        return value


def _help(meta: dict[str, Any], default: Any, kind: str) -> str:
    """The flag's help with its default. The default is written into the text, not left to argparse's
    %(default)s: a given_only flag's argparse default is SUPPRESS, which argparse drops from the values it
    expands, so `%(default)s` made `--help` a KeyError traceback (`predict --help`)."""
    text = meta["help"].replace("%", "%%")
    if meta["default_help"]:
        return f"{text} (default: {meta['default_help'].replace('%', '%%')})"
    if kind == "bool" or default is dataclasses.MISSING or default is None:
        return text
    return f"{text} (default: {str(default).replace('%', '%%')})"


def cli_fields(config_cls: type) -> list[dataclasses.Field]:
    return [f for f in dataclasses.fields(config_cls) if f.metadata.get("cli", False)]


def add_config_arguments(parser: argparse.ArgumentParser, config_cls: type,
                         required: tuple[str, ...] = (), given_only: bool = False) -> None:
    """One flag per option field of `config_cls`, in field order, in --help sections by the fields' groups.
    `required`: fields that must be given although the config has a default for them. `given_only`: a flag not
    given leaves no attribute in the namespace (its default still shows in --help; config_from_args fills it in),
    for a command where a flag given its default value must be told apart from no flag."""
    groups: dict[str | None, Any] = {None: parser}
    for name in getattr(config_cls, "GROUPS", ()):  # the --help sections in the config's order
        groups[name] = parser.add_argument_group(name)
    exclusive: dict[str, argparse._MutuallyExclusiveGroup] = {}
    fields = cli_fields(config_cls)
    exclusive_required = {}
    for f in fields:
        name = f.metadata["exclusive"]
        if name:
            exclusive_required[name] = exclusive_required.get(name, True) and option_default(f) in (None, dataclasses.MISSING)
    for f in fields:
        meta = f.metadata
        group_name = meta["group"]
        if group_name not in groups:
            groups[group_name] = parser.add_argument_group(group_name)
        target = groups[group_name]
        if meta["exclusive"]:
            key = meta["exclusive"]
            if key not in exclusive:
                exclusive[key] = target.add_mutually_exclusive_group(required=exclusive_required[key])
            target = exclusive[key]
        default = option_default(f)
        kind, _nullable = option_type(f)
        kwargs: dict[str, Any] = {"help": _help(meta, default, kind)}
        if given_only:
            kwargs["default"] = argparse.SUPPRESS
        if meta["positional"]:
            target.add_argument(f.name, metavar=meta["metavar"] or f.name.upper(), **kwargs)
            continue
        names = [meta["flag"] or "--" + f.name.replace("_", "-"), *meta["aliases"]]
        if kind == "bool":
            if meta["deprecated"]:
                raise TypeError(f"{config_cls.__name__}.{f.name}: deprecated names are for flags taking a value")
            if meta["negate"]:
                switch = target.add_mutually_exclusive_group() if meta["aliases"] else target
                switch.add_argument(meta["negate"], dest=f.name, action="store_false", **kwargs)
                for alias in meta["aliases"]:  # the positive flag, kept where it was documented
                    switch.add_argument(alias, dest=f.name, action="store_true", help=argparse.SUPPRESS,
                                        **({"default": argparse.SUPPRESS} if given_only else {}))
            else:
                target.add_argument(*names, dest=f.name, action="store_true", **kwargs)
            continue
        kinds = option_types(f)[0]
        kwargs.update(dest=f.name, type=_int_or_str if kinds == ["int", "str"] else _TYPES.get(kind, str))
        if meta["const"] is not None:
            kwargs.update(nargs="?", const=meta["const"])
        if meta["choices"] is not None:
            kwargs["choices"] = list(meta["choices"])
        if meta["metavar"]:
            kwargs["metavar"] = meta["metavar"]
        if default is dataclasses.MISSING or f.name in required:
            if not meta["exclusive"]:
                kwargs["required"] = True
        elif not given_only:
            kwargs["default"] = default
        target.add_argument(*names, **kwargs)
        for old in meta["deprecated"]:  # hidden from --help; the default stays the field's (SUPPRESS: none here)
            target.add_argument(old, dest=f.name, type=kwargs["type"], choices=kwargs.get("choices"),
                                default=argparse.SUPPRESS, help=argparse.SUPPRESS, action=_DeprecatedName,
                                current=names[0])


def config_from_args(config_cls: type, args: argparse.Namespace, **overrides: Any) -> Any:
    """The config of the flags given (fields without a flag keep their defaults unless overridden)."""
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(config_cls) if hasattr(args, f.name)}
    return config_cls(**{**values, **overrides})


def use_home_mlflow(config: Any) -> None:
    """Before a step that logs to MLflow (pretrain, finetune) runs from the CLI without --tracking-uri or
    MLFLOW_TRACKING_URI: while a stack is up on the home ($BERT_PIPELINE_HOME, as `stack up` gives its Ray head and
    so every `ray job submit` job), its MLflow server is the home's MLflow, as for `run`, `demo` and `report`
    (embedded_home.use_stack_mlflow). The experiments that server made keep their artifacts at
    `mlflow-artifacts:/N`, which the home's sqlite file cannot reach: logging there trained the whole run and then
    failed with a traceback at the first artifact. With the server down and such experiments in the store, an error
    before any work says what to do."""
    if not getattr(config, "tracking", False) or getattr(config, "tracking_uri", None):
        return
    from bert_pipeline.embedded_home import use_stack_mlflow
    from bert_pipeline.stack.state import stack_home

    use_stack_mlflow(stack_home(None))

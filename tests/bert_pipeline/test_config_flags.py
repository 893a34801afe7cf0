"""The CLI's flags are generated from the step configs: every setting has one default, one help text, and
the same flag means the same thing in every command."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from bert_core.data.instances import ShardConfig
from bert_core.deploy.export import ExportConfig
from bert_core.finetune.config import FinetuneConfig, SquadOptions
from bert_core.pretrain.config import PretrainConfig
from bert_core.train.config import OptimizerConfig, RayTrainConfig, TrackingConfig
from bert_pipeline.commands import export, finetune, make_shards, predict, pretrain
from bert_pipeline.commands.config_flags import cli_fields, config_from_args

COMMANDS = {"pretrain": (pretrain, PretrainConfig), "finetune": (finetune, FinetuneConfig),
            "export": (export, ExportConfig), "make-shards": (make_shards, ShardConfig)}
MINIMAL = {
    "pretrain": ["--data", "shards", "--model", "bert_2_128_2", "--output", "out", "--num-steps", "10"],
    "finetune": ["sst-2", "--data-dir", "d", "--model", "m", "--output", "out"],
    "export": ["--task", "classification", "--output", "out", "--model", "m"],
    "make-shards": ["segmented", "--output", "out", "--vocab", "vocab.txt"],
}
REQUIRED = {
    "pretrain": dict(data="shards", model="bert_2_128_2", output="out", num_steps=10),
    "finetune": dict(task="sst-2", data_dir="d", model="m", output="out"),
    "export": dict(task="classification", output="out", model="m"),
    "make-shards": {},
}
SHARED = [f.name for piece in (OptimizerConfig, RayTrainConfig, TrackingConfig) for f in dataclasses.fields(piece)]


def parser_of(command) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="bert-pipeline")
    command.add_arguments(parser)
    return parser


def actions(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {option: action for action in parser._actions for option in action.option_strings}


@pytest.mark.parametrize("name", COMMANDS)
def test_flag_defaults_are_the_configs(name):
    """Parsing only the required flags gives the config's own defaults, field by field."""
    command, config_cls = COMMANDS[name]
    args = parser_of(command).parse_args(MINIMAL[name])
    assert config_from_args(config_cls, args) == config_cls(**REQUIRED[name])
    for field in cli_fields(config_cls):
        assert hasattr(args, field.name), f"{name}: no flag for {field.name}"


def test_every_field_has_help():
    for config_cls in (PretrainConfig, FinetuneConfig, ExportConfig, SquadOptions, ShardConfig):
        for field in cli_fields(config_cls):
            assert len(field.metadata["help"]) > 10, f"{config_cls.__name__}.{field.name}: no help"


def test_shared_flags_mean_the_same_in_pretrain_and_finetune():
    """Optimization, Ray Train and tracking flags come from the same pieces: same dest, type and choices."""
    pre, fine = actions(parser_of(pretrain)), actions(parser_of(finetune))
    shared_flags = [flag for flag, action in pre.items() if action.dest in SHARED]
    assert {"--adam-eps", "--epsilon", "--lr", "--warmup-ratio", "--optimizer", "--dtype", "--num-workers",
            "--use-gpu", "--storage", "--no-tracking", "--tracking-uri", "--accumulate"} <= set(shared_flags)
    for flag in shared_flags:
        a, b = pre[flag], fine[flag]
        if flag == "--num-workers":  # pretraining also takes an elastic MIN:MAX (its steps do not depend on it)
            assert (a.type("4"), a.type("1:4"), b.type("4")) == (4, "1:4", 4)
            continue
        assert (a.dest, a.type, a.choices, type(a)) == (b.dest, b.type, b.choices, type(b)), flag
    # Each step keeps its own default where the recipes differ, with the same help otherwise.
    assert pre["--lr"].default is None and fine["--lr"].default == 2e-5
    assert pre["--weight-decay"].help == fine["--weight-decay"].help


def test_pretrain_help_gives_the_default_learning_rate_as_a_number():
    """`pretrain --help` says where the lr rule lives and what it gives (bert_2_128_2 at the default batch)."""
    text = actions(parser_of(pretrain))["--lr"].help
    assert "bert_core/pretrain/recipe.py" in text and "lr 1.41e-03 for hidden 128, global batch 32" in text


def test_old_flag_names_keep_working():
    args = parser_of(finetune).parse_args(MINIMAL["finetune"] + ["--epsilon", "1e-8", "--optimizer", "adam"])
    cfg = config_from_args(FinetuneConfig, args)
    assert cfg.adam_eps == 1e-8 and cfg.optimizer_name() == "adamw"
    args = parser_of(pretrain).parse_args(MINIMAL["pretrain"] + ["--adam-eps", "1e-8", "--resume"])
    cfg = config_from_args(PretrainConfig, args)
    assert cfg.adam_eps == 1e-8 and cfg.resume == "latest"
    assert config_from_args(PretrainConfig, parser_of(pretrain).parse_args(MINIMAL["pretrain"])).resume is None
    shards = parser_of(make_shards)
    for flags, lower in (([], True), (["--cased"], False), (["--do-lower-case"], True)):
        assert config_from_args(ShardConfig, shards.parse_args(MINIMAL["make-shards"] + flags)).do_lower_case is lower
    with pytest.raises(SystemExit):
        shards.parse_args(MINIMAL["make-shards"] + ["--cased", "--do-lower-case"])


@pytest.mark.parametrize(("name", "old"), [("finetune", "--max-len"), ("export", "--seq-length")])
def test_renamed_flags_keep_working_with_a_warning(name, old, caplog, capsys):
    """The sequence length is --max-seq-length in every command; the shipped names still set it, with a
    warning, and are left out of --help."""
    command, config_cls = COMMANDS[name]
    parser = parser_of(command)
    with caplog.at_level("WARNING"):
        cfg = config_from_args(config_cls, parser.parse_args(MINIMAL[name] + [old, "48"]))
    assert cfg.max_seq_length == 48
    assert f"{old} is deprecated; write --max-seq-length" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING"):
        assert config_from_args(config_cls, parser.parse_args(MINIMAL[name] + ["--max-seq-length", "40"])
                                ).max_seq_length == 40
    assert caplog.text == ""
    assert config_from_args(config_cls, parser.parse_args(MINIMAL[name])) == config_cls(**REQUIRED[name])
    with pytest.raises(SystemExit):
        parser.parse_args(MINIMAL[name] + [old, "many"])  # the same type check as the flag's
    parser.print_help()
    text = capsys.readouterr().out
    assert "--max-seq-length" in text and old not in text


def test_finetune_help_gives_the_length_of_each_task_kind():
    text = actions(parser_of(finetune))["--max-seq-length"].help
    assert "(default: 128 for classification, regression and NER, 384 for SQuAD)" in text


def test_squad_options_are_one_object_in_finetune_export_and_predict():
    """One SquadOptions: its defaults are fine-tuning's, and predict's flags are generated from it."""
    defaults = SquadOptions()
    assert FinetuneConfig(task="squad", data_dir="d", model="m", output="o").squad_options() == defaults
    args = parser_of(predict).parse_args(["--export", "e", "in.json", "--output", "o"])
    assert config_from_args(SquadOptions, args) == defaults
    args = parser_of(predict).parse_args(["--export", "e", "in.json", "--output", "o", "--n-best-size", "5",
                                          "--version-2"])
    assert config_from_args(SquadOptions, args) == dataclasses.replace(defaults, n_best_size=5, version_2=True)


def test_predict_help_shows_the_squad_defaults(capsys):
    """predict's SQuAD flags leave no attribute when not given (argparse.SUPPRESS); their --help still gives each
    default. It was a KeyError traceback: argparse drops a SUPPRESS default from what `%(default)s` expands."""
    parser = parser_of(predict)
    with pytest.raises(SystemExit) as exit_:
        parser.parse_args(["--help"])
    assert exit_.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"(default: {SquadOptions().doc_stride})" in out and f"(default: {SquadOptions().n_best_size})" in out


def test_required_and_exclusive_flags(capsys):
    parser = parser_of(pretrain)
    with pytest.raises(SystemExit):
        parser.parse_args(MINIMAL["pretrain"] + ["--pretrained", "dir"])  # --model and --pretrained
    with pytest.raises(SystemExit):
        parser.parse_args(MINIMAL["pretrain"] + ["--epochs", "2"])  # --num-steps and --epochs
    with pytest.raises(SystemExit):
        parser_of(finetune).parse_args(["sst-2", "--model", "m", "--output", "o"])  # no --data-dir
    err = capsys.readouterr().err
    assert "--data-dir" in err
    with pytest.raises(SystemExit):
        parser_of(export).parse_args(MINIMAL["export"] + ["--optimizer", "sgd"])

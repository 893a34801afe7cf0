"""`bert-pipeline export`: an ONNX (optimised for ONNX Runtime) or torch.export graph plus what is needed to run
it; with --register, also a registered model version that serves the graph (`mlflow models serve`)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from bert_pipeline.commands.config_flags import add_config_arguments, config_from_args


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from bert_core.deploy.export import ExportConfig
    from bert_core.deploy.int8_gate import INT8_MAX_DROP_POINTS

    add_config_arguments(parser, ExportConfig)
    serving = parser.add_argument_group("serving the export from the registry")
    serving.add_argument("--register", metavar="NAME",
                         help="log the fine-tuned --model with this export as an MLflow model that runs the graph on "
                              "ONNX Runtime, and register it as a new version of NAME (its task's, e.g. bert-sst-2, or a "
                              "name of no task; another task's name is refused); its metric "
                              "tags are the --eval-data evaluation's, else the fine-tuning run's dev metrics. Needs an "
                              "fp32 ONNX export of a model fine-tuned by bert-pipeline (its task.json), best with "
                              "--dynamic-batch --dynamic-seq")
    serving.add_argument("--serve-int8", action="store_true",
                         help="with --register: the registered model serves the INT8 graph (needs --quantize int8 "
                              "and --eval-data). Its metric tags are the INT8 graph's evaluation, and it is refused "
                              f"if that is more than {INT8_MAX_DROP_POINTS:g} point below the fp32 graph's on the "
                              "task's main metric")
    serving.add_argument("--promote", action="store_true",
                         help="with --register: promote the new version to `champion` behind the usual gates (its "
                              "task's gate metrics above chance on the dev file they were scored on, and no worse "
                              "than the champion's on the same file), including the check that the served graph answers the model's scored dev examples "
                              "as they were scored")


def run(args: argparse.Namespace) -> int:
    from bert_core.deploy.export import ExportConfig, export
    from bert_core.deploy.export_evaluation import describe_evaluation
    from bert_core.errors import BertPipelineError

    cfg = config_from_args(ExportConfig, args)
    if args.promote and not args.register:
        raise BertPipelineError("--promote needs --register NAME")
    if args.serve_int8 and not (args.register and cfg.quantize == "int8" and cfg.eval_data):
        raise BertPipelineError("--serve-int8 needs --register NAME, --quantize int8 and --eval-data (the INT8 "
                                "graph's metrics are what is registered)")
    if args.register and (cfg.format != "onnx" or cfg.model is None):
        raise BertPipelineError("--register serves an ONNX export of a fine-tuned model: give --model and "
                                "--format onnx")
    if args.register:
        _registered_card(cfg, args.register)
    result = export(cfg)
    metrics = result.get("metrics", {})
    report = {"output": args.output, "files": [o["path"] for o in result["outputs"]],
              "parity": {k: v for k, v in metrics.items() if k.endswith("max_abs_diff")}}
    if "evaluation" in result:
        report["evaluation"] = result["evaluation"]
    if args.register:
        report["registry"] = _register(cfg, result, args.register, args.promote, args.serve_int8)
    print(json.dumps(report, indent=2))
    if "evaluation" in result:
        print(describe_evaluation(result["evaluation"]))
    return 0


def _register(cfg, result: dict, name: str, promote: bool, int8: bool = False) -> dict:
    """Register the export as a served version of `name`; its metrics: the export's evaluation (of the INT8
    graph when it serves that), else the dev metrics in the fine-tuning output's manifest (the model dir's
    parent). Promotion gates it as any version of its task: the task's gate metrics, chance level on the dev
    file the metrics were scored on, and that file's sha256 (only metrics of one dev file are compared)."""
    from bert_core.errors import BertPipelineError
    from bert_core.io import manifest
    from operators import registry

    model_dir, card = _registered_card(cfg, name)
    finetuned = _finetune_output(model_dir)
    if int8:
        from bert_core.deploy.int8_gate import servable_int8_evaluation

        try:
            metrics = servable_int8_evaluation(cfg.output)["int8"]
        except BertPipelineError as exc:
            raise BertPipelineError(f"--serve-int8: {exc}; nothing was registered (leave out --serve-int8 to "
                                    "register the fp32 graph)") from None
        source = "the export's INT8 evaluation on --eval-data"
    elif "evaluation" in result:
        metrics, source = result["evaluation"]["fp32"], "the export's evaluation on --eval-data"
    else:
        try:
            metrics, source = manifest.read(finetuned)["metrics"], "the fine-tuning run's dev metrics"
        except (FileNotFoundError, BertPipelineError):
            raise BertPipelineError(f"{cfg.model}: no metrics to register it with: pass --eval-data (and "
                                    "--eval-task) or export from a fine-tuning output's model/") from None
    chance, dev_sha256 = _dev_file_facts(cfg, card.task, finetuned, required=promote)
    tags = {"metrics_from": source, "export": str(cfg.output)}
    if dev_sha256:
        tags[registry.DEV_DATA_TAG] = dev_sha256
    # Under a name of its own the version is gated as its task's model is, by every promotion of it.
    tags[registry.GATES_TAG] = ",".join(registry.default_gates(_own_name(card), metrics))
    registered = registry.register_model_dir(model_dir, name, metrics, export_dir=cfg.output, quantized=int8,
                                             tags=tags, chance=chance)
    if promote:
        return registry.promote(name, registered["version"])
    return registered


def _registered_card(cfg, name: str):
    """(model dir, task card) of the model to register as `name`. It is registered under its own name
    (registry.model_name: bert-<task>, bert-squad2 for SQuAD 2.0) or a name the registry gives no model: under
    another model's name it would be compared with, and could replace, that model's champion. Checked before the
    export is written, and again before anything is logged."""
    from bert_core.errors import BertPipelineError
    from bert_core.finetune import task_card
    from bert_core.model.weights import resolve_model_dir
    from bert_core.tasks import catalog
    from operators import registry

    model_dir = resolve_model_dir(cfg.model)
    card = task_card.read_card(model_dir)
    if card is None:
        raise BertPipelineError(f"{cfg.model}: no task.json: --register needs a model fine-tuned by bert-pipeline "
                                "(the card says how to read and answer requests)")
    own = _own_name(card)
    try:
        named = catalog.get(name.removeprefix("bert-")).name
    except BertPipelineError:
        named = None
    # The names the registry itself gives (registry.model_name): only the model's own is accepted.
    registry_names = {registry.PRETRAINED, *([registry.model_name(named, v) for v in (False, True)] if named else [])}
    if name != own and name in registry_names:
        raise BertPipelineError(f"--register {name}: that is the registry's name for other models than this one, "
                                f"fine-tuned for {card.task}{' 2.0' if own == 'bert-squad2' else ''} (its "
                                f"task.json); register it as {own}; nothing was registered")
    return model_dir, card


def _own_name(card) -> str:
    """The registry's name for the model of `card` (bert-<task>, bert-squad2 for a SQuAD 2.0 model)."""
    from operators import registry

    return registry.model_name(card.task, bool(card.squad.get("version_2")))


def _finetune_output(model_dir: Path) -> str:
    """The fine-tuning output that `model_dir` is the model/ of: its parent directory, or for the cached copy of
    an s3:// model its parent prefix on S3 (nothing of the output but model/ is beside the cached copy)."""
    from bert_core.io import storage

    source = storage.source_uri(model_dir)
    if storage.is_s3(source):
        return source.rstrip("/").rsplit("/", 1)[0]
    return str(Path(source).parent)


def _dev_file_facts(cfg, task: str, finetuned: str, required: bool) -> tuple[dict[str, float] | None, str | None]:
    """(chance metrics, sha256) of the dev file the registered metrics were scored on: --eval-data, else the
    first file the fine-tuning run scored (its scored.json, in its data dir). `required` (promotion): an error
    when that file cannot be read, since a first version would otherwise be promoted with no chance bar."""
    from bert_core.errors import BertPipelineError
    from bert_core.finetune.step import SCORED, chance_of_output
    from bert_core.io import manifest, storage
    from bert_core.metrics.scoring import chance_metrics

    if cfg.eval_data is not None:
        return chance_metrics(cfg.eval_task or task, cfg.eval_data), manifest.sha256_file(cfg.eval_data)
    try:
        scored = json.loads(storage.read_text(storage.join(finetuned, SCORED)))
        data_dir = manifest.read(finetuned)["config"]["data_dir"]
        return chance_of_output(scored, storage.local_dir(data_dir), task)
    except (OSError, KeyError, IndexError, ValueError, BertPipelineError) as exc:
        if required:
            raise BertPipelineError(f"--promote: the dev file that {finetuned}'s metrics were scored on cannot be "
                                    f"read ({exc}), so chance level on it is unknown: pass --eval-data (and "
                                    "--eval-task); nothing was registered") from None
        return None, None

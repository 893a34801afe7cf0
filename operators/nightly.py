"""Task helpers of the `bert_nightly_regression` DAG: a pinned benchmark suite over the model registry.

Every night:
1. plan: for each registered task model (`bert-<task>` with pinned dev data), its `champion` version and its
   newest version when that is not the champion (the candidate);
2. evaluate each of them: download the version from the registry and re-score it on the pinned dev data
   (evaluation.rescore: fine-tuning's own evaluation code and the official scorers; the files' sha256 recorded);
3. run the speed benchmarks, in this task's process, each against transformers in the same run (the ratio is
   what is compared; absolute speeds depend on the machine's load): the fine-tuning step and inference
   (evaluation.model_throughput), the pretraining step at BERT-base size (evaluation.pretrain_throughput) and the
   time to the peer's held-out masked-LM accuracy at the small size (evaluation.pretrain_convergence);
4. compare: champions against the last night that passed, the speed ratios against their median over the last
   few nights that passed (NIGHTLY.speed_reference_nights: one night's ratio moves with the machine's load),
   candidates against their champion, with tolerances (evaluation.regression); write a Markdown report with
   history plots (PNG), log it all to the MLflow experiment `bert-nightly` (metrics, report, plots, results
   JSON, tag `nightly.status`) and fail the task when anything regressed.

A night whose pinned data changed (another sha256 than the last good night's) is not compared with it for
that task: the numbers would measure the data, not the models; the report says so. Defaults (tolerances,
benchmark sizes) are evaluation.settings.NIGHTLY's, as the DAG's Params are.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import logging
import tempfile
from pathlib import Path
from typing import Any

from evaluation.settings import NIGHTLY

log = logging.getLogger(__name__)

EXPERIMENT = "bert-nightly"
STATUS_TAG = "nightly.status"
HISTORY_NIGHTS = 14
# How far back a champion's figure looks for the last good night that scored it (a model left out of some nights).
QUALITY_REFERENCE_NIGHTS = 100
SPEED_KEYS = ("throughput/", "time_to_accuracy/")  # ratios to transformers measured in the same night
# Conf keys the form shipped under another name: still accepted, with a warning.
RENAMED = {"throughput_seq_len": "throughput_max_seq_length"}


def _bundled_data() -> dict[str, str]:
    from operators.locations import demo_data

    return {"sst-2": demo_data("sst2"), "squad": demo_data("squad")}


def pinned_data(params: dict[str, Any]) -> dict[str, str]:
    """Task (as the catalog names it) -> pinned dev data directory: the `data` param, else the bundled sets."""
    from bert_core.errors import BertPipelineError
    from bert_core.tasks import catalog as tasks

    data = {}
    for key, directory in (params.get("data") or {}).items():
        try:
            task = tasks.get(key).name
        except BertPipelineError as exc:
            raise BertPipelineError(f"data: {exc}") from None
        if not isinstance(directory, str) or not directory:
            raise BertPipelineError(f"data.{key}: expected a dev data directory (local or s3://), got {directory!r}")
        data[task] = directory
    return data or _bundled_data()


def check_conf(params: dict[str, Any]) -> None:
    """What a later task of the night would refuse, refused by its first task, naming the Param: the speed tasks
    otherwise ran for minutes (the BERT-base step and the time to accuracy take 7 min on 2 cores) before a misspelt
    architecture or a missing data directory failed the night."""
    from bert_core.errors import BertPipelineError
    from bert_core.io import storage
    from bert_core.model.zoo import architecture_config

    for task, directory in pinned_data(params).items():
        if not storage.exists(directory):
            raise BertPipelineError(f"data.{task}: {directory}: no such directory (the pinned dev data of {task})")
    names = [(f"{param}[{i}]", name) for param in ("throughput_configs", "pretrain_step_configs")
             for i, name in enumerate(params.get(param) or [])]
    if params.get("convergence_config"):
        names.append(("convergence_config", params["convergence_config"]))
    for param, name in names:
        try:
            architecture_config(name)
        except BertPipelineError as exc:
            raise BertPipelineError(f"{param}: {exc}") from None
    for param in ("convergence_corpus", "convergence_vocab"):
        if params.get(param) and not storage.exists(params[param]):
            raise BertPipelineError(f"{param}: {params[param]}: no such file or directory")


def plan(params: dict[str, Any]) -> list[dict[str, Any]]:
    """The night's work: which model versions to evaluate on which pinned data."""
    import difflib

    from bert_core.errors import BertPipelineError
    from bert_core.tasks import catalog as tasks
    from operators import registry
    from operators.run_records import tracking_uri_to_record
    from operators.tasks import ensure_experiment

    ensure_experiment(EXPERIMENT)
    data = pinned_data(params)
    wanted = list(params.get("models") or [])
    registered = registry.registered_names()
    for name in wanted:
        if name not in registered:
            close = difflib.get_close_matches(name, registered, n=1)
            raise BertPipelineError(
                f"models: {name!r} is not a registered model"
                + (f" (did you mean {close[0]}?)" if close else "")
                + (f"; the registry at {tracking_uri_to_record()} holds {', '.join(registered)}" if registered
                   else f"; the registry at {tracking_uri_to_record()} holds none (register one: bert_finetune, "
                        "or bert-pipeline export --register)"))
    names = wanted or [n for n in registered if n != registry.PRETRAINED]
    specs = []
    for name in names:
        task = name.removeprefix("bert-")
        try:
            task = tasks.get(task).name
        except BertPipelineError as exc:
            if wanted:
                raise BertPipelineError(f"models: {name} is not a task model (bert-<task>): {exc}") from None
            continue
        if task not in data:
            if wanted:
                raise BertPipelineError(f"models: {name} has no pinned data; add {task!r} to the `data` param")
            log.warning("%s: no pinned data for task %s (the `data` param); not benchmarked", name, task)
            continue
        versions = registry.latest_versions(name)
        if versions["champion"] is None:
            if wanted:
                raise BertPipelineError(f"models: {name} has no version with the alias 'champion'")
            log.warning("%s: no version with the alias 'champion'; not benchmarked", name)
            continue
        specs.append({"name": name, "task": task, "version": versions["champion"], "role": "champion",
                      "data_dir": data[task]})
        if versions["newest"] not in (None, versions["champion"]):
            tags = registry.version_tags(name, versions["newest"])
            specs.append({"name": name, "task": task, "version": versions["newest"], "role": "candidate",
                          "data_dir": data[task], "promotion": {"decision": tags.get("promotion.decision"),
                                                                 "reasons": tags.get("promotion.reasons")}})
    return specs


def evaluate_version(spec: dict[str, Any], work: str) -> dict[str, Any]:
    """Dev metrics of one registered version on its pinned data; returns `spec` with `metrics`, `data_sha256`
    (the dev files scored), `settings` and `predictions` (where the prediction files went)."""
    from bert_core.errors import BertPipelineError
    from bert_core.finetune.evaluate import settings_from_manifest
    from bert_core.io import manifest, storage
    from evaluation.rescore import dev_files_sha256, rescore
    from operators import registry

    output = registry.version_tags(spec["name"], spec["version"]).get("output")
    settings: dict[str, Any] = {}
    if output:
        try:
            settings = settings_from_manifest(manifest.read(output))
        except (FileNotFoundError, OSError, ValueError):  # the training output is gone: its model's card
            log.warning("%s v%s: no finetune manifest at %s; evaluating with its model directory's task card",
                        spec["name"], spec["version"], output)
    try:  # the pinned data's dev file, before the model is downloaded; its error names the Param
        dev_files_sha256(spec["task"], spec["data_dir"], bool(settings.get("version_2")))
    except BertPipelineError as exc:
        raise BertPipelineError(f"data.{spec['task']} (the pinned dev data {spec['name']} v{spec['version']} is "
                                f"scored on): {exc}") from None
    target = storage.join(work, "evaluations", f"{spec['name']}-v{spec['version']}")
    with registry.downloaded_model_dir(f"models:/{spec['name']}/{spec['version']}") as model_dir:
        if not settings:
            settings = card_settings(model_dir, f"{spec['name']} v{spec['version']}")
        scored = rescore(model_dir, spec["task"], spec["data_dir"], target, settings)
    log.info("%s v%s (%s): %s", spec["name"], spec["version"], spec["role"], json.dumps(scored["metrics"]))
    return {**spec, **scored, "settings": settings, "predictions": target}


def card_settings(model_dir: str | Path, label: str) -> dict[str, Any]:
    """The feature settings a model was fine-tuned and scored with, from its directory's task card (task.json): what
    a version without a finetune manifest is scored with (one registered by `export --register` has no `output`
    tag; a training output since deleted). It was scored at the task's defaults instead (max_seq_length 128 for a
    model trained and scored at 32, SQuAD's windows), silently when the version had no `output` tag."""
    from bert_core.finetune.evaluate import FEATURE_FIELDS
    from bert_core.finetune.task_card import read_card

    card = read_card(model_dir)
    if card is None:
        log.warning("%s: no finetune manifest and no task card (task.json); evaluating with the task's default "
                    "settings", label)
        return {}
    settings = {"max_seq_length": card.max_seq_length,
                **{k: v for k, v in card.squad.items() if k in FEATURE_FIELDS and card.kind == "squad"}}
    log.info("%s: no finetune manifest; evaluating with its task card's settings %s", label, json.dumps(settings))
    return settings


def throughput(work: str, configs: list[str] | None = None, steps: int | None = None,
               batch_size: int | None = None, max_seq_length: int | None = None, threads: int = 0
               ) -> dict[str, float]:
    """Run the throughput benchmark (evaluation.model_throughput) in this process; None: NIGHTLY's size. The
    report goes to `work`/model_throughput.json; returns {"throughput/<config>/<mode>": ours/transformers
    tokens/s ratio}.

    In-process: an Airflow task is a process of its own already (its torch threads and memory are the
    benchmark's), and the benchmark gives back the thread count it changes."""
    from bert_core.errors import BertPipelineError
    from bert_core.io import storage
    from bert_core.model.zoo import architecture_config
    from evaluation.model_throughput import measure_throughput

    given = dict(configs=tuple(configs) if configs is not None else None, steps=steps, batch_size=batch_size,
                 max_seq_length=max_seq_length, threads=threads)
    run = dataclasses.replace(NIGHTLY.throughput, **{k: v for k, v in given.items() if v is not None})
    for name in run.configs:
        try:
            architecture_config(name)
        except BertPipelineError as exc:
            raise BertPipelineError(f"throughput_configs: {exc}") from None
    report = measure_throughput(run, log=lambda line: log.info("[bench] %s", line))
    storage.write_text(storage.join(work, "model_throughput.json"), json.dumps(report, indent=2) + "\n")
    return {f"throughput/{row['config']}/{row['mode']}": float(row["ratio_ours_over_transformers"])
            for row in report["rows"]}


def pretrain_step_speed(work: str, configs: list[str] | None = None, steps: int | None = None,
                        batch_size: int | None = None, max_seq_length: int | None = None,
                        max_predictions: int | None = None, threads: int = 0) -> dict[str, float]:
    """The pretraining-step benchmark (evaluation.pretrain_throughput) in this process; None: NIGHTLY's size. The
    report goes to `work`/pretrain_throughput.json; returns {"throughput/pretrain_step/<config>": ours/transformers
    tokens/s ratio}, each system in its best precision on this machine."""
    from bert_core.errors import BertPipelineError
    from bert_core.io import storage
    from bert_core.model.zoo import architecture_config
    from evaluation.pretrain_throughput import measure_pretrain_throughput

    given = dict(configs=tuple(configs) if configs is not None else None, steps=steps, batch_size=batch_size,
                 max_seq_length=max_seq_length, max_predictions=max_predictions, threads=threads or None)
    run = dataclasses.replace(NIGHTLY.pretrain_throughput, **{k: v for k, v in given.items() if v is not None})
    for name in run.configs:
        try:
            architecture_config(name)
        except BertPipelineError as exc:
            raise BertPipelineError(f"pretrain_step_configs: {exc}") from None
    report = measure_pretrain_throughput(run, log=lambda line: log.info("[pretrain step] %s", line))
    storage.write_text(storage.join(work, "pretrain_throughput.json"), json.dumps(report, indent=2) + "\n")
    return {f"throughput/pretrain_step/{entry['config']}": float(entry["median_ratio_ours_over_transformers"])
            for entry in report["summary"]}


def time_to_accuracy(work: str, settings: dict[str, Any] | None = None, corpus: str | None = None,
                     vocab: str | None = None) -> dict[str, float]:
    """The time-to-accuracy benchmark (evaluation.pretrain_convergence) at one size in this process: `settings`
    are ConvergenceRun fields over NIGHTLY.convergence; corpus None: the bundled demo corpus; vocab None: the
    default model's vocab.txt. The report goes to `work`/pretrain_convergence.json; returns
    {"time_to_accuracy/<config>": the peer's training time over ours' time to the peer's final held-out
    accuracy, on the process-CPU clock (what other jobs on a shared worker cannot inflate); 0 when ours never
    reached it (infinitely slower: a regression against any night that got there)}."""
    from pathlib import Path

    from bert_core.errors import BertPipelineError
    from bert_core.io import storage
    from bert_core.model.zoo import architecture_config
    from evaluation.pretrain_convergence import measure_size
    from evaluation.settings import ConvergenceRun
    from operators.locations import default_model_dir, demo_data

    known = {f.name for f in dataclasses.fields(ConvergenceRun)}
    unknown = sorted(set(settings or {}) - known)
    if unknown:
        raise BertPipelineError(f"convergence settings: unknown {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    given = {k: tuple(v) if isinstance(v, list) else v for k, v in (settings or {}).items() if v is not None}
    run = dataclasses.replace(NIGHTLY.convergence, **given)
    try:
        architecture_config(run.config)
    except BertPipelineError as exc:
        raise BertPipelineError(f"convergence_config: {exc}") from None
    corpus = corpus or demo_data("corpus")
    vocab = vocab or str(Path(default_model_dir()) / "vocab.txt")
    with tempfile.TemporaryDirectory(prefix="bert-nightly-convergence-") as scratch:
        entry = measure_size(run, corpus, vocab, Path(scratch), log=lambda line: log.info("[convergence] %s", line))
    storage.write_text(storage.join(work, "pretrain_convergence.json"), json.dumps(entry, indent=2) + "\n")
    comparison = entry["comparison"]
    ratio = comparison["time_to_accuracy_ratio_cpu"]
    if ratio is None:
        log.warning("time to accuracy (%s): ours never reached the peer's final held-out masked-LM accuracy %.4f "
                    "(ours ended at %.4f)", run.config, comparison["peer_final_mlm_accuracy"],
                    comparison["ours_final_mlm_accuracy"])
    return {f"time_to_accuracy/{run.config}": 0.0 if ratio is None else float(ratio)}


def speed_group(key: str) -> str:
    """The benchmark a speed figure comes from: `pretrain_step`, `time_to_accuracy` or `throughput`."""
    if key.startswith("throughput/pretrain_step/"):
        return "pretrain_step"
    return "time_to_accuracy" if key.startswith("time_to_accuracy/") else "throughput"


def _good_nights(client, experiment_id: str, count: int) -> list[Any]:
    """The last `count` nights that passed, newest first."""
    return client.search_runs([experiment_id], filter_string=f"tags.`{STATUS_TAG}` = 'passed'",
                              order_by=["attributes.start_time DESC"], max_results=count)


def _not_benchmarked(scored: set[str]) -> list[str]:
    """A note per registered task model the night did not score, and why: a PASSED night says nothing of them."""
    from operators import registry

    notes = []
    for name in registry.registered_names():
        if name == registry.PRETRAINED or name in scored:
            continue
        why = ("it has no version with the alias 'champion'" if registry.latest_versions(name)["champion"] is None
               else "its task has no pinned data (the `data` param) or `models` leaves it out")
        notes.append(f"{name}: registered, not benchmarked tonight: {why}.")
    if not scored:
        notes.append("No model was scored tonight" + ("." if notes else ": the registry holds no task model "
                                                      "(bert_finetune, or bert-pipeline export --register)."))
    return notes


def _when(run: Any) -> str:
    return dt.datetime.fromtimestamp(run.info.start_time / 1000, tz=dt.UTC).isoformat(timespec="minutes")


def _history(client, experiment_id: str) -> list[Any]:
    runs = client.search_runs([experiment_id], filter_string=f"tags.`{STATUS_TAG}` != ''",
                              order_by=["attributes.start_time DESC"], max_results=HISTORY_NIGHTS - 1)
    return list(reversed(runs))


def compare_and_report(evaluated: list[dict[str, Any]], speed: dict[str, float], work: str,
                       quality_tolerance: float | None = None, throughput_tolerance: float | None = None,
                       time_to_accuracy_tolerance: float | None = None,
                       speed_reference_nights: int | None = None,
                       speed_settings: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """Compare tonight with the last good night (the speed ratios with their median over the last
    `speed_reference_nights` good nights) and candidates with champions; log to MLflow; raise on regression.
    A setting left None is NIGHTLY's. `speed_settings`: per speed group (`speed_group`), the benchmark's settings
    tonight; a night that measured a group with other settings is no reference for it (logged as params
    `speed_settings.<group>`)."""
    import mlflow

    from bert_core.errors import BertPipelineError
    from bert_core.io import storage
    from bert_core.io.tracking import build_tracker, standard_tags
    from evaluation.regression import (
        LOWER_IS_BETTER,
        compare,
        findings_json,
        median_reference,
        metric_name,
        plot_history,
        render_report,
    )
    from operators.tasks import ensure_experiment

    nights = speed_reference_nights if speed_reference_nights is not None else NIGHTLY.speed_reference_nights
    if nights < 1:
        raise BertPipelineError(f"speed_reference_nights: expected at least 1 night, got {nights}")
    tolerances = dataclasses.replace(NIGHTLY.tolerances, **{k: v for k, v in (
        ("quality", quality_tolerance), ("throughput", throughput_tolerance),
        ("time_to_accuracy", time_to_accuracy_tolerance)) if v is not None})
    champions = {s["name"]: s for s in evaluated if s["role"] == "champion"}
    candidates = {s["name"]: s for s in evaluated if s["role"] == "candidate"}
    tonight = {f"{name}/{k}": v for name, s in champions.items() for k, v in s["metrics"].items()}
    tonight.update(speed)
    pins = {f"data_sha256.{s['task']}.{f}": h for s in champions.values() for f, h in s["data_sha256"].items()}
    settings_params = {f"speed_settings.{group}": json.dumps(values, sort_keys=True, default=str)
                       for group, values in (speed_settings or {}).items()}

    ensure_experiment(EXPERIMENT)
    tracker = build_tracker(True, experiment=EXPERIMENT, run_name="nightly")
    client = mlflow.MlflowClient(tracker.tracking_uri)
    # Newest first. The speed ratios' window is the last `nights` of them; a champion's figure is compared with the
    # newest of them that scored it: a night that skipped a model (`models` naming others, its evaluation skipped)
    # would otherwise leave it no reference, and the next night's drop would pass unseen.
    passed = _good_nights(client, tracker.experiment_id, max(nights, QUALITY_REFERENCE_NIGHTS))
    good = passed[:nights]
    last = passed[0] if passed else None
    history = _history(client, tracker.experiment_id)
    notes: list[str] = []
    sections = []
    if last is None:
        notes.append("No earlier night passed: tonight is the first reference; nothing compared night over night.")
        vs_last = []
    else:
        reference = {}
        for key in (k for k in tonight if k.startswith(SPEED_KEYS)):
            # Only nights that measured it as tonight does: a ratio at another batch or length is another figure.
            group = speed_group(key)
            same = [r for r in good if r.data.params.get(f"speed_settings.{group}", settings_params.get(
                f"speed_settings.{group}")) == settings_params.get(f"speed_settings.{group}")]
            if len(same) < len(good) and any(key in r.data.metrics for r in good if r not in same):
                notes.append(f"{key}: {len(good) - len(same)} of the last {len(good)} good night(s) measured it with "
                             f"other {group} settings; not its reference.")
            reference.update(median_reference([dict(r.data.metrics) for r in same], [key]))
        keys = []
        for key in sorted(tonight):
            model = key.split("/", 1)[0]
            if key.startswith(SPEED_KEYS) or model not in champions:
                keys.append(key)
                continue
            source = next((r for r in passed if key in r.data.metrics), None)
            if source is None:
                notes.append(f"{key}: no earlier good night scored it; tonight is its first reference.")
                continue
            task = champions[model]["task"]
            old = {k: v for k, v in source.data.params.items() if k.startswith(f"data_sha256.{task}.")}
            new = {k: v for k, v in pins.items() if k.startswith(f"data_sha256.{task}.")}
            if old and old != new:
                notes.append(f"{key}: the pinned {task} data changed since the last good night that scored it; "
                             "not compared.")
                continue
            reference[key] = source.data.metrics[key]
            if source is not last:
                notes.append(f"{key}: against MLflow run {source.info.run_id} ({_when(source)}), the last good "
                             "night that scored it.")
            keys.append(key)
        vs_last = [f for f in compare(tonight, reference, tolerances, keys) if f.reference is not None]
        when = _when(last)
        sections.append(("Tonight against the last good night",
                         f"Champions on the pinned data and throughput ratios, against MLflow run {last.info.run_id} "
                         f"({when}). Versions tonight: "
                         + (", ".join(f"{n} v{s['version']}" for n, s in sorted(champions.items())) or "none") + ".",
                         [f for f in vs_last if not f.key.startswith(SPEED_KEYS)]))
        sections.append((f"Speed against the last {len(good)} good night(s)",
                         f"Each ratio against its median over the last {len(good)} good night(s) (up to "
                         f"{nights}: one night's ratio moves with the machine's load). "
                         "Ratios of ours to transformers measured in the same run: tokens/s of the fine-tuning step "
                         "and inference (`throughput/<config>/<mode>`, evaluation.model_throughput) and of the "
                         "pretraining step (`throughput/pretrain_step/<config>`, evaluation.pretrain_throughput); the "
                         "peer's training time over ours' time to its final held-out masked-LM accuracy "
                         "(`time_to_accuracy/<config>`, CPU clock, evaluation.pretrain_convergence).",
                         [f for f in vs_last if f.key.startswith(SPEED_KEYS)]))
    vs_champion = []
    # Which comparison a regressed key comes from, for the task's error (the report has it in its headings).
    versus = {f"{name}/{k}": f" (champion v{s['version']} against the last good night)"
              for name, s in champions.items() for k in s["metrics"]}
    for name, cand in sorted(candidates.items()):
        champ = champions[name]
        # Keyed as the MLflow metric of the candidate (`candidate/<model>/<metric>`), never as the champion's own
        # `<model>/<metric>`: a candidate's regression read as the served champion's in the verdict and the error.
        prefix = f"candidate/{name}"
        found = compare({f"{prefix}/{k}": v for k, v in cand["metrics"].items()},
                        {f"{prefix}/{k}": v for k, v in champ["metrics"].items()}, tolerances)
        promotion = cand.get("promotion") or {}
        if promotion.get("decision") == "rejected":
            # Promotion already kept it from serving: shown, not counted, or the night would stay red for a version
            # nobody serves until a newer one is registered.
            found = [dataclasses.replace(f, regressed=False, note="; ".join(filter(None, [f.note, "rejected at "
                                                                                            "promotion"])))
                     for f in found]
            notes.append(f"{name}: candidate v{cand['version']} was rejected at promotion "
                         f"({promotion.get('reasons') or 'no reason recorded'}): its figures against champion "
                         f"v{champ['version']} are shown, not counted.")
        else:
            note = f"{name}: candidate v{cand['version']} against champion v{champ['version']}."
            if any(f.regressed for f in found):
                # What the one on call can do about a worse version nobody decided on: it fails every night else.
                note += (f" It was registered without a promotion decision, so it is judged each night until a newer "
                         f"version is registered or it is decided: `bert-pipeline promote {name} {cand['version']} "
                         f"--reject 'WHY'` (models:/{name}/{cand['version']}).")
            notes.append(note)
        vs_champion += found
        versus.update({f.key: f" (candidate v{cand['version']} against champion v{champ['version']})" for f in found})
    sections.append(("Newest candidates against their champions",
                     "The newest registered version of each model, on the same pinned data as its champion.",
                     vs_champion))
    regressions = [f for _, _, findings in sections for f in findings if f.regressed]
    status = "failed" if regressions else "passed"
    # Every value measured tonight, the candidates' too: the report's first table (a first night compares nothing).
    measured = {**tonight, **{f"candidate/{n}/{k}": v for n, s in candidates.items() for k, v in s["metrics"].items()}}
    notes += _not_benchmarked(set(champions))
    if not speed:
        notes.append("No speed benchmark ran tonight (throughput_configs, pretrain_step_configs and "
                     "convergence_config empty).")

    with tempfile.TemporaryDirectory(prefix="bert-nightly-report-") as scratch:
        out = Path(scratch)
        plot_keys = sorted(measured)
        # Not `nights` (the setting, logged as the param speed_reference_nights below): the history plotted, each
        # night by its start (UTC), failed ones marked; tonight's candidates beside their champions, and where each
        # figure would have regressed.
        # A model's figures of a night scored on other pinned data are another measure: left out of its plot.
        def same_data(run: Any, key: str) -> bool:
            model = key.removeprefix("candidate/").split("/", 1)[0]
            if model not in champions:
                return True
            prefix = f"data_sha256.{champions[model]['task']}."
            old = {k: v for k, v in run.data.params.items() if k.startswith(prefix)}
            return not old or old == {k: v for k, v in pins.items() if k.startswith(prefix)}

        plotted = [{"label": _when(r)[5:16].replace("T", " "),
                    "metrics": {k: v for k, v in r.data.metrics.items() if same_data(r, k)},
                    "status": r.data.tags.get(STATUS_TAG)} for r in history]
        other_data = sum(1 for r, night in zip(history, plotted) if len(night["metrics"]) < len(r.data.metrics))
        if other_data:
            notes.append(f"The history plots leave out the figures of {other_data} earlier night(s) scored on other "
                         "pinned data.")
        plotted.append({"label": "tonight", "metrics": measured, "status": status})
        floors = {f.key: (f.reference + f.allowed_drop if metric_name(f.key) in LOWER_IS_BETTER
                          else f.reference - f.allowed_drop)
                  for _, _, findings in sections for f in findings
                  if f.reference is not None and f.allowed_drop is not None}
        plots = plot_history(plotted, plot_keys, out / "plots", floors) if plot_keys else []
        report = render_report("bert-pipeline nightly regression", sections, notes,
                               [f"plots/{p.name}" for p in plots], measured)
        (out / "report.md").write_text(report + "\n")
        results = {"status": status, "tonight": tonight, "candidates": candidates, "champions": champions,
                   "last_good_run": last.info.run_id if last else None,
                   "speed_reference_runs": [r.info.run_id for r in good], "tolerances": vars(tolerances),
                   "findings": findings_json([f for _, _, fs in sections for f in fs]), "notes": notes,
                   "mlflow_run_id": tracker.run_id}
        (out / "results.json").write_text(json.dumps(results, indent=2, default=str) + "\n")

        tracker.set_tags({**standard_tags(None), STATUS_TAG: status, "nightly.regressions": str(len(regressions))})
        tracker.log_params({**pins, **settings_params, "quality_tolerance": tolerances.quality,
                            "throughput_tolerance": tolerances.throughput,
                            "time_to_accuracy_tolerance": tolerances.time_to_accuracy,
                            "speed_reference_nights": nights,
                            **{f"version.{n}.{s['role']}": s["version"] for n, s in
                               [*champions.items(), *candidates.items()]}})
        tracker.log_metrics(tonight, step=0)
        tracker.log_metrics({f"candidate/{n}/{k}": v for n, s in candidates.items() for k, v in s["metrics"].items()},
                            step=0)
        for path in (out / "report.md", out / "results.json"):
            tracker.log_artifact(path)
        for path in plots:
            tracker.log_artifact(path, "plots")
        target = storage.join(work, "report")
        with storage.atomic_output_dir(target, overwrite=True) as dest:
            for path in [out / "report.md", out / "results.json", *plots]:
                rel = path.relative_to(out)
                (dest / rel).parent.mkdir(parents=True, exist_ok=True)
                (dest / rel).write_bytes(path.read_bytes())
    tracker.end("FAILED" if regressions else "FINISHED")
    summary = {"status": status, "mlflow_run_id": tracker.run_id, "report": storage.join(target, "report.md"),
               "regressions": [f.key for f in regressions]}
    if regressions:
        # A worse candidate nobody decided on fails every night until someone does: the error says how.
        undecided = sorted({f.key.split("/")[1] for f in regressions if f.key.startswith("candidate/")})
        decide = "".join(f"; to decide on candidate {n} v{candidates[n]['version']}: bert-pipeline promote {n} "
                         f"{candidates[n]['version']} --reject 'WHY'" for n in undecided)
        raise BertPipelineError("nightly regression: " + "; ".join(
            f"{f.key} {'missing' if f.current is None else f'{f.current:.6g}'} vs {f.reference:.6g} (allowed drop "
            f"{f.allowed_drop:.3g}){versus.get(f.key, '')}" for f in regressions) + decide
            + f"; report: {summary['report']}")
    log.info("nightly regression passed; report %s (MLflow run %s)", summary["report"], tracker.run_id)
    return summary

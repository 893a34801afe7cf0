"""MLflow model registry: register a logged model as a new version, and promote it behind metric gates.

Registered models are `bert-pretrained` and `bert-<task>` (ARCHITECTURE §7; SQuAD 2.0: `bert-squad2`,
model_name). A version carries its
metrics as tags (`metric.<name>`), so promotion compares recorded numbers, not whatever a run logged
later. `promote` moves the alias `champion` to the candidate only when every gate metric is no worse
than the current champion's and at or above the task's floor; the champion it replaces gets the
alias `previous`. Every decision is written to the candidate's tags (`promotion.*`) and returned as a
small JSON-able report (also written to a file when asked). Promotions of one model are serialized by a lock in
the registry itself (operators.promotion_lock), so concurrent runs never move the champion backwards.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

CHAMPION = "champion"
PREVIOUS = "previous"
PRETRAINED = "bert-pretrained"
METRIC_TAG = "metric."
# What a model that ignores its input scores on the dev data the version's metrics came from
# (bert_core.metrics.scoring.chance_metrics), recorded at registration so that every later promotion of the
# version (the DAG's, `export --promote`, `bert-pipeline promote`) applies the same chance check.
CHANCE_TAG = "chance."
# The gate metrics of a version registered under a name that is not its task's (`export --register NAME`); other
# versions are gated by their name (default_gates).
GATES_TAG = "gates"
# The start of the promotion.reasons of a version a person rejected (`bert-pipeline promote --reject`).
REJECTED_BY_HAND = "rejected by hand: "
# Metrics where lower is better; every other gate metric is higher-is-better.
LOWER_IS_BETTER = frozenset({"loss", "mlm_loss", "nsp_loss"})
# Gate metrics per registered model when the caller names none (fine-tuned tasks: the task's main metric).
DEFAULT_GATES: dict[str, tuple[str, ...]] = {
    PRETRAINED: ("mlm_accuracy",),
    "bert-squad": ("f1", "exact_match"),
    "bert-squad2": ("f1", "exact"),  # SQuAD 2.0's official scorer says "exact" where v1.1's says "exact_match"
    "bert-sts-b": ("pearson", "spearman"),
    "bert-mrpc": ("f1", "accuracy"),
}
# Floors: the least a candidate must reach to be promoted at all (chance level for the toy-sized tasks).
# A floor may name a metric that is not a gate: it is checked, but not compared with the champion.
# bert-pretrained: held-out masked-LM accuracy at least 5 points above always predicting the most
# frequent masked token of the same data (pretrain's `mlm_accuracy_chance`); a run stuck at the
# unigram stage (e.g. 0.08 against 0.063) stays below it.
PRETRAINED_MIN_LIFT = 0.05
DEFAULT_FLOORS: dict[str, dict[str, float]] = {
    "bert-sst-2": {"accuracy": 0.5},
    "bert-squad": {"f1": 0.0},
    "bert-squad2": {"f1": 0.0},
    PRETRAINED: {"mlm_accuracy_over_chance": PRETRAINED_MIN_LIFT},
}


# The sha256 of the dev file a version's metrics were scored on (the evaluate step's gold file): metrics of two
# dev files (a changed dev set, or SQuAD 1.1 and 2.0 under one bert-squad in a registry older than bert-squad2)
# cannot be compared.
DEV_DATA_TAG = "dev_sha256"


def model_name(task: str | None, version_2: bool = False) -> str:
    """`bert-<task>` (lower-case, canonical task name) or `bert-pretrained` for None / "pretrained". A SQuAD 2.0
    model (`version_2`) is `bert-squad2`: its metrics, on another dev file with unanswerable questions, cannot be
    compared with a SQuAD 1.1 model's, so each version has its own champion."""
    if task is None or task.lower() in ("pretrained", "pretrain", PRETRAINED):
        return PRETRAINED
    from bert_core.tasks import catalog as tasks

    name = tasks.get(task).name
    return "bert-squad2" if name == "squad" and version_2 else f"bert-{name}"


# A registry made before bert-squad2 existed may hold SQuAD 2.0 versions under bert-squad: gated on 2.0's names.
SQUAD_V2_NAMES = {"exact_match": "exact"}


def default_gates(name: str, candidate: dict[str, float] | None = None) -> tuple[str, ...]:
    """The gates of `name` when the caller names none; `candidate`: its metrics, which say a SQuAD model's version."""
    if name in DEFAULT_GATES:
        gates = DEFAULT_GATES[name]
        if candidate is not None and name == "bert-squad" and "exact_match" not in candidate:
            gates = tuple(SQUAD_V2_NAMES.get(gate, gate) for gate in gates)
        return gates
    from bert_core.tasks import catalog as tasks

    return (tasks.get(name.removeprefix("bert-")).main_metric,)


def _client(tracking_uri: str | None):
    import mlflow
    from mlflow import MlflowClient

    from bert_core.io.tracking import default_tracking_uri

    uri = tracking_uri or default_tracking_uri()
    mlflow.set_tracking_uri(uri)
    return MlflowClient(tracking_uri=uri, registry_uri=uri)


def register(run_id: str, name: str, metrics: dict[str, float] | None = None, tags: dict[str, str] | None = None,
             artifact: str = "model", tracking_uri: str | None = None,
             chance: dict[str, float] | None = None) -> dict[str, Any]:
    """Register the model logged in `run_id` under the name `artifact` as a new version of `name`.

    The version's source is the logged model's own URI (models:/m-...): MLflow 3 keeps a logged model apart from
    the run's artifacts. The registered model is created once, race-free; concurrent registrations each get their
    own version (the store numbers them in a transaction). Returns {"name", "version", "run_id", "source",
    "metrics"}. The metrics become `metric.<k>` tags; `chance`, the chance level of the dev data they were scored
    on, `chance.<k>` tags (what promotion's chance check reads)."""
    from bert_core.errors import BertPipelineError
    from operators.promotion_lock import ensure_registered_model

    client = _client(tracking_uri)
    ensure_registered_model(client, name, f"BERT models registered by bert-pipeline ({name})")
    run = client.get_run(run_id)
    logged = client.search_logged_models(experiment_ids=[run.info.experiment_id],
                                         filter_string=f"source_run_id = '{run_id}' AND name = '{artifact}'",
                                         order_by=[{"field_name": "creation_time", "ascending": False}])
    if not logged:
        raise BertPipelineError(f"MLflow run {run_id} has no logged model named {artifact!r}: nothing to register "
                                f"as {name} (was the run's model logged with log_model_dir?)")
    model_id = logged[0].model_id
    all_tags = {f"{METRIC_TAG}{k}": repr(float(v)) for k, v in (metrics or {}).items()}
    all_tags.update({f"{CHANCE_TAG}{k}": repr(float(v)) for k, v in (chance or {}).items()})
    all_tags.update(tags or {})
    all_tags.setdefault("run_id", run_id)
    version = client.create_model_version(name, f"models:/{model_id}", run_id=run_id, tags=all_tags,
                                          model_id=model_id)
    _link_logged_model(client, model_id, name, str(version.version))
    log.info("registered %s version %s from run %s (logged model %s)", name, version.version, run_id, model_id)
    return {"name": name, "version": str(version.version), "run_id": run_id, "source": version.source,
            "metrics": {k: float(v) for k, v in (metrics or {}).items()}}


def _link_logged_model(client, model_id: str, name: str, version: str) -> None:
    """List the version on its logged model (the `mlflow.modelVersions` tag the MLflow UI shows), as
    mlflow.register_model does; a tracking server has already done it, a database store has not."""
    from mlflow.utils.mlflow_tags import MLFLOW_MODEL_VERSIONS

    entry = {"name": name, "version": version}
    listed = json.loads(client.get_logged_model(model_id).tags.get(MLFLOW_MODEL_VERSIONS) or "[]")
    if entry not in listed:
        client.set_logged_model_tags(model_id, {MLFLOW_MODEL_VERSIONS: json.dumps([*listed, entry])})


def register_model_dir(model_dir: str | Path, name: str, metrics: dict[str, float] | None = None,
                       tags: dict[str, str] | None = None, export_dir: str | Path | None = None,
                       experiment: str = "bert-export", tracking_uri: str | None = None,
                       quantized: bool = False, chance: dict[str, float] | None = None) -> dict[str, Any]:
    """Log a model directory (with `export_dir`: served through that export's graph; with `quantized`, its
    INT8 graph) in a new run of `experiment` and register it as a new version of `name`; promotion then
    checks that this artifact answers the model's check examples as they were scored (check_examples.json;
    for INT8, the graph's own answers recorded when it was logged), as for any version. An INT8 graph is only
    registered when its export's evaluation shows it loses at most INT8_MAX_DROP_POINTS (an error otherwise,
    before anything is logged)."""
    import functools

    from bert_core.deploy.mlflow_model import pyfunc_spec
    from bert_core.io.tracking import MlflowTracker, ensure_experiment

    if quantized:
        from bert_core.deploy.int8_gate import servable_int8_evaluation
        from bert_core.errors import BertPipelineError

        if export_dir is None:
            raise BertPipelineError("serving the INT8 graph needs an export (export_dir) made with --quantize int8")
        servable_int8_evaluation(export_dir)

    ensure_experiment(experiment, tracking_uri)
    tracker = MlflowTracker(experiment, tracking_uri,
                            pyfunc=functools.partial(pyfunc_spec, export_dir=export_dir, quantized=quantized))
    served_by = ("onnxruntime-int8" if quantized else "onnxruntime") if export_dir else "pytorch"
    try:
        tracker.set_tags({"model_dir": str(model_dir), "served_by": served_by,
                          **({"export_dir": str(export_dir)} if export_dir else {})})
        tracker.log_model_dir(model_dir)
    except BaseException:
        tracker.end("FAILED")
        raise
    tracker.end()
    all_tags = {"served_by": served_by, **(tags or {})}
    return register(tracker.run_id, name, metrics, tags=all_tags, tracking_uri=tracking_uri, chance=chance)


def version_metrics(client, name: str, version: str, prefix: str = METRIC_TAG) -> dict[str, float]:
    """The version's recorded metrics (`metric.<k>` tags); with prefix=CHANCE_TAG, their chance levels."""
    tags = client.get_model_version(name, str(version)).tags
    return {k[len(prefix):]: float(v) for k, v in tags.items() if k.startswith(prefix)}


def current_version(client, name: str, alias: str) -> str | None:
    from mlflow.exceptions import MlflowException

    try:
        return str(client.get_model_version_by_alias(name, alias).version)
    except MlflowException:
        return None


def _worse(metric: str, candidate: float, reference: float) -> bool:
    return candidate > reference if metric in LOWER_IS_BETTER else candidate < reference


def decide(candidate: dict[str, float], champion: dict[str, float] | None, gates: tuple[str, ...],
           floors: dict[str, float], chance: dict[str, float] | None = None,
           chance_answer: str = "the dev set's most frequent label, a constant score, no answer or no entity",
           ) -> tuple[bool, list[str]]:
    """(promote?, reasons). Pure: the rule itself, without MLflow. `chance`: what a model that ignores its input
    scores on the same dev data (bert_core.metrics.scoring.chance_metrics); a gate metric must beat it, so that
    a first model at chance (no champion to compare with, no floor for its task) is not promoted. `chance_answer`:
    that model's answer in words, for the reason."""
    reasons: list[str] = []
    for metric in dict.fromkeys([*gates, *floors]):
        value = candidate.get(metric)
        if value is None or math.isnan(value):
            reasons.append(f"{metric}: the candidate has no value")
            continue
        floor = floors.get(metric)
        if floor is not None and _worse(metric, value, floor):
            reasons.append(f"{metric}: {value:.6g} is below the floor {floor:.6g}")
        level = (chance or {}).get(metric)
        if metric in gates and level is not None and not _worse(metric, level, value):
            reasons.append(f"{metric}: {value:.6g} is no better than chance {level:.6g} (a model that ignores its "
                           f"input: {chance_answer})")
        if metric in gates and champion is not None and metric in champion and _worse(metric, value, champion[metric]):
            reasons.append(f"{metric}: {value:.6g} is worse than the champion's {champion[metric]:.6g}")
    return not reasons, reasons


def promote(name: str, version: str, gates: list[str] | tuple[str, ...] | None = None,
            floors: dict[str, float] | None = None, tracking_uri: str | None = None,
            report_path: str | Path | None = None, check_serving: bool = True,
            override: str | None = None) -> dict[str, Any]:
    """Move `champion` to `name`/`version` if its gates pass; the replaced champion becomes `previous`.

    The gates: every gate metric no worse than the champion's, at or above the model's floors, better than chance
    on its dev data (the version's `chance.<k>` tags) and scored on the champion's dev file; for bert-pretrained,
    metrics measured on held-out data (its `metrics_on` tag, set at registration: a pretrained model scored on
    its own training data proves nothing).

    check_serving: before the alias moves, the registered pyfunc is loaded as `mlflow models serve` loads it
    and answers the dev examples its evaluation scored; any answer that differs blocks the promotion.

    override: a person's reason to promote it whatever the metric gates say (a rollback to an older version, a
    champion scored on other data); the serving check still applies, and the gates' findings are recorded
    with the reason.

    Promotions of one model run one at a time, on any machine (operators.promotion_lock, a lock in the registry
    itself): the champion is read, compared with and moved inside the lock, so two runs promoting at once leave
    the better candidate as champion whatever order they finish in, and the alias never moves to a worse version.
    The serving check (seconds: a download and a model load) runs before the lock is taken, when a first look at
    the champion says the candidate would win.

    The decision is recorded as `promotion.*` tags on the candidate and returned as a report dict
    (written as JSON to report_path when given).
    """
    from bert_core.io.manifest import now
    from operators import promotion_lock

    client = _client(tracking_uri)
    version = str(version)
    registered = registered_version(client, name, version)
    candidate = version_metrics(client, name, version)
    chance = version_metrics(client, name, version, prefix=CHANCE_TAG)
    recorded = registered.tags.get(GATES_TAG)
    gates = tuple(gates or (recorded.split(",") if recorded else default_gates(name, candidate)))
    floors = dict(DEFAULT_FLOORS.get(name, {}) if floors is None else floors)

    def judge(served: dict[str, Any] | None) -> tuple[str | None, dict[str, float] | None, bool, list[str]]:
        champion_version, champion, promoted, reasons = _judge(
            client, name, version, candidate, gates, floors,
            registered.tags.get("metrics_on") if name == PRETRAINED else "held-out", served, chance,
            registered.tags.get(DEV_DATA_TAG))
        decided = registered.tags.get("promotion.reasons", "")
        if promoted and not override and decided.startswith(REJECTED_BY_HAND) and champion_version != version:
            # A person's decision holds until a person overrides it (a scripted promote must not undo it).
            promoted, reasons = False, [f"it was {decided}; only a promotion with an override serves it"]
        if override and champion_version != version:
            if promoted:
                reasons = [*reasons, f"promoted by hand: {override}"]
            elif not (served or {}).get("problems"):
                promoted, reasons = True, [f"promoted by hand ({override}) over the gates: " + "; ".join(reasons)]
        return champion_version, champion, promoted, reasons

    served: dict[str, Any] | None = None
    while True:
        if check_serving and served is None:
            champion_version, _, promoted, _ = judge(None)
            if promoted and champion_version != version:
                served = serving_check(name, version)
        with promotion_lock.held(client, name, version, registered.run_id) as ticket:
            champion_version, champion, promoted, reasons = judge(served)
            if promoted and check_serving and served is None and champion_version != version:
                continue  # the champion was moved (by hand) since the first look: check serving, then judge again
            report = {
                "name": name, "candidate": version, "champion_before": champion_version,
                "promoted": promoted, "champion_after": version if promoted else champion_version,
                "previous_after": champion_version if promoted and champion_version != version
                else current_version(client, name, PREVIOUS),
                "gates": list(gates), "floors": floors, "chance": chance, "candidate_metrics": candidate,
                "champion_metrics": champion, "reasons": reasons, "decided_at": now(), "serving_check": served,
            }
            ticket.check()
            if promoted and champion_version != version:
                if champion_version is not None:
                    client.set_registered_model_alias(name, PREVIOUS, champion_version)
                    client.set_model_version_tag(name, champion_version, "promotion.superseded_by", version)
                client.set_registered_model_alias(name, CHAMPION, version)
            _record_decision(client, name, version, "promoted" if promoted else "rejected", reasons,
                             champion_version, gates, report["decided_at"])
            break
    log.info("%s version %s: %s (%s)", name, version, "promoted to champion" if promoted else "not promoted",
             "; ".join(reasons))
    return _written(report, report_path)


def _written(report: dict[str, Any], report_path: str | Path | None) -> dict[str, Any]:
    """The decision report, also written as JSON to report_path (local or s3://) when given."""
    if report_path is not None:
        from bert_core.io import storage
        storage.write_text(str(report_path), json.dumps(report, indent=2) + "\n")
        report["report_path"] = str(report_path)
    return report


def reject(name: str, version: str, reason: str, tracking_uri: str | None = None,
           report_path: str | Path | None = None) -> dict[str, Any]:
    """Record a person's decision that `name`/`version` is not to be served (`promotion.decision` = rejected, with
    the reason): the nightly then shows its figures without failing on them. The champion cannot be rejected:
    promote another version (with an override for a rollback) first."""
    from bert_core.errors import BertPipelineError
    from bert_core.io.manifest import now
    from operators import promotion_lock

    client = _client(tracking_uri)
    version = str(version)
    registered = registered_version(client, name, version)
    with promotion_lock.held(client, name, version, registered.run_id) as ticket:
        champion_version = current_version(client, name, CHAMPION)
        if champion_version == version:
            previous = current_version(client, name, PREVIOUS)
            raise BertPipelineError(
                f"{name} v{version} is the champion: it cannot be rejected while it is served. Promote another "
                f"version first" + (f" (to roll back: bert-pipeline promote {name} {previous} --override "
                                    "'WHY')" if previous else "") + ", then reject it")
        ticket.check()
        reasons = [f"{REJECTED_BY_HAND}{reason}"]
        decided_at = now()
        _record_decision(client, name, version, "rejected", reasons, champion_version, (), decided_at)
    log.info("%s version %s: rejected by hand (%s)", name, version, reason)
    return _written({"name": name, "candidate": version, "rejected_by_hand": True,
                     "champion_before": champion_version, "promoted": False, "champion_after": champion_version,
                     "previous_after": current_version(client, name, PREVIOUS),
                     "candidate_metrics": version_metrics(client, name, version), "reasons": reasons,
                     "decided_at": decided_at}, report_path)


def _record_decision(client, name: str, version: str, decision: str, reasons: list[str], compared_to: str | None,
                     gates: tuple[str, ...], decided_at: str) -> None:
    for key, value in (("decision", decision), ("reasons", "; ".join(reasons)), ("compared_to", compared_to or "none"),
                       ("gates", ",".join(gates)), ("decided_at", decided_at)):
        client.set_model_version_tag(name, version, f"promotion.{key}", value)


def registered_version(client, name: str, version: str):
    """The registry's record of `name`/`version`, or an error that names the store and what it holds."""
    from mlflow.exceptions import MlflowException

    from bert_core.errors import BertPipelineError
    from operators.promotion_lock import LOCK_PREFIX

    try:
        return client.get_model_version(name, str(version))
    except MlflowException:
        held = sorted(int(v.version) for v in client.search_model_versions(f"name = '{name}'"))
        if str(version) in map(str, held):
            raise  # there, so the store failed to answer: its own error says how
    names = sorted(m.name for m in client.search_registered_models() if not m.name.startswith(LOCK_PREFIX))
    known = (f"its versions: {', '.join(map(str, held))}" if held else
             f"no model of that name; registered: {', '.join(names) or 'none'}")
    raise BertPipelineError(f"{name} v{version}: no such registered model version in {client.tracking_uri} "
                            f"({known})")


def _chance_answer(name: str) -> dict[str, str]:
    """decide()'s chance_answer for a fine-tuned task's model (bert-<task>); none for others."""
    from bert_core.errors import BertPipelineError
    from bert_core.metrics.scoring import chance_answer

    try:
        return {"chance_answer": chance_answer(name.removeprefix("bert-"))}
    except BertPipelineError:  # bert-pretrained, or a name of no task
        return {}


def _judge(client, name: str, version: str, candidate: dict[str, float], gates: tuple[str, ...],
           floors: dict[str, float], metrics_on: str | None, served: dict[str, Any] | None,
           chance: dict[str, float] | None = None, dev_data: str | None = None,
           ) -> tuple[str | None, dict[str, float] | None, bool, list[str]]:
    """(champion version, its metrics, promote?, reasons) against the champion as the registry has it now.
    `metrics_on`: where the candidate was scored when held-out data is required ("held-out" otherwise);
    `served`: the serving check's result, None when not (yet) run; `dev_data`: the candidate's DEV_DATA_TAG."""
    champion_version = current_version(client, name, CHAMPION)
    champion = version_metrics(client, name, champion_version) if champion_version else None
    if champion_version == version:
        return champion_version, champion, True, ["already the champion"]
    promoted, reasons = decide(candidate, champion, gates, floors, chance, **_chance_answer(name))
    champion_data = client.get_model_version(name, champion_version).tags.get(DEV_DATA_TAG) if champion else None
    if dev_data and champion_data and dev_data != champion_data:
        promoted = False
        reasons.append(f"it was scored on another dev file than champion v{champion_version} (sha256 {dev_data[:12]} "
                       f"against {champion_data[:12]}: another SQuAD version or dev set), so their metrics cannot be "
                       f"compared; the nightly scores both on its pinned data, and `bert-pipeline promote {name} "
                       f"{version} --override 'WHY'` promotes it by hand")
    if metrics_on != "held-out":
        promoted = False
        reasons.append(f"its metrics were measured on {metrics_on or 'unrecorded data'}, not on held-out data")
    if promoted and served is not None and served["problems"]:
        promoted = False
        reasons.append("the registered model, loaded as it is served, does not answer as its evaluation did: "
                       + "; ".join(served["problems"]))
    if promoted:
        reasons = ["first model: no champion yet"] if champion is None else [
            "every gate metric is no worse than the champion's"]
    return champion_version, champion, promoted, reasons


_LOADING = threading.Lock()


def serving_check(name: str, version: str) -> dict[str, Any]:
    """{"examples": n, "problems": [...]}: the registered version loaded as a server loads it
    (mlflow.pyfunc.load_model), answering the dev examples that were scored (bert_core.deploy.mlflow_model)."""
    import mlflow.pyfunc

    from bert_core.deploy.mlflow_model import check_served

    try:
        # Loaded from a download of our own, removed afterwards: MLflow's default is a temp dir it never
        # deletes, a copy of the model per promotion in a long-lived worker's /tmp.
        with tempfile.TemporaryDirectory(prefix="bert-serving-check-") as copy:
            # MLflow loads a model logged from code through one process-wide slot (mlflow.models.set_model):
            # two threads loading at once could get each other's model.
            with _LOADING:
                model = mlflow.pyfunc.load_model(f"models:/{name}/{version}", dst_path=copy)
            examples, problems = check_served(model)
    except Exception as exc:  # noqa: BLE001 - any failure to load or answer is the finding itself
        log.exception("%s version %s: the registered model could not be loaded or run", name, version)
        return {"examples": 0, "problems": [f"loading or running it failed: {type(exc).__name__}: {exc}"]}
    log.info("%s version %s: served artifact answered %d check example(s)%s", name, version, examples,
             "" if not problems else f", {len(problems)} differ")
    return {"examples": examples, "problems": problems}


@contextlib.contextmanager
def downloaded_model_dir(uri: str, tracking_uri: str | None = None) -> Iterator[Path]:
    """A temporary local copy of the model directory (config.json, weights, vocab.txt) behind an MLflow
    model URI (models:/NAME/VERSION, models:/NAME@ALIAS, runs:/RUN_ID/model), removed on leaving."""
    with tempfile.TemporaryDirectory(prefix="bert-model-download-") as dst:
        yield model_dir_from_uri(uri, dst, tracking_uri)


@contextlib.contextmanager
def served_predictor(uri: str, batch_size: int = 32, tracking_uri: str | None = None) -> Iterator[Any]:
    """What `mlflow models serve -m URI` answers with: the logged task pyfunc, loaded as the server loads it (its
    export's ONNX graph when one was logged with it, the INT8 graph when logged to serve that, else eager
    PyTorch), as a bert_core.deploy.serving.TaskPredictor; the download is removed on leaving."""
    import mlflow

    from bert_core.errors import BertPipelineError

    _client(tracking_uri)
    with tempfile.TemporaryDirectory(prefix="bert-model-download-") as dst:
        try:
            loaded = mlflow.pyfunc.load_model(uri, dst_path=dst)
        except mlflow.exceptions.MlflowException as exc:
            raise BertPipelineError(f"{uri}: {exc.message}") from None
        predictor = loaded.unwrap_python_model().predictor
        predictor.batch_size = batch_size
        yield predictor


def model_dir_from_uri(uri: str, dst: str, tracking_uri: str | None = None) -> Path:
    """The model directory behind an MLflow model URI, downloaded under `dst`."""
    import mlflow

    from bert_core.errors import BertPipelineError

    _client(tracking_uri)
    try:
        local = Path(mlflow.artifacts.download_artifacts(artifact_uri=uri, dst_path=dst))
    except mlflow.exceptions.MlflowException as exc:
        raise BertPipelineError(f"{uri}: {exc.message}") from None
    configs = sorted(local.rglob("config.json"), key=lambda p: len(p.parts))
    if not configs:
        raise BertPipelineError(f"{uri}: the logged model holds no config.json (was it logged by bert-pipeline?)")
    return configs[0].parent


def version_tags(name: str, version: str, tracking_uri: str | None = None) -> dict[str, str]:
    """The tags of one registered version (e.g. `output`: the training output it was registered from)."""
    return dict(_client(tracking_uri).get_model_version(name, version).tags)


def latest_versions(name: str, tracking_uri: str | None = None) -> dict[str, str | None]:
    """{"champion": version or None, "newest": the highest version number or None} of a registered model."""
    client = _client(tracking_uri)
    versions = [int(v.version) for v in client.search_model_versions(f"name='{name}'")]
    return {"champion": current_version(client, name, CHAMPION),
            "newest": str(max(versions)) if versions else None}


def registered_names(prefix: str = "bert-", tracking_uri: str | None = None) -> list[str]:
    client = _client(tracking_uri)
    return sorted(m.name for m in client.search_registered_models() if m.name.startswith(prefix))

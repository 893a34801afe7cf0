"""Where a report goes: report.html in the run's directory (or where asked), and the DAG run's own MLflow run.

Each DAG run gets one run in the MLflow experiment `bert-runs` (REPORT_EXPERIMENT), named `<dag_id> <run id>`
and tagged `pipeline_run_id`, `dag_id` and `run_dir`; it holds report.html and the records it was drawn from
(report_data.json), and its description says what was decided. That run, not one of the steps' runs, holds the
report because a DAG run may have no pretraining (bert_finetune) or several fine-tuning runs; each step's run
(bert-pretrain, bert-finetune/<task>) gets the tag `report_run_id` pointing to it. Building the report again
logs into the same run (found by its `run_dir` tag), replacing the files.
"""

from __future__ import annotations

import json
import logging
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bert_core.errors import BertPipelineError
from bert_core.io import storage
from operators.report import DATA_FILE, REPORT_FILE
from operators.report.collect import FORMAT, mlflow_client
from operators.report.render import data_lines

log = logging.getLogger(__name__)

REPORT_EXPERIMENT = "bert-runs"
REPORT_RUN_TAG = "report_run_id"  # on each step's MLflow run: the DAG run's report run
_RUN_ID = re.compile(r"^[0-9a-f]{32}$")


def write_html(where: str, html: str) -> str:
    """report.html at `where` (a file path or s3:// key), written in one step (temp + rename, or one PUT)."""
    storage.write_text(where, html)
    return where


def _summary(records: dict[str, Any]) -> str:
    lines = [f"Run report of {records.get('dag_id') or 'a DAG run'} `{records.get('dag_run_id') or ''}` "
             f"(artifact `{REPORT_FILE}`); work directory `{records['run_dir']}`.", ""]
    for d in records["registry"]:
        verdict = "promoted to champion" if d["promoted"] else "not promoted: " + "; ".join(d.get("reasons") or [])
        lines.append(f"- {d['name']} v{d['candidate']}: {verdict}")
    night = records.get("nightly")
    if night:
        regressed = [f["key"] for f in night["findings"] if f.get("regressed")]
        lines.append(f"- nightly regression {night['status']}" + (f": {', '.join(regressed)}" if regressed else ""))
    data = data_lines(records)
    if data:
        lines += ["", "Data:", *(f"- {line}" for line in data)]
    return "\n".join(lines)


def _find_run(client, experiment_id: str, run_dir: str):
    # A quote cannot be escaped in MLflow's filter syntax: such a directory is matched here instead.
    query = f"tags.run_dir = '{run_dir}'" if "'" not in run_dir else ""
    runs = [r for r in client.search_runs([experiment_id], filter_string=query, max_results=1000)
            if r.data.tags.get("run_dir") == run_dir]
    return runs[0] if runs else None


@dataclass(frozen=True)
class Logged:
    run_id: str  # the DAG run's report run in REPORT_EXPERIMENT
    page: str | None  # its page in the MLflow UI, where the store is a server (http/https)


def ui_page(tracking_uri: str, experiment_id: str, run_id: str) -> str | None:
    """The MLflow UI address of a run, where the store is an MLflow server; None for a file or database store."""
    if not tracking_uri.startswith(("http://", "https://")):
        return None
    return f"{tracking_uri.rstrip('/')}/#/experiments/{experiment_id}/runs/{run_id}"


def log_to_mlflow(records: dict[str, Any], html: str) -> Logged:
    """Log report.html and its records into the DAG run's report run (created the first time)."""
    from bert_core.io.tracking import ensure_experiment, git_sha

    uri = records["tracking_uri"]
    experiment_id = ensure_experiment(REPORT_EXPERIMENT, uri)
    with mlflow_client(uri) as client:
        tags = {"run_dir": records["run_dir"], "git_sha": git_sha(), "mlflow.note.content": _summary(records)}
        for key in ("dag_id", "dag_run_id"):
            if records.get(key):
                tags["pipeline_run_id" if key == "dag_run_id" else key] = records[key]
        found = _find_run(client, experiment_id, records["run_dir"])
        if found is None:
            name = " ".join(str(records[k]) for k in ("dag_id", "dag_run_id") if records.get(k)) or records["run_dir"]
            run_id = client.create_run(experiment_id, run_name=name, tags=tags).info.run_id
        else:
            run_id = found.info.run_id
            for key, value in tags.items():
                client.set_tag(run_id, key, value)
        with tempfile.TemporaryDirectory(prefix="bert-report-") as scratch:
            (Path(scratch) / REPORT_FILE).write_text(html, encoding="utf-8")
            (Path(scratch) / DATA_FILE).write_text(json.dumps(records, indent=1) + "\n", encoding="utf-8")
            client.log_artifact(run_id, str(Path(scratch) / REPORT_FILE))
            client.log_artifact(run_id, str(Path(scratch) / DATA_FILE))
        client.set_terminated(run_id, "FINISHED")
        for step_run in _step_runs(records):
            try:
                client.set_tag(step_run, REPORT_RUN_TAG, run_id)
            except Exception as exc:  # noqa: BLE001 - a step run from another store: the report itself is logged
                log.warning("could not tag MLflow run %s with its report run: %s", step_run, exc)
    log.info("report logged to MLflow run %s (experiment %s) at %s", run_id, REPORT_EXPERIMENT, uri)
    return Logged(run_id, ui_page(uri, experiment_id, run_id))


def _step_runs(records: dict[str, Any]) -> list[str]:
    ids = [p.get("mlflow_run_id") for p in records["pretraining"]] + [
        f.get("mlflow_run_id") for f in records["finetuning"]]
    return list(dict.fromkeys(i for i in ids if i))


def mlflow_run_id(reference: str) -> tuple[str, str | None]:
    """(run id, the tracking URI the reference names or None) of `runs:/ID`, a bare run id, or an MLflow UI
    address (http://host:5000/#/experiments/1/runs/ID); an error naming the accepted forms otherwise."""
    text = reference.strip()
    if text.startswith("runs:/"):
        run_id = text[len("runs:/"):].split("/", 1)[0]
        if _RUN_ID.match(run_id):
            return run_id, None
    elif _RUN_ID.match(text):
        return text, None
    elif text.startswith(("http://", "https://")) and (found := re.search(r"/runs/([0-9a-f]{32})", text)):
        return found.group(1), text.split("#", 1)[0].rstrip("/")
    raise BertPipelineError(f"{reference!r}: not a run directory, nor an MLflow run (runs:/RUN_ID, a 32-hex run "
                            "id, or an MLflow UI address .../#/experiments/N/runs/RUN_ID)")


def looks_like_mlflow_run(reference: str) -> bool:
    try:
        mlflow_run_id(reference)
    except BertPipelineError:
        return False
    return True


def records_from_mlflow(reference: str, tracking_uri: str | None = None) -> tuple[dict[str, Any], str]:
    """The records a logged report was drawn from (their `tracking_uri`: the store they were read from), and its
    report run's id. `reference` names the report run,
    or any step run of the same DAG run (a bert-pretrain or bert-finetune run: through its `report_run_id` tag,
    else its `pipeline_run_id`)."""
    from mlflow.exceptions import MlflowException

    from bert_core.io.tracking import default_tracking_uri

    run_id, named_uri = mlflow_run_id(reference)
    uri = tracking_uri or named_uri or default_tracking_uri()
    with mlflow_client(uri) as client:
        try:
            run = client.get_run(run_id)
        except MlflowException as exc:
            raise BertPipelineError(f"MLflow run {run_id} not found at {uri}: {exc.message.splitlines()[0]} "
                                    "(--tracking-uri names the store)") from None
        experiment = client.get_experiment(run.info.experiment_id)
        if experiment.name != REPORT_EXPERIMENT:
            run = _report_run_of(client, run, uri)
        records = _logged_records(client, run.info.run_id, uri)
    if records.get("format") != FORMAT:
        raise BertPipelineError(f"MLflow run {run.info.run_id}: {DATA_FILE} is format {records.get('format')}, "
                                f"this version reads format {FORMAT}; build the report from the run directory")
    return {**records, "tracking_uri": uri}, run.info.run_id


def _logged_records(client, run_id: str, uri: str) -> dict[str, Any]:
    """The DATA_FILE logged in MLflow run `run_id`. Listing the run's artifacts first tells a run without the file
    from artifacts this store cannot reach (an `mlflow-artifacts:` location read from the server's sqlite file
    instead of the server): only the first is the run's fault."""
    from mlflow.exceptions import MlflowException

    try:
        names = {artifact.path for artifact in client.list_artifacts(run_id)}
    except (MlflowException, OSError) as exc:
        raise BertPipelineError(f"the artifacts of MLflow run {run_id} cannot be read through {uri}: "
                                f"{_first_line(exc)} (--tracking-uri or MLFLOW_TRACKING_URI names the store; for a "
                                "stack's runs, its MLflow server's URL)") from None
    if DATA_FILE not in names:
        raise BertPipelineError(f"MLflow run {run_id} holds no {DATA_FILE} (its artifacts: "
                                f"{', '.join(sorted(names)) or 'none'}): build the report from the run directory "
                                "instead")
    with tempfile.TemporaryDirectory(prefix="bert-report-") as scratch:
        try:
            path = client.download_artifacts(run_id, DATA_FILE, scratch)
        except (MlflowException, OSError) as exc:
            raise BertPipelineError(f"{DATA_FILE} of MLflow run {run_id} could not be downloaded through {uri}: "
                                    f"{_first_line(exc)}") from None
        return json.loads(Path(path).read_text(encoding="utf-8"))


def _first_line(exc: Exception) -> str:
    return (getattr(exc, "message", None) or str(exc)).strip().splitlines()[0]


def _report_run_of(client, run, uri: str):
    tags = run.data.tags
    if tags.get(REPORT_RUN_TAG):
        return client.get_run(tags[REPORT_RUN_TAG])
    experiment = client.get_experiment_by_name(REPORT_EXPERIMENT)
    pipeline_run = tags.get("pipeline_run_id")
    if experiment is not None and pipeline_run and "'" not in pipeline_run:
        found = client.search_runs([experiment.experiment_id], f"tags.pipeline_run_id = '{pipeline_run}'",
                                   order_by=["attributes.start_time DESC"], max_results=1)
        if found:
            return found[0]
    raise BertPipelineError(f"MLflow run {run.info.run_id} has no run report in {uri} (no {REPORT_RUN_TAG} tag, and "
                            f"no {REPORT_EXPERIMENT} run for its pipeline run {pipeline_run or '(none)'}): build one "
                            "with `bert-pipeline report RUN_DIR`")

"""Build a run report: from a run's work directory (collect, draw, write report.html there, log it to MLflow), or
again from a report already logged to MLflow (its records, drawn with this version's code)."""

from __future__ import annotations

from dataclasses import dataclass

from bert_core.io import storage
from operators.report import REPORT_FILE, publish
from operators.report.collect import collect
from operators.report.render import render


@dataclass(frozen=True)
class Built:
    path: str  # where report.html was written
    mlflow: publish.Logged | None  # the DAG run's report run, when logged


def from_run_dir(run_dir: str, tracking_uri: str | None = None, output: str | None = None,
                 log_to_mlflow: bool = True) -> Built:
    """report.html of the run in `run_dir`: at `output`, default `run_dir`/report.html."""
    records = collect(run_dir, tracking_uri)
    html = render(records)
    path = publish.write_html(output or storage.join(records["run_dir"], REPORT_FILE), html)
    return Built(path, publish.log_to_mlflow(records, html) if log_to_mlflow else None)


def from_mlflow(reference: str, tracking_uri: str | None = None, output: str | None = None,
                log_to_mlflow: bool = True) -> Built:
    """report.html drawn again from the records logged with a report (`reference`: see
    publish.records_from_mlflow): at `output`, default ./report.html; logged back into its run."""
    records, _ = publish.records_from_mlflow(reference, tracking_uri)
    html = render(records)
    path = publish.write_html(output or str(storage.local_path(REPORT_FILE).absolute()), html)
    return Built(path, publish.log_to_mlflow(records, html) if log_to_mlflow else None)


def build(source: str, tracking_uri: str | None = None, output: str | None = None,
          log_to_mlflow: bool = True) -> Built:
    """`source`: a run directory (local or s3://), or an MLflow run (runs:/ID, a run id, an MLflow UI address);
    a local path that exists is always a directory, even if its name looks like a run id."""
    if publish.looks_like_mlflow_run(source) and not _local_path_that_exists(source):
        return from_mlflow(source, tracking_uri, output, log_to_mlflow)
    return from_run_dir(source, tracking_uri, output, log_to_mlflow)


def _local_path_that_exists(source: str) -> bool:
    # An s3:// prefix or an MLflow UI's http:// address is no local path (storage.local_path refuses them).
    if "://" in source and not source.startswith("file://"):
        return False
    return storage.local_path(source).exists()

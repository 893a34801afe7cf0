"""`bert-pipeline demo`: run the `bert_demo` Airflow DAG once, in this process, on the bundled tiny data.

`bert-pipeline run bert_demo` with the demo's defaults (its work dir HOME/demo/<UTC timestamp>) and its summary:
each model's metrics and registry decision, in words where a figure is at chance, and where everything is. The
run view shows the tasks as they go; the components' own output is in the run's log file (--verbose: on the
terminal); the run's report.html is written by the DAG's last task (`report`, operators/report/task.py), and
its path printed.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from bert_core.pretrain.learning_watch import chance_findings
from bert_pipeline.commands.run import add_run_arguments, airflow_ui_line, stamp
from bert_pipeline.task_figures import metrics_text

DAG_ID = "bert_demo"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_run_arguments(parser, example='{"pretrain_num_steps": 600}')
    parser.add_argument("--work-dir", metavar="DIR_OR_URI",
                        help="where the run's artifacts go: a directory or an s3:// prefix (AWS_ENDPOINT_URL and the "
                             "usual AWS credentials apply) (default: HOME/demo/<UTC timestamp>)")


def model_lines(model: dict[str, Any], metrics_on: str | None) -> list[str]:
    """A model's line (version, decision, metrics), and a line in words for each metric at chance."""
    metrics = model["candidate_metrics"]
    pretrained = "mlm_accuracy" in metrics
    keys = ["mlm_accuracy", "nsp_accuracy", "loss"] if pretrained else None
    text = metrics_text(metrics, keys)
    if pretrained and metrics_on:
        text = f"{metrics_on} {text}"
    if model.get("promoted"):
        decision = "champion"
    elif model.get("promoted") is None:
        decision = "registered"
    else:
        decision = "not promoted: " + "; ".join(model.get("reasons", []))
    lines = [f"  {model['name']} v{model['candidate']} ({decision}): {text}"]
    for skill, value, chance, baseline in chance_findings(metrics):
        score = f"{value:.3f} = {baseline}" if abs(value - chance) < 5e-4 else f"{value:.3f}, {baseline} scores {chance:.3f}"
        lines.append(f"      {skill} did not learn on this tiny corpus: {score}")
    return lines


def summary_text(home: Path, summary: dict[str, Any], metrics_on: str | None, log_path: Path, took: str) -> str:
    lines = ["", f"bert_demo finished in {took}.", ""]
    for model in summary["models"]:
        lines += model_lines(model, metrics_on)
    lines += [
        "",
        f"Artifacts (manifests, models, predictions): {summary['summary_file'].rsplit('/', 1)[0]}",
        f"Summary: {summary['summary_file']}",
        f"Log: {log_path}",
        *ui_lines(home, summary["tracking_uri"]),
    ]
    return "\n".join(lines)


def ui_lines(home: Path, tracking_uri: str) -> list[str]:
    """Where to see the run: the servers of the stack up on the home, else how to start them. A server's URL is
    its own UI; `mlflow ui` is only for a store (the embedded sqlite file)."""
    from bert_pipeline.embedded_home import stack_airflow_url
    from bert_pipeline.stack.state import DEFAULT_PORTS

    if tracking_uri.startswith(("http://", "https://")):
        mlflow = f"MLflow UI:  {tracking_uri}"
    else:
        mlflow = f"MLflow UI:  mlflow ui --backend-store-uri {tracking_uri} --port 5000   (then http://127.0.0.1:5000)"
    if stack_airflow_url(home):
        return [mlflow, airflow_ui_line(home)]
    return [mlflow, f"Airflow UI, MLflow server and a Ray head together: bert-pipeline stack up --home {home}   "
                    f"(then http://127.0.0.1:{DEFAULT_PORTS['airflow']}; `bert-pipeline stack down --home ...` "
                    "stops them)"]


def run(args: argparse.Namespace) -> int:
    from bert_pipeline.dag_run import conf_from, run_dag, run_dir_for
    from bert_pipeline.run_view import duration
    from bert_pipeline.stack.state import stack_home

    conf = conf_from(args.conf)
    home = stack_home(args.home)
    when = stamp()
    if args.work_dir:
        conf["work_dir"] = args.work_dir
    conf.setdefault("work_dir", str(home / "demo" / when))
    result = run_dag(DAG_ID, conf, run_dir_for(home, DAG_ID, conf, when), home=home, verbose=args.verbose)
    if not result.succeeded:
        print(f"\nbert_demo {result.outcome} (run {result.run_id}); the artifacts so far are under {conf['work_dir']}.")
        if result.report:
            print(result.report)
        return 1
    pretrained = result.task("pretrain").values
    took = duration((result.ended_at - result.started_at).total_seconds())
    print(summary_text(home, result.task("summary").values[0], pretrained[0].get("metrics_on") if pretrained else None,
                       result.log_path, took))
    if result.report:
        print(result.report)
    return 0

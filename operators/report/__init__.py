"""The run report: one self-contained `report.html` per DAG run, something to look at rather than read.

What a run left behind is gathered into one JSON-able record (collect.py): pretraining's curves (MLflow metric
history of each phase's run) with its final held-out figures and chance levels, fine-tuning's dev metrics per
epoch (each output's metrics.json), the registry's decision per model (registry/<name>-v<N>.json, written by
operators.registry.promote), the tasks' timeline (tasks/*.json, written by each task: operators.run_records) and
an example request for each promoted model. plots.py draws it (matplotlib, PNG), render.py writes the HTML
(images as data: URIs, inline CSS, no script), publish.py puts report.html and the record (report_data.json)
in the run's directory and in the DAG run's MLflow run (experiment `bert-runs`), build.py ties them together, and
task.py is the `report` task each pipeline DAG ends with (`bert-pipeline report` builds a report again).
"""

REPORT_FILE = "report.html"
DATA_FILE = "report_data.json"
TASK_ID = "report"  # the DAGs' report task (task.py): a teardown, no part of the run's outcome

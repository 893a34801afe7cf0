"""The local stack supervisor behind `bert-pipeline stack up|down|status`: the services the DAGs talk to (an MLflow
tracking server, a Ray head, Airflow) as background processes.

- processes: start a process in a session (process group) of its own; stop one with its family (leader first
  where the service stops its own children in order, a grace period, then SIGKILL)
- state: HOME/stack/state.json (ports, per service pid, start time, URLs, log), the lock, the ports
- health: each service's HTTP health check, and waiting until the started ones pass it
- mlflow_server, ray_head, airflow: one module per service: its command, environment, ports, health check
- supervisor: up, down and status over the three

Nothing here imports airflow, mlflow or ray: their CLIs do the work, and this package only starts processes and
talks HTTP to them.
"""

"""`up`, `down` and `status` over the three services, with what they print."""

from __future__ import annotations

import subprocess
from pathlib import Path

from bert_core.errors import BertPipelineError
from bert_pipeline.stack import airflow, mlflow_server, processes, ray_head
from bert_pipeline.stack.health import wait_healthy
from bert_pipeline.stack.service import Record, Service
from bert_pipeline.stack.state import PORT_FLAGS, Stack, port_free, stack_home

# Start order; `down` stops in reverse.
SERVICES: dict[str, Service] = {s.name: s for s in (mlflow_server.SERVICE, ray_head.SERVICE, airflow.SERVICE)}
# Airflow last: its start-up (migrations, four components) saturates a 2-core machine, and `ray start` gives up
# when its raylet has not registered with the GCS within 30 s.
START_PHASES = (("mlflow", "ray"), ("airflow",))


def check_ports(ports: dict[str, int]) -> None:
    """Refuse ports the services cannot use together, before anything starts."""
    clashes = {port for port in ports.values() if list(ports.values()).count(port) > 1}
    if clashes:
        raise BertPipelineError(f"two services cannot share port {min(clashes)}: give each its own port")
    low, high = ray_head.WORKER_PORTS
    for key in ray_head.SERVICE.port_keys:
        if low <= ports[key] <= high:
            raise BertPipelineError(f"{PORT_FLAGS[key]} {ports[key]}: Ray keeps ports {low}-{high} for its "
                                    "workers; choose a port outside them")


def plan(home: Path, ports: dict[str, int], ray_num_cpus: int, airflow_parallelism: int) -> dict[str, Record]:
    """Command, environment, URLs and log file of each service."""
    return {"mlflow": mlflow_server.spec(home, ports),
            "ray": ray_head.spec(home, ports, ray_num_cpus),
            "airflow": airflow.spec(home, ports, airflow_parallelism)}


def start(home: Path, spec: Record) -> tuple[subprocess.Popen, Record]:
    """Start one planned service; returns its process and the record `status` and `down` will need."""
    proc = processes.start(spec["command"], spec["env"], home, Path(spec["log"]))
    record = {key: value for key, value in spec.items() if key not in ("env", "command")}
    record.update(pid=proc.pid, started=processes.start_time(proc.pid), command=spec["command"])
    return proc, record


def stop_target(service: Service, record: Record) -> processes.StopTarget:
    return processes.StopTarget(record["pid"], record.get("started"), service.stop_grace_s, service.leader_first)


def running(stack: Stack) -> dict[str, Record]:
    """The recorded services whose process still runs (the one recorded, not a process that reused its pid)."""
    return {name: record for name, record in stack.services.items()
            if processes.alive(record["pid"], record.get("started"))}


def _stop_all(stack: Stack, names: list[str]) -> dict[str, float | None]:
    """Stop the named services together and forget them; name -> seconds it took (None: was not running)."""
    services = stack.services
    took = processes.stop_processes({name: stop_target(SERVICES[name], services[name])
                                     for name in names if name in services})
    for name in took:
        del services[name]
    stack.save()
    return took


def up(stack: Stack, ports: dict[str, int], given: dict[str, int], ray_num_cpus: int, airflow_parallelism: int,
       timeout: float) -> int:
    """Start the services that are not running; `given` holds the ports named on the command line."""
    already = running(stack)
    if already:
        # Ports are those of the services already up: a half-up stack is completed with the same addresses.
        ports = stack.state["ports"]
        changed = [f"{PORT_FLAGS[key]} {port}" for key, port in given.items() if port != ports[key]]
        if changed:
            print(f"note: the stack is already up with its earlier ports; ignoring {', '.join(changed)} "
                  "(`bert-pipeline stack down` first to change them)")
    specs = plan(stack.home, ports, ray_num_cpus, airflow_parallelism)
    healthy = {}
    for name in already:
        ok, reason = SERVICES[name].check_health(stack.services[name])
        healthy[name] = ok
        print(f"  {name:8} already running (pid {already[name]['pid']}), "
              + ("healthy" if ok else f"NOT healthy: {reason}"))
    to_start = [name for name in SERVICES if name not in already]
    if not to_start:
        print_urls(stack)
        if not all(healthy.values()):
            raise BertPipelineError("the stack is up but not healthy: see `bert-pipeline stack status` and the "
                                    f"logs in {stack.dir}, or restart it (`stack down`, then `stack up`)")
        return 0

    for name in to_start:
        for key in SERVICES[name].port_keys:
            if not port_free(ports[key]):
                raise BertPipelineError(f"port {ports[key]} (for {name}) is in use by another program: "
                                        f"choose another with {PORT_FLAGS[key]}")
    stack.state["ports"] = ports
    stack.state["home"] = str(stack.home)
    started: list[str] = []
    try:
        for phase in START_PHASES:
            batch = {}
            for name in (name for name in phase if name in to_start):
                print(f"  {name:8} starting (log: {specs[name]['log']})", flush=True)
                proc, record = start(stack.home, specs[name])
                started.append(name)
                batch[name] = (SERVICES[name], proc, record)
                stack.services[name] = record
                stack.save()
            wait_healthy(batch, timeout)
    except BaseException:
        # All or nothing: what this `up` started is stopped again, so a failed `up` leaves no half stack.
        _stop_all(stack, started)
        raise
    print_urls(stack)
    return 0


def print_urls(stack: Stack) -> None:
    services = stack.services
    mlflow, ray, airflow_ = (services.get(name) for name in SERVICES)
    lines = [""]
    if mlflow:
        lines.append(f"MLflow   {mlflow['url']}   (store sqlite:///{stack.home / 'mlflow.db'}, artifacts "
                     f"{stack.home / 'mlartifacts'})")
    if ray:
        lines.append(f"Ray      dashboard {ray['url']}   GCS {ray['address']}   "
                     f"(ray job submit --address {ray['url']} -- python ...)")
    if airflow_:
        lines.append(f"Airflow  {airflow_['url']}   user admin, password in {airflow_['password_file']}")
    lines.append(f"Logs in {stack.dir}; stop with `bert-pipeline stack down"
                 + ("" if stack.home == stack_home(None) else f" --home {stack.home}") + "`")
    if mlflow and ray:
        lines.append(f"From a shell: export MLFLOW_TRACKING_URI={mlflow['url']} RAY_ADDRESS={ray['address']} "
                     "RAY_AUTH_MODE=disabled")
    print("\n".join(lines))


def down(stack: Stack) -> int:
    services = stack.services
    if not services:
        print(f"stack is not running (no services recorded in {stack.state_file})")
        return 0
    names = [name for name in reversed(SERVICES) if name in services]
    for name in names:
        print(f"  {name:8} stopping (pid {services[name]['pid']})", flush=True)
    # All at once: each takes seconds to shut down cleanly (Airflow's scheduler ~15 s on 2 cores).
    for name, took in _stop_all(stack, names).items():
        print(f"  {name:8} " + ("was not running" if took is None else f"stopped ({took:.1f} s)"), flush=True)
    return 0


def status(stack: Stack) -> int:
    services = stack.services
    if not services:
        print(f"stack is not running (no services recorded in {stack.state_file}); start it with "
              "`bert-pipeline stack up`")
        return 1
    all_ok = True
    for name, service in SERVICES.items():
        record = services.get(name)
        if record is None:
            print(f"{name:8} not started")
            all_ok = False
            continue
        if not processes.alive(record["pid"], record.get("started")):
            print(f"{name:8} DOWN      (pid {record['pid']} gone; log: {record['log']})")
            all_ok = False
            continue
        ok, reason = service.check_health(record)
        all_ok &= ok
        extra = f"  GCS {record['address']}" if name == "ray" else ""
        print(f"{name:8} pid {record['pid']:<7} {record['url']}{extra}  "
              + ("healthy" if ok else f"UNHEALTHY: {reason} (log: {record['log']})"))
    if "airflow" in services:
        print(f"Airflow login: admin, password in {services['airflow']['password_file']}")
    return 0 if all_ok else 1

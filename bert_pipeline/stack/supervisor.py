"""`up`, `down` and `status` over a profile's services (bert_pipeline.stack.profiles), with what they print."""

from __future__ import annotations

import subprocess
from pathlib import Path

from bert_core.errors import BertPipelineError
from bert_core.launch.ports import RAY_WORKER_PORTS
from bert_pipeline.stack import processes, ray_head
from bert_pipeline.stack.health import http_ok, wait_healthy
from bert_pipeline.stack.profiles import DEFAULT, PROFILES, Options, Profile
from bert_pipeline.stack.service import Record, Service
from bert_pipeline.stack.state import PORT_FLAGS, Stack, port_free, stack_home

# Keys of a service's spec that are not recorded in state.json: how it is started, and what is secret.
UNRECORDED = ("env", "command", "private")


def check_ports(ports: dict[str, int]) -> None:
    """Refuse ports the services cannot use together, before anything starts."""
    clashes = {port for port in ports.values() if list(ports.values()).count(port) > 1}
    if clashes:
        raise BertPipelineError(f"two services cannot share port {min(clashes)}: give each its own port")
    low, high = RAY_WORKER_PORTS[0], RAY_WORKER_PORTS[-1]
    for key in ray_head.SERVICE.port_keys:
        if key in ports and low <= ports[key] <= high:
            raise BertPipelineError(f"{PORT_FLAGS[key]} {ports[key]}: Ray keeps ports {low}-{high} for its "
                                    "workers; choose a port outside them")


def name_width(names) -> int:
    """The column the service names are printed in: 8, or the longest name (the production profile's)."""
    return max([8, *map(len, names)])


def check_request(profile: Profile, ports: dict[str, int], given: dict[str, int], options: Options) -> dict[str, int]:
    """Refuse, before anything is made or started, what the profile cannot do; returns its ports."""
    profile.check_options(options)
    keys = profile.port_keys(options)
    unused = [PORT_FLAGS[key] for key in given if key not in keys]
    if unused:
        raise BertPipelineError(f"{', '.join(unused)}: not a port of --profile {profile.name}")
    ports = {key: ports[key] for key in keys}
    check_ports(ports)
    return ports


def recorded(stack: Stack) -> tuple[Profile, Options]:
    """The profile and options the recorded stack was started with (a stack recorded before profiles: default)."""
    return PROFILES[stack.state.get("profile", DEFAULT)], Options.from_json(stack.state.get("options"))


def start(home: Path, spec: Record) -> tuple[subprocess.Popen, Record]:
    """Start one planned service; returns its process and the record `status` and `down` will need."""
    proc = processes.start(spec["command"], spec["env"], Path(spec.get("cwd", home)), Path(spec["log"]))
    record = {key: value for key, value in spec.items() if key not in UNRECORDED}
    record.update(pid=proc.pid, started=processes.start_time(proc.pid), command=spec["command"])
    return proc, record


def stop_target(service: Service, record: Record) -> processes.StopTarget:
    return processes.StopTarget(record["pid"], record.get("started"), service.stop_grace_s, service.leader_first,
                                service.stop_signal)


def running(stack: Stack) -> dict[str, Record]:
    """The recorded services whose process still runs (the one recorded, not a process that reused its pid)."""
    return {name: record for name, record in stack.services.items()
            if processes.alive(record["pid"], record.get("started"))}


def _stop_all(stack: Stack, names: list[str]) -> dict[str, float | None]:
    """Stop the named services together and forget them; name -> seconds it took (None: was not running)."""
    profile, options = recorded(stack)
    known = profile.services(options)
    services = stack.services
    # A recorded service the profile does not name (state.json edited by hand) is stopped with a generic grace.
    took = processes.stop_processes({name: stop_target(known.get(name) or Service(name, (), 30.0, http_ok),
                                                        services[name])
                                     for name in names if name in services})
    for name in took:
        del services[name]
    stack.save()
    return took


def stop_leftovers(stack: Stack, names: list[str]) -> list[str]:
    """Stop what the named recorded services whose main process died left running (a Celery worker killed
    mid-task leaves its pool process), so that `up` does not start a successor beside it; returns their names."""
    dead = [name for name in names if name in stack.services
            and processes.leftovers(stack.services[name]["pid"], stack.services[name].get("started"))]
    if dead:
        print(f"  stopping what {', '.join(dead)} left running after its main process died", flush=True)
        _stop_all(stack, dead)
    return dead


def check_missing(profile: Profile, options: Options) -> None:
    """What the machine lacks for the profile, with the commands that install it: an error before anything starts."""
    lacking = profile.missing(options)
    if lacking:
        lines = [f"  - {m.what}: {m.install}" for m in lacking]
        commands = list(dict.fromkeys(m.install for m in lacking))
        raise BertPipelineError(f"--profile {profile.name} needs what this machine lacks (nothing was started):\n"
                                + "\n".join(lines) + "\ninstall with:\n  " + "\n  ".join(commands))


def up(stack: Stack, profile: Profile, ports: dict[str, int], given: dict[str, int], options: Options,
       timeout: float) -> int:
    """Start the services that are not running; `given` holds the ports named on the command line."""
    already = running(stack)
    if already:
        was, options_before = recorded(stack)
        if was.name != profile.name:
            raise BertPipelineError(f"the stack in {stack.home} is up with --profile {was.name}; "
                                    "`bert-pipeline stack down` first to start another profile")
        options = options_before
        # Ports are those of the services already up: a half-up stack is completed with the same addresses.
        ports = stack.state["ports"]
        changed = [f"{PORT_FLAGS[key]} {port}" for key, port in given.items() if port != ports.get(key)]
        if changed:
            print(f"note: the stack is already up with its earlier ports; ignoring {', '.join(changed)} "
                  "(`bert-pipeline stack down` first to change them)")
    ports = check_request(profile, ports, {} if already else given, options)
    services = profile.services(options)
    width = name_width(services)
    healthy = {}
    for name in already:
        ok, reason = services[name].check_health(stack.services[name])
        healthy[name] = ok
        print(f"  {name:{width}} already running (pid {already[name]['pid']}), "
              + ("healthy" if ok else f"NOT healthy: {reason}"))
    to_start = [name for name in services if name not in already]
    if not to_start:
        print_urls(stack)
        if not all(healthy.values()):
            raise BertPipelineError("the stack is up but not healthy: see `bert-pipeline stack status` and the "
                                    f"logs in {stack.dir}, or restart it (`stack down`, then `stack up`)")
        return 0

    check_missing(profile, options)
    stop_leftovers(stack, to_start)
    for name in to_start:
        for key in services[name].port_keys:
            if not port_free(ports[key]):
                raise BertPipelineError(f"port {ports[key]} (for {name}) is in use by another program: "
                                        f"choose another with {PORT_FLAGS[key]}")
    specs = profile.plan(stack.home, ports, options)
    stack.state.update(ports=ports, home=str(stack.home), profile=profile.name, options=options.to_json())
    started: list[str] = []
    try:
        for phase in profile.phases(options):
            batch = {}
            for service in (s for s in phase if s.name in to_start):
                name, spec = service.name, specs[service.name]
                if service.prepare:
                    service.prepare(spec, timeout)
                print(f"  {name:{width}} starting (log: {spec['log']})", flush=True)
                proc, record = start(stack.home, spec)
                started.append(name)
                batch[name] = (service, proc, record)
                stack.services[name] = record
                stack.save()
            wait_healthy(batch, timeout, width)
            for name, (service, _, _) in batch.items():
                if service.ready:
                    service.ready(specs[name], timeout)
    except BaseException:
        # All or nothing: what this `up` started is stopped again, so a failed `up` leaves no half stack.
        _stop_all(stack, started)
        raise
    print_urls(stack)
    return 0


def print_urls(stack: Stack) -> None:
    profile, options = recorded(stack)
    lines = ["", *profile.summary(stack.home, stack.services, options)]
    lines.append(f"Logs in {stack.dir}; stop with `bert-pipeline stack down"
                 + ("" if stack.home == stack_home(None) else f" --home {stack.home}") + "`")
    print("\n".join(lines))


def down(stack: Stack) -> int:
    services = stack.services
    if not services:
        print(f"stack is not running (no services recorded in {stack.state_file})")
        return 0
    profile, options = recorded(stack)
    # The profile's start phases in reverse, each phase's services at once (each takes seconds to shut down
    # cleanly: Airflow's scheduler ~15 s on 2 cores): what uses PostgreSQL, Redis and MLflow stops before they do.
    # All at once, PostgreSQL went in under a second and every production `down` left AdminShutdown and
    # "Connection refused" tracebacks in the scheduler's, triggerer's and workers' logs.
    phased = [[s.name for s in phase if s.name in services] for phase in reversed(profile.phases(options))]
    # A recorded service the profile does not name (state.json edited by hand) is stopped too, with the first wave.
    unnamed = [name for name in services if all(name not in wave for wave in phased)]
    waves = [wave for wave in [unnamed + (phased[0] if phased else []), *phased[1:]] if wave]
    width = name_width([n for wave in waves for n in wave])
    for wave in waves:
        for name in wave:
            print(f"  {name:{width}} stopping (pid {services[name]['pid']})", flush=True)
        for name, took in _stop_all(stack, wave).items():
            print(f"  {name:{width}} " + ("was not running" if took is None else f"stopped ({took:.1f} s)"),
                  flush=True)
    return 0


def status(stack: Stack) -> int:
    services = stack.services
    if not services:
        print(f"stack is not running (no services recorded in {stack.state_file}); start it with "
              "`bert-pipeline stack up`")
        return 1
    profile, options = recorded(stack)
    width = name_width(profile.services(options))
    all_ok = True
    for name, service in profile.services(options).items():
        record = services.get(name)
        if record is None:
            print(f"{name:{width}} not started")
            all_ok = False
            continue
        if not processes.alive(record["pid"], record.get("started")):
            print(f"{name:{width}} DOWN      (pid {record['pid']} gone; log: {record['log']})")
            all_ok = False
            continue
        ok, reason = service.check_health(record)
        all_ok &= ok
        extra = f"  GCS {record['address']}" if name == "ray" else ""
        print(f"{name:{width}} pid {record['pid']:<7} {record['url']}{extra}  "
              + ("healthy" if ok else f"UNHEALTHY: {reason} (log: {record['log']})"))
    password_file = next((r["password_file"] for r in services.values() if "password_file" in r), None)
    if password_file:
        print(f"Airflow login: admin, password in {password_file}")
    return 0 if all_ok else 1

"""infra/ray/cluster.yaml (Ray cluster launcher) and infra/ray/rayjob.yaml (KubeRay RayJob) against the code.

The pretrain command each file runs must parse with `bert-pipeline pretrain`'s real parser and validate as a
PretrainConfig; its elastic MIN:MAX must fit the node counts of the file's worker group; data, storage and
output must be on S3 (nodes share no disk); Ray's version must be infra/constraints.txt's pin. Each check is
also run on a broken copy of a file, so a check that cannot fail shows up here.
"""

from __future__ import annotations

import argparse
import copy
import re
import shlex
import subprocess

import pytest
import yaml

from bert_core.errors import BertPipelineError
from bert_core.pretrain.config import PretrainConfig
from bert_core.train.config import worker_range
from bert_pipeline.commands import pretrain
from bert_pipeline.commands.config_flags import config_from_args
from tests.infra.pins import pinned
from tests.paths import REPO

INFRA = REPO / "infra"
CLUSTER = INFRA / "ray" / "cluster.yaml"
RAYJOB = INFRA / "ray" / "rayjob.yaml"


def ray_pin() -> str:
    return pinned("ray")


def load(path) -> dict:
    return yaml.safe_load(path.read_text())


def cluster_job(config: dict) -> str:
    return config["metadata"]["pretrain_job"]


def rayjob_job(config: dict) -> str:
    return config["spec"]["entrypoint"]


def gpu_group(config: dict) -> dict:
    """The KubeRay worker group that holds GPUs (exactly one)."""
    groups = [g for g in config["spec"]["rayClusterSpec"]["workerGroupSpecs"]
              if "nvidia.com/gpu" in g["template"]["spec"]["containers"][0]["resources"]["limits"]]
    assert len(groups) == 1, "rayjob.yaml: expected one worker group with nvidia.com/gpu limits"
    return groups[0]


def parse_pretrain(command: str) -> PretrainConfig:
    """The PretrainConfig `command` makes, through the CLI's own parser: an unknown flag or a bad value fails."""
    argv = shlex.split(command)
    assert argv[:2] == ["bert-pipeline", "pretrain"], f"not a pretrain command: {command[:60]!r}"
    parser = argparse.ArgumentParser(prog="bert-pipeline pretrain", exit_on_error=False)
    pretrain.add_arguments(parser)
    args, unknown = parser.parse_known_args(argv[2:])
    if unknown:
        raise BertPipelineError(f"flags `bert-pipeline pretrain` does not have: {unknown}")
    config = config_from_args(PretrainConfig, args)
    config.validate()
    return config


def check_job(command: str, node_gpus: int, min_nodes: int, max_nodes: int) -> PretrainConfig:
    """The pretrain job fits a worker group of `min_nodes`..`max_nodes` nodes of `node_gpus` GPUs each."""
    config = parse_pretrain(command)
    low, high = worker_range(config.num_workers)
    assert low < high, f"--num-workers {config.num_workers}: the clusters run an elastic MIN:MAX group"
    assert config.use_gpu, "--use-gpu: one worker per GPU"
    # MIN workers fit on the nodes that are always there, MAX on all of them: otherwise the run waits out
    # --placement-timeout at the start, or never reaches MAX.
    assert low <= min_nodes * node_gpus, f"MIN {low} workers > {min_nodes} node(s) x {node_gpus} GPUs"
    assert high <= max_nodes * node_gpus, f"MAX {high} workers > {max_nodes} node(s) x {node_gpus} GPUs"
    assert high > (max_nodes - 1) * node_gpus, f"MAX {high} leaves the last of {max_nodes} nodes idle"
    for name, value in (("data", config.data), ("data_eval", config.data_eval), ("storage", config.storage),
                        ("output", config.output)):
        if value is not None:
            assert all(v.startswith("s3://") for v in value.split(",")), (
                f"--{name.replace('_', '-')} {value}: nodes share no disk, use s3://")
    assert config.storage is not None, "--storage s3://...: checkpoints must outlive a node"
    assert config.max_failures != 0, "--max-failures: a lost node must not end the run"
    return config


def check_cluster(config: dict) -> PretrainConfig:
    from ray.autoscaler._private.util import prepare_config, validate_config

    # What `ray up` checks first: Ray's schema (unknown or missing fields), on a copy with Ray's defaults.
    validate_config(prepare_config(copy.deepcopy(config)))
    types = config["available_node_types"]
    head = types[config["head_node_type"]]
    workers = [t for name, t in types.items() if name != config["head_node_type"] and t["resources"].get("GPU", 0)]
    assert len(workers) == 1, "cluster.yaml: expected one worker node type with GPUs"
    node = workers[0]
    assert head["resources"].get("GPU", 0) == 0, "no training worker on the head"
    assert config["max_workers"] >= node["max_workers"], "cluster max_workers < the GPU node type's max_workers"
    tag = config["docker"]["image"].rsplit(":", 1)[1]
    assert tag.startswith(f"ray{ray_pin()}-"), f"docker image {tag!r}: its Ray must be ray=={ray_pin()}"
    return check_job(cluster_job(config), node["resources"]["GPU"], node["min_workers"], node["max_workers"])


def check_rayjob(config: dict) -> PretrainConfig:
    from ray._private import ray_constants

    cluster = config["spec"]["rayClusterSpec"]
    assert cluster["rayVersion"] == ray_pin(), f"rayVersion {cluster['rayVersion']} != ray=={ray_pin()}"
    pods = [cluster["headGroupSpec"]["template"]["spec"]] + [
        g["template"]["spec"] for g in cluster["workerGroupSpecs"]]
    for pod in pods:
        for container in pod["containers"]:
            assert container["image"].rsplit(":", 1)[1].startswith(f"ray{ray_pin()}-"), container["image"]
    group = gpu_group(config)
    assert group["minReplicas"] <= group["replicas"] <= group["maxReplicas"]
    pod = group["template"]["spec"]
    env = {e["name"]: e["value"] for e in pod["containers"][0].get("env", [])}
    # The drain on SIGTERM is Ray's own (ray/_private/node.py); the variable must be the one Ray reads, and the
    # pod must live until the drain's deadline so the checkpoint it triggers is written.
    drain = "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S"
    assert hasattr(ray_constants, drain) and drain in env, f"{drain}: not read by Ray or not set"
    assert 0 < float(env[drain]) < pod["terminationGracePeriodSeconds"] <= 120, (
        "drain timeout < terminationGracePeriodSeconds <= a 2-minute spot notice")
    gpus = int(pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"])
    return check_job(rayjob_job(config), gpus, group["minReplicas"], group["maxReplicas"])


def test_cluster_launcher_config_runs_an_elastic_job_the_cli_accepts():
    config = check_cluster(load(CLUSTER))
    assert worker_range(config.num_workers) == (8, 16)
    assert config.placement_timeout < 3600 and config.resize_interval > 0


def test_kuberay_rayjob_runs_an_elastic_job_the_cli_accepts():
    config = check_rayjob(load(RAYJOB))
    assert worker_range(config.num_workers) == (8, 16)
    assert config.resume == "auto"


def test_both_files_run_the_same_training():
    """The two files are two ways to run one job: only where they differ on purpose may they differ."""
    ours = {k: v for k, v in vars(parse_pretrain(cluster_job(load(CLUSTER)))).items() if k != "run_name"}
    theirs = {k: v for k, v in vars(parse_pretrain(rayjob_job(load(RAYJOB)))).items() if k != "run_name"}
    differ = {k for k in ours if ours[k] != theirs[k]}
    assert differ <= {"resume", "num_buckets"}, differ


def test_spot_watcher_is_valid_shell_and_drains_for_preemption():
    script = (INFRA / "ray" / "spot_drain.sh")
    subprocess.run(["bash", "-n", str(script)], check=True)
    text = script.read_text()
    assert "--reason DRAIN_NODE_REASON_PREEMPTION" in text and "--deadline-remaining-seconds" in text
    assert any("spot_drain.sh" in c for c in load(CLUSTER)["worker_start_ray_commands"])


def _broken(config: dict, job_key: tuple[str, ...], edit) -> dict:
    broken = copy.deepcopy(config)
    target = broken
    for key in job_key[:-1]:
        target = target[key]
    target[job_key[-1]] = edit(target[job_key[-1]])
    return broken


CLUSTER_JOB = ("metadata", "pretrain_job")
RAYJOB_JOB = ("spec", "entrypoint")


@pytest.mark.parametrize("edit, message", [
    (lambda c: c.replace("--placement-timeout", "--placement-timout"), "does not have"),
    (lambda c: c.replace("--num-workers 8:16", "--num-workers 16:8"), "MIN <= MAX"),
    (lambda c: c.replace("--num-workers 8:16", "--num-workers 8-16"), "expected a number N or a range"),
    (lambda c: c.replace("--num-workers 8:16", "--num-workers 8:24"), "MAX 24 workers"),
    (lambda c: c.replace("--num-workers 8:16", "--num-workers 9:16"), "MIN 9 workers"),
    (lambda c: c.replace("--num-workers 8:16", "--num-workers 8:8"), "elastic"),
    (lambda c: c.replace("--storage s3://BUCKET/ray-results", "--storage /mnt/ray"), "nodes share no disk"),
    (lambda c: c.replace("--output s3://", "--output /data/"), "nodes share no disk"),
    (lambda c: c.replace("--max-failures 50", "--max-failures 0"), "must not end the run"),
    (lambda c: c.replace("--resize-interval 120", "--resize-interval 0"), "--resize-interval must be positive"),
    (lambda c: c.replace("--placement-timeout 900", "--placement-timeout soon"), "invalid float"),
])
@pytest.mark.parametrize("path, job_key, check", [(CLUSTER, CLUSTER_JOB, check_cluster),
                                                  (RAYJOB, RAYJOB_JOB, check_rayjob)], ids=["cluster", "rayjob"])
def test_a_broken_job_fails_the_checks(path, job_key, check, edit, message):
    config = load(path)
    broken = _broken(config, job_key, edit)
    assert broken != config, "the edit did not apply: the files changed, update the edits"
    with pytest.raises((AssertionError, BertPipelineError, argparse.ArgumentError), match=re.escape(message)):
        check(broken)


def test_broken_cluster_settings_fail_the_checks():
    pin = ray_pin()

    def node(c):
        return c["available_node_types"]["gpu_worker"]

    cases = [
        (lambda c: node(c).update(max_workers=1), "MAX 16 workers > 1 node"),
        (lambda c: (node(c).update(max_workers=3), c.update(max_workers=3)), "leaves the last of 3 nodes idle"),
        (lambda c: node(c).update(max_workers=3), "cluster max_workers"),
        (lambda c: node(c)["resources"].update(GPU=4), "MIN 8 workers > 1 node(s) x 4 GPUs"),
        (lambda c: c["available_node_types"]["head"]["resources"].update(GPU=1), "no training worker on the head"),
        (lambda c: c["docker"].update(image=c["docker"]["image"].replace(f"ray{pin}", "ray2.9.0")), "its Ray must be"),
        (lambda c: node(c).update(min_worker=1), "Additional properties"),
    ]
    for edit, message in cases:
        config = load(CLUSTER)
        edit(config)
        with pytest.raises(Exception, match=re.escape(message)):
            check_cluster(config)


def test_broken_rayjob_settings_fail_the_checks():
    pin = ray_pin()
    group = gpu_group
    cases = [
        (lambda c: c["spec"]["rayClusterSpec"].update(rayVersion="2.59.0"), f"!= ray=={pin}"),
        (lambda c: group(c).update(maxReplicas=1, replicas=1), "MAX 16 workers > 1 node"),
        (lambda c: group(c).update(minReplicas=0), "MIN 8 workers > 0 node"),
        (lambda c: group(c)["template"]["spec"].update(terminationGracePeriodSeconds=30), "drain timeout"),
        (lambda c: group(c)["template"]["spec"]["containers"][0]["env"][0].update(
            name="RAY_GRACEFUL_SHUTDOWN_TIMEOUT_S"), "not read by Ray or not set"),
        (lambda c: group(c)["template"]["spec"]["containers"][0].update(image="bert:latest"), "bert:latest"),
    ]
    for edit, message in cases:
        config = load(RAYJOB)
        edit(config)
        with pytest.raises(AssertionError, match=re.escape(message)):
            check_rayjob(config)

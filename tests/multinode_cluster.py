"""A real multi-node Ray cluster on loopback, and the moto S3 server its nodes share (nodes share no disk), for the
multi-node tests: the pretraining and make-shards tests, and the production stack's. The cluster lives in
evaluation.loopback_cluster, which the elastic-recovery benchmark runs on too; this module is the tests' name
for it.

- `moto_s3(extra_env)`: the S3 server, with NODE_ENV set in this process (the nodes inherit it);
- `joined_cluster(workers, dashboard)`: a 0-CPU head and 1-CPU worker nodes, this process their driver;
- `LoopbackCluster`: `add_worker`, `kill_raylet` (SIGKILL: the machine vanishes), `drain` (a spot notice with a
  deadline), `restart_worker` (the lost node joins again), `node_id`/`name_of`, `wait_for`, `stop`/`stop_all`.
"""

from __future__ import annotations

from evaluation.loopback_cluster import NODE_ENV, LoopbackCluster, joined_cluster, moto_s3

__all__ = ["NODE_ENV", "LoopbackCluster", "joined_cluster", "moto_s3"]

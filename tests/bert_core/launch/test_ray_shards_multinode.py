"""make-shards across the nodes of a real multi-node Ray cluster on loopback (issue 24, item 4): a head that runs
no unit and two 1-CPU worker nodes, each its own raylet; corpus, vocab and output are s3:// URIs on the moto
server (nodes share no disk).

- The units (chunks of the input files) run as Ray tasks on both worker nodes (Ray's state API says where each
  attempt ran).
- One worker node's raylet SIGKILLed in the middle of the run, while a unit it ran is still to be fetched: only
  units of that node run again, on the other node (Ray's task retries and lineage reconstruction).
- The shards and the manifest are the bytes of an in-process run's (the manifest apart from its start and
  finish times).
- The output prefix, listed all through the run, never shows a shard that is not final nor a manifest before
  every shard it names.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections import defaultdict

import pytest

from bert_core.data import make_shards as data_shards
from bert_core.data.instances import ShardConfig
from bert_core.io import manifest, storage
from bert_core.launch import ray_shards
from tests import multinode_cluster
from tests.corpus_text import documents, write_segmented
from tests.paths import FIXTURES

BUCKET = "shardsmultinode"
CORPUS, VOCAB = f"s3://{BUCKET}/corpus", f"s3://{BUCKET}/vocab.txt"
# 4 files of 300 documents in units of 50: 24 units, each result a few hundred KB (kept in the object store of
# the node that made it, so a node lost before the driver fetched its result takes the result with it).
CONFIG = ShardConfig(dupe_factor=2, chunk_documents=50, instances_per_shard=1000, shuffle_buffer=1000)
KILL_FROM = 4  # results fetched before the kill may happen


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """moto with the corpus and vocab; the reference: the same inputs sharded in this process (no Ray)."""
    with multinode_cluster.moto_s3():
        storage.s3_client().create_bucket(Bucket=BUCKET)
        root = tmp_path_factory.mktemp("corpus")
        for i in range(4):
            write_segmented(root / f"part{i}.txt", documents(300, seed=10 + i))
        storage.upload_dir(root, CORPUS)
        storage.upload_file(FIXTURES / "vocab" / "uncased_L-12_H-768_A-12.vocab.txt", VOCAB)
        data_shards.make_shards([CORPUS], f"s3://{BUCKET}/inline", VOCAB, CONFIG, backend="inline")
        yield


class PrefixWatcher:
    """Lists an s3 prefix over and over in a thread: every (key, size, ETag) set seen while the run went on."""

    def __init__(self, uri: str):
        self.bucket, self.prefix = storage.split_s3(uri.rstrip("/") + "/")
        self.snapshots: list[dict[str, tuple[int, str]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def list_once(self) -> dict[str, tuple[int, str]]:
        listed = storage.s3_client().list_objects_v2(Bucket=self.bucket, Prefix=self.prefix)
        return {o["Key"][len(self.prefix):]: (o["Size"], o["ETag"]) for o in listed.get("Contents", [])}

    def _run(self) -> None:
        while not self._stop.is_set():
            self.snapshots.append(self.list_once())
            time.sleep(0.01)

    def stop(self) -> dict[str, tuple[int, str]]:
        """Stop listing; the prefix as it is now (a listing begun before the run ended may miss its end)."""
        self._stop.set()
        self._thread.join(timeout=30)
        return self.list_once()


def unit_attempts(dashboard: str) -> dict[str, list[tuple[int, str, str]]]:
    """Unit task name -> its attempts as (attempt number, node id, state), from Ray's state API."""
    from ray.util.state import list_tasks

    attempts = defaultdict(list)
    for task in list_tasks(address=dashboard, limit=10_000, detail=True, raise_on_missing_output=False):
        if task.name.startswith("make-shards unit "):
            attempts[task.name].append((task.attempt_number, task.node_id, task.state))
    return {name: sorted(a) for name, a in attempts.items()}


def test_units_spread_over_nodes_survive_a_node_loss_and_give_the_single_node_bytes(s3):
    with multinode_cluster.joined_cluster(dashboard=True) as cluster:
        node_a, node_b = cluster.node_id("node_a"), cluster.node_id("node_b")
        fetched: list[str] = []
        killed: dict[str, object] = {}

        @contextlib.contextmanager
        def kill_node_b_midway(vocab_file, config, workers, stats):
            """Ray's executor, whose results stream SIGKILLs node_b's raylet once KILL_FROM results are fetched
            and a unit node_b ran is still in flight (its result only in node_b's object store)."""
            with ray_shards.open_ray_executor(vocab_file, config, workers, stats) as run_units:
                def run(units):
                    for result in run_units(units):
                        fetched.append(ray_shards.unit_task_name((result.file_index, result.chunk_index, [])))
                        if len(fetched) >= KILL_FROM and not killed:
                            deadline = time.monotonic() + 5  # task events reach the GCS about every second
                            while time.monotonic() < deadline:
                                on_b = {n for n, a in unit_attempts(cluster.dashboard_url).items()
                                        if n not in fetched and any(node == node_b for _, node, _ in a)}
                                if on_b:
                                    cluster.kill_raylet("node_b")
                                    killed.update(after=len(fetched), in_flight_on_b=on_b)
                                    break
                                time.sleep(0.2)
                        yield result
                yield run

        watcher = PrefixWatcher(f"s3://{BUCKET}/multi")
        try:
            data_shards.make_shards([CORPUS], f"s3://{BUCKET}/multi", VOCAB, CONFIG, workers=2, backend="ray",
                                    remote=kill_node_b_midway)
        finally:
            final = watcher.stop()
        assert killed, "node_b never held an unfetched unit: the node loss was not tested"

        # Where every unit ran, once the surviving node's task events have reached the GCS.
        deadline = time.monotonic() + 30
        while True:
            attempts = unit_attempts(cluster.dashboard_url)
            if (len(attempts) == len(fetched) and all(a[-1][2] == "FINISHED" for a in attempts.values())) \
                    or time.monotonic() > deadline:
                break
            time.sleep(1.0)

    assert sorted(attempts) == sorted(fetched) and len(fetched) == 24
    assert all(a[-1][2] == "FINISHED" for a in attempts.values()), attempts
    first_nodes = {a[0][1] for a in attempts.values()}
    assert first_nodes == {node_a, node_b}, "the units did not spread over both worker nodes"
    again = {name for name, a in attempts.items() if len(a) > 1}
    # The units node_b held when it went ran again, on node_a; no other unit ran twice.
    assert again, f"no unit ran again after node_b was killed ({killed})"
    assert killed["in_flight_on_b"] <= again
    for name in again:
        assert any(node == node_b for _, node, _ in attempts[name][:-1]), (name, attempts[name])
        assert attempts[name][-1][1] == node_a, (name, attempts[name])
    assert all(len(a) == 1 for a in attempts.values() if a[0][1] == node_a)

    # The single-node run's bytes.
    names = storage.list_files(f"s3://{BUCKET}/multi")
    assert names == storage.list_files(f"s3://{BUCKET}/inline") and manifest.MANIFEST in names
    ours, theirs = _objects(f"s3://{BUCKET}/multi"), _objects(f"s3://{BUCKET}/inline")
    for name in names:
        if name != manifest.MANIFEST:
            assert ours[name] == theirs[name], f"{name} differs from the single-node run's"
    times = ("started_at", "finished_at")
    mine, single = json.loads(ours[manifest.MANIFEST]), json.loads(theirs[manifest.MANIFEST])
    assert {k: v for k, v in mine.items() if k not in times} == {k: v for k, v in single.items() if k not in times}
    assert len([n for n in names if n.startswith("part-")]) >= 2

    # Never a partial output: each object seen is its final self, and the manifest comes after every shard.
    assert set(final) == set(names)
    assert len(watcher.snapshots) > 20, "the output prefix was hardly listed during the run"
    for seen in watcher.snapshots:
        assert all(seen[key] == final[key] for key in seen), "an object was seen with other bytes than its final"
        if manifest.MANIFEST in seen:
            assert set(seen) == set(final), f"manifest.json visible before {sorted(set(final) - set(seen))}"
    assert storage.COMPLETE_MARK == manifest.MANIFEST


def _objects(uri: str) -> dict[str, bytes]:
    bucket, prefix = storage.split_s3(uri.rstrip("/") + "/")
    client = storage.s3_client()
    return {name: client.get_object(Bucket=bucket, Key=prefix + name)["Body"].read()
            for name in storage.list_files(uri)}


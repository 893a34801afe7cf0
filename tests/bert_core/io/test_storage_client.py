"""One S3 client per process and S3 settings: every storage call building its own client logged botocore's "Found
endpoint for s3 via: environment_global." each time (50+ lines in a task's log). A changed environment (another S3
server, a task's connection credentials) must get a client of its own, and threads asking at once get one client."""

from __future__ import annotations

import logging
import threading

from bert_core.io import storage
from tests import multinode_cluster


def test_storage_calls_share_one_client_and_log_where_they_found_s3_once(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="botocore")
    with multinode_cluster.moto_s3():
        client = storage.s3_client()
        client.create_bucket(Bucket="runs")
        (tmp_path / "a.txt").write_text("a")
        storage.upload_file(tmp_path / "a.txt", "s3://runs/x/a.txt")
        storage.write_text("s3://runs/x/manifest.json", "{}")
        assert storage.exists("s3://runs/x") and storage.read_text("s3://runs/x/a.txt") == "a"
        assert storage.list_files("s3://runs/x") == ["a.txt", "manifest.json"]
        assert storage.s3_client() is client
    found = [r for r in caplog.records if "Found endpoint for s3" in r.getMessage()]
    assert len(found) <= 1, [r.getMessage() for r in found]


def test_another_s3_server_gets_a_client_of_its_own():
    with multinode_cluster.moto_s3() as first:
        client = storage.s3_client()
        assert client.meta.endpoint_url == first
    with multinode_cluster.moto_s3() as second:  # a test's next server: another port
        assert second != first
        other = storage.s3_client()
        assert other is not client and other.meta.endpoint_url == second
        other.create_bucket(Bucket="on-the-second")  # it talks to the server that is up


def test_other_credentials_get_a_client_of_their_own(monkeypatch):
    with multinode_cluster.moto_s3():
        client = storage.s3_client()
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "from-the-airflow-connection")
        other = storage.s3_client()
        assert other is not client
        assert other.meta.region_name == "us-east-1"
        monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
        assert storage.s3_client().meta.region_name == "eu-west-1"


def test_threads_asking_at_once_get_one_client():
    with multinode_cluster.moto_s3():
        start, got = threading.Barrier(8), []

        def ask() -> None:
            start.wait()
            got.append(storage.s3_client())

        threads = [threading.Thread(target=ask) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(got) == 8 and len({id(c) for c in got}) == 1


def test_a_forked_child_makes_a_client_of_its_own():
    """An Airflow task process is forked from its supervisor: the parent's client (its connections) is not its."""
    import os

    with multinode_cluster.moto_s3():
        parent = id(storage.s3_client())
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: say whether it got the parent's client, and leave at once
            os.write(write, b"same" if id(storage.s3_client()) == parent else b"own")
            os._exit(0)
        os.close(write)
        answer = os.read(read, 16)
        os.waitpid(pid, 0)
        assert answer == b"own"

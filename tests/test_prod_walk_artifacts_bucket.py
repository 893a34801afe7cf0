"""`stack up --profile production` checks its --artifacts-destination before anything starts (found walking
docs/stack.md's production profile on moto, 2026-11-29): with a bucket that did not exist the stack came up
healthy, and the first artifact a DAG task logged failed with the MLflow server's "too many 500 error responses",
naming neither the bucket nor the flag. Against a real S3 protocol server (moto's, on loopback)."""

from __future__ import annotations

import pytest

from bert_core.errors import BertPipelineError
from bert_pipeline.cli import main
from bert_pipeline.commands.stack import check_artifacts_destination
from bert_pipeline.stack.profiles import PRODUCTION, PROFILES

KEY = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


@pytest.fixture(scope="module")
def s3_endpoint():
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@pytest.fixture
def s3(s3_endpoint, monkeypatch):
    import boto3

    for name in ("AWS_PROFILE", "AWS_ENDPOINT_URL_S3", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    for name, value in {**KEY, "AWS_ENDPOINT_URL": s3_endpoint}.items():
        monkeypatch.setenv(name, value)
    client = boto3.client("s3")
    if "mlflow-artifacts" not in [b["Name"] for b in client.list_buckets()["Buckets"]]:
        client.create_bucket(Bucket="mlflow-artifacts")
    return s3_endpoint


def test_an_existing_bucket_passes(s3):
    check_artifacts_destination("s3://mlflow-artifacts/mlflow")


def test_a_missing_bucket_is_refused_naming_the_flag_the_bucket_and_the_endpoint(s3):
    with pytest.raises(BertPipelineError) as error:
        check_artifacts_destination("s3://mlflow-artfacts/mlflow")
    assert str(error.value).startswith("--artifacts-destination s3://mlflow-artfacts/mlflow: bucket "
                                       f"'mlflow-artfacts' does not exist at {s3} (AWS_ENDPOINT_URL); create it")


def test_no_credentials_are_refused_naming_the_variables(s3, monkeypatch, tmp_path):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name)
    # No other place boto3 would find keys in: the shared files and an instance's metadata service.
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.delenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", raising=False)
    monkeypatch.delenv("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", raising=False)
    with pytest.raises(BertPipelineError, match="no S3 credentials in this environment.*AWS_ACCESS_KEY_ID"):
        check_artifacts_destination("s3://mlflow-artifacts/mlflow")


def test_an_endpoint_that_does_not_answer_is_refused(s3, monkeypatch):
    from bert_core.launch.ports import free_ports

    dead = f"http://127.0.0.1:{free_ports()[0]}"
    monkeypatch.setenv("AWS_ENDPOINT_URL", dead)
    with pytest.raises(BertPipelineError, match=f"cannot reach bucket 'mlflow-artifacts' at {dead}"):
        check_artifacts_destination("s3://mlflow-artifacts/mlflow")


def test_up_refuses_a_missing_bucket_before_anything_is_made(s3, monkeypatch, tmp_path, capsys):
    # Whether or not this machine has PostgreSQL and Redis: the bucket is what is checked here.
    monkeypatch.setattr(PROFILES[PRODUCTION], "missing", lambda options: [])
    home = tmp_path / "home"
    assert main(["stack", "up", "--profile", "production", "--home", str(home),
                 "--artifacts-destination", "s3://no-such-bucket/mlflow"]) == 2
    assert "bucket 'no-such-bucket' does not exist" in capsys.readouterr().err
    assert not home.exists()

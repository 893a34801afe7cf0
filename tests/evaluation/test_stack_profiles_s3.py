"""`python -m evaluation.stack_profiles` starts a moto S3 server for the production profile when no S3 is configured;
the server's HTTP access log (one line per request the stacks' tasks make: 473 of its 500 lines) stays out of the
benchmark's output."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from tests.paths import REPO


def test_the_benchmarks_s3_server_does_not_print_its_access_log():
    code = textwrap.dedent("""
        import boto3
        from evaluation.stack_profiles import s3_endpoint

        with s3_endpoint() as s3:
            client = boto3.client("s3", endpoint_url=s3["AWS_ENDPOINT_URL"], aws_access_key_id=s3["AWS_ACCESS_KEY_ID"],
                                  aws_secret_access_key=s3["AWS_SECRET_ACCESS_KEY"], region_name=s3["AWS_DEFAULT_REGION"])
            client.create_bucket(Bucket="bert-stack-bench")
            for i in range(3):
                client.put_object(Bucket="bert-stack-bench", Key=f"runs/{i}", Body=b"x")
            print("objects:", client.list_objects_v2(Bucket="bert-stack-bench")["KeyCount"])
    """)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.endswith("objects: 3\n")
    output = done.stdout + done.stderr
    assert "HTTP/1.1" not in output and "/bert-stack-bench" not in output, output

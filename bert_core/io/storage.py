"""Paths and URIs: local paths, file:// and s3://bucket/prefix behind one small interface.

S3 goes through boto3, which honours AWS_ENDPOINT_URL (MinIO, moto, any S3-compatible server)
and the usual credential chain; transfers retry with backoff and large files go multipart
(boto3's transfer manager). Credentials are never logged.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import shutil
import tempfile
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from bert_core.errors import BertPipelineError

log = logging.getLogger(__name__)


def is_s3(uri: str | os.PathLike) -> bool:
    return str(uri).startswith("s3://")


def local_path(uri: str | os.PathLike) -> Path:
    """A local path for a local path or file:// URI; an error for anything else."""
    text = str(uri)
    if text.startswith("file://"):
        return Path(urlparse(text).path)
    if "://" in text:
        raise BertPipelineError(f"{text}: only local paths, file:// and s3:// URIs are supported")
    return Path(text)


def split_s3(uri: str) -> tuple[str, str]:
    parsed = urlparse(uri)
    if parsed.scheme != "s3" or not parsed.netloc:
        raise BertPipelineError(f"{uri}: expected s3://bucket/key")
    return parsed.netloc, parsed.path.lstrip("/")


# The client of this process and its S3 settings (below). boto3 clients are thread-safe; making one is not (it
# goes through boto3's default session), hence the lock.
_client: tuple[tuple, Any] | None = None
_client_lock = threading.Lock()


def _forget_client() -> None:
    """In a forked child (an Airflow task process): a client of its own, not its parent's connections, and a lock no
    thread holds."""
    global _client, _client_lock
    _client, _client_lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_client)


def _s3_settings() -> tuple:
    """What a client is made of, as boto3 reads it from the environment: every AWS_* variable (endpoint, credentials,
    region, profile, config files)."""
    return tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("AWS_")))


def s3_client():
    """The S3 client for the current settings, made once: boto3 logs where it found the endpoint and credentials
    each time it makes one ("Found endpoint for s3 via: environment_global"), which was 50+ lines per task when
    every storage call made its own. Changed settings (another S3 server, a task's connection credentials) get a
    new client."""
    global _client
    settings = _s3_settings()
    with _client_lock:
        if _client is None or _client[0] != settings:
            _client = (settings, _new_s3_client())
        return _client[1]


def _new_s3_client():
    import boto3
    from botocore.config import Config

    # "adaptive" retries back off on throttling and transient network errors.
    return boto3.client("s3", config=Config(retries={"max_attempts": 8, "mode": "adaptive"}))


def _is_missing_bucket(exc: BaseException, bucket: str) -> bool:
    code = (getattr(exc, "response", None) or {}).get("Error", {}).get("Code")
    if code in ("404", "NoSuchKey"):  # a HEAD (a download's first call) says only "Not Found": ask about the bucket
        try:
            s3_client().head_bucket(Bucket=bucket)
        except Exception as head:  # noqa: BLE001 - any answer but "it exists" leaves the first error as it was
            return (getattr(head, "response", None) or {}).get("Error", {}).get("Code") in ("404", "NoSuchBucket")
        return False
    # An upload through boto3's transfer manager wraps the error in S3UploadFailedError's message.
    return code == "NoSuchBucket" or (type(exc).__name__ == "S3UploadFailedError" and "NoSuchBucket" in str(exc))


def _names_missing_bucket(fn):
    """A bucket that does not exist is an error naming the URI, the bucket and the S3 endpoint. boto3 said only
    "An error occurred (NoSuchBucket) when calling the GetObject operation", and as a BertPipelineError it is a
    verdict that an Airflow task does not retry (three tries of a DAG's plan task took 90 s)."""
    @functools.wraps(fn)
    def named(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            uri = next((str(a) for a in (*args, *kwargs.values()) if is_s3(a)), None)
            if uri is None or not _is_missing_bucket(exc, split_s3(uri)[0]):
                raise
            endpoint = s3_client().meta.endpoint_url  # what boto3 resolved (AWS_ENDPOINT_URL, a profile, AWS)
            raise BertPipelineError(f"{uri}: the S3 bucket {split_s3(uri)[0]!r} does not exist on {endpoint}: "
                                    "create it, or name a bucket that exists") from None
    return named


def join(base: str, *parts: str) -> str:
    if is_s3(base):
        return "/".join([base.rstrip("/"), *(p.strip("/") for p in parts)])
    return str(local_path(base).joinpath(*parts))


@_names_missing_bucket
def exists(uri: str) -> bool:
    if not is_s3(uri):
        return local_path(uri).exists()
    bucket, key = split_s3(uri)
    client = s3_client()
    if key and not key.endswith("/"):
        try:
            client.head_object(Bucket=bucket, Key=key)
            return True
        except client.exceptions.ClientError:
            pass
    prefix = key.rstrip("/") + "/" if key else ""
    resp = client.list_objects_v2(Bucket=bucket, Prefix=prefix, MaxKeys=1)
    return resp.get("KeyCount", 0) > 0


@_names_missing_bucket
def _s3_objects(uri: str) -> dict[str, str]:
    """Relative name -> ETag of every object under an s3 prefix."""
    bucket, key = split_s3(uri)
    prefix = key.rstrip("/") + "/" if key else ""
    objects = {}
    for page in s3_client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for obj in page.get("Contents", []):
            name = obj["Key"][len(prefix):]
            if name and not name.endswith("/"):
                objects[name] = obj["ETag"]
    return objects


def list_files(uri: str) -> list[str]:
    """Relative paths of the files under a directory or prefix, sorted."""
    if not is_s3(uri):
        root = local_path(uri)
        return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    return sorted(_s3_objects(uri))


def _temp_name(path: Path, kind: str) -> Path:
    """A name beside `path` that no other writer uses: processes (Ray workers on one node share its cache) and
    threads may write the same file at once, and each renames its own copy into place."""
    return path.with_name(f".{path.name}.{kind}-{os.getpid()}-{uuid.uuid4().hex[:8]}")


@_names_missing_bucket
def download_file(uri: str, dest: Path) -> None:
    bucket, key = split_s3(uri)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temp_name(dest, "part")
    try:
        s3_client().download_file(bucket, key, str(tmp))
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)


@_names_missing_bucket
def upload_file(src: Path, uri: str) -> None:
    bucket, key = split_s3(uri)
    s3_client().upload_file(str(src), bucket, key)


@_names_missing_bucket
def read_text(uri: str) -> str:
    """A small text file (a manifest, a report) from a local path or an s3 object."""
    if not is_s3(uri):
        return local_path(uri).read_text(encoding="utf-8")
    bucket, key = split_s3(uri)
    client = s3_client()
    try:
        return client.get_object(Bucket=bucket, Key=key)["Body"].read().decode("utf-8")
    except client.exceptions.NoSuchKey:
        raise FileNotFoundError(f"{uri}: no such object") from None


@_names_missing_bucket
def write_text(uri: str, text: str) -> None:
    """Write a small text file in one step: a local temp file renamed into place, or one S3 PUT (atomic)."""
    if is_s3(uri):
        bucket, key = split_s3(uri)
        s3_client().put_object(Bucket=bucket, Key=key, Body=text.encode("utf-8"))
        return
    path = local_path(uri)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temp_name(path, "tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def cache_root() -> Path:
    return Path(os.environ.get("BERT_PIPELINE_CACHE", Path.home() / ".cache" / "bert-pipeline"))


# In each cached copy of an s3 prefix: the prefix's URI, so a path in the copy can be named by its URI (source_uri).
SOURCE_FILE = ".source-uri"


# The two caches of s3:// content: copies of prefixes (local_dir) and of single objects (local_file).
_CACHES = ("s3", "s3-objects")


def _mark_source(directory: Path, uri: str) -> None:
    """Record, in a cache directory, the s3:// prefix whose files it holds (read back by source_uri)."""
    source = directory / SOURCE_FILE
    if not source.is_file():
        directory.mkdir(parents=True, exist_ok=True)
        source.write_text(uri.rstrip("/") + "\n")


def source_uri(path: str | os.PathLike) -> str:
    """What a local path stands for, for the record: the s3:// URI of an object when the path is in a cached copy
    (local_dir, local_file: another machine can read the URI, not this machine's cache), else the path itself."""
    text = str(path)
    if is_s3(text):
        return text
    absolute = Path(text).absolute()
    for cache in _CACHES:
        root = (cache_root() / cache).absolute()
        if root not in absolute.parents:
            continue
        parts = absolute.relative_to(root).parts
        source = root / parts[0] / SOURCE_FILE
        if source.is_file():
            return join(source.read_text().strip(), *parts[1:]) if parts[1:] else source.read_text().strip()
    return text


@_names_missing_bucket
def local_file(uri: str) -> Path:
    """A local file with the content of `uri`: the path itself, or a cached copy of an s3 object (keyed by its URI
    and ETag: a changed object is fetched again; downloaded under a temporary name)."""
    if not is_s3(uri):
        return local_path(uri)
    bucket, key = split_s3(uri)
    etag = s3_client().head_object(Bucket=bucket, Key=key)["ETag"].strip('"')
    target = cache_root() / _CACHES[1] / hashlib.sha256(f"{uri}\0{etag}".encode()).hexdigest()[:24]
    dest = target / Path(key).name
    if not dest.exists():
        _mark_source(target, uri.rsplit("/", 1)[0])
        log.info("fetching %s", uri)
        download_file(uri, dest)
    return dest


def local_dir(uri: str) -> Path:
    """A local directory holding the files of `uri`: the path itself, or a cached copy of an s3 prefix.

    The cache key is the URI; a cached file is fetched again when its object's ETag changed, and
    every file is downloaded under a temporary name of its own so a killed download never looks complete and
    several processes (the Ray workers of one node) may fill the same cache at once.
    """
    if not is_s3(uri):
        return local_path(uri)
    objects = _s3_objects(uri)
    if not objects:
        raise BertPipelineError(f"{uri}: no objects under this prefix")
    target = cache_root() / _CACHES[0] / hashlib.sha256(uri.rstrip("/").encode()).hexdigest()[:16]
    _mark_source(target, uri)
    etag_file = target / ".etags.json"
    try:
        cached = json.loads(etag_file.read_text()) if etag_file.exists() else {}
    except ValueError:  # not expected (it is replaced whole); a lost record only costs a download
        cached = {}
    for name, etag in sorted(objects.items()):
        dest = target / name
        if not dest.exists() or cached.get(name) != etag:
            log.info("downloading %s/%s", uri.rstrip("/"), name)
            download_file(join(uri, name), dest)
            cached[name] = etag
            write_text(str(etag_file), json.dumps(cached))
    return target


# The file that marks an output complete (bert_core.io.manifest.MANIFEST; not imported: manifest imports this module).
COMPLETE_MARK = "manifest.json"


def upload_dir(src: Path, uri: str) -> None:
    """Every file under `src` to `uri`, manifest.json last: S3 has no rename, so the objects of a prefix appear
    one by one (each whole), and a reader that finds the manifest must find every file it names."""
    names = list_files(str(src))
    for name in sorted(names, key=lambda n: n == COMPLETE_MARK):
        upload_file(src / name, join(uri, name))


def current_umask() -> int:
    """The process's umask, read from /proc where Linux has it: os.umask can only be read by setting it, which
    another thread creating a file at that moment would see."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@contextmanager
def atomic_output_dir(uri: str, overwrite: bool = False) -> Iterator[Path]:
    """Yield a fresh local directory; on success it becomes `uri` in one step.

    Local targets are renamed into place (an existing target is replaced only with overwrite);
    s3 targets are uploaded after the body succeeds, manifest.json last. On failure nothing is left at `uri`.
    """
    if is_s3(uri):
        if exists(uri) and not overwrite:
            raise BertPipelineError(f"{uri} already exists; pass --overwrite to replace it")
        with tempfile.TemporaryDirectory(prefix="bert-pipeline-") as tmp:
            yield Path(tmp)
            upload_dir(Path(tmp), uri)
        return
    final = local_path(uri).absolute()
    if final.exists() and any(final.iterdir()) and not overwrite:
        raise BertPipelineError(f"{final} already exists and is not empty; pass --overwrite to replace it")
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=final.parent))
    # mkdtemp makes the directory 0700, and the rename kept that: shards, models and segmented text were
    # readable by their owner only (a serving container or Ray node running as another user could not read
    # them). The output gets the mode of any directory the user makes: 0777 less the umask.
    tmp.chmod(0o777 & ~current_umask())
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if final.exists():
        trash = final.with_name(f".{final.name}.old-{os.getpid()}")
        os.replace(final, trash)
        os.replace(tmp, final)
        shutil.rmtree(trash, ignore_errors=True)
    else:
        os.replace(tmp, final)

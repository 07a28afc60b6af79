"""Helpers for the object-storage tests: an S3-compatible HTTP server and a fresh bucket the
portal is configured to use (tests/dpportal/test_object_storage.py, tests/e2e/...).

The server is moto's standalone server: the one test.sh starts (scripts/common.sh
ensure_object_store exports DPPORTAL_TEST_S3_ENDPOINT), or one started here when the tests run
without test.sh. The portal reaches it over HTTP through its production client code.
"""

import http.client
import http.server
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import boto3

REGION = "us-east-1"
AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "portal-test",
    "AWS_SECRET_ACCESS_KEY": "portal-test-secret",
    "AWS_EC2_METADATA_DISABLED": "true",
}


@contextmanager
def s3_server():
    """The S3-compatible server's URL (started here if test.sh did not start one)."""
    url = os.environ.get("DPPORTAL_TEST_S3_ENDPOINT")
    if url:
        yield url
        return
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = Path(sys.executable).with_name("moto_server")
    process = subprocess.Popen(  # noqa: S603  (our own venv's moto_server)
        [str(server), "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while not _answers(url):
            if time.monotonic() > deadline or process.poll() is not None:
                raise RuntimeError("moto_server did not start")
            time.sleep(0.1)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)


def bucket_with(endpoint: str, bucket: str, files: dict[str, Path]) -> dict[str, str]:
    """A new bucket on the server at `endpoint` holding `files` ({key: local file}); the storage
    options a source reads it with (the test keys)."""
    options = {
        "endpoint_url": endpoint,
        "region": REGION,
        "access_key": AWS_ENV["AWS_ACCESS_KEY_ID"],
        "secret_key": AWS_ENV["AWS_SECRET_ACCESS_KEY"],
    }
    client = boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name=REGION,
        aws_access_key_id=options["access_key"],
        aws_secret_access_key=options["secret_key"],
    )
    client.create_bucket(Bucket=bucket)
    for key, path in files.items():
        client.upload_file(str(path), bucket, key)
    return options


def _answers(url) -> bool:
    try:
        urllib.request.urlopen(url, timeout=1).close()  # noqa: S310  (our local test server)
    except OSError:
        return False
    return True


def use_bucket(endpoint, settings, monkeypatch, storage: Path) -> SimpleNamespace:
    """Create a fresh bucket and point the portal at it, here (`settings`) and in any worker
    started afterwards (the environment); `storage` becomes the local storage folder."""
    name = f"dpportal-test-{uuid.uuid4().hex[:16]}"
    for variable, value in {
        **AWS_ENV,
        "DPPORTAL_S3_BUCKET": name,
        "DPPORTAL_S3_ENDPOINT_URL": endpoint,
        "DPPORTAL_S3_REGION": REGION,
        "DPPORTAL_STORAGE_DIR": str(storage),
    }.items():
        monkeypatch.setenv(variable, value)
    settings.DPPORTAL_S3_BUCKET = name
    settings.DPPORTAL_S3_ENDPOINT_URL = endpoint
    settings.DPPORTAL_S3_REGION = REGION
    settings.DPPORTAL_S3_SSE = True
    settings.DATASET_STORAGE_DIR = storage
    client = boto3.client("s3", endpoint_url=endpoint, region_name=REGION)
    client.create_bucket(Bucket=name)
    return SimpleNamespace(name=name, client=client, url=endpoint, storage=storage)


def keys(bucket, prefix="") -> set[str]:
    listed = bucket.client.list_objects_v2(Bucket=bucket.name, Prefix=prefix)
    return {entry["Key"] for entry in listed.get("Contents", [])}


def stored_bytes(bucket, key) -> bytes:
    return bucket.client.get_object(Bucket=bucket.name, Key=key)["Body"].read()


def local_files(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file()] if folder.exists() else []


def anonymous_get(bucket, key) -> int:
    """The HTTP status of an unsigned GET of the object, as anyone on the network could send."""
    url = f"{bucket.url}/{bucket.name}/{key}"
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:  # noqa: S310  (local server)
            return answer.status
    except urllib.error.HTTPError as error:
        return error.code


@contextmanager
def recording_proxy(upstream: str):
    """A URL that forwards every request to the S3 server at `upstream` and the list it records
    each request in, as (User-Agent, Authorization): who asked, with whose key."""
    target = urllib.parse.urlsplit(upstream)
    seen: list[tuple[str, str]] = []

    class Forward(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _forward(self):
            seen.append((self.headers.get("User-Agent", ""), self.headers.get("Authorization", "")))
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            connection = http.client.HTTPConnection(target.hostname, target.port, timeout=30)
            connection.request(self.command, self.path, body=body, headers=dict(self.headers))
            answer = connection.getresponse()
            payload = answer.read()
            self.send_response(answer.status)
            for name, value in answer.getheaders():
                if name.lower() not in ("transfer-encoding", "connection", "content-length"):
                    self.send_header(name, value)
            size = answer.getheader("Content-Length") if self.command == "HEAD" else None
            self.send_header("Content-Length", size or str(len(payload)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(payload)
            connection.close()

        do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _forward

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Forward)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    host, port = server.server_address[:2]
    try:
        yield f"http://{host}:{port}", seen
    finally:
        server.shutdown()
        server.server_close()

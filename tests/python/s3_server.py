"""An S3 store for the tests (and benchmarks): moto's server with signature checking on, and a
fault-injecting HTTP proxy of our own in front of it.

    with S3Server() as s3:
        s3.create_bucket("data")
        s3.upload_tree(local_root, "data", "ds/v21")
        env = s3.env()          # AWS_* variables with the real keys, AWS_ENDPOINT_URL
        with FaultProxy(s3.endpoint, seed=1) as proxy:
            proxy.set_faults(slowdown=0.2, reset=0.05)
            ...                 # point clients at proxy.endpoint

moto checks signatures only after its first ``INITIAL_NO_AUTH_ACTION_COUNT`` requests: the
server spends those on making an IAM user with an access key and an s3:* policy, and every later
request must be signed with that key (a wrong secret gets 403 SignatureDoesNotMatch).
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import random
import re
import socket
import socketserver
import subprocess
import sys
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Dict, List, Optional, Tuple

REGION = "us-east-1"
# Requests moto serves unauthenticated: create_user, put_user_policy, create_access_key, and
# slack for boto3 retries (any request beyond them must be signed).
_SETUP_REQUESTS = 3

_POLICY = json.dumps(
    {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class S3Server:
    """moto's server in a subprocess on 127.0.0.1, authenticating every request after setup."""

    def __init__(self, python: str = sys.executable, timeout_s: float = 30):
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        env = dict(
            os.environ,
            INITIAL_NO_AUTH_ACTION_COUNT=str(_SETUP_REQUESTS),
            AWS_DEFAULT_REGION=REGION,
            MOTO_ALLOW_NONEXISTENT_REGION="true",
        )
        self._log = open(os.devnull, "wb")
        self._process = subprocess.Popen(
            [python, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=self._log,
            stderr=self._log,
            env=env,
        )
        try:
            self._wait_ready(timeout_s)
            self.access_key_id, self.secret_access_key = self._make_user()
        except BaseException:
            self.close()
            raise
        self.s3 = self.client()

    def _wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            if self._process.poll() is not None:
                raise RuntimeError(f"moto server exited with {self._process.returncode}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return  # a TCP accept, not a request: the free requests are not spent
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"moto server not ready on {self.endpoint}") from None
                time.sleep(0.1)

    def _make_user(self) -> tuple:
        import boto3

        iam = boto3.client(
            "iam",
            endpoint_url=self.endpoint,
            region_name=REGION,
            aws_access_key_id="setup",
            aws_secret_access_key="setup",
        )
        iam.create_user(UserName="stoker-test")
        iam.put_user_policy(UserName="stoker-test", PolicyName="s3-all", PolicyDocument=_POLICY)
        key = iam.create_access_key(UserName="stoker-test")["AccessKey"]
        return key["AccessKeyId"], key["SecretAccessKey"]

    def client(self, endpoint: Optional[str] = None, secret: Optional[str] = None):
        """A boto3 S3 client signing with the real key (or with ``secret``), path-style."""
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3",
            endpoint_url=endpoint or self.endpoint,
            region_name=REGION,
            aws_access_key_id=self.access_key_id,
            aws_secret_access_key=secret or self.secret_access_key,
            config=Config(
                s3={"addressing_style": "path"},
                signature_version="s3v4",
                retries={"total_max_attempts": 1},
            ),
        )

    def env(self, endpoint: Optional[str] = None) -> Dict[str, str]:
        """AWS_* variables for the real key and this server (or ``endpoint``, e.g. a proxy)."""
        return {
            "AWS_ACCESS_KEY_ID": self.access_key_id,
            "AWS_SECRET_ACCESS_KEY": self.secret_access_key,
            "AWS_REGION": REGION,
            "AWS_DEFAULT_REGION": REGION,
            "AWS_ENDPOINT_URL": endpoint or self.endpoint,
        }

    def create_bucket(self, bucket: str) -> None:
        self.s3.create_bucket(Bucket=bucket)

    def upload_tree(self, local_dir, bucket: str, prefix: str = "") -> list:
        """Uploads every file under ``local_dir`` (dot-folders such as .stoker/ left out) to
        ``bucket`` under ``prefix``; returns the keys."""
        keys = []
        local_dir = os.fspath(local_dir)
        for folder, dirs, files in os.walk(local_dir):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            for name in sorted(files):
                path = os.path.join(folder, name)
                rel = os.path.relpath(path, local_dir).replace(os.sep, "/")
                key = f"{prefix.strip('/')}/{rel}" if prefix.strip("/") else rel
                self.s3.upload_file(path, bucket, key)
                keys.append(key)
        return keys

    def put(self, bucket: str, key: str, data: bytes) -> None:
        self.s3.put_object(Bucket=bucket, Key=key, Body=data)

    def presign(self, bucket: str, key: str, expires: int = 600) -> str:
        return self.s3.generate_presigned_url(
            "get_object", Params={"Bucket": bucket, "Key": key}, ExpiresIn=expires
        )

    def close(self) -> None:
        if self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(5)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._log.close()

    def __enter__(self) -> "S3Server":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# ---------------------------------------------------------------------------------------------
# Faults


@dataclass
class Faults:
    """What the proxy does to requests. Rates are per request, drawn from the proxy's seeded
    generator in request order; ``on_request`` maps a request number (1-based) to one fault
    name forced on it. Fault names: "slowdown" (503 SlowDown), "error" (500), "reset"
    (connection reset mid-body), "stall" (sleep ``stall_s``, then go on; with ``stall_hang``,
    never answer; with ``stall_mid_body`` too, send the headers and half the body, then
    nothing more), "truncate" (fewer bytes than Content-Length, then close), "down" (every
    request answered 503: a server that never recovers). ``paths``, a regular expression,
    limits every fault to the requests whose path (``/bucket/key``) it matches (searched);
    the others are forwarded untouched. A hung request is let go when the proxy closes."""

    slowdown: float = 0.0
    error: float = 0.0
    reset: float = 0.0
    stall: float = 0.0
    truncate: float = 0.0
    down: bool = False
    stall_s: float = 2.0
    stall_hang: bool = False
    stall_mid_body: bool = False
    paths: str = ""
    on_request: Dict[int, str] = field(default_factory=dict)
    latency_s: float = 0.0  # added before every answer
    deny_listing: bool = False  # ListObjects answered 403 AccessDenied (get allowed, list not)
    bandwidth: float = 0.0  # bytes/s of bodies sent back; 0: no cap


class FaultProxy:
    """An HTTP proxy on 127.0.0.1 in front of ``upstream`` (moto), forwarding each request as
    received (the Host header kept, so SigV4 signatures still verify) over a kept-alive
    connection per client connection, and injecting :class:`Faults`. Counts requests, bytes
    and faults."""

    _KINDS = ("slowdown", "error", "reset", "stall", "truncate")

    def __init__(self, upstream: str, seed: int = 0, faults: Optional[Faults] = None):
        host, port = upstream.split("://", 1)[1].rsplit(":", 1)
        self._upstream = (host, int(port))
        self._random = random.Random(seed)
        self._lock = threading.Lock()
        self._faults = faults or Faults()
        self._closed = threading.Event()
        self.requests = 0
        self.methods: Dict[str, int] = {}  # requests by HTTP method
        self.log: List[Tuple[str, str]] = []  # (method, path and query) of every request
        self.bytes_sent = 0
        self.faults_injected: Dict[str, int] = {}
        self.in_flight = 0
        self.max_in_flight = 0  # the most requests being answered at once
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                proxy._handle(self)

            do_HEAD = do_PUT = do_POST = do_DELETE = do_GET

        class Server(socketserver.ThreadingMixIn, socketserver.TCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self._server = Server(("127.0.0.1", 0), Handler)
        self.port = self._server.server_address[1]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def set_faults(self, faults: Optional[Faults] = None, **fields) -> None:
        """Replaces the faults: a :class:`Faults`, or its fields as keywords."""
        with self._lock:
            self._faults = faults if faults is not None else Faults(**fields)

    def _draw(self, path: str) -> tuple:
        with self._lock:
            self.requests += 1
            number, faults = self.requests, self._faults
            if faults.paths and not re.search(faults.paths, urllib.parse.unquote(path)):
                return None, faults
            kind = faults.on_request.get(number)
            if kind is None and faults.down:
                kind = "slowdown"
            if kind is None:
                draw = self._random.random()
                for name in self._KINDS:
                    rate = getattr(faults, name)
                    if draw < rate:
                        kind = name
                        break
                    draw -= rate
            if kind is not None:
                self.faults_injected[kind] = self.faults_injected.get(kind, 0) + 1
            return kind, faults

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        with self._lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            self._answer(handler)
        finally:
            with self._lock:
                self.in_flight -= 1

    def _answer(self, handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length else None
        with self._lock:
            self.methods[handler.command] = self.methods.get(handler.command, 0) + 1
            self.log.append((handler.command, urllib.parse.unquote(handler.path)))
        kind, faults = self._draw(handler.path)
        if faults.latency_s:
            time.sleep(faults.latency_s)
        if faults.deny_listing and "list-type=" in handler.path:
            kind = "denied"
            with self._lock:
                self.faults_injected[kind] = self.faults_injected.get(kind, 0) + 1
        if kind in ("slowdown", "error", "denied"):
            status, code = {
                "slowdown": (503, "SlowDown"),
                "error": (500, "InternalError"),
                "denied": (403, "AccessDenied"),
            }[kind]
            xml = (
                f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code>'
                f"<Message>injected by FaultProxy</Message></Error>"
            ).encode()
            handler.send_response(status)
            handler.send_header("Content-Type", "application/xml")
            handler.send_header("Content-Length", str(len(xml)))
            handler.end_headers()
            if handler.command != "HEAD":
                handler.wfile.write(xml)
            return
        if kind == "stall":
            if faults.stall_hang and not faults.stall_mid_body:
                self._hang(handler)
                return
            if not faults.stall_hang:
                time.sleep(faults.stall_s)
        status, headers, data = self._forward(handler, body)
        handler.send_response(status)
        for name, value in headers:
            if name.lower() not in ("transfer-encoding", "connection", "content-length"):
                handler.send_header(name, value)
        declared = (
            len(data)
            if handler.command != "HEAD"
            else int(dict((k.lower(), v) for k, v in headers).get("content-length", 0))
        )
        handler.send_header("Content-Length", str(declared))
        handler.end_headers()
        if handler.command == "HEAD":
            return
        if kind == "stall" and faults.stall_hang:  # mid-body: half of it, then nothing
            self._send(handler, data[: len(data) // 2], faults)
            handler.wfile.flush()
            self._hang(handler)
            return
        if kind in ("reset", "truncate") and len(data) > 1:
            self._send(handler, data[: len(data) // 2], faults)
            if kind == "reset":  # RST instead of FIN
                handler.connection.setsockopt(
                    socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00"
                )
            handler.close_connection = True
            handler.connection.close()
            return
        self._send(handler, data, faults)

    def _hang(self, handler: BaseHTTPRequestHandler) -> None:
        """Answers nothing more on this connection until the proxy closes (or an hour)."""
        self._closed.wait(3600)
        handler.close_connection = True

    def _send(self, handler, data: bytes, faults: Faults) -> None:
        if faults.bandwidth <= 0:
            handler.wfile.write(data)
        else:
            step = max(1, int(faults.bandwidth / 50))  # 20 ms slices
            for start in range(0, len(data), step):
                handler.wfile.write(data[start : start + step])
                time.sleep(len(data[start : start + step]) / faults.bandwidth)
        with self._lock:
            self.bytes_sent += len(data)

    def _forward(self, handler, body: Optional[bytes]) -> tuple:
        connection = getattr(handler, "_upstream", None)
        for attempt in range(2):  # a kept-alive connection moto closed: one fresh try
            if connection is None:
                connection = http.client.HTTPConnection(*self._upstream, timeout=60)
                handler._upstream = connection
            try:
                connection.putrequest(
                    handler.command, handler.path, skip_host=True, skip_accept_encoding=True
                )
                for name, value in handler.headers.items():
                    if name.lower() not in ("connection", "proxy-connection"):
                        connection.putheader(name, value)
                connection.endheaders(body)
                response = connection.getresponse()
                data = response.read()
                return response.status, response.getheaders(), data
            except (http.client.HTTPException, OSError):
                connection.close()
                connection = None
                handler._upstream = None
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def close(self) -> None:
        self._closed.set()
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> "FaultProxy":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# ---------------------------------------------------------------------------------------------
# Plain HTTP


class HttpFileServer:
    """Files of a local folder served over HTTP on 127.0.0.1 with ranges (206), HEAD and ETags,
    as a web server or a CDN serves videos. A URL may carry ``?expires=<unix time>`` like a
    presigned URL's query: past that time the server answers 403 with S3's
    ``AccessDenied``/``Request has expired`` body. (moto, with signature checking on, answers
    500 to every presigned URL, so these tests use this server for query-string URLs.)"""

    def __init__(self, folder: str):
        folder = os.path.abspath(folder)

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                parsed = urllib.parse.urlsplit(self.path)
                expires = urllib.parse.parse_qs(parsed.query).get("expires")
                if expires and float(expires[0]) < time.time():
                    body = (
                        b'<?xml version="1.0"?><Error><Code>AccessDenied</Code>'
                        b"<Message>Request has expired</Message></Error>"
                    )
                    self._answer(403, body, {"Content-Type": "application/xml"})
                    return
                path = os.path.join(folder, urllib.parse.unquote(parsed.path).lstrip("/"))
                if not os.path.isfile(path):
                    self._answer(404, b"not found", {})
                    return
                with open(path, "rb") as f:
                    data = f.read()
                headers = {"ETag": f'"{hashlib.md5(data).hexdigest()}"', "Accept-Ranges": "bytes"}
                ranged = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range") or "")
                if ranged:
                    first = int(ranged.group(1))
                    last = min(int(ranged.group(2) or len(data) - 1), len(data) - 1)
                    headers["Content-Range"] = f"bytes {first}-{last}/{len(data)}"
                    self._answer(206, data[first : last + 1], headers)
                else:
                    self._answer(200, data, headers)

            do_HEAD = do_GET

            def _answer(self, status: int, body: bytes, headers: Dict[str, str]) -> None:
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

        class Server(socketserver.ThreadingMixIn, socketserver.TCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self._server = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> "HttpFileServer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

# SPDX-License-Identifier: Apache-2.0
"""Fixtures of the Python suite: real redis-server / etcd processes on free loopback ports and
clusters of real kvmeshd processes (build/bin/kvmeshd), with the Python store joining as a
client-only runtime.

Every process started here is stopped here, by pid (SIGTERM, then SIGKILL after a bound), and
reaped; every wait is bounded. The children get PR_SET_PDEATHSIG(SIGKILL) so that a crashed
pytest leaves nothing behind. Paths:
  KVMESH_BUILD_DIR  the CMake build directory (default <repo>/build): kvmeshd is bin/kvmeshd
  KVMESH_REDIS_SERVER, KVMESH_ETCD  override the server binaries (default: from PATH)
"""
import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.path.abspath(os.environ.get("KVMESH_BUILD_DIR", os.path.join(REPO, "build")))
KVMESHD = os.path.join(BUILD, "bin", "kvmeshd")
KVMESH_CLI = os.path.join(BUILD, "bin", "kvmesh")
# the route policy defaults (a Cluster sets neither shards nor top_k)
ROUTE_SHARDS = 64
ROUTE_TOP_K = 3

# When the package is not installed (running from the source tree), use python/ in place.
try:
    import kvmesh  # noqa: F401
except ImportError:
    sys.path.insert(0, os.path.join(REPO, "python"))
    import kvmesh  # noqa: F401

READY_TIMEOUT_S = 30
STOP_TIMEOUT_S = 10

_libc = ctypes.CDLL(None, use_errno=True)


def _pdeathsig():
    _libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _binary(name, env, package):
    path = os.environ.get(env) or shutil.which(name) or shutil.which(name, path="/usr/bin:/usr/sbin")
    if not path:
        pytest.fail(f"{name} not found: install the Debian package {package} (scripts/deps.sh) "
                    f"or set {env}")
    return path


class Proc:
    """A child process we own: started with a log file, stopped by pid."""

    def __init__(self, argv, log_path, cwd=None):
        self.argv = argv
        self.log_path = log_path
        self.log = open(log_path, "wb")
        self.p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=self.log,
                                  stderr=subprocess.STDOUT, cwd=cwd, preexec_fn=_pdeathsig)
        self.pid = self.p.pid

    def alive(self):
        return self.p.poll() is None

    def kill(self, sig=signal.SIGKILL, timeout=STOP_TIMEOUT_S):
        if self.p.poll() is None:
            os.kill(self.pid, sig)
            try:
                self.p.wait(timeout)
            except subprocess.TimeoutExpired:
                os.kill(self.pid, signal.SIGKILL)
                self.p.wait(timeout)
        self.log.close()
        return self.p.returncode

    def stop(self):
        return self.kill(signal.SIGTERM)

    def tail(self, n=4000):
        try:
            with open(self.log_path, "rb") as f:
                return f.read()[-n:].decode(errors="replace")
        except OSError:
            return ""


def _wait(pred, what, timeout, proc=None):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if proc is not None and not proc.alive():
            pytest.fail(f"{what}: process exited with {proc.p.returncode}:\n{proc.tail()}")
        if pred():
            return
        time.sleep(0.05)
    pytest.fail(f"{what}: not ready after {timeout}s" + (f":\n{proc.tail()}" if proc else ""))


class Redis:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="kvmesh-py-redis-")
        self.port = free_port()
        conf = os.path.join(self.dir, "redis.conf")
        with open(conf, "w") as f:
            f.write(f"port {self.port}\nbind 127.0.0.1\nprotected-mode no\ndaemonize no\n"
                    f"dir {self.dir}\nlogfile \"\"\nsave \"\"\nappendonly no\nloglevel warning\n")
        self.proc = Proc([_binary("redis-server", "KVMESH_REDIS_SERVER", "redis-server"), conf],
                         os.path.join(self.dir, "redis.log"))
        _wait(self._ping, "redis-server", READY_TIMEOUT_S, self.proc)
        self.url = f"redis://127.0.0.1:{self.port}"

    def _ping(self):
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self):
        self.proc.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


class Etcd:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="kvmesh-py-etcd-")
        self.port, self.peer = free_port(), free_port()
        while self.peer == self.port:
            self.peer = free_port()
        argv = [_binary("etcd", "KVMESH_ETCD", "etcd-server"), "--name=kvmesh-py",
                f"--data-dir={self.dir}/data",
                f"--listen-client-urls=http://127.0.0.1:{self.port}",
                f"--advertise-client-urls=http://127.0.0.1:{self.port}",
                f"--listen-peer-urls=http://127.0.0.1:{self.peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{self.peer}",
                f"--initial-cluster=kvmesh-py=http://127.0.0.1:{self.peer}",
                "--initial-cluster-state=new", f"--initial-cluster-token=kvmesh-py-{os.getpid()}",
                "--heartbeat-interval=50", "--election-timeout=300", "--logger=zap",
                "--log-outputs=stderr", "--log-level=warn"]
        self.proc = Proc(argv, os.path.join(self.dir, "etcd.log"))
        _wait(self._health, "etcd", READY_TIMEOUT_S, self.proc)
        self.url = f"etcd://127.0.0.1:{self.port}"

    def _health(self):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=1) as r:
                return b'"health":"true"' in r.read()
        except OSError:
            return False

    def stop(self):
        self.proc.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


class Cluster:
    """N kvmeshd processes on one deployment of a metadata server."""

    def __init__(self, url, n=3, memory="64MiB", segment="32MiB", transport="auto", extra=(),
                 lease_ms=1000):
        if not os.access(KVMESHD, os.X_OK):
            pytest.fail(f"{KVMESHD} missing: build kvmesh first (cmake --build build)")
        self.url = url
        self.deployment = "py-" + uuid.uuid4().hex[:12]
        self.transport = transport
        self.dir = tempfile.mkdtemp(prefix="kvmesh-py-cluster-")
        self.fields = {"metadata_url": url, "deployment": self.deployment,
                       "lease_ttl_ms": str(lease_ms), "request_timeout_ms": "20000",
                       "transport": transport, "segment_size": segment,
                       "max_object_size": segment}
        self.daemons = []
        self.ids = []
        try:
            for i in range(n):
                ready = os.path.join(self.dir, f"ready{i}")
                argv = [KVMESHD, "--ready-file", ready, "--memory-size", memory]
                for k, v in self.fields.items():
                    argv += [f"--{k}", v]
                argv += list(extra)
                d = Proc(argv, os.path.join(self.dir, f"kvmeshd{i}.log"))
                self.daemons.append(d)
                _wait(lambda: os.path.exists(ready) and os.path.getsize(ready) > 0,
                      f"kvmeshd {i}", READY_TIMEOUT_S, d)
                with open(ready) as f:
                    self.ids.append(f.read().split()[0])
        except BaseException:
            self.stop()
            raise

    def client_fields(self, **more):
        f = dict(self.fields)
        f["memory_size"] = "0"
        f.update({k: str(v) for k, v in more.items()})
        return f

    def store(self, **kw):
        fields = self.client_fields(**{k: v for k, v in kw.items()
                                       if k not in ("tenant", "domain")})
        return kvmesh.Store(fields, tenant=kw.get("tenant"), domain=kw.get("domain"))

    def kill(self, i, sig=signal.SIGKILL):
        return self.daemons[i].kill(sig)

    def _shards(self):
        try:
            p = subprocess.run([KVMESH_CLI, "admin", "shards", "--json", "--metadata", self.url,
                                "--deployment", self.deployment], capture_output=True, text=True,
                               timeout=10)
            return json.loads(p.stdout)["shards"] if p.returncode == 0 else None
        except (OSError, ValueError, KeyError, subprocess.TimeoutExpired):
            return None

    def wait_routes_settled(self, timeout=READY_TIMEOUT_S):
        """Waits until every shard-authority record is active under a live primary with the
        authority set of the daemons as they are now (the WRH top-k of all of them). A daemon
        becomes ready when it joined, but the route authority sets follow the membership only
        later (resign, acquire, state transfer, activation; seconds on a loaded machine): until
        then a shard's routes may live on the first daemon alone, and a test that kills or
        stops one daemon would lose them (docs/protocol.md section 5, guarantee 3)."""
        want = min(ROUTE_TOP_K, len(self.ids))
        ids = set(self.ids)
        last = None

        def settled():
            nonlocal last
            last = self._shards()
            return (last is not None and len(last) == ROUTE_SHARDS and
                    all(r.get("state") == "active" and r.get("primary_live") and
                        len(r["set"]) == want and set(r["set"]) <= ids for r in last))

        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            if settled():
                return
            time.sleep(0.05)
        pytest.fail(f"route authorities not settled after {timeout}s: {last}")

    def stop(self):
        for d in self.daemons:
            d.kill(signal.SIGKILL)
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="session")
def redis_server():
    r = Redis()
    yield r
    r.stop()


@pytest.fixture(scope="session")
def etcd_server():
    e = Etcd()
    yield e
    e.stop()


@pytest.fixture(scope="session")
def cluster(redis_server):
    """3 kvmeshd on Redis, shared by the tests that do not kill anything."""
    c = Cluster(redis_server.url)
    yield c
    c.stop()


@pytest.fixture
def store(cluster):
    s = cluster.store(tenant="t-" + uuid.uuid4().hex[:8])
    yield s
    s.close()

#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Python vs C throughput on one cluster in one run.

Starts a redis-server and 3 kvmeshd (build/bin/kvmeshd) on free loopback ports, then for each
value size runs the same workload twice, both as client-only runtimes on registered buffers:
  - C:      bench_python_cbench (kvmesh_batch_put / kvmesh_batch_get), a long-lived subprocess
            driven through its stdin;
  - Python: kvmesh.mooncake.MooncakeDistributedStore.batch_put_from / batch_get_into.
Every read is verified. Each side runs --repeats times per size in alternating order (as many
untimed warm-up rounds as timed ones) and its best run is reported. Prints GB/s and the Python/C ratio per
row (goal >= 0.9 at >= 256 KiB).
Every process it starts is stopped by pid at the end.

    /usr/bin/python3 bench/python_bench.py [--sizes 64KiB,256KiB,1MiB,4MiB] [--batch-mib 32]
                                           [--rounds 3] [--markdown] [--build-dir build]
"""
import argparse
import mmap
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def parse_size(s):
    units = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "": 1}
    for u in ("KiB", "MiB", "GiB"):
        if s.endswith(u):
            return int(s[:-len(u)]) * units[u]
    return int(s)


def human(n):
    for u, v in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= v and n % v == 0:
            return f"{n // v} {u}"
    return f"{n} B"


class Procs:
    def __init__(self):
        self.procs = []
        self.dir = tempfile.mkdtemp(prefix="kvmesh-pybench-")

    def start(self, argv, name):
        log = open(os.path.join(self.dir, name + ".log"), "wb")
        p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL)
        self.procs.append((p, log))
        return p

    def dump_logs(self, lines=15):
        """The tail of every log, for a failed run."""
        for name in sorted(os.listdir(self.dir)):
            if name.endswith(".log"):
                with open(os.path.join(self.dir, name), errors="replace") as f:
                    tail = f.readlines()[-lines:]
                print(f"--- {name}", file=sys.stderr)
                sys.stderr.writelines(tail)

    def stop(self):
        for p, log in reversed(self.procs):
            if p.poll() is None:
                os.kill(p.pid, signal.SIGTERM)
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    os.kill(p.pid, signal.SIGKILL)
                    p.wait(10)
            log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def wait_for(pred, what, timeout=30):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if pred():
            return
        time.sleep(0.05)
    raise SystemExit(f"{what}: not ready after {timeout}s")


def redis_ping(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


_RUN = [0]


def python_run(store, tenant_prefix, size, batch, rounds, src, dst, src_addr, dst_addr):
    put_s = get_s = 0.0
    _RUN[0] += 1
    for r in range(2 * rounds):  # the first `rounds` warm up, untimed (as in the C bench)
        keys = [f"pb-{_RUN[0]}-{r}-{i}" for i in range(batch)]
        for i in range(batch):
            src[i * size:i * size + 4] = r.to_bytes(4, "little")
        ptrs = [src_addr + i * size for i in range(batch)]
        dptrs = [dst_addr + i * size for i in range(batch)]
        sizes = [size] * batch
        t0 = time.perf_counter()
        res = store.batch_put_from(keys, ptrs, sizes)
        put_s += (time.perf_counter() - t0) if r >= rounds else 0.0
        if any(x != 0 for x in res):
            raise SystemExit(f"python batch_put_from failed: {store.last_error}")
        t0 = time.perf_counter()
        res = store.batch_get_into(keys, dptrs, sizes)
        get_s += (time.perf_counter() - t0) if r >= rounds else 0.0
        if any(x != size for x in res) or src[:batch * size] != dst[:batch * size]:
            raise SystemExit(f"python batch_get_into wrong: {store.last_error}")
        store.batch_remove(keys)
    total = size * batch * rounds
    return total / put_s / 1e9, total / get_s / 1e9


def main():
    ap = argparse.ArgumentParser(description="Python vs C batch throughput on one cluster")
    ap.add_argument("--sizes", default="64KiB,256KiB,1MiB,4MiB")
    ap.add_argument("--batch-mib", type=int, default=32, help="bytes per batch call (MiB)")
    ap.add_argument("--rounds", type=int, default=3, help="timed batch rounds per run")
    ap.add_argument("--repeats", type=int, default=2,
                    help="runs per side and size (alternating order); the best is reported")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--build-dir", default=os.environ.get("KVMESH_BUILD_DIR",
                                                          os.path.join(REPO, "build")))
    a = ap.parse_args()
    build = os.path.abspath(a.build_dir)
    try:
        import kvmesh  # noqa: F401  (an installed package first)
    except ImportError:
        sys.path.insert(0, os.path.join(REPO, "python"))  # else the tree's, built in place
    from kvmesh.mooncake import MooncakeDistributedStore  # noqa: E402

    cbench = os.path.join(build, "bin", "bench_python_cbench")
    kvmeshd = os.path.join(build, "bin", "kvmeshd")
    for b in (cbench, kvmeshd):
        if not os.access(b, os.X_OK):
            raise SystemExit(f"{b} missing: build kvmesh first")
    sizes = [parse_size(s) for s in a.sizes.split(",")]
    procs = Procs()
    try:
        port = free_port()
        conf = os.path.join(procs.dir, "redis.conf")
        with open(conf, "w") as f:
            f.write(f"port {port}\nbind 127.0.0.1\nsave \"\"\nappendonly no\n"
                    f"dir {procs.dir}\nloglevel warning\n")
        procs.start([shutil.which("redis-server") or "/usr/bin/redis-server", conf], "redis")
        wait_for(lambda: redis_ping(port), "redis-server")
        url = f"redis://127.0.0.1:{port}"
        dep = "pybench-" + uuid.uuid4().hex[:8]
        common = ["--metadata-url", url, "--deployment", dep, "--segment-size", "64MiB",
                  "--max-object-size", "64MiB", "--request-timeout-ms", "30000"]
        for i in range(3):
            ready = os.path.join(procs.dir, f"ready{i}")
            procs.start([kvmeshd, "--ready-file", ready, "--memory-size", "1GiB"] + common,
                        f"kvmeshd{i}")
            wait_for(lambda: os.path.exists(ready) and os.path.getsize(ready) > 0,
                     f"kvmeshd {i}")
        fields = ["segment_size=64MiB", "max_object_size=64MiB", "request_timeout_ms=30000"]
        store = MooncakeDistributedStore(kvmesh_config=dict(
            deployment=dep, segment_size="64MiB", max_object_size="64MiB",
            request_timeout_ms="30000"))
        if store.setup("127.0.0.1", url, 0, tenant_id="pybench") != 0:
            raise SystemExit(f"setup: {store.last_error}")
        cap = a.batch_mib << 20
        src, dst = mmap.mmap(-1, cap), mmap.mmap(-1, cap)
        for i in range(0, cap, 4096):
            src[i:i + 8] = (i * 7 + 3).to_bytes(8, "little")
        import kvmesh
        src_addr, dst_addr = kvmesh.address(src), kvmesh.address(dst)
        store.register_buffer(src_addr, cap)
        store.register_buffer(dst_addr, cap)
        # the C side: one long-lived process too, driven by commands on its stdin
        cproc = subprocess.Popen([cbench, url, dep, "cbench", str(cap)] + fields,
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        procs.procs.append((cproc, open(os.devnull, "wb")))
        if cproc.stdout.readline().strip() != "READY":
            raise SystemExit("C bench did not start")
        rows = []
        for size in sizes:
            batch = max(1, min(4096, cap // size))
            best = [0.0, 0.0, 0.0, 0.0]  # C put, Py put, C get, Py get: best of the repeats
            for rep in range(a.repeats):
                # alternate which side goes first, so neither always meets cold memory
                order = ("c", "py") if rep % 2 == 0 else ("py", "c")
                for side in order:
                    if side == "c":
                        cproc.stdin.write(f"{size} {batch} {a.rounds}\n")
                        cproc.stdin.flush()
                        out = cproc.stdout.readline()
                        if not out.startswith("size="):
                            raise SystemExit(f"C bench failed: {out}")
                        kv = dict(x.split("=") for x in out.split())
                        put, get = float(kv["put_gbps"]), float(kv["get_gbps"])
                        best[0], best[2] = max(best[0], put), max(best[2], get)
                    else:
                        put, get = python_run(store, "pb", size, batch, a.rounds, src, dst,
                                              src_addr, dst_addr)
                        best[1], best[3] = max(best[1], put), max(best[3], get)
            rows.append((size, batch, best[0], best[1], best[2], best[3]))
        cproc.stdin.close()
        if cproc.wait(60) != 0:
            raise SystemExit("C bench failed at exit")
        store.unregister_buffer(src_addr)
        store.unregister_buffer(dst_addr)
        store.close()
    except BaseException:
        procs.dump_logs()
        raise
    finally:
        procs.stop()

    hdr = ["size", "batch", "C put GB/s", "Py put GB/s", "put Py/C", "C get GB/s",
           "Py get GB/s", "get Py/C"]
    lines = [[human(s), str(b), f"{cp:.2f}", f"{pp:.2f}", f"{pp / cp:.2f}x", f"{cg:.2f}",
              f"{pg:.2f}", f"{pg / cg:.2f}x"] for s, b, cp, pp, cg, pg in rows]
    if a.markdown:
        print("| " + " | ".join(hdr) + " |")
        print("| " + " | ".join("---" for _ in hdr) + " |")
        for ln in lines:
            print("| " + " | ".join(ln) + " |")
    else:
        w = [max(len(h), *(len(ln[i]) for ln in lines)) for i, h in enumerate(hdr)]
        print("  ".join(h.rjust(w[i]) for i, h in enumerate(hdr)))
        for ln in lines:
            print("  ".join(x.rjust(w[i]) for i, x in enumerate(ln)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

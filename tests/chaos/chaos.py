#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""chaos.py — the chaos harness: real kvmeshd daemons and a real metadata server (redis-server
or etcd) on simulated hosts (network namespaces joined by veth links to a bridge), client
workloads that record a history, nemeses that break things, and the checker (checker.py).

Topology of one cluster (every address lives only inside namespaces this run created):

    <prefix>-br : bridge "br0"; one veth end per host
    <prefix>-m  : metadata server          10.77.0.100
    <prefix>-h1 .. -hN : kvmeshd + one chaos_client each   10.77.0.1 .. 10.77.0.N

<prefix> is "kvc<pid>", so parallel runs never collide; at start, namespaces of this prefix
family whose pid is gone are removed (a stale sweep); every exit path (normal, exception,
SIGINT, SIGTERM) stops the processes this run started (by pid) and deletes its namespaces.

Nemeses (one per run, in cycles until the workload ends, then everything heals):
    kill        SIGKILL a daemon, restart it (same runtime id: a new epoch)
    pause       SIGSTOP a daemon longer than its leases, then SIGCONT
    partition   isolate one host from every other host (nftables, both directions)
    asym        one host drops what it receives from the other daemon hosts (one direction)
    meta        SIGKILL the metadata server, restart it on its data (etcd / redis with AOF)
    clock       one daemon runs under libfaketime: wall clock offset and a 1% slow rate
                (inside the 2% drift bound the lease deadlines assume)
    netem       packet loss and delay on one host (tc netem)
    none        no fault

Usage:
    chaos.py --schedule ci            every nemesis briefly + the Redis comparison (CI)
    chaos.py --nemesis kill --duration 60
    chaos.py --soak --hours 2         cycles every nemesis until the time is up
    chaos.py --compare-redis          the partition schedule against Redis primary/replica
    chaos.py --expect-violation ...   exit 0 only when the checker finds a violation
    chaos.py --sweep                  remove stale namespaces of dead runs and exit
Exit status: 0 no violation, 1 violation (or, with --expect-violation, none found),
3 the environment refused (no netns / nft / tc, not root), 2 usage.
"""
import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
import checker  # noqa: E402

NFT = shutil.which("nft") or "/usr/sbin/nft"
TC = shutil.which("tc") or "/usr/sbin/tc"
IP = shutil.which("ip") or "/usr/sbin/ip"
FAKETIME_LIB = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1"
SUBNET = "10.77.0"
META_IP = SUBNET + ".100"
NEMESES = ["none", "kill", "pause", "partition", "asym", "meta", "clock", "netem"]
LEASE_MS = 2000  # daemon lease_ttl_ms; the route shard lease is 3000 ms (docs/protocol.md)
TIMEOUT_MS = 2000  # request_timeout_ms of daemons and clients


class Refused(Exception):
    """The kernel or the machine refused something the harness needs."""


def log(msg):
    print("[chaos %s] %s" % (time.strftime("%H:%M:%S"), msg), flush=True)


def sh(args, check=True, quiet=False):
    r = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if check and r.returncode != 0:
        raise RuntimeError("%s failed (%d): %s" % (" ".join(args), r.returncode,
                                                   r.stderr.strip()))
    return r


def pid_alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def sweep_stale(own=False):
    """Deletes namespaces kvc<pid>-* whose pid is no longer running (own: also this run's),
    after killing the processes left inside them (a harness that was SIGKILLed leaves its
    daemons there; only this harness starts processes in these namespaces)."""
    r = sh([IP, "netns", "list"], check=False)
    n = 0
    for line in r.stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        m = re.match(r"^kvc(\d+)-", name)
        if not m:
            continue
        pid = int(m.group(1))
        if (own and pid == os.getpid()) or (pid != os.getpid() and not pid_alive(pid)):
            for p in sh([IP, "netns", "pids", name], check=False).stdout.split():
                try:
                    os.kill(int(p), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
            sh([IP, "netns", "del", name], check=False)
            n += 1
    if n:
        log("removed %d leftover namespaces (%s)" % (n, "this run" if own else "earlier runs"))


class Net:
    """The namespaces, bridge and veths of one cluster. Owns them: delete() removes them."""

    def __init__(self, prefix, n_hosts):
        self.prefix = prefix
        self.hosts = ["h%d" % (i + 1) for i in range(n_hosts)]
        self.ns = {}
        self.ip = {h: "%s.%d" % (SUBNET, i + 1) for i, h in enumerate(self.hosts)}
        self.ip["m"] = META_IP
        self.created = []

    def nsname(self, h):
        return "%s-%s" % (self.prefix, h)

    def ex(self, h, args, check=True):
        return sh([IP, "netns", "exec", self.nsname(h)] + args, check=check)

    def create(self):
        br = self.nsname("br")
        for h in ["br", "m"] + self.hosts:
            r = sh([IP, "netns", "add", self.nsname(h)], check=False)
            if r.returncode != 0:
                raise Refused("the kernel refused to create network namespace %s: %s (the "
                              "chaos harness needs root and CONFIG_NET_NS; run as root on a "
                              "machine that allows `ip netns add`)" % (self.nsname(h),
                                                                       r.stderr.strip()))
            self.created.append(self.nsname(h))
            self.ex(h, [IP, "link", "set", "lo", "up"])
        r = self.ex("br", [IP, "link", "add", "br0", "type", "bridge"], check=False)
        if r.returncode != 0:
            raise Refused("the kernel refused to create a bridge in %s: %s" % (br,
                                                                              r.stderr.strip()))
        self.ex("br", [IP, "link", "set", "br0", "up"])
        for i, h in enumerate(["m"] + self.hosts):
            a, b = "%sa%d" % (self.prefix, i), "%sb%d" % (self.prefix, i)
            # the pair is created inside the host namespace, so nothing touches the root one
            r = self.ex(h, [IP, "link", "add", a, "type", "veth", "peer", "name", b, "netns",
                            br], check=False)
            if r.returncode != 0:
                raise Refused("the kernel refused a veth pair: %s" % r.stderr.strip())
            self.ex(h, [IP, "link", "set", a, "name", "eth0"])
            self.ex(h, [IP, "addr", "add", self.ip[h] + "/24", "dev", "eth0"])
            self.ex(h, [IP, "link", "set", "eth0", "up"])
            self.ex("br", [IP, "link", "set", b, "master", "br0"])
            self.ex("br", [IP, "link", "set", b, "up"])
        # nftables must work: partitions depend on it
        r = self.ex(self.hosts[0], [NFT, "list", "tables"], check=False)
        if r.returncode != 0:
            raise Refused("nft does not work in a namespace: %s (install nftables: "
                          "scripts/deps.sh)" % r.stderr.strip())
        for h in self.hosts:  # reachability before anything starts
            r = self.ex(h, ["ping", "-c", "1", "-W", "2", META_IP], check=False) \
                if shutil.which("ping") else None
            if r is not None and r.returncode != 0:
                raise Refused("host %s cannot reach %s over the bridge" % (h, META_IP))

    def delete(self):
        for name in reversed(self.created):
            sh([IP, "netns", "del", name], check=False)
        self.created = []

    # --- faults ---
    def block(self, h, peers, direction="both"):
        """Drops traffic between h and peers inside h's namespace."""
        self.ex(h, [NFT, "add", "table", "inet", "chaos"], check=False)
        self.ex(h, [NFT, "add", "chain", "inet", "chaos", "in",
                    "{ type filter hook input priority 0 ; }"], check=False)
        self.ex(h, [NFT, "add", "chain", "inet", "chaos", "out",
                    "{ type filter hook output priority 0 ; }"], check=False)
        for p in peers:
            self.ex(h, [NFT, "add", "rule", "inet", "chaos", "in", "ip", "saddr", self.ip[p],
                        "drop"])
            if direction == "both":
                self.ex(h, [NFT, "add", "rule", "inet", "chaos", "out", "ip", "daddr",
                            self.ip[p], "drop"])

    def heal(self):
        for h in self.hosts + ["m"]:
            self.ex(h, [NFT, "delete", "table", "inet", "chaos"], check=False)
            self.ex(h, [TC, "qdisc", "del", "dev", "eth0", "root"], check=False)

    def netem(self, h, delay_ms, jitter_ms, loss_pct):
        """Delay and loss on h's link. Returns a description of what was applied: tc netem, or
        where the kernel has no sch_netem, nft random drop (numgen) plus a tbf rate limit (its
        queue delays bursts; steady light traffic sees little delay)."""
        r = self.ex(h, [TC, "qdisc", "replace", "dev", "eth0", "root", "netem", "delay",
                        "%dms" % delay_ms, "%dms" % jitter_ms, "loss", "%d%%" % loss_pct],
                    check=False)
        if r.returncode == 0:
            return "tc netem delay %dms %dms loss %d%%" % (delay_ms, jitter_ms, loss_pct)
        self.ex(h, [NFT, "add", "table", "inet", "chaos"], check=False)
        for chain, hook in (("in", "input"), ("out", "output")):
            self.ex(h, [NFT, "add", "chain", "inet", "chaos", chain,
                        "{ type filter hook %s priority 0 ; }" % hook], check=False)
            self.ex(h, [NFT, "add", "rule", "inet", "chaos", chain, "ip", "saddr" if chain ==
                        "in" else "daddr", "!=", self.ip[h], "numgen", "random", "mod", "100",
                        "<", str(loss_pct), "drop"])
        self.ex(h, [TC, "qdisc", "replace", "dev", "eth0", "root", "tbf", "rate", "512kbit",
                    "burst", "8kb", "latency", "%dms" % (delay_ms * 4)])
        return ("no sch_netem in this kernel (%s): nft random drop %d%% both ways + tbf rate "
                "512kbit latency %dms" % (r.stderr.strip(), loss_pct, delay_ms * 4))


def log_tail(path, n):
    """The last n lines of a log file (decoded leniently), [] when it cannot be read."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 8192))
            return f.read().decode("utf-8", "replace").splitlines()[-n:]
    except OSError:
        return []


class Proc:
    """One process this run started, in a namespace. Only ever signalled by its pid."""

    def __init__(self, net, host, args, logpath, env=None):
        self.host, self.args, self.logpath, self.env = host, args, logpath, env
        self.net = net
        self.p = None
        self.stopped = False

    def start(self):
        lf = open(self.logpath, "ab")
        env = dict(os.environ)
        if self.env:
            env.update(self.env)
        # `ip netns exec` execs the command after setns, so the pid is the command's pid
        self.p = subprocess.Popen([IP, "netns", "exec", self.net.nsname(self.host)] + self.args,
                                  stdout=lf, stderr=lf, stdin=subprocess.DEVNULL, env=env,
                                  start_new_session=True)
        lf.close()
        self.stopped = False
        return self

    def alive(self):
        return self.p is not None and self.p.poll() is None

    def signal(self, sig):
        if self.alive():
            os.kill(self.p.pid, sig)

    def kill(self):
        if self.p is None:
            return
        if self.alive():
            try:
                os.kill(self.p.pid, signal.SIGCONT)
                os.kill(self.p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            self.p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass

    def wait(self, timeout):
        try:
            return self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None


def wait_until(pred, timeout, what):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if pred():
            return
        time.sleep(0.05)
    raise RuntimeError("timed out after %ds waiting for %s" % (timeout, what))


def tcp_open(net, host, ip, port):
    r = net.ex(host, ["/usr/bin/python3", "-c",
                      "import socket,sys; s=socket.socket(); s.settimeout(1); "
                      "sys.exit(s.connect_ex((%r,%d)))" % (ip, port)], check=False)
    return r.returncode == 0


class Cluster:
    """One run: namespaces, metadata server, daemons (kvmesh) or redis pair, clients."""

    def __init__(self, a, run_dir, tag):
        self.a = a
        self.dir = os.path.join(run_dir, tag)
        os.makedirs(self.dir, exist_ok=True)
        self.net = Net("kvc%d" % os.getpid(), a.hosts)
        self.procs = []
        self.meta = None
        self.daemons = {}
        self.ids = {}
        self.bin = a.bin_dir
        self.history = os.path.join(self.dir, "history.jsonl")
        self.deployment = "chaos"
        self.rnd = random.Random(a.seed)
        self.events = []  # nemesis log: (time, text)
        self.losses = []  # (CLOCK_MONOTONIC ns, host): a daemon that lost its memory
        self.crashes = []  # daemons that exited without being killed by the harness
        self.join_failures = []  # daemons that exited while joining (started again)

    def note(self, text):
        self.events.append((time.monotonic(), text))
        log("  nemesis: " + text)
        with open(os.path.join(self.dir, "nemesis.log"), "a") as f:
            f.write("%d %s\n" % (time.monotonic_ns(), text))

    def add(self, proc):
        self.procs.append(proc)
        return proc.start()

    def stop_all(self):
        for p in reversed(self.procs):
            p.kill()
        self.procs = []

    # --- metadata ---
    def meta_url(self):
        return ("etcd://%s:2379" % META_IP) if self.a.meta == "etcd" else \
            ("redis://%s:6379/0" % META_IP)

    def start_meta(self):
        d = os.path.join(self.dir, "meta-data")
        os.makedirs(d, exist_ok=True)
        if self.a.meta == "etcd":
            args = ["/usr/bin/etcd", "--name", "m", "--data-dir", d,
                    "--listen-client-urls", "http://%s:2379" % META_IP,
                    "--advertise-client-urls", "http://%s:2379" % META_IP,
                    "--listen-peer-urls", "http://127.0.0.1:2380",
                    "--initial-advertise-peer-urls", "http://127.0.0.1:2380",
                    "--initial-cluster", "m=http://127.0.0.1:2380", "--log-level", "error"]
            port = 2379
        else:
            # durable: a restart after SIGKILL comes back with every acknowledged txn
            args = ["/usr/bin/redis-server", "--bind", META_IP, "--port", "6379", "--dir", d,
                    "--save", "", "--appendonly", "yes", "--appendfsync", "always",
                    "--protected-mode", "no"]
            port = 6379
        self.meta = Proc(self.net, "m", args, os.path.join(self.dir, "meta.log"))
        self.add(self.meta)
        wait_until(lambda: tcp_open(self.net, "m", META_IP, port), 30, "the metadata server")

    # --- kvmesh daemons ---
    def daemon_args(self, h):
        return [os.path.join(self.bin, "kvmeshd"),
                "--set", "metadata_url=" + self.meta_url(),
                "--set", "deployment=" + self.deployment,
                "--set", "runtime_id=" + self.ids[h],
                "--set", "listen=%s:7000" % self.net.ip[h],
                "--set", "memory_size=64MiB", "--set", "segment_size=16MiB",
                "--set", "max_object_size=1MiB",
                "--set", "replicas=%d" % self.a.replicas,
                "--set", "transport=tcp",
                "--set", "lease_ttl_ms=%d" % LEASE_MS,
                "--set", "request_timeout_ms=%d" % TIMEOUT_MS,
                "--set", "io_threads=1",
                "--ready-file", os.path.join(self.dir, "ready-" + h)]

    def start_daemon(self, h, env=None):
        """Starts kvmeshd on h and waits until it has joined. A daemon that exits while joining
        is started again, at most twice, as a supervisor would (noted: a finding of its own)."""
        rf = os.path.join(self.dir, "ready-" + h)
        for attempt in range(3):
            if os.path.exists(rf):
                os.unlink(rf)
            p = Proc(self.net, h, self.daemon_args(h),
                     os.path.join(self.dir, "kvmeshd-%s.log" % h), env)
            self.daemons[h] = p
            self.add(p)
            wait_until(lambda: os.path.exists(rf) and os.path.getsize(rf) > 0 or not p.alive(),
                       30, "kvmeshd on %s to join" % h)
            if p.alive():
                return
            p.wait(5)
            self.join_failures.append("kvmeshd on %s exited while joining (status %s); see %s" %
                                      (h, p.p.returncode, p.logpath))
            # the run directory is deleted when the run passes: say why it exited now
            for line in log_tail(p.logpath, 12):
                log("    kvmeshd-%s.log: %s" % (h, line))
            self.note("kvmeshd on %s exited while joining; starting it again" % h)
        raise RuntimeError("kvmeshd on %s exited while joining 3 times; see %s" % (h, p.logpath))

    def start_kvmesh(self):
        self.start_meta()
        for i, h in enumerate(self.net.hosts):
            self.ids[h] = "%032x" % (0xC4A05000 + i + 1)
            self.start_daemon(h)

    # --- clients ---
    def client_args(self, h, base, duration_ms, final=False):
        args = [os.path.join(self.bin, "chaos_client"), "--history", self.history,
                "--process-base", str(base), "--threads", str(self.a.threads),
                "--keys", str(self.a.keys), "--rate", str(self.a.rate),
                "--duration-ms", str(duration_ms), "--timeout-ms", str(TIMEOUT_MS),
                "--seed", str(self.a.seed)]
        if self.a.backend_redis:
            args += ["--backend", "redis", "--redis-file", self.redis_file]
        else:
            args += ["--set", "metadata_url=" + self.meta_url(),
                     "--set", "deployment=" + self.deployment,
                     "--set", "listen=%s:0" % self.net.ip[h],
                     "--set", "replicas=%d" % self.a.replicas, "--set", "transport=tcp",
                     "--set", "lease_ttl_ms=%d" % LEASE_MS, "--set", "io_threads=1"]
        if final:
            args.append("--final")
        return args

    def run_workload(self, nemesis, duration):
        clients = []
        for i, h in enumerate(self.net.hosts):
            c = Proc(self.net, h, self.client_args(h, (i + 1) * 100, int(duration * 1000)),
                     os.path.join(self.dir, "client-%s.log" % h))
            clients.append(self.add(c))
        t_end = time.monotonic() + duration
        time.sleep(min(3.0, duration / 4))
        self.nemesis_loop(nemesis, t_end)
        self.heal_all()
        for c in clients:
            if c.wait(timeout=max(5, t_end - time.monotonic() + TIMEOUT_MS / 1000 * 4 + 30)) \
                    is None:
                c.kill()
                raise RuntimeError("client on %s did not stop; see %s" % (c.host, c.logpath))

    def final_read(self):
        h = self.net.hosts[-1]
        c = Proc(self.net, h, self.client_args(h, checker.FINAL_BASE, 60000, final=True),
                 os.path.join(self.dir, "client-final.log"))
        self.add(c)
        if c.wait(timeout=90) is None:
            c.kill()
            raise RuntimeError("the final read did not stop")

    # --- nemeses ---
    def nemesis_loop(self, nemesis, t_end):
        hosts = self.net.hosts
        k = 0
        while time.monotonic() < t_end - 4:
            h = hosts[k % len(hosts)] if nemesis != "kill" else self.rnd.choice(hosts)
            k += 1
            left = t_end - time.monotonic()
            if nemesis == "none":
                time.sleep(min(5, max(0, left)))
            elif nemesis == "kill":
                self.note("SIGKILL kvmeshd on %s" % h)
                self.lose(h)
                self.sleep(2.5, t_end)
                self.note("restart kvmeshd on %s" % h)
                self.start_daemon(h)
                self.sleep(5, t_end)
            elif nemesis == "pause":
                self.note("SIGSTOP kvmeshd on %s for %.1f s (leases %d/3000 ms)" %
                          (h, LEASE_MS * 3 / 1000, LEASE_MS))
                self.daemons[h].signal(signal.SIGSTOP)
                time.sleep(LEASE_MS * 3 / 1000)
                self.daemons[h].signal(signal.SIGCONT)
                self.note("SIGCONT kvmeshd on %s" % h)
                self.sleep(5, t_end)
            elif nemesis == "partition":
                others = [o for o in hosts if o != h] + ["m"] * (k % 2)
                self.note("partition %s | %s" % (h, " ".join(others)))
                self.net.block(h, others, "both")
                for o in others:
                    self.net.block(o, [h], "both")
                self.sleep(6, t_end + 2)
                self.heal_all()
                self.sleep(5, t_end)
            elif nemesis == "asym":
                others = [o for o in hosts if o != h]
                self.note("%s stops receiving from %s (one direction)" % (h, " ".join(others)))
                self.net.block(h, others, "in")
                self.sleep(6, t_end + 2)
                self.heal_all()
                self.sleep(5, t_end)
            elif nemesis == "meta":
                self.note("SIGKILL the metadata server (%s)" % self.a.meta)
                self.meta.kill()
                self.sleep(LEASE_MS * 2 / 1000, t_end + 2)
                self.note("restart the metadata server on its data")
                self.meta.start()
                self.sleep(6, t_end)
            elif nemesis == "clock":
                spec = self.a.faketime or "+%d x0.99" % (300 + 60 * k)
                self.note("restart kvmeshd on %s under libfaketime FAKETIME='%s'" % (h, spec))
                self.lose(h)
                self.start_daemon(h, env={"LD_PRELOAD": FAKETIME_LIB, "FAKETIME": spec,
                                          "FAKETIME_NO_CACHE": "1"})
                self.sleep(8, t_end)
                self.note("restart kvmeshd on %s on the real clock" % h)
                self.lose(h)
                self.start_daemon(h)
                self.sleep(4, t_end)
            elif nemesis == "netem":
                what = self.net.netem(h, 60, 40, 8)
                self.note("loss and delay on %s: %s" % (h, what))
                self.sleep(7, t_end + 2)
                self.heal_all()
                self.sleep(3, t_end)
            else:
                raise ValueError(nemesis)

    def lose(self, h):
        """SIGKILLs the daemon on h (its memory, and so its replicas, are gone)."""
        self.losses.append((time.monotonic_ns(), h))
        self.daemons[h].kill()

    def check_crashes(self):
        for h, d in self.daemons.items():
            if d.p is not None and not d.alive():
                self.crashes.append("kvmeshd on %s exited by itself (status %s); see %s" %
                                    (h, d.p.returncode, d.logpath))
                self.losses.append((time.monotonic_ns(), h))
                log("  CRASH: " + self.crashes[-1])
                self.start_daemon(h)

    def sleep(self, s, t_limit):
        time.sleep(max(0.0, min(s, t_limit - time.monotonic())))

    def heal_all(self):
        self.net.heal()
        for d in self.daemons.values():
            d.signal(signal.SIGCONT)
        self.check_crashes()
        if self.meta is not None and not self.meta.alive():
            self.meta.start()

    # --- redis primary/replica (the comparison) ---
    def start_redis_pair(self):
        self.redis_file = os.path.join(self.dir, "redis-primary")
        self.redis = {}
        for i, h in enumerate(self.net.hosts[:2]):
            args = ["/usr/bin/redis-server", "--bind", self.net.ip[h], "--port", "6379",
                    "--save", "", "--appendonly", "no", "--protected-mode", "no",
                    "--dir", self.dir, "--repl-timeout", "60"]
            if i == 1:
                args += ["--replicaof", self.net.ip[self.net.hosts[0]], "6379"]
            p = Proc(self.net, h, args, os.path.join(self.dir, "redis-%s.log" % h))
            self.redis[h] = self.add(p)
            wait_until(lambda: tcp_open(self.net, h, self.net.ip[h], 6379), 30, "redis on " + h)
        self.primary = self.net.hosts[0]
        with open(self.redis_file, "w") as f:
            f.write("%s:6379\n" % self.net.ip[self.primary])

    def redis_cli(self, h, *cmd):
        return self.net.ex(h, ["/usr/bin/redis-cli", "-h", self.net.ip[h], "-p", "6379"] +
                           list(cmd), check=False)

    def run_redis_workload(self, duration):
        """The partition schedule of the kvmesh run, with a Sentinel-like fail-over: the
        isolated primary's replica is promoted and clients re-resolve on a failed connection;
        after the heal the old primary becomes a replica of the new one."""
        clients = []
        for i, h in enumerate(self.net.hosts):
            c = Proc(self.net, h, self.client_args(h, (i + 1) * 100, int(duration * 1000)),
                     os.path.join(self.dir, "client-%s.log" % h))
            clients.append(self.add(c))
        t_end = time.monotonic() + duration
        time.sleep(min(3.0, duration / 4))
        while time.monotonic() < t_end - 4:
            old = self.primary
            new = [h for h in self.net.hosts[:2] if h != old][0]
            others = [o for o in self.net.hosts if o != old]
            self.note("partition %s (primary) | %s" % (old, " ".join(others)))
            self.net.block(old, others, "both")
            for o in others:
                self.net.block(o, [old], "both")
            time.sleep(1.0)
            self.note("promote the replica on %s" % new)
            self.redis_cli(new, "REPLICAOF", "NO", "ONE")
            self.primary = new
            with open(self.redis_file + ".tmp", "w") as f:
                f.write("%s:6379\n" % self.net.ip[new])
            os.rename(self.redis_file + ".tmp", self.redis_file)
            self.sleep(5, t_end + 2)
            self.net.heal()
            self.note("heal; %s becomes a replica of %s" % (old, new))
            self.redis_cli(old, "REPLICAOF", self.net.ip[new], "6379")
            self.sleep(5, t_end)
        self.net.heal()
        for c in clients:
            if c.wait(timeout=max(5, t_end - time.monotonic() + 30)) is None:
                c.kill()
                raise RuntimeError("client on %s did not stop" % c.host)
        time.sleep(2)  # replication settles


def run_one(a, run_dir, nemesis, tag, redis_pair=False):
    """One fresh cluster, one nemesis; returns (checker report, row dict)."""
    a.backend_redis = redis_pair
    c = Cluster(a, run_dir, tag)
    log("run %s: nemesis %s, %s, %d hosts, %d s, metadata %s" %
        (tag, nemesis, "redis primary/replica" if redis_pair else "kvmesh", a.hosts,
         a.duration, "-" if redis_pair else a.meta))
    try:
        c.net.create()
        if redis_pair:
            c.start_redis_pair()
            c.run_redis_workload(a.duration)
        else:
            c.start_kvmesh()
            c.run_workload(nemesis, a.duration)
            time.sleep(LEASE_MS * 3 / 1000)  # every fault healed: leases settle
        c.final_read()
        c.check_crashes()
    finally:
        c.stop_all()
        c.net.delete()
    with open(c.history) as f:
        rep = checker.check(f.readlines(), losses=c.losses, replicas=a.replicas)
    log("run %s: %s" % (tag, rep.summary()))
    for k, note in rep.nonlinear[:5]:
        log("  non-linearizable %s: %s" % (k, note))
    for k, v, cands in rep.lost[:5]:
        log("  lost %s: final read %r, expected one of %r" % (k, v, cands))
    for k in rep.unreadable_allowed[:5]:
        log("  unreadable %s: allowed, %d owners lost their memory after its last write" %
            (k, a.replicas))
    for m in c.crashes:
        log("  crash: " + m)
    for m in c.join_failures:
        log("  failed join: " + m)
    for k in rep.unreadable[:5]:
        log("  unreadable %s: every final read failed after the heal" % k)
    for k, v in rep.phantom[:5]:
        log("  phantom %s: %r" % (k, v))
    row = {"system": "redis primary/replica" if redis_pair else "kvmesh",
           "nemesis": nemesis, "meta": "-" if redis_pair else a.meta, "seconds": a.duration,
           "ops": rep.ops, "ok_writes": rep.ok["put"] + rep.ok["del"], "ok_reads": rep.ok["get"],
           "info": rep.info, "fail": rep.fail, "nonlinear": len(rep.nonlinear),
           "lost": len(rep.lost), "rolled_back": len(rep.rolled_back),
           "unreadable": len(rep.unreadable), "allowed": len(rep.unreadable_allowed),
           "crashes": len(c.crashes), "join_failures": len(c.join_failures),
           "losses": c.losses, "replicas": a.replicas,
           "phantom": len(rep.phantom), "unknown": len(rep.unknown),
           "history": c.history}
    return rep, row


COUNTS = ["seconds", "ops", "ok_writes", "ok_reads", "info", "fail", "nonlinear", "lost",
          "rolled_back", "unreadable", "allowed", "phantom", "unknown", "crashes",
          "join_failures"]


def group(rows):
    """Sums rows of the same (system, nemesis, metadata); adds a total row for kvmesh."""
    out = {}
    for r in rows:
        k = (r["system"], r["nemesis"], r["meta"])
        g = out.setdefault(k, dict({c: 0 for c in COUNTS}, system=k[0], nemesis=k[1],
                                   meta=k[2], runs=0))
        g["runs"] += 1
        for c in COUNTS:
            g[c] += r[c]
    res = list(out.values())
    kv = [g for g in res if g["system"] == "kvmesh"]
    if len(kv) > 1:
        tot = dict({c: sum(g[c] for g in kv) for c in COUNTS}, system="kvmesh (all)",
                   nemesis="all", meta="-", runs=sum(g["runs"] for g in kv))
        res.append(tot)
    return res


def table(rows):
    hdr = ["system", "nemesis", "metadata", "runs", "workload s", "ops", "acked writes",
           "acked reads", "info", "fail", "non-linearizable keys", "lost-ack keys",
           "acked writes rolled back", "unreadable keys", "unreadable, replicas lost",
           "phantom", "unknown", "daemon crashes", "failed joins"]
    out = ["| " + " | ".join(hdr) + " |", "|" + "---|" * len(hdr)]
    for r in group(rows):
        out.append("| " + " | ".join(str(r[x]) for x in [
            "system", "nemesis", "meta", "runs"] + COUNTS) + " |")
    return "\n".join(out)


def preflight(a):
    if os.geteuid() != 0:
        raise Refused("the chaos harness needs root (network namespaces, nftables, tc)")
    for tool in [IP, NFT, TC]:
        if not os.access(tool, os.X_OK):
            raise Refused("%s not found; run scripts/deps.sh" % tool)
    for b in ["kvmeshd", "chaos_client"]:
        if not os.access(os.path.join(a.bin_dir, b), os.X_OK):
            raise Refused("%s/%s is not built (cmake --build build)" % (a.bin_dir, b))
    if not os.path.exists(FAKETIME_LIB):
        raise Refused("%s missing (install libfaketime: scripts/deps.sh)" % FAKETIME_LIB)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin-dir", default=os.path.join(ROOT, "build", "bin"))
    ap.add_argument("--schedule", choices=["ci"], help="every nemesis briefly + the Redis "
                    "comparison")
    ap.add_argument("--nemesis", choices=NEMESES, action="append")
    ap.add_argument("--compare-redis", action="store_true",
                    help="also run the partition schedule against Redis primary/replica")
    ap.add_argument("--soak", action="store_true", help="cycle every nemesis for --hours")
    ap.add_argument("--hours", type=float, default=2.0)
    ap.add_argument("--duration", type=int, default=20, help="seconds of workload per run")
    ap.add_argument("--hosts", type=int, default=3, choices=[3, 4, 5])
    ap.add_argument("--threads", type=int, default=2, help="logical processes per client")
    ap.add_argument("--keys", type=int, default=12)
    ap.add_argument("--rate", type=int, default=15, help="ops/s per logical process")
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--meta", choices=["redis", "etcd"], default="redis")
    ap.add_argument("--faketime", metavar="SPEC",
                    help="FAKETIME of the clock nemesis (default '+N x0.99': N s ahead, 1%% "
                    "slow); a rate beyond the 2%% drift bound, e.g. 'x0.5', is outside the "
                    "failure model")
    ap.add_argument("--seed", type=int, default=int(time.time()) % 100000)
    ap.add_argument("--out", help="directory for histories and logs (default: a temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the run directory")
    ap.add_argument("--expect-violation", action="store_true",
                    help="succeed only if a violation is found (the broken build)")
    ap.add_argument("--sweep", action="store_true", help="remove stale namespaces and exit")
    ap.add_argument("--results", help="append the results table (markdown) to this file")
    ap.add_argument("--recheck", metavar="DIR",
                    help="check the histories of an earlier run directory again (its "
                    "results.json) and print the table")
    a = ap.parse_args()

    if a.recheck:
        with open(os.path.join(a.recheck, "results.json")) as f:
            rows = json.load(f)
        bad = 0
        for r in rows:
            losses = [tuple(x) for x in r.get("losses", [])]
            nlog = os.path.join(os.path.dirname(r["history"]), "nemesis.log")
            if "losses" not in r and os.path.exists(nlog):  # older results.json: from the log
                for line in open(nlog):
                    m = re.match(r"^(\d+) (?:SIGKILL|restart) kvmeshd on (h\d+)", line)
                    if m and "(heal)" not in line and not line.startswith("SIGKILL the"):
                        losses.append((int(m.group(1)), m.group(2)))
            with open(r["history"]) as f:
                rep = checker.check(f.readlines(), losses=losses, replicas=r.get("replicas", 2))
            r.update(ops=rep.ops, ok_writes=rep.ok["put"] + rep.ok["del"],
                     ok_reads=rep.ok["get"], info=rep.info, fail=rep.fail,
                     nonlinear=len(rep.nonlinear), lost=len(rep.lost),
                     rolled_back=len(rep.rolled_back), unreadable=len(rep.unreadable),
                     phantom=len(rep.phantom), unknown=len(rep.unknown),
                     allowed=len(rep.unreadable_allowed), crashes=r.get("crashes", 0),
                     join_failures=r.get("join_failures", 0))
            if r["system"] == "kvmesh" and rep.violations:
                bad += 1
                log("%s: %s" % (r["history"], rep.summary()))
        print(table(rows))
        return 1 if bad else 0

    sweep_stale()
    if a.sweep:
        return 0
    try:
        preflight(a)
    except Refused as e:
        print("chaos: refused: %s" % e, file=sys.stderr)
        return 3

    run_dir = a.out or tempfile.mkdtemp(prefix="kvmesh-chaos-")
    os.makedirs(run_dir, exist_ok=True)
    log("run directory %s, seed %d" % (run_dir, a.seed))

    # SIGINT / SIGTERM unwind through the finally blocks (processes stopped, namespaces gone)
    def on_signal(sig, frm):
        raise KeyboardInterrupt("signal %d" % sig)
    signal.signal(signal.SIGTERM, on_signal)

    plan = []  # (nemesis, meta, redis_pair)
    if a.schedule == "ci":
        for n in NEMESES[1:]:
            plan.append((n, "etcd" if n == "meta" else "redis", False))
        plan.append(("partition", "-", True))
    elif a.soak:
        pass
    else:
        for n in a.nemesis or ["partition"]:
            plan.append((n, a.meta, False))
        if a.compare_redis:
            plan.append(("partition", "-", True))

    rows = []
    errors = []
    failed = False
    redis_tried = False
    t_stop = time.monotonic() + a.hours * 3600
    i = 0
    try:
        while True:
            if a.soak:
                if time.monotonic() >= t_stop:
                    if a.compare_redis and not redis_tried:
                        step = ("partition", "-", True)  # once, at the end
                        redis_tried = True
                    else:
                        break
                else:
                    n = NEMESES[1 + i % (len(NEMESES) - 1)]
                    step = (n, "etcd" if (i // (len(NEMESES) - 1)) % 2 else "redis", False)
            else:
                if i >= len(plan):
                    break
                step = plan[i]
            n, meta, rp = step
            if meta != "-":
                a.meta = meta
            tag = "%02d-%s%s" % (i, "redis-" if rp else "", n)
            try:
                rep, row = run_one(a, run_dir, n, tag, redis_pair=rp)
            except Refused as e:
                print("chaos: refused: %s" % e, file=sys.stderr)
                return 3
            except (RuntimeError, OSError, subprocess.SubprocessError) as e:
                # the run could not complete (a daemon that does not rejoin, a client that does
                # not stop): a failure of its own, reported, and the schedule goes on
                log("run %s could not complete: %s" % (tag, e))
                errors.append("%s: %s" % (tag, e))
                failed = True
                i += 1
                continue
            rows.append(row)
            if not rp and (rep.violations or row["crashes"]):
                failed = True
            i += 1
    except KeyboardInterrupt as e:
        log("interrupted (%s): cleaned up" % e)
        return 130
    finally:
        sweep_stale(own=True)

    if rows:
        t = table(rows)
        print()
        print(t)
        if a.results:
            with open(a.results, "a") as f:
                f.write("\n" + " ".join(sys.argv) + "\n\n" + t + "\n")
        with open(os.path.join(run_dir, "results.json"), "w") as f:
            json.dump(rows, f, indent=1)
    for e in errors:
        print("harness error: %s" % e)
    if not a.keep and not a.out and not failed:
        shutil.rmtree(run_dir, ignore_errors=True)
    elif failed:
        log("histories and logs kept in %s" % run_dir)
    if a.expect_violation:
        if failed:
            log("a violation was found, as expected for this build")
            return 0
        log("expected a violation (broken build) but the checker found none")
        return 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

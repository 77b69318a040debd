# SPDX-License-Identifier: Apache-2.0
"""checker.py — checks a chaos history (JSON lines, docs/reliability.md) of a register per key
with put / get / del:

  linearizable   each key's sub-history is linearizable (Wing & Gong search with Lowe's state
                 caching: a (linearized-set, state) pair already explored is not explored again);
  lost           no acknowledged write is lost: the final read of a key (made by a "final"
                 process after every fault healed) returns the value of a write that no
                 acknowledged write definitely followed (or absent only if such a write is a del,
                 or nothing was ever acknowledged);
  rolled back    no acknowledged write is seen undone: no read that starts after an acknowledged
                 write ended returns a value written before that write began (or absent when no
                 del could follow it); counted per acknowledged write (the size of a loss);
  unreadable     no key is left unreadable: once every fault healed, a final read of each key
                 succeeds (absent is a success); a key whose final reads all fail lost its
                 object (or its route) although its owners are back — unless `replicas`
                 distinct owners lost their memory (losses) after the earliest write that may
                 hold the final state (then every replica may be gone: reported apart);
  phantom        no get returns a value that no put of that key ever carried.

Semantics: "ok" happened between its invoke and completion; "fail" did not happen (dropped);
"info" (and an invoke without completion) may have happened at any time after its invoke, or
never: its interval is open-ended. Two reductions keep the search small and are exact: an
indeterminate put whose value no get returned can be left out (dropping an unread write from
any linearization leaves a valid one), and so can an indeterminate del when no get of the key
returned absent; indeterminate and failed gets constrain nothing.

Use as a module (check(events) -> Report) or a program: checker.py HISTORY [--final-base N].
"""
import json
import sys
from collections import defaultdict

INF = float("inf")
FINAL_BASE = 100000  # process ids >= this are final-read processes (chaos_client --final)
STEP_LIMIT = 2_000_000  # per key; past it the key's result is "unknown", never "ok"


class Op:
    __slots__ = ("idx", "process", "f", "key", "value", "invoke", "complete", "type", "result")

    def __init__(self, idx, process, f, key, value, invoke):
        self.idx = idx
        self.process = process
        self.f = f
        self.key = key
        self.value = value  # put: the value written; get: the value read (None = absent)
        self.invoke = invoke
        self.complete = INF
        self.type = "info"
        self.result = None

    def __repr__(self):
        return "%s(p%s %s %r=%r [%s,%s] %s)" % (
            "Op", self.process, self.f, self.key, self.value, self.invoke, self.complete,
            self.type)


class Report:
    def __init__(self):
        self.ops = 0
        self.ok = defaultdict(int)  # f -> count of ok
        self.info = 0
        self.fail = 0
        self.keys = 0
        self.nonlinear = []  # (key, explanation)
        self.unknown = []  # keys whose search hit STEP_LIMIT
        self.lost = []  # (key, final value, expected one of)
        self.phantom = []  # (key, value)
        self.unreadable = []  # keys whose final reads all failed after every fault healed
        self.unreadable_allowed = []  # the same, but every replica may have been lost
        self.rolled_back = set()  # op indices of acknowledged writes a later read showed undone
        self.malformed = []

    @property
    def violations(self):
        return (len(self.nonlinear) + len(self.lost) + len(self.rolled_back) + len(self.phantom) +
                len(self.unreadable) + len(self.malformed))

    def summary(self):
        return ("%d ops (%d ok put, %d ok del, %d ok get, %d info, %d fail) on %d keys: "
                "%d non-linearizable keys, %d lost-ack keys, %d acked writes rolled back, "
                "%d unreadable keys, %d phantom reads, %d unknown, %d malformed" % (
                    self.ops, self.ok["put"], self.ok["del"], self.ok["get"], self.info,
                    self.fail, self.keys, len(self.nonlinear), len(self.lost),
                    len(self.rolled_back),
                    len(self.unreadable), len(self.phantom), len(self.unknown),
                    len(self.malformed)))


def parse(lines):
    """Pairs invocations with completions per process. Returns (ops, malformed messages)."""
    open_op = {}
    ops = []
    bad = []
    for n, line in enumerate(lines, 1):
        line = line.strip()
        if not line:
            continue
        try:
            e = json.loads(line)
            p, t, f, k, v, tm = (e["process"], e["type"], e["f"], e["key"], e.get("value"),
                                 e["time"])
        except (ValueError, KeyError, TypeError) as ex:
            bad.append("line %d: %s" % (n, ex))
            continue
        if f not in ("put", "get", "del") or t not in ("invoke", "ok", "fail", "info"):
            bad.append("line %d: bad f/type %r/%r" % (n, f, t))
            continue
        if t == "invoke":
            if p in open_op:
                bad.append("line %d: process %s invokes while an op is open" % (n, p))
            op = Op(len(ops), p, f, k, v if f == "put" else None, tm)
            ops.append(op)
            open_op[p] = op
            continue
        op = open_op.pop(p, None)
        if op is None or op.f != f or op.key != k:
            bad.append("line %d: completion without a matching invoke" % n)
            continue
        op.type = t
        if t == "ok":
            op.complete = tm
            if f == "get":
                op.value = v
        elif t == "fail":
            op.complete = tm
    return ops, bad


def _step(state, op):
    """Applies op to the register state; returns (ok, new state)."""
    if op.f == "put":
        return True, op.value
    if op.f == "del":
        return True, None
    return op.value == state, state


def linearizable(ops, limit=STEP_LIMIT):
    """Wing & Gong with state caching over one key's ops (ok and info). Returns (True|False|None,
    note): None when the step limit was reached."""
    # entries: (time, kind, op) kind 0 = call, 1 = return; calls sort before returns at a tie
    entries = []
    for op in ops:
        entries.append((op.invoke, 0, op))
        if op.complete != INF:
            entries.append((op.complete, 1, op))
    entries.sort(key=lambda e: (e[0], e[1], e[2].idx))
    n = len(entries)
    # doubly linked list over entry indices, with a head sentinel -1
    nxt = list(range(1, n + 1))
    prv = list(range(-1, n - 1))
    head_next = 0 if n else n
    call_at = {}
    ret_at = {}
    for i, (_, kind, op) in enumerate(entries):
        (call_at if kind == 0 else ret_at)[op.idx] = i
    pending_returns = sum(1 for op in ops if op.complete != INF)
    removed = [False] * n

    def unlink(i):
        nonlocal head_next
        removed[i] = True
        p, q = prv[i], nxt[i]
        if p == -1:
            head_next = q
        else:
            nxt[p] = q
        if q < n:
            prv[q] = p

    def relink(i):
        nonlocal head_next
        removed[i] = False
        p, q = prv[i], nxt[i]
        if p == -1:
            head_next = i
        else:
            nxt[p] = i
        if q < n:
            prv[q] = i

    bit = {op.idx: 1 << j for j, op in enumerate(ops)}
    cache = set()
    stack = []  # (op, previous state)
    state = None
    linearized = 0
    cur = head_next
    steps = 0
    best = [0, None, None]  # deepest prefix: length, blocking op, last linearized op
    while True:
        if pending_returns == 0:
            return True, ""
        steps += 1
        if steps > limit:
            return None, "step limit %d reached" % limit
        if cur >= n:
            # only calls of indeterminate ops remain after cur: backtrack
            kind = 1
        else:
            _, kind, op = entries[cur]
        if cur < n and kind == 0:
            ok, ns = _step(state, op)
            if ok:
                key = (linearized | bit[op.idx], ns)
                if key not in cache:
                    cache.add(key)
                    stack.append((op, state))
                    state = ns
                    linearized |= bit[op.idx]
                    unlink(cur)
                    if op.complete != INF:
                        unlink(ret_at[op.idx])
                        pending_returns -= 1
                    cur = head_next
                    continue
            cur = nxt[cur]
            continue
        # a return entry (or the end): backtrack
        if cur < n and len(stack) >= best[0]:
            best[0], best[1], best[2] = len(stack), entries[cur][2], stack[-1][0] if stack else None
        if not stack:
            return False, ("no linearization; the longest linearizable prefix has %d ops, "
                           "ending with %r; after it nothing can be linearized before the "
                           "completion of %r" % (best[0], best[2], best[1]))
        op, prev_state = stack.pop()
        state = prev_state
        linearized &= ~bit[op.idx]
        if op.complete != INF:
            relink(ret_at[op.idx])
            pending_returns += 1
        ci = call_at[op.idx]
        relink(ci)
        cur = nxt[ci]


def check(events_or_lines, final_base=FINAL_BASE, losses=(), replicas=2):
    """losses: (time, owner) of every owner that lost its memory (a killed daemon), in the
    history's clock; replicas: the replica count of every put."""
    lines = events_or_lines
    if lines and not isinstance(lines[0], str):
        lines = [json.dumps(e) for e in lines]
    ops, bad = parse(lines)
    r = Report()
    r.malformed = bad
    r.ops = len(ops)
    by_key = defaultdict(list)
    for op in ops:
        if op.type == "ok":
            r.ok[op.f] += 1
        elif op.type == "fail":
            r.fail += 1
        else:
            r.info += 1
        by_key[op.key].append(op)
    r.keys = len(by_key)
    for key in sorted(by_key):
        kops = by_key[key]
        written = {op.value for op in kops if op.f == "put"}
        reads = [op for op in kops if op.f == "get" and op.type == "ok"]
        read_values = {op.value for op in reads}
        for op in reads:
            if op.value is not None and op.value not in written:
                r.phantom.append((key, op.value))
        # acknowledged writes that a later read shows undone: the read returns a value written
        # before the acknowledged write began (or absent, with no del that could follow it)
        acked_w = [op for op in kops if op.f in ("put", "del") and op.type == "ok"]
        put_of = {op.value: op for op in kops if op.f == "put"}
        dels = [op for op in kops if op.f == "del" and op.type != "fail"]
        for rd in reads:
            if rd.value is not None:
                wv = put_of.get(rd.value)
                if wv is None:
                    continue
                for w in acked_w:
                    if w.invoke > wv.complete and w.complete < rd.invoke:
                        r.rolled_back.add(w.idx)
            else:
                for w in acked_w:
                    if w.f == "put" and w.complete < rd.invoke and \
                            not any(d.complete > w.invoke and d.invoke < rd.complete for d in dels):
                        r.rolled_back.add(w.idx)
        # the search set
        s = []
        for op in kops:
            if op.type == "fail":
                continue
            if op.type == "info":
                if op.f == "get":
                    continue
                if op.f == "put" and op.value not in read_values:
                    continue
                if op.f == "del" and None not in read_values:
                    continue
            s.append(op)
        res, note = linearizable(s)
        if res is False:
            r.nonlinear.append((key, note))
        elif res is None:
            r.unknown.append(key)
        # lost acknowledged writes: the final read against the writes nothing definitely followed
        finals = [op for op in reads if op.process >= final_base]
        writes = [op for op in kops if op.f in ("put", "del") and op.type != "fail"]
        acked = [w for w in writes if w.type == "ok"]
        cand_ops = [w for w in writes if not any(w2.invoke > w.complete for w2 in acked)]
        cands = {w.value if w.f == "put" else None for w in cand_ops}
        if not acked:
            cands.add(None)
        if not finals:
            if any(op.process >= final_base for op in kops):
                # every final read failed, with every fault healed. Allowed only when the
                # object may have lost every replica: two distinct owners lost their memory
                # after the earliest write that may hold the final state (kvmesh has no
                # background re-replication; replicas = 2 in the harness).
                t = min((w.invoke for w in cand_ops), default=-INF)
                if len({h for (tm, h) in losses if tm > t}) >= replicas:
                    r.unreadable_allowed.append(key)
                else:
                    r.unreadable.append(key)
            continue
        fin = max(finals, key=lambda o: o.invoke)
        if fin.value not in cands:
            r.lost.append((key, fin.value, sorted(cands, key=lambda v: (v is None, v or ""))))
    return r


def main(argv):
    if len(argv) < 2:
        print("usage: checker.py HISTORY [--final-base N]", file=sys.stderr)
        return 2
    fb = FINAL_BASE
    if "--final-base" in argv:
        fb = int(argv[argv.index("--final-base") + 1])
    with open(argv[1]) as f:
        r = check(f.readlines(), fb)
    print(r.summary())
    for k, note in r.nonlinear[:20]:
        print("  non-linearizable %s: %s" % (k, note))
    for k, v, c in r.lost[:20]:
        print("  lost %s: final read %r, expected one of %r" % (k, v, c))
    for k in r.unreadable[:20]:
        print("  unreadable %s: every final read failed" % k)
    for k, v in r.phantom[:20]:
        print("  phantom %s: %r never written" % (k, v))
    for m in r.malformed[:20]:
        print("  malformed: %s" % m)
    return 1 if r.violations else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

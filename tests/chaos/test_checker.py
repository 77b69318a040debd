# SPDX-License-Identifier: Apache-2.0
"""test_checker.py — the chaos checker on hand-made histories, linearizable and not (ctest
chaos_checker). Each history is written as (process, type, f, key, value, time) tuples."""
import os
import random
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import checker  # noqa: E402

F = checker.FINAL_BASE


def H(*rows):
    return [{"process": p, "type": t, "f": f, "key": k, "value": v, "time": tm}
            for (p, t, f, k, v, tm) in rows]


def op(p, f, k, v, t0, t1, res="ok", out=None):
    """An invoke at t0 and a completion of type res at t1 (a get's ok carries out)."""
    inv = (p, "invoke", f, k, v if f == "put" else None, t0)
    if res is None:
        return [inv]
    return [inv, (p, res, f, k, (out if f == "get" else v), t1)]


class CheckerTest(unittest.TestCase):
    def run_h(self, *ops):
        rows = [r for o in ops for r in o]
        rows.sort(key=lambda r: r[5])
        return checker.check(H(*rows))

    def test_sequential_ok(self):
        r = self.run_h(op(1, "get", "a", None, 0, 1, out=None),
                       op(1, "put", "a", "x", 2, 3),
                       op(2, "get", "a", None, 4, 5, out="x"),
                       op(1, "del", "a", None, 6, 7),
                       op(2, "get", "a", None, 8, 9, out=None),
                       op(F, "get", "a", None, 10, 11, out=None))
        self.assertEqual(r.violations, 0, r.summary())
        self.assertEqual(r.ok["put"], 1)

    def test_stale_read_is_caught(self):
        r = self.run_h(op(1, "put", "a", "x", 0, 1),
                       op(1, "put", "a", "y", 2, 3),
                       op(2, "get", "a", None, 4, 5, out="x"))
        self.assertEqual([k for k, _ in r.nonlinear], ["a"])
        self.assertEqual(r.phantom, [])
        self.assertEqual(len(r.rolled_back), 1)  # put y was seen undone

    def test_read_after_delete_is_caught(self):
        r = self.run_h(op(1, "put", "a", "x", 0, 1),
                       op(1, "del", "a", None, 2, 3),
                       op(2, "get", "a", None, 4, 5, out="x"))
        self.assertEqual(len(r.nonlinear), 1)

    def test_concurrent_writes_either_order(self):
        # two overlapping puts; reads during them may see either, later reads agree
        r = self.run_h(op(1, "put", "a", "x", 0, 10),
                       op(2, "put", "a", "y", 1, 9),
                       op(3, "get", "a", None, 2, 3, out="y"),
                       op(3, "get", "a", None, 4, 5, out="x"),
                       op(3, "get", "a", None, 11, 12, out="x"))
        self.assertEqual(r.violations, 0, r.summary())

    def test_flip_flop_after_both_complete(self):
        r = self.run_h(op(1, "put", "a", "x", 0, 10),
                       op(2, "put", "a", "y", 1, 9),
                       op(3, "get", "a", None, 11, 12, out="y"),
                       op(3, "get", "a", None, 13, 14, out="x"))
        self.assertEqual(len(r.nonlinear), 1)

    def test_info_may_apply_late_fail_may_not(self):
        ok = self.run_h(op(1, "put", "a", "x", 0, 1),
                        op(2, "put", "a", "y", 2, 3, res="info"),
                        op(3, "get", "a", None, 50, 51, out="y"),
                        op(3, "get", "a", None, 52, 53, out="y"))
        self.assertEqual(ok.violations, 0, ok.summary())
        bad = self.run_h(op(1, "put", "a", "x", 0, 1),
                         op(2, "put", "a", "y", 2, 3, res="fail"),
                         op(3, "get", "a", None, 50, 51, out="y"))
        self.assertEqual(len(bad.nonlinear), 1)
        # a value that no put carried at all is a phantom as well
        ph = self.run_h(op(1, "put", "a", "x", 0, 1), op(3, "get", "a", None, 2, 3, out="zz"))
        self.assertEqual(ph.phantom, [("a", "zz")])
        self.assertEqual(len(ph.nonlinear), 1)

    def test_info_once_visible_cannot_vanish(self):
        # an indeterminate put that a read saw, then the older value again: not linearizable
        r = self.run_h(op(1, "put", "a", "x", 0, 1),
                       op(2, "put", "a", "y", 2, 3, res="info"),
                       op(3, "get", "a", None, 4, 5, out="y"),
                       op(3, "get", "a", None, 6, 7, out="x"))
        self.assertEqual(len(r.nonlinear), 1)

    def test_pending_invoke_is_indeterminate(self):
        r = self.run_h(op(1, "put", "a", "x", 0, None, res=None),
                       op(2, "get", "a", None, 5, 6, out="x"))
        self.assertEqual(r.violations, 0, r.summary())

    def test_lost_acknowledged_write(self):
        r = self.run_h(op(1, "put", "a", "x", 0, 1),
                       op(2, "put", "b", "y", 0, 1),
                       op(F, "get", "a", None, 10, 11, out=None),
                       op(F + 1, "get", "b", None, 10, 11, out="y"))
        self.assertEqual([k for k, _, _ in r.lost], ["a"])
        self.assertEqual(len(r.nonlinear), 1)  # the same loss, seen by the search

    def test_unreadable_after_heal(self):
        r = self.run_h(op(1, "put", "a", "x", 0, 1),
                       op(F, "get", "a", None, 10, 11, res="fail"),
                       op(F, "get", "a", None, 12, 13, res="fail"))
        self.assertEqual(r.unreadable, ["a"])
        self.assertEqual(r.lost, [])
        self.assertEqual(r.violations, 1)

    def test_unreadable_allowed_after_two_owner_losses(self):
        rows = op(1, "put", "a", "x", 0, 1) + op(F, "get", "a", None, 10, 11, res="fail")
        rows.sort(key=lambda r: r[5])
        one = checker.check(H(*rows), losses=[(5, "h1"), (6, "h1")])
        self.assertEqual(one.unreadable, ["a"])  # the same owner twice: a replica survives
        two = checker.check(H(*rows), losses=[(5, "h1"), (6, "h2")])
        self.assertEqual((two.unreadable, two.unreadable_allowed), ([], ["a"]))
        before = checker.check(H(*rows), losses=[(-2, "h1"), (-1, "h2")])
        self.assertEqual(before.unreadable, ["a"])  # lost before the write: no excuse

    def test_keys_independent(self):
        r = self.run_h(op(1, "put", "a", "x", 0, 1), op(2, "get", "b", None, 2, 3, out=None))
        self.assertEqual(r.violations, 0, r.summary())
        self.assertEqual(r.keys, 2)

    def test_malformed(self):
        r = checker.check(["{not json", '{"process": 1, "type": "ok", "f": "get", "key": "a", '
                           '"value": null, "time": 1}'])
        self.assertEqual(len(r.malformed), 2)

    def test_many_concurrent_ops_finish(self):
        # a real register driven by 8 overlapping processes: linearizable by construction
        rnd = random.Random(7)
        rows = []
        state = None
        t = 0
        open_ops = {}
        seq = 0
        for _ in range(3000):
            p = rnd.randrange(8)
            t += 1
            if p in open_ops:
                f, v, lin_out = open_ops.pop(p)
                rows.append((p, "ok", f, "k", lin_out if f == "get" else v, t))
                continue
            f = rnd.choice(["put", "put", "get", "get", "del"])
            seq += 1
            v = "v%d" % seq if f == "put" else None
            rows.append((p, "invoke", f, "k", v, t))
            # linearize at the invoke instant
            if f == "put":
                state = v
            elif f == "del":
                state = None
            open_ops[p] = (f, v, state)
        r = checker.check(H(*rows))
        self.assertEqual(r.violations, 0, r.summary())
        self.assertEqual(r.unknown, [])

    def test_many_ops_with_one_stale_read(self):
        rows = []
        t = 0
        for i in range(500):
            rows += [(1, "invoke", "put", "k", "v%d" % i, t), (1, "ok", "put", "k", "v%d" % i, t + 1)]
            rows += [(2, "invoke", "get", "k", None, t + 2), (2, "ok", "get", "k", "v%d" % i, t + 3)]
            t += 4
        rows += [(2, "invoke", "get", "k", None, t), (2, "ok", "get", "k", "v10", t + 1)]
        r = checker.check(H(*rows))
        self.assertEqual(len(r.nonlinear), 1)


class FindingsTest(unittest.TestCase):
    """Real histories of violations the harness found (tests/chaos/findings/)."""

    def load(self, name):
        with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "findings",
                               name)) as f:
            return checker.check(f.readlines())

    def test_partition_minority_ack(self):
        r = self.load("partition-minority-ack.jsonl")
        self.assertEqual([k for k, _ in r.nonlinear], ["k004"])
        self.assertGreaterEqual(len(r.rolled_back), 1)

    def test_netem_timeout_unreadable(self):
        r = self.load("netem-timeout-unreadable.jsonl")
        self.assertEqual(r.unreadable, ["k008"])
        self.assertEqual(r.nonlinear, [])


if __name__ == "__main__":
    unittest.main(verbosity=1)

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tenv.h — a tiny deterministic env for unit tests: a virtual clock that moves only when a
 * timer runs (tenv_step), timers run in (due, id) order, a xorshift rng from a seed, no network
 * (send fails KVMESH_EUNAVAILABLE), defer and post are 0-delay timers.
 *
 *   struct tenv *t = calloc(1, sizeof(*t));   (or static / in a fixture: it is large)
 *   tenv_init(t, seed);                       t->env is the env_t to hand out
 *   while (tenv_step(t, limit)) {}            runs what is due up to limit
 *
 * Ownership: the caller owns the struct. Threading: one thread (the test's).
 */
#ifndef KVMESH_TESTS_SUPPORT_TENV_H
#define KVMESH_TESTS_SUPPORT_TENV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "env/env.h"

#define TENV_MAX_TIMERS 4096 /* timer_start fails (returns 0) beyond it */

struct ttimer {
    uint64_t id, due;
    env_cb cb;
    void *arg;
};

struct tenv {
    env_t env;
    uint64_t now, next_id, rng; /* now: virtual ns */
    struct ttimer t[TENV_MAX_TIMERS];
    size_t n;
};

/* The env's operations (env.impl must point at the struct tenv). */
extern const struct env_ops tenv_ops;

/* Zeroes t and makes t->env usable: ops, impl, rng = seed (0: rand_u64 answers 0 always),
 * clock at 0. */
void tenv_init(struct tenv *t, uint64_t seed);

/* Runs the earliest timer if it is due at or before limit (the clock jumps to its due time when
 * later than now); false when no timer is due by then. */
bool tenv_step(struct tenv *t, uint64_t limit);

#endif

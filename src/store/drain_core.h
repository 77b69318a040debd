/* SPDX-License-Identifier: Apache-2.0 */
/*
 * drain_core.h — a runtime's drain (or a segment retirement's move) as a sans-I/O core
 * (docs/store.md "Drain core"): list this runtime's committed replicas page by page; for each
 * replica of a page reserve at another owner, copy, CAS the route from the old replica to the new
 * one, then commit the new slot and release the old one; until two listing passes a writers
 * period apart find nothing new (writers that placed here before they saw the retirement commit
 * within it), the deadline passed, or the shell closed. A round that ends with replicas it could
 * not move (a reservation, copy or CAS that failed: they are still committed here) is followed
 * by another from the first replica, a writers period later, while the deadline allows, at most
 * cfg.rounds rounds: the failures of a loaded moment (no room yet, a CAS that lost a race) are
 * retried within the drain's own deadline instead of failing the drain. Every decision is here;
 * every action in the world (list a page, reserve, copy, route CAS, commit, release, arm a timer,
 * report the end) is asked through drain_effects_t, and every answer comes back through an input
 * function that takes the current time. The core never reads a clock and never calls the loop, RPC,
 * the route service or the transport. src/store/data.c is the shell that runs it in a runtime;
 * tests/sim/scen_store.c runs it in the simulator.
 *
 * Drain states (one set_state asserts every transition):
 *
 *           start            listed: n > 0               page settled, deadline not passed
 *   NEW ----------> LISTING --------------------> MOVING ------------------------+
 *                    ^  |  \ listed: empty (first)                               |
 *                    |  |   +-----------------> WAITING --- timer fired ---------+--> LISTING
 *                    |  | listed: empty (second) / error / deadline passed        |
 *                    |  +-------------------------------------------------------> DONE
 *                    |     listed: empty (second) with failures, rounds left:
 *                    +---- WAITING (a writers period) <--- the next round from cursor 0
 *   close: LISTING / WAITING -> DONE; MOVING -> CLOSING (items in flight settle) -> DONE
 *
 * Item states (one per replica of the current page; item_set_state asserts every edge):
 *
 *   RESERVING --ok--> COPYING --ok--> CAS --applied / superseded--> MOVED  (commit new, release
 *       |                |             |                                   old)
 *       | failed         | failed      | refused: release new; indeterminate: keep new (its
 *       v                v             v reservation's expiry asks the route)
 *     FAILED <--------- FAILED <----- FAILED     (copy failed: release new)
 *
 * Invariants (drain_core_check): the old replica is released only after the CAS that removed it
 * from the route applied (or the route no longer referenced it); a reservation is released or
 * committed exactly once, or kept only after an indeterminate CAS; moved + failed counts every
 * settled item once; a page's items are all settled before the next listing.
 *
 * Ownership: drain_core_new allocates the core, drain_core_free releases it (the shell settles
 * nothing more: free it after the done effect). Threading: none (the shell's thread). Inputs are
 * never called from inside an effect (asserted): a shell answers after the effect returned.
 */
#ifndef KVMESH_STORE_DRAIN_CORE_H
#define KVMESH_STORE_DRAIN_CORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DRAIN_PAGE_MAX 64 /* replicas one page lists at most (== SLOT_LIST_MAX) */

enum drain_state {
    DRAIN_NEW = 0,
    DRAIN_LISTING, /* a page listing is in flight */
    DRAIN_MOVING,  /* a page's items are in flight */
    DRAIN_WAITING, /* after the first empty pass: the writers period's timer is armed */
    DRAIN_CLOSING, /* closed while items were in flight: they settle, nothing new starts */
    DRAIN_DONE,    /* the done effect was asked; the core takes no more inputs but close */
};
const char *drain_state_name(enum drain_state s);

enum drain_item_state {
    DITEM_NONE = 0,
    DITEM_RESERVING, /* the reservation at another owner is in flight */
    DITEM_COPYING,   /* the copy into the reservation is in flight */
    DITEM_CAS,       /* the route CAS (old replica -> new) is in flight */
    DITEM_MOVED,     /* counted moved */
    DITEM_FAILED,    /* counted failed */
};
const char *drain_item_state_name(enum drain_item_state s);

/* The answer of the route CAS replacing the old replica by the new one. */
enum drain_cas {
    DRAIN_CAS_APPLIED,       /* the route now names the new replica instead of the old one */
    DRAIN_CAS_SUPERSEDED,    /* the route no longer referenced the old replica: nothing to move */
    DRAIN_CAS_REFUSED,       /* not applied (a conflict the shell did not resolve, a refusal) */
    DRAIN_CAS_INDETERMINATE, /* may have been applied (timeout, lost answer) */
};

/* Why the new reservation is released. */
enum drain_release {
    DRAIN_REL_COPY_FAILED, /* the copy into it failed: nothing references it */
    DRAIN_REL_REFUSED,     /* its CAS was refused */
    DRAIN_REL_SUPERSEDED,  /* the route no longer named the old replica: the copy is not needed */
    DRAIN_REL_CLOSED,      /* the drain closed before its copy or CAS started */
};

/* Effects: i is the item's index in the current page (the shell keeps the replicas). */
typedef struct drain_effects {
    void (*list)(void *ctx, uint64_t cursor, uint32_t cap); /* answer: drain_core_listed */
    void (*reserve)(void *ctx, uint32_t i);                 /* answer: drain_core_reserved */
    void (*copy)(void *ctx, uint32_t i);                    /* answer: drain_core_copied */
    void (*cas)(void *ctx, uint32_t i);                     /* answer: drain_core_cas_answer */
    void (*commit_new)(void *ctx, uint32_t i);              /* the new slot is referenced */
    void (*release_new)(void *ctx, uint32_t i, enum drain_release why);
    void (*release_old)(void *ctx, uint32_t i);   /* the old replica is no longer referenced */
    void (*arm_timer)(void *ctx, uint64_t at_ns); /* answer: drain_core_timer (at or after) */
    /* The end: rc 0, KVMESH_ETIMEDOUT, KVMESH_EUNAVAILABLE (some replicas not moved in the last
     * round), KVMESH_ECLOSED or the listing's error; the last error is set for every rc but a
     * listing error (the shell's own). Asked once. */
    void (*done)(void *ctx, int rc);
    /* Optional: a round ended with `failed` replicas not moved and the next (round + 1, from 1)
     * starts after a writers period: progress for the shell's log. moved: so far. */
    void (*retry)(void *ctx, uint32_t round, size_t moved, size_t failed);
} drain_effects_t;

typedef struct drain_core_cfg {
    uint32_t timeout_ms; /* the drain's deadline after drain_core_start */
    uint64_t writers_ns; /* the pause between the two empty passes */
    uint32_t page;       /* replicas per listing, 1..DRAIN_PAGE_MAX */
    uint32_t rounds;     /* rounds at most while replicas fail to move (0: DRAIN_ROUNDS) */
} drain_core_cfg_t;

#define DRAIN_ROUNDS 4 /* default cfg.rounds: the first pass and three retries */

struct drain_core;
typedef struct drain_core drain_core_t;

int drain_core_new(const drain_core_cfg_t *cfg, const drain_effects_t *fx, void *ctx,
                   drain_core_t **out);
void drain_core_free(drain_core_t *c);

/* NEW -> LISTING: the first listing (cursor 0). */
void drain_core_start(drain_core_t *c, uint64_t now);
/* The listing's answer: rc != 0 ends the drain with rc; n replicas (<= the cap asked) form the
 * page, items 0..n-1; next_cursor is where the next listing starts. */
void drain_core_listed(drain_core_t *c, uint64_t now, int rc, uint32_t n, uint64_t next_cursor);
void drain_core_reserved(drain_core_t *c, uint64_t now, uint32_t i, int rc);
void drain_core_copied(drain_core_t *c, uint64_t now, uint32_t i, int rc);
void drain_core_cas_answer(drain_core_t *c, uint64_t now, uint32_t i, enum drain_cas ans);
void drain_core_timer(drain_core_t *c, uint64_t now);
/* The shell closes: the drain ends with KVMESH_ECLOSED once the items in flight settled. A close
 * after DONE does nothing. */
void drain_core_close(drain_core_t *c, uint64_t now);

enum drain_state drain_core_state(const drain_core_t *c);
enum drain_item_state drain_core_item_state(const drain_core_t *c, uint32_t i);
/* moved: every replica moved; failed: those not moved in the current (or last) round. */
void drain_core_counts(const drain_core_t *c, size_t *moved, size_t *failed);
uint32_t drain_core_round(const drain_core_t *c); /* 1 for the first round */
/* Checks the invariants above; 0 or KVMESH_EINTERNAL with the last error set. */
int drain_core_check(const drain_core_t *c);

/* Deliberately broken behaviour, for the simulator's broken variants only. */
enum drain_bug {
    DRAIN_BUG_RELEASE_EARLY = 1u << 0, /* the old replica is released once copied, before the
                                          route CAS applied */
};
void drain_core_test_set_bugs(drain_core_t *c, unsigned bugs);

#endif

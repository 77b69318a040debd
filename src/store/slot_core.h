/* SPDX-License-Identifier: Apache-2.0 */
/*
 * slot_core.h — the storage owner's slot protocol as a sans-I/O core (spec "Write path" 3,
 * "Delete and reclaim", DRAM eviction; docs/store.md "Owner slot core"): the owner's
 * segments and their allocators (store/alloc.h), the replica slots carved from them, the
 * reserved / reclaim queues, the CLOCK ring of committed slots and the reservations waiting for
 * space. Every transition is a function that takes the current time; what the owner must do in
 * the world (grant or revoke a write grant, look a route up, count an event, answer a waiting
 * reservation) is asked through slot_effects_t. The core never reads a clock, never calls the
 * route service, RPC, the loop or metrics. src/store/owner.c is the shell that runs it in a
 * runtime; tests/sim/scen_store.c runs it in the simulator.
 *
 * Slot states (one set_state asserts every transition):
 *
 *             reserve              commit / lookup: referenced
 *   NEW ----------------> RESERVED ---------------------------------------> COMMITTED
 *    |                     |   |  TTL passed                  commit /          |
 *    | adopt (handoff)     |   +-----------> HELD --------------------------->  | release /
 *    +---------------------|------------------ | ------------------------------>| evicted
 *    |                     | release           | release / lookup: not referenced v (route CAS)
 *    +---------------------+-------------------+--------------------------------> RECLAIM
 *                                                                                   | grace
 *                                                                                   v passed,
 *                                                                                 FREED  not busy
 *
 * Invariants (slot_core_check):
 *   - bytes are reused only after their slot was FREED: from RECLAIM, once reclaim_grace_ns
 *     passed since it entered RECLAIM and no lookup or CAS is in flight for it (busy);
 *   - a COMMITTED slot leaves only by a release (its writer replaced the route) or an eviction
 *     whose route CAS removed the replica (or whose lookup proved no route references it);
 *   - a RESERVED slot past its TTL is HELD, never freed, until an exact route lookup settles it
 *     (slot_core_settle_decide);
 *   - a slot whose payload is landing (slot_core_land_begin) is never freed, and the landing
 *     began only in a RESERVED slot of the same token before its TTL; an expired reservation
 *     settled free stays in RECLAIM at least late_write_ns per started MiB plus one;
 *   - every slot is in exactly one place: RESERVED and HELD in the reserved queue, RECLAIM in
 *     the reclaim queue, COMMITTED in the clock ring or, while its eviction is in flight
 *     (evicting), in the eviction list;
 *   - used bytes = the sum of the live slots' lengths = the allocators' requested bytes.
 *
 * Ownership: slot_core_new allocates the core, slot_core_free releases it with every slot and
 * allocator (it answers no waiter: slot_core_fail_waiters first). Slots are the core's: a
 * slot_t pointer handed to an effect stays valid until the core is told the answer
 * (slot_core_held_answer, slot_core_evict_answer / slot_core_evict_end), since a busy slot is
 * never freed. Identities passed in are copied. Threading: none (the owner's loop thread).
 */
#ifndef KVMESH_STORE_SLOT_CORE_H
#define KVMESH_STORE_SLOT_CORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/hash.h"
#include "core/ident.h"
#include "store/alloc.h"

#define SLOT_CORE_MAX_SEGS 64 /* segments per core (== STORE_MAX_SEGS) */
#define SLOT_LIST_MAX      64 /* slots one slot_core_list page returns */
/* RECLAIM slots one reclaim pass examines by default (a few ms: bench_slot_reclaim) */
#define SLOT_RECLAIM_CAP 8192

enum slot_state {
    SLOT_NEW = 0,
    SLOT_RESERVED,  /* write grant live; in the reserved queue */
    SLOT_HELD,      /* TTL passed; in the reserved queue until a lookup settles it */
    SLOT_COMMITTED, /* referenced by a route; in the clock ring (or being evicted) */
    SLOT_RECLAIM,   /* released; in the reclaim queue until the grace passed */
    SLOT_FREED,     /* bytes returned to the allocator; the slot is gone */
};
const char *slot_state_name(enum slot_state s);

struct slot_core;
typedef struct slot_core slot_core_t;

/* One record per slot, one record of the core's pool (core/slab.h) per stored object (88
 * bytes for a 22-byte identity): the allocator's block record (store/alloc.h) comes first, so
 * that the slot is the record of its block (off and len overlay the record's words; the
 * allocator never writes its last word while the block is allocated, and the deadline / commit
 * sequence lives there: a slot has neither before its bytes are allocated or after they are
 * freed; the slot keeps no pointer to its core: the shell's callbacks carry their own), the
 * identity's canonical encoding follows the record inline and is all the slot keeps of it (its
 * length, the tenant, domain and key lengths are read from the encoding and the hash computed:
 * slot_ident makes the kvm_ident_t view), fields that are never live in the same state share
 * words (the queue and clock-ring links; the deadline and the commit sequence), and the small
 * fields are 16 bits. When its bytes are freed the record passes to the allocator
 * (alloc_release), which keeps it as a free block's record or returns it to the pool; the
 * allocator's own records are bare slots of the same pool (bare: no encoding), so the pool
 * learns every record's size from the record.
 */
typedef struct slot {
    union {
        alloc_blk_t blk; /* the segment allocator's record of [off, off + len) */
        struct {
            uint32_t off_u;           /* == blk.off_u (read only; slot_off: bytes) */
            uint32_t len;             /* == blk.len: bytes (read only) */
            uintptr_t blk_w_[3];      /* the record's links */
            union {                   /* the record's last word, unused while allocated */
                uint64_t deadline_ns; /* RESERVED: TTL end; HELD: next lookup; RECLAIM: grace
                                         end */
                uint64_t seq;         /* COMMITTED: commit order (drain cursor) */
            };
        };
    };
    /* the write grant the reservation answered; live while RESERVED / HELD, kept afterwards as
     * the slot's identity (slot_note_t); 0: adopted. Its own word: never shared */
    uint64_t token;
    union { /* a slot is in one queue or in the clock ring, never both */
        struct {
            struct slot *qnext, *qprev; /* reserved, reclaim or eviction list */
        };
        struct {
            struct slot *cnext, *cprev; /* clock ring */
        };
    };
    uint16_t segi : 6; /* index of the segment in the core (and the shell's table) */
    enum slot_state state : 3;
    bool ref : 1;      /* CLOCK reference bit */
    bool busy : 1;     /* a lookup or CAS for this slot is in flight: never freed */
    bool evicting : 1; /* COMMITTED, out of the ring, its eviction in flight */
    bool checked : 1;  /* HELD: the further check (held_check) said "decide by the route" */
    bool queued : 1;
    bool landing : 1;    /* a payload is being received into the bytes (slot_core_land_begin):
                            never freed until slot_core_land_end, whatever the state */
    bool bare : 1;       /* an allocator's free-block record (alloc_recs_t), never a slot */
    uint8_t ident_enc[]; /* the identity's canonical encoding (ident.h; not in a bare record) */
} slot_t;

/* The offset of s's bytes in its segment. */
static inline uint64_t slot_off(const slot_t *s)
{
    return alloc_blk_off(&s->blk);
}

/* The identity of s as a view: enc points into the slot (valid while the slot lives; never
 * kvm_ident_free it; kvm_ident_copy it to keep it past that). The lengths are read from the
 * canonical encoding (u8 version | u8 tenant_len | tenant | u8 domain_len | domain |
 * u16 key_len BE | key: slot_core_reserve and slot_core_adopt take canonical encodings only)
 * and the hash is computed (XXH3 of ~20-40 bytes). */
static inline kvm_ident_t slot_ident(const slot_t *s)
{
    const uint8_t *e = s->ident_enc;
    uint32_t tl = e[1], dl = e[2 + tl], kl = (uint32_t)e[3 + tl + dl] << 8 | e[4 + tl + dl];
    uint32_t len = 5 + tl + dl + kl;
    return (kvm_ident_t){.enc = (uint8_t *)e,
                         .enc_len = len,
                         .tenant_len = (uint8_t)tl,
                         .domain_len = (uint8_t)dl,
                         .key_len = (uint16_t)kl,
                         .hash = kvm_hash_seeded(e, len, KVM_HASH_SEED_IDENT)};
}

/* Why the core asks for a route lookup. */
enum slot_lookup_why {
    SLOT_LOOKUP_EXPIRY, /* a HELD reservation: answer with slot_core_held_answer */
    SLOT_LOOKUP_EVICT,  /* an eviction victim: answer with slot_core_evict_answer */
};

/* The answer of an exact route lookup, as the shell reads it. */
enum slot_answer {
    SLOT_ANS_REFERENCED,   /* the route references this slot */
    SLOT_ANS_UNREFERENCED, /* the route exists (or is a tombstone) without this slot */
    SLOT_ANS_ABSENT,       /* no route for the key */
    SLOT_ANS_UNKNOWN,      /* the lookup failed: nothing is known */
    SLOT_ANS_CANCELED,     /* the route service closed */
};

/* Events the shell counts (metrics); bytes where it applies. */
enum slot_event {
    SLOT_EV_ALLOC_OK,     /* a reservation got bytes */
    SLOT_EV_NO_SPACE,     /* a reservation was refused for space */
    SLOT_EV_RECLAIMED,    /* bytes freed after the grace */
    SLOT_EV_EXPIRED,      /* a held reservation released after its lookup */
    SLOT_EV_EVICTED,      /* a committed slot left its route and entered RECLAIM */
    SLOT_EV_HELD_CHANGED, /* the number of held reservations changed (bytes = the number) */
};

typedef void (*slot_reserve_cb)(void *arg, int rc, const char *err, uint64_t seg, uint64_t off,
                                uint64_t token);

/* The effects a core asks for. ctx is slot_core_new's. All but lookup may be NULL. */
typedef struct slot_effects {
    /* A write grant over [off, off + len) of segment segi for ttl_ms: 0 and *token, or an
     * error (the reservation then fails with it). NULL: token 0. */
    int (*grant)(void *ctx, uint32_t segi, uint64_t off, uint64_t len, uint32_t ttl_ms,
                 uint64_t *token);
    void (*revoke)(void *ctx, uint64_t token);
    /* Look up the route of s->ident and answer (see enum slot_lookup_why). 0: started (the
     * answer may come before the return); an error: not started (the core undoes). */
    int (*lookup)(void *ctx, slot_t *s, enum slot_lookup_why why);
    /* Optional further check of a HELD slot the route shows unreferenced, before it is freed
     * (e.g. the put replay's quota operation record): answer with slot_core_held_check_answer.
     * 0: started; an error: not started (kept held, asked again later). NULL: no check. */
    int (*held_check)(void *ctx, slot_t *s);
    /* s's bytes go back to the allocator now (the grace passed). */
    void (*freed)(void *ctx, const slot_t *s);
    void (*event)(void *ctx, enum slot_event ev, uint64_t bytes);
} slot_effects_t;

typedef struct slot_core_cfg {
    const char *name;             /* the owner in messages (borrowed for the core's life) */
    uint64_t reclaim_grace_ns;    /* RECLAIM -> FREED no earlier than this */
    double evict_high, evict_low; /* watermarks (fractions of capacity) */
    uint64_t wait_timeout_ns;     /* a reservation waits this long for eviction at most */
    uint64_t held_retry_ns;       /* a HELD slot whose lookup did not answer is asked again */
    uint32_t tick_budget;         /* expired reservations examined per tick (their lookups) */
    uint32_t reclaim_cap;         /* RECLAIM slots examined per tick or slot_core_reclaim call
                                     (0: SLOT_RECLAIM_CAP) */
    uint32_t evict_inflight_max;
    uint32_t wait_max; /* reservations waiting for space */
    /* How long a transport write admitted by a reservation's grant may still be landing, per
     * started MiB of the slot plus one (tcp: the transport's io_timeout_ms; 0: not bounded by
     * it): an expired reservation settled free keeps its bytes at least late_write_ns * (1 +
     * len / MiB) in RECLAIM, not only the grace, so that a WRITE the grant admitted before the
     * TTL ended has landed before the bytes are reserved again (slot_core_land_begin). */
    uint64_t late_write_ns;
} slot_core_cfg_t;

int slot_core_new(const slot_core_cfg_t *cfg, const slot_effects_t *fx, void *ctx,
                  slot_core_t **out);
void slot_core_free(slot_core_t *c);
void *slot_core_ctx(const slot_core_t *c);

/* ---- segments: the shell keeps a parallel table (same indices) of what it maps ------------ */
int slot_core_seg_add(slot_core_t *c, uint64_t seg_id, uint64_t size, uint32_t *segi);
int slot_core_seg_find(const slot_core_t *c, uint64_t seg_id); /* index or -1 */
uint32_t slot_core_n_segs(const slot_core_t *c);
bool slot_core_seg_present(const slot_core_t *c, uint32_t segi);
void slot_core_seg_retire(slot_core_t *c, uint32_t segi);
bool slot_core_seg_retiring(const slot_core_t *c, uint32_t segi);
/* Operator drain (no new slots); returns true when the flag changed. */
bool slot_core_seg_set_drained(slot_core_t *c, uint32_t segi, bool drained);
bool slot_core_seg_drained(const slot_core_t *c, uint32_t segi);
/* A retiring segment with no slot left leaves the core: 0, or KVMESH_EAGAIN with *n_slots. */
int slot_core_seg_remove(slot_core_t *c, uint32_t segi, uint64_t *n_slots);

/* ---- transitions ------------------------------------------------------------------------- */

/* Reserves len bytes for ident with a TTL: cb(arg, 0, "", seg, off, token) — possibly before
 * the return — or an error with a message; with no room but something evictable the request
 * waits (FIFO, at most wait_max) for eviction and is answered by a later tick. */
void slot_core_reserve(slot_core_t *c, uint64_t now, const kvm_ident_t *ident, uint64_t len,
                       uint32_t ttl_ms, slot_reserve_cb cb, void *arg);
/* Binds a reservation to another identity (pre-granted ranges: docs/performance.md "shm puts
 * above 16 KiB", the first piece): the RESERVED slot at (seg_id, off) whose write grant is token,
 * whose length is len and whose identity is `from` (a placeholder nothing publishes) gets the
 * identity `to`, its TTL end more than margin_ns after now. The identity lives inline in the
 * allocator's block record, so the slot's record is replaced: the bytes are released and
 * reserved again at the same offset and length for a new record, in this one call (nothing runs
 * between: the loop thread), keeping the token (the grant stays live), the TTL end and the
 * place in the reserved queue; used bytes and live slots unchanged. After it, a lookup, commit,
 * release or expiry of the slot is that of `to`'s reservation, and a second bind of the range
 * finds `to`, not `from`. Returns 0; KVMESH_ENOENT when no slot matches (state, token, length,
 * identity) or it is busy or landing; KVMESH_ETIMEDOUT when its TTL ends within margin_ns (the
 * reservation is left to expire); KVMESH_EINVAL for a non-canonical `to` and KVMESH_ENOMEM
 * without a record for it (nothing changed); KVMESH_ENOMEM when the re-reservation needed a free
 * record and got none: then the reservation is gone (grant revoked, bytes free, nothing
 * published from them). An error message is set. */
int slot_core_bind(slot_core_t *c, uint64_t now, uint64_t seg_id, uint64_t off, uint64_t token,
                   uint64_t len, const kvm_ident_t *from, const kvm_ident_t *to,
                   uint64_t margin_ns);
/* Which slot a COMMIT or RELEASE means besides (segment, offset), which a later slot reusing
 * the same bytes shares (docs/store.md "Slot identity in COMMIT and RELEASE"):
 *   - SLOT_NOTE_TOKEN: the write-grant token the reservation answered (its writer's own
 *     reservation): the note applies only to the slot holding that token;
 *   - SLOT_NOTE_OBJECT only (a replica known from a route: no token): the object's identity hash
 *     (kvm_ident_t.hash) and length must match the slot's (a later slot of the same object and
 *     length at the same bytes is not told apart);
 *   - nothing (has = 0: an older peer's message): (segment, offset) alone, as before.
 * A note that does not match is ignored and counted (slot_core_stats_t.notes_stale). */
enum slot_note_has { SLOT_NOTE_TOKEN = 1u << 0, SLOT_NOTE_OBJECT = 1u << 1 };
typedef struct slot_note {
    unsigned has; /* SLOT_NOTE_* bits */
    uint64_t token;
    uint64_t ident_hash, len;
} slot_note_t;

/* The writer's route was published: RESERVED / HELD -> COMMITTED. Returns the slot (any state)
 * or NULL when no slot starts there or the note does not name it. note NULL: no identity. */
const slot_t *slot_core_commit_note(slot_core_t *c, uint64_t now, uint64_t seg_id, uint64_t off,
                                    const slot_note_t *note);
/* The writer gave the slot up or its route replaced it: -> RECLAIM. Returns whether the note
 * applied (false: no slot there, or the note does not name it). */
bool slot_core_release_note(slot_core_t *c, uint64_t now, uint64_t seg_id, uint64_t off,
                            const slot_note_t *note);
/* The same without an identity (note NULL). */
const slot_t *slot_core_commit(slot_core_t *c, uint64_t now, uint64_t seg_id, uint64_t off);
void slot_core_release(slot_core_t *c, uint64_t now, uint64_t seg_id, uint64_t off);
/* A reader used a committed slot (CLOCK reference bit). */
void slot_core_hit(slot_core_t *c, uint64_t seg_id, uint64_t off);
/* Housekeeping: frees the reclaim slots whose grace passed, up to reclaim_cap (a cap, not a
 * tick_budget's worth: at 256 per tick a backlog would outgrow the grace under fast overwrites),
 * holds expired reservations and asks for their lookups (at most tick_budget), serves the
 * waiters, evicts above the high watermark. Returns true when the cap stopped the reclaim with
 * more slots past their grace: the shell then calls slot_core_reclaim at once (a zero-delay
 * timer: its loop's next turn, never a sleep) until that returns false. */
bool slot_core_tick(slot_core_t *c, uint64_t now);
/* A reclaim re-run: frees up to reclaim_cap more slots whose grace passed, then serves the
 * waiters with the space; nothing else of the tick (expiry lookups keep their tick_budget per
 * period). Returns true while more are due. */
bool slot_core_reclaim(slot_core_t *c, uint64_t now);

/* The held-reservation settle decision (spec "Write path": a reservation past its TTL is kept
 * until an exact lookup settles it). One pure function so that further conditions (the quota
 * operation record of a put replay) plug in here. */
enum slot_settle {
    SLOT_SETTLE_COMMIT, /* the route references the slot: it is the object's replica */
    SLOT_SETTLE_FREE,   /* the route proves it does not: release (RECLAIM, then the grace) */
    SLOT_SETTLE_KEEP,   /* unknown: keep it held, ask again later */
    SLOT_SETTLE_CHECK,  /* unreferenced, but the further check decides first (held_check) */
};
typedef struct slot_settle_in {
    enum slot_answer route; /* the exact lookup's answer */
    bool check_due;         /* filled by the core: a held_check effect exists and has not yet said
                               "decide by the route" for this slot */
} slot_settle_in_t;
enum slot_settle slot_core_settle_decide(const slot_settle_in_t *in);
/* The answer of a SLOT_LOOKUP_EXPIRY lookup (in->route; in->check_due is the core's); returns
 * what was done (KEEP also when the slot was settled meanwhile or the lookup was canceled). */
enum slot_settle slot_core_held_answer(slot_core_t *c, uint64_t now, slot_t *s,
                                       const slot_settle_in_t *in);
/* The answer of a held_check: SLOT_CHECK_KEEP keeps the slot held (asked again after
 * held_retry_ns), SLOT_CHECK_REREAD looks the route up again and lets that answer decide. */
enum slot_check { SLOT_CHECK_KEEP, SLOT_CHECK_REREAD, SLOT_CHECK_CANCELED };
void slot_core_held_check_answer(slot_core_t *c, uint64_t now, slot_t *s, enum slot_check a);

/* The answer of a SLOT_LOOKUP_EVICT lookup. SLOT_EVICT_CAS: the route references the slot; the
 * shell removes the replica by a route CAS (or the cold tier's eviction) and then calls
 * slot_core_evict_end. SLOT_EVICT_DONE: the core settled the eviction (nothing referenced the
 * slot: RECLAIM; or it went back to the ring). */
enum slot_evict_next { SLOT_EVICT_CAS, SLOT_EVICT_DONE };
enum slot_evict_next slot_core_evict_answer(slot_core_t *c, uint64_t now, slot_t *s,
                                            enum slot_answer a);
enum slot_evict_end {
    SLOT_EVICT_REMOVED,  /* the replica left the route: RECLAIM */
    SLOT_EVICT_CONFLICT, /* the CAS lost: back to the ring (counted) */
    SLOT_EVICT_KEPT,     /* not evicted now (pinned, failed to start): back to the ring */
};
void slot_core_evict_end(slot_core_t *c, uint64_t now, slot_t *s, enum slot_evict_end e);

/* ---- landing: a reservation's payload received into its bytes ----------------------------- */
/*
 * The fence for a payload that lands after its reservation's TTL (docs/store.md "Late
 * payloads"): a writer that receives the bytes into the slot over time (the raw put's payload
 * sink) brackets the receive with these two calls, on the core's thread. The token is the
 * reservation's generation: a later reservation of the same bytes has another.
 *
 * slot_core_land_begin: 0 when (seg_id, off) holds a RESERVED slot of this token whose TTL has
 * not passed (now < its deadline): the slot is marked landing and is never freed (whatever it
 * becomes meanwhile: HELD, RECLAIM) until slot_core_land_end; else KVMESH_ETIMEDOUT (the TTL
 * passed, held or released) or KVMESH_ENOENT (no such reservation), nothing marked: the writer
 * discards the payload. One landing per reservation.
 *
 * slot_core_land_end: ends the landing; 0 when the reservation is still RESERVED with this token
 * (the bytes may be published); else KVMESH_ETIMEDOUT: its TTL passed (HELD, or settled since)
 * while the payload landed: the writer must not publish the bytes and releases the reservation
 * (slot_core_release_note with its token), the put fails cleanly. KVMESH_ENOENT: no landing
 * there (a programmer error in the shell).
 */
int slot_core_land_begin(slot_core_t *c, uint64_t now, uint64_t seg_id, uint64_t off,
                         uint64_t token);
int slot_core_land_end(slot_core_t *c, uint64_t now, uint64_t seg_id, uint64_t off, uint64_t token);

/* Answers every waiting reservation with rc and msg (close). */
void slot_core_fail_waiters(slot_core_t *c, int rc, const char *msg);

/* ---- hot upgrade and drain ---------------------------------------------------------------- */
/* A slot adopted from a predecessor: SLOT_COMMITTED (with its seq) or SLOT_RECLAIM (its grace
 * starts at slot_core_start). */
int slot_core_adopt(slot_core_t *c, uint32_t segi, uint64_t off, uint64_t len,
                    enum slot_state state, uint64_t seq, const kvm_ident_t *ident);
void slot_core_start(slot_core_t *c, uint64_t now);
uint64_t slot_core_seq(const slot_core_t *c);
void slot_core_set_seq(slot_core_t *c, uint64_t seq);
/* Calls fn for every COMMITTED slot in the ring, then every RECLAIM slot; stops at the first
 * non-zero return and returns it. */
int slot_core_visit(const slot_core_t *c, int (*fn)(void *arg, const slot_t *s), void *arg);
/* The committed slots with the cap (<= SLOT_LIST_MAX) smallest commit sequences above cursor
 * (segi_filter < 0: any segment), in order. */
size_t slot_core_list(const slot_core_t *c, int segi_filter, uint64_t cursor, const slot_t **out,
                      size_t cap);
/* No reservation open, no waiter, no eviction in flight (a hot upgrade may export). */
bool slot_core_settled(const slot_core_t *c);
const slot_t *slot_core_find(const slot_core_t *c, uint64_t seg_id, uint64_t off);

typedef struct slot_core_stats {
    uint64_t capacity, used, reclaim_bytes;
    uint64_t reclaimed, reservations_expired, reserve_waits, reservations_held;
    uint64_t evict_conflicts;
    uint64_t notes_stale;  /* COMMIT / RELEASE notes ignored: they named another slot */
    uint64_t record_bytes; /* the record pool's chunks (slots and free-block records) */
    uint64_t records_live; /* of it: records in use (rounded sizes; records above SLAB_MAX are
                              malloc'd and not counted) */
    uint64_t n_reserved, n_committed, n_reclaim, n_waiters, evict_inflight;
    double fragmentation;
} slot_core_stats_t;
void slot_core_stats(const slot_core_t *c, slot_core_stats_t *out); /* O(slots) */
uint64_t slot_core_used(const slot_core_t *c);                      /* bytes of live slots */
uint64_t slot_core_capacity(const slot_core_t *c);                  /* bytes of present segments */
/* Every invariant above; 0 or KVMESH_EINTERNAL with a message. O(slots + blocks). */
int slot_core_check(const slot_core_t *c);

/* Tests only: deliberately broken variants the simulator's checkers must catch. */
enum slot_bug {
    SLOT_BUG_NO_GRACE = 1u << 0,         /* RECLAIM is freed at the next tick, without the grace */
    SLOT_BUG_FREE_HELD = 1u << 1,        /* an expired reservation is released without its lookup */
    SLOT_BUG_EVICT_NO_CAS = 1u << 2,     /* an eviction frees a referenced slot without the CAS */
    SLOT_BUG_REMOVE_UNDRAINED = 1u << 3, /* a retiring segment's reserved and reclaim slots are
                                            dropped at its removal */
    SLOT_BUG_NO_TOKEN = 1u << 4,         /* COMMIT / RELEASE ignore the note's identity: (segment,
                                            offset) alone names the slot */
};
void slot_core_test_set_bugs(slot_core_t *c, unsigned bugs);
/* Tests only: the RESERVED slot at (seg_id, off) of this token reaches its TTL now (it moves to
 * the head of the reserved queue with deadline now and is held, its lookup asked, as a tick
 * would). KVMESH_ENOENT when no such reservation. */
int slot_core_test_expire(slot_core_t *c, uint64_t now, uint64_t seg_id, uint64_t off,
                          uint64_t token);

#endif

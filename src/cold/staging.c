// SPDX-License-Identifier: Apache-2.0
/*
 * staging.c — owns the staging pool's slot table, its pins, tokens and counters, and the
 * first-fit allocation of the caller's region among live slots (staging.h describes the
 * lifecycle). Every state change goes through slot_set_state, which asserts the edge.
 */
#include "cold/staging.h"

#include <stdlib.h>
#include <string.h>

#include "core/util.h"

#define TOKEN_SLOT_BITS 16
#define TOKEN_SLOT_MASK ((1ull << TOKEN_SLOT_BITS) - 1)

struct slot {
    enum staging_state state;
    uint64_t off, len; /* [off, off + len) of the region (len rounded to STAGING_ALIGN) */
    uint64_t want_len, checksum;
    uint64_t token;      /* live token (0 = none: FILLING, or fenced) */
    uint64_t last_token; /* the token of the current/last use (late reports are recognised) */
    uint64_t deadline;
    uint32_t reader, transfer, promotion;
};

struct staging_pool {
    uint8_t *mem;
    uint64_t bytes;
    uint32_t n;
    uint64_t seq; /* token sequence, never reused */
    staging_stats_t st;
    struct slot *s;
};

static const char *const NAMES[STAGING_STATE_COUNT] = {"free", "filling", "staged", "fenced"};

const char *staging_state_name(enum staging_state s)
{
    return (unsigned)s < STAGING_STATE_COUNT ? NAMES[s] : "?";
}

/* The only legal edges (staging.h's diagram). */
static bool edge_ok(enum staging_state from, enum staging_state to)
{
    switch (from) {
    case STAGING_FREE:
        return to == STAGING_FILLING;
    case STAGING_FILLING:
        return to == STAGING_STAGED || to == STAGING_FREE;
    case STAGING_STAGED:
        return to == STAGING_FENCED || to == STAGING_FREE;
    case STAGING_FENCED:
        return to == STAGING_FREE;
    default:
        return false;
    }
}

static void slot_set_state(staging_pool_t *p, struct slot *s, enum staging_state to)
{
    KVM_ASSERT(edge_ok(s->state, to));
    if (to == STAGING_FREE) {
        /* recycle only at zero pins */
        KVM_ASSERT(s->reader == 0 && s->transfer == 0 && s->promotion == 0);
        KVM_ASSERT(p->st.slots_used > 0 && p->st.bytes_used >= s->len);
        p->st.slots_used--;
        p->st.bytes_used -= s->len;
        if (s->state != STAGING_FILLING)
            p->st.recycled++;
        s->token = 0;
        s->len = 0;
    }
    s->state = to;
}

int staging_new(staging_pool_t **out, void *mem, uint64_t bytes, uint32_t slots)
{
    *out = NULL;
    if (!mem || bytes == 0 || slots == 0 || slots > STAGING_SLOTS_MAX)
        return kvm_errf(KVMESH_EINVAL,
                        "staging pool: %u slots over %llu bytes (need 1..%d slots "
                        "and a non-empty region)",
                        slots, (unsigned long long)bytes, STAGING_SLOTS_MAX);
    staging_pool_t *p = calloc(1, sizeof(*p));
    if (!p || !(p->s = calloc(slots, sizeof(*p->s)))) {
        free(p);
        return KVMESH_ENOMEM;
    }
    p->mem = mem;
    p->bytes = bytes;
    p->n = slots;
    p->st.slots_cap = slots;
    p->st.bytes_cap = bytes;
    *out = p;
    return 0;
}

void staging_free(staging_pool_t *p, bool require_empty)
{
    if (!p)
        return;
    if (require_empty)
        KVM_ASSERT(p->st.slots_used == 0);
    free(p->s);
    free(p);
}

int staging_validate(const staging_expect_t *want, const staging_expect_t *have)
{
    const char *f = NULL;
    if (want->namespace_hash != have->namespace_hash)
        f = "namespace";
    else if (!kvm_id128_equal(&want->owner, &have->owner))
        f = "cold owner";
    else if (want->route_version != have->route_version)
        f = "route version";
    else if (want->locator_fp != have->locator_fp)
        f = "locator";
    else if (want->length != have->length)
        f = "length";
    else if (want->checksum != have->checksum)
        f = "checksum";
    if (f)
        return kvm_errf(KVMESH_ECONFLICT,
                        "cold read: the reader's %s differs from the owner's "
                        "route; look the route up again",
                        f);
    return 0;
}

/* First fit among the live slots' ranges (at most n of them: bounded). */
static bool find_gap(const staging_pool_t *p, uint64_t len, uint64_t *off)
{
    uint64_t at = 0;
    for (;;) {
        bool moved = false;
        for (uint32_t i = 0; i < p->n; i++) {
            const struct slot *s = &p->s[i];
            if (s->state == STAGING_FREE)
                continue;
            if (s->off < at + len && at < s->off + s->len) {
                at = s->off + s->len;
                moved = true;
            }
        }
        if (at + len > p->bytes)
            return false;
        if (!moved) {
            *off = at;
            return true;
        }
    }
}

int staging_acquire(staging_pool_t *p, const staging_expect_t *want, const staging_expect_t *have,
                    staging_handle_t *out)
{
    memset(out, 0, sizeof(*out));
    int rc = staging_validate(want, have);
    if (rc) {
        p->st.rejected++;
        return rc;
    }
    uint64_t len = (want->length + STAGING_ALIGN - 1) / STAGING_ALIGN * STAGING_ALIGN;
    if (len == 0)
        len = STAGING_ALIGN;
    if (len > p->bytes) {
        p->st.rejected++;
        return kvm_errf(KVMESH_ETOOBIG,
                        "cold read: %llu bytes do not fit the %llu-byte staging "
                        "pool; raise cold_staging_bytes",
                        (unsigned long long)want->length, (unsigned long long)p->bytes);
    }
    uint32_t idx = p->n;
    for (uint32_t i = 0; i < p->n && idx == p->n; i++)
        if (p->s[i].state == STAGING_FREE)
            idx = i;
    uint64_t off = 0;
    if (idx == p->n || !find_gap(p, len, &off)) {
        p->st.backpressure++;
        return kvm_errf(STAGING_EBACKPRESSURE,
                        "cold read: the staging pool is saturated (%u/%u slots, %llu/%llu bytes); "
                        "retry later",
                        p->st.slots_used, p->n, (unsigned long long)p->st.bytes_used,
                        (unsigned long long)p->bytes);
    }
    struct slot *s = &p->s[idx];
    memset(s, 0, sizeof(*s));
    s->off = off;
    s->len = len;
    s->want_len = want->length;
    s->checksum = want->checksum;
    slot_set_state(p, s, STAGING_FILLING);
    p->st.slots_used++;
    p->st.bytes_used += len;
    p->st.acquired++;
    out->slot = idx;
    return 0;
}

uint8_t *staging_buf(staging_pool_t *p, uint32_t slot, uint64_t *offset, uint64_t *len)
{
    KVM_ASSERT(slot < p->n && p->s[slot].state != STAGING_FREE);
    if (offset)
        *offset = p->s[slot].off;
    if (len)
        *len = p->s[slot].want_len;
    return p->mem + p->s[slot].off;
}

int staging_ready(staging_pool_t *p, staging_handle_t *h, uint64_t checksum, uint64_t deadline)
{
    KVM_ASSERT(h->slot < p->n);
    struct slot *s = &p->s[h->slot];
    KVM_ASSERT(s->state == STAGING_FILLING);
    if (checksum != s->checksum) {
        p->st.checksum_failures++;
        slot_set_state(p, s, STAGING_FREE);
        return kvm_errf(KVMESH_ECHECKSUM, "cold read: the staged bytes fail the checksum");
    }
    s->token = s->last_token = (++p->seq << TOKEN_SLOT_BITS) | h->slot;
    s->reader = 1;
    s->transfer = 1;
    s->deadline = deadline;
    slot_set_state(p, s, STAGING_STAGED);
    h->token = s->token;
    return 0;
}

int staging_abort(staging_pool_t *p, uint32_t slot)
{
    if (slot >= p->n || p->s[slot].state != STAGING_FILLING)
        return kvm_errf(KVMESH_EINVAL, "staging: slot %u is not being filled", slot);
    slot_set_state(p, &p->s[slot], STAGING_FREE);
    return 0;
}

static void maybe_recycle(staging_pool_t *p, struct slot *s)
{
    if (s->reader == 0 && s->transfer == 0 && s->promotion == 0 &&
        (s->state == STAGING_STAGED || s->state == STAGING_FENCED))
        slot_set_state(p, s, STAGING_FREE);
}

/* The slot a live token names, or NULL (then *known says whether the token was ever issued). */
static struct slot *by_token(staging_pool_t *p, uint64_t token, bool *known)
{
    uint64_t idx = token & TOKEN_SLOT_MASK;
    *known = token != 0 && idx < p->n && (token >> TOKEN_SLOT_BITS) <= p->seq &&
             (token >> TOKEN_SLOT_BITS) > 0;
    if (!*known)
        return NULL;
    struct slot *s = &p->s[idx];
    return s->token == token && s->state == STAGING_STAGED ? s : NULL;
}

static int release_pin(staging_pool_t *p, uint64_t token, bool reader, bool *applied)
{
    bool known;
    struct slot *s = by_token(p, token, &known);
    *applied = false;
    if (!known)
        return kvm_errf(KVMESH_EINVAL, "staging: token %llx was never issued by this pool",
                        (unsigned long long)token);
    uint32_t *pin = s ? (reader ? &s->reader : &s->transfer) : NULL;
    if (!pin || *pin == 0) { /* fenced, recycled, or a repeat: ignored */
        if (reader)
            p->st.late_acks++;
        else
            p->st.late_completions++;
        return 0;
    }
    *pin = 0;
    *applied = true;
    maybe_recycle(p, s);
    return 0;
}

int staging_transfer_done(staging_pool_t *p, uint64_t token, bool *applied)
{
    return release_pin(p, token, false, applied);
}

int staging_ack(staging_pool_t *p, uint64_t token, bool *applied)
{
    return release_pin(p, token, true, applied);
}

int staging_promote_pin(staging_pool_t *p, uint64_t token)
{
    bool known;
    struct slot *s = by_token(p, token, &known);
    if (!s)
        return kvm_errf(KVMESH_ECANCELED,
                        "staging: the slot of token %llx expired or was "
                        "recycled; promote from another copy",
                        (unsigned long long)token);
    s->promotion++;
    return 0;
}

int staging_promote_unpin(staging_pool_t *p, uint32_t slot)
{
    KVM_ASSERT(slot < p->n);
    struct slot *s = &p->s[slot];
    KVM_ASSERT(s->promotion > 0);
    s->promotion--;
    maybe_recycle(p, s);
    return 0;
}

uint32_t staging_expire(staging_pool_t *p, uint64_t now, uint32_t max)
{
    uint32_t k = 0;
    for (uint32_t i = 0; i < p->n && k < max; i++) {
        struct slot *s = &p->s[i];
        if (s->state != STAGING_STAGED || s->deadline > now)
            continue;
        s->token = 0;  /* fenced: the old token applies nothing any more */
        s->reader = 0; /* the abandoned reader lease */
        slot_set_state(p, s, STAGING_FENCED);
        p->st.expiries++;
        k++;
        maybe_recycle(p, s);
    }
    return k;
}

int staging_transfer_terminal(staging_pool_t *p, uint32_t slot)
{
    if (slot >= p->n)
        return kvm_errf(KVMESH_EINVAL, "staging: no slot %u", slot);
    struct slot *s = &p->s[slot];
    if (s->state != STAGING_FENCED)
        return 0; /* already recycled (or the transfer completed on its own): idempotent */
    s->transfer = 0;
    maybe_recycle(p, s);
    return 0;
}

uint32_t staging_fenced_pending(staging_pool_t *p, uint32_t *slots, uint32_t max)
{
    uint32_t k = 0;
    for (uint32_t i = 0; i < p->n && k < max; i++)
        if (p->s[i].state == STAGING_FENCED && p->s[i].transfer)
            slots[k++] = i;
    return k;
}

enum staging_state staging_state_of(const staging_pool_t *p, uint32_t slot)
{
    return slot < p->n ? p->s[slot].state : STAGING_FREE;
}

void staging_pins(const staging_pool_t *p, uint32_t slot, uint32_t *reader, uint32_t *transfer,
                  uint32_t *promotion)
{
    KVM_ASSERT(slot < p->n);
    *reader = p->s[slot].reader;
    *transfer = p->s[slot].transfer;
    *promotion = p->s[slot].promotion;
}

void staging_get_stats(const staging_pool_t *p, staging_stats_t *out)
{
    *out = p->st;
}

int staging_check(const staging_pool_t *p)
{
    uint32_t used = 0;
    uint64_t bytes = 0;
    for (uint32_t i = 0; i < p->n; i++) {
        const struct slot *s = &p->s[i];
        if (s->state == STAGING_FREE) {
            if (s->reader || s->transfer || s->promotion)
                return kvm_errf(KVMESH_EINTERNAL, "staging: free slot %u holds pins", i);
            continue;
        }
        used++;
        bytes += s->len;
        if (s->off + s->len > p->bytes)
            return kvm_errf(KVMESH_EINTERNAL, "staging: slot %u outside the region", i);
        if (s->state == STAGING_FENCED && (s->token || s->reader))
            return kvm_errf(KVMESH_EINTERNAL, "staging: fenced slot %u has a live token", i);
        for (uint32_t j = i + 1; j < p->n; j++) {
            const struct slot *t = &p->s[j];
            if (t->state != STAGING_FREE && s->off < t->off + t->len && t->off < s->off + s->len)
                return kvm_errf(KVMESH_EINTERNAL, "staging: slots %u and %u overlap", i, j);
        }
    }
    if (used != p->st.slots_used || bytes != p->st.bytes_used)
        return kvm_errf(KVMESH_EINTERNAL, "staging: occupancy counters disagree with the table");
    return 0;
}

// SPDX-License-Identifier: Apache-2.0
/*
 * cold_serve.c — the owner side of remote restores (docs/cold.md "Remote restore", "Staging
 * pool", "Batch restore"): the staging pool in its registered segment with the per-slot read
 * grants, the handlers of STORE_RPC_COLD_READ (struct srv_read), STORE_RPC_COLD_READ_BATCH
 * (struct srv_batch) and STORE_RPC_COLD_ACK, and the best-effort re-promotion after a restore
 * (struct promo: the core's promote(), which copies from the slot just staged when there is one).
 * Every request this owner serves is listed in g->serving / g->bserving until it is answered;
 * at close they are dropped (their callers time out).
 */
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "core/bytes.h"
#include "core/wire.h"
#include "env/clock.h"
#include "net/seg.h"
#include "store/cold_int.h"
#include "store/proto.h"

/* ---- the staging pool ------------------------------------------------------------------------ */

/* The staging pool (src/cold/staging.h) lives in one segment of this runtime's registry, so the
 * transports serve reads of it under a per-slot grant; g->stg_grant[slot] is the grant of the
 * slot's current use (0 = none), revoked when the slot is recycled or fenced. */

enum srv_stage { SRV_LOOKUP, SRV_RESTORE };

struct srv_read {
    struct kvm_cold *g;
    rpc_reply *reply;
    kvm_ident_t ident;
    staging_expect_t want;
    staging_handle_t h;
    enum srv_stage stage;
    bool orphan;                  /* dropped at close while its lookup was in flight */
    struct srv_read *next, *prev; /* g->serving */
};

static void srv_free(struct srv_read *s)
{
    if (!s->orphan)
        KVM_COLD_LIST_UNLINK(s->g->serving, s, next, prev);
    kvm_ident_free(&s->ident);
    free(s);
}

static void srv_reply(rpc_reply *reply, int rc, const char *err, const uint8_t *body, size_t blen)
{
    struct rpc_msg m = {.type = STORE_RPC_COLD_READ, .body = body, .body_len = blen};
    if (rpc_reply_send(reply, rc, err, &m, NULL, NULL) == KVMESH_EAGAIN)
        rpc_reply_drop(reply); /* the caller times out and reports it */
}

/* [loop] A slot whose pins all went: its grant goes with it. */
static void stg_reap(struct kvm_cold *g, uint32_t slot)
{
    if (slot < g->stg_slots && g->stg_grant[slot] &&
        staging_state_of(g->stg, slot) == STAGING_FREE) {
        seg_revoke(g->rt->reg, g->stg_grant[slot]);
        g->stg_grant[slot] = 0;
    }
}

/* [loop] Both pins of a staged token go (its reader never learns it, or can never read it). */
static void stg_release(struct kvm_cold *g, uint64_t token, uint32_t slot)
{
    bool a;
    staging_transfer_done(g->stg, token, &a);
    staging_ack(g->stg, token, &a);
    stg_reap(g, slot);
}

/* [loop] Slot h holds its len bytes: stages it (their checksum, the TTL) and issues its read
 * grant into *gr. 0, or the error (a grant refused: the pins went already). */
static int stg_publish(struct kvm_cold *g, staging_handle_t *h, uint64_t len, struct seg_grant *gr)
{
    uint64_t off = 0;
    uint8_t *b = staging_buf(g->stg, h->slot, &off, NULL);
    uint64_t ttl = g->rt->cfg.cold_staging_ttl_ms;
    int rc = staging_ready(g->stg, h, kvm_checksum(b, len), env_clock_mono_ms() + ttl);
    if (rc)
        return rc;
    rc = seg_grant(g->rt->reg, g->stg_seg->id, off, len ? len : 1, SEG_READ, ttl * 1000000ull, gr);
    if (rc) /* no grant: nobody can read it; the pins go now */
        stg_release(g, h->token, h->slot);
    else
        g->stg_grant[h->slot] = gr->token;
    return rc;
}

/* [loop] What a lookup found, as the staging validation compares it with the reader's request;
 * 0 when the route has a materialized cold copy on this runtime's device, else the refusal. */
static int srv_found(struct kvm_cold *g, int rc, const cold_route_obs_t *obs, const kvm_ident_t *id,
                     staging_expect_t *have)
{
    if (!rc && g->closed)
        rc = KVMESH_ECANCELED;
    if (!rc && (!obs->found || obs->tombstone || obs->cold.kind != KVM_COLD_MATERIALIZED))
        rc = kvm_errf(KVMESH_ECONFLICT, "cold read: the route has no materialized cold copy "
                                        "now; look it up again");
    if (!rc && !kvm_id128_equal(&obs->cold.owner, &g->rt->self.id))
        rc = kvm_errf(KVMESH_ECONFLICT, "cold read: this runtime does not own the object's cold "
                                        "device");
    if (!rc)
        *have = (staging_expect_t){.namespace_hash = kvm_cold_namespace_u64(id),
                                   .owner = obs->cold.owner,
                                   .route_version = kvm_cold_version_u64(&obs->version),
                                   .locator_fp = kvm_cold_backing_fingerprint(&obs->cold),
                                   .length = obs->cold.u.mat.length,
                                   .checksum = obs->cold.u.mat.checksum};
    return rc;
}

/* Whether this owner serves remote restores now (its cold tier open). */
static bool serving(const struct kvm_cold *g)
{
    return g && g->c && g->stg && !g->open_cb && !g->closed;
}

/* Expiry: fence the tokens past their deadline, revoke their grants (no new transfer
 * starts), then the transport is terminal for the pool. A read already started by a tcp I/O
 * thread may still copy from the slot after it is recycled; the reader's checksum check then
 * refuses the bytes (they are never handed out). */

void kvm_cold_stg_expire(struct kvm_cold *g)
{
    if (!g->stg)
        return;
    staging_expire(g->stg, env_clock_mono_ms(), g->stg_slots);
    uint32_t pend[64];
    uint32_t k;
    while ((k = staging_fenced_pending(g->stg, pend, 64)) > 0)
        for (uint32_t i = 0; i < k; i++) {
            if (g->stg_grant[pend[i]])
                seg_revoke(g->rt->reg, g->stg_grant[pend[i]]);
            g->stg_grant[pend[i]] = 0;
            staging_transfer_terminal(g->stg, pend[i]);
        }
    kvm_cold_stg_export(g);
}

static void srv_restored(void *arg, int rc, const void *buf, uint64_t len)
{
    struct srv_read *s = arg; /* (kvmesh_cold_restores_total is counted by the reader) */
    struct kvm_cold *g = s->g;
    if (rc == 0 && len != s->want.length)
        rc = KVMESH_ECHECKSUM;
    if (rc) {
        staging_abort(g->stg, s->h.slot);
        srv_reply(s->reply, rc, kvmesh_strerror(rc), NULL, 0);
        srv_free(s);
        return;
    }
    memcpy(staging_buf(g->stg, s->h.slot, NULL, NULL), buf, len);
    struct seg_grant gr = {0};
    rc = stg_publish(g, &s->h, len, &gr);
    if (rc) {
        srv_reply(s->reply, rc, kvmesh_last_error(), NULL, 0);
        srv_free(s);
        return;
    }
    uint8_t body[48];
    kvm_wr_t w;
    kvm_wr_fixed(&w, body, sizeof(body));
    kvm_wr_u8(&w, STORE_COLD_READ_VERSION);
    kvm_wr_u64le(&w, gr.seg_id);
    kvm_wr_u64le(&w, gr.offset);
    kvm_wr_u64le(&w, len);
    kvm_wr_u64le(&w, gr.token);
    kvm_wr_u64le(&w, s->h.token);
    struct rpc_msg m = {.type = STORE_RPC_COLD_READ, .body = body, .body_len = w.len};
    int src = rpc_reply_send(s->reply, 0, "", &m, NULL, NULL);
    if (src) { /* the reader never learns the token: release its pins now */
        if (src == KVMESH_EAGAIN)
            rpc_reply_drop(s->reply);
        stg_release(g, s->h.token, s->h.slot);
    } else {
        g->stg_last.set = true;
        g->stg_last.ident_hash = s->ident.hash;
        g->stg_last.token = s->h.token;
        g->stg_last.len = len;
        g->stg_last.slot = s->h.slot;
    }
    srv_free(s);
}

static void srv_looked_up(void *arg, int rc, const cold_route_obs_t *obs)
{
    struct srv_read *s = arg;
    if (s->orphan) { /* the runtime closed meanwhile (g may be gone) */
        srv_free(s);
        return;
    }
    struct kvm_cold *g = s->g;
    staging_expect_t have = {0};
    rc = srv_found(g, rc, obs, &s->ident, &have);
    if (!rc)
        rc = staging_acquire(g->stg, &s->want, &have, &s->h);
    if (!rc) {
        s->stage = SRV_RESTORE;
        rc = cold_restore(g->c, &s->ident, srv_restored, s);
        if (rc)
            staging_abort(g->stg, s->h.slot);
    }
    if (rc) {
        srv_reply(s->reply, rc, kvmesh_last_error(), NULL, 0);
        srv_free(s);
    }
}

/* Request body: ver u8 | route version hash u64 | locator fingerprint u64 | length u64 |
 * checksum u64 | namespace hash u64 | cold owner (16) | ident (wire). */
static void on_cold_read(rpc_reply *reply, struct rpc_request *req, void *arg)
{
    kvm_rt_t *rt = arg;
    struct kvm_cold *g = kvm_cold_dev(rt);
    if (!serving(g)) {
        srv_reply(reply, KVMESH_EUNAVAILABLE, "the cold tier of this runtime is not open", NULL, 0);
        return;
    }
    struct srv_read *s = calloc(1, sizeof(*s));
    if (!s) {
        srv_reply(reply, KVMESH_ENOMEM, "out of memory", NULL, 0);
        return;
    }
    kvm_rd_t r;
    kvm_rd_init(&r, req->body, req->body_len);
    uint8_t ver = kvm_rd_u8(&r);
    if (kvm_rd_ok(&r) && ver != STORE_COLD_READ_VERSION) { /* a v1 reader sends the ident only */
        free(s);
        char msg[256];
        snprintf(msg, sizeof(msg),
                 "cold read: the reader's request is not cold read version %u (it starts with "
                 "%u; version 1 readers send the identity only): the reader runs an older "
                 "release than this owner; upgrade it to read this owner's cold-only objects",
                 (unsigned)STORE_COLD_READ_VERSION, (unsigned)ver);
        srv_reply(reply, KVMESH_EPROTO, msg, NULL, 0);
        return;
    }
    int rc = 0;
    s->want.route_version = kvm_rd_u64le(&r);
    s->want.locator_fp = kvm_rd_u64le(&r);
    s->want.length = kvm_rd_u64le(&r);
    s->want.checksum = kvm_rd_u64le(&r);
    s->want.namespace_hash = kvm_rd_u64le(&r);
    kvm_rd_copy(&r, s->want.owner.b, sizeof(s->want.owner.b));
    size_t left = kvm_rd_remaining(&r);
    const uint8_t *ib = kvm_rd_bytes(&r, left);
    if (rc || !kvm_rd_ok(&r) || !ib || wire_ident_decode(ib, left, &s->ident) != 0) {
        free(s);
        srv_reply(reply, KVMESH_EPROTO, "cold read: malformed request", NULL, 0);
        return;
    }
    s->g = g;
    s->reply = reply;
    KVM_COLD_LIST_PUSH(g->serving, s, next, prev);
    kvm_cold_route_lookup(g, &s->ident, srv_looked_up, s);
}

/* Notification body: ver u8 | transfer token u64. The reader's transfer reached a terminal
 * state and it is done with the slot: both pins go (late or repeated: ignored, counted). */
static void on_cold_ack(rpc_reply *reply, struct rpc_request *req, void *arg)
{
    (void)reply;
    kvm_rt_t *rt = arg;
    struct kvm_cold *g = kvm_cold_dev(rt);
    kvm_rd_t r;
    kvm_rd_init(&r, req->body, req->body_len);
    uint8_t ver = kvm_rd_u8(&r);
    uint64_t token = kvm_rd_u64le(&r);
    if (!g || !g->stg || g->closed || ver != STORE_COLD_READ_VERSION || !kvm_rd_ok(&r))
        return;
    bool a;
    if (staging_transfer_done(g->stg, token, &a) == 0 && staging_ack(g->stg, token, &a) == 0)
        stg_reap(g, (uint32_t)(token & 0xffffu));
}

int kvm_cold_stg_open(struct kvm_cold *g)
{
    const struct kvm_store_config *cfg = &g->rt->cfg;
    g->stg_slots = cfg->cold_staging_slots;
    int rc = seg_create(g->rt->reg, cfg->cold_staging_bytes, 0, &g->stg_seg);
    if (rc)
        return kvm_errf(rc,
                        "cannot create the %" PRIu64 "-byte staging segment (%s); lower "
                        "cold_staging_bytes",
                        cfg->cold_staging_bytes, kvmesh_strerror(rc));
    g->stg_grant = calloc(g->stg_slots, sizeof(*g->stg_grant));
    if (!g->stg_grant)
        return KVMESH_ENOMEM;
    rc = staging_new(&g->stg, g->stg_seg->base, g->stg_seg->size, g->stg_slots);
    if (!rc)
        kvm_cold_stg_export(g);
    return rc;
}

void kvm_cold_stg_close(struct kvm_cold *g)
{
    for (uint32_t i = 0; g->stg_grant && i < g->stg_slots; i++)
        if (g->stg_grant[i])
            seg_revoke(g->rt->reg, g->stg_grant[i]);
    free(g->stg_grant);
    g->stg_grant = NULL;
    staging_free(g->stg, false); /* slots still staged: their readers' ACKs find nothing */
    g->stg = NULL;
    if (g->stg_seg)
        seg_destroy(g->rt->reg, g->stg_seg->id);
    g->stg_seg = NULL;
}

/* ---- batch restore: the owner side (STORE_RPC_COLD_READ_BATCH) ----------------------------- */

/* One request of a reader's (owner, device) group: every item is looked up exactly and validated
 * like a single COLD_READ; the items that get a staging slot are read from the device in one
 * cold_restore_batch, straight into their slots; then one reply answers every item (staged, or
 * its own error; KVMESH_EAGAIN for the items the pool had no room for: the reader asks again
 * for those once it released the others). No promotion on this path. */
struct srv_batch;
struct sb_look {
    struct srv_batch *sb;
    uint16_t i;
};

struct srv_batch {
    struct kvm_cold *g;
    rpc_reply *reply;
    store_cold_batch_req_t req;
    store_cold_batch_resp_t resp;
    struct sb_look look[STORE_COLD_BATCH_MAX];
    kvm_cold_backing_t cold[STORE_COLD_BATCH_MAX]; /* what each item's lookup found */
    staging_handle_t h[STORE_COLD_BATCH_MAX];
    bool held[STORE_COLD_BATCH_MAX]; /* a slot acquired (FILLING) */
    cold_batch_item_t items[STORE_COLD_BATCH_MAX];
    uint16_t map[STORE_COLD_BATCH_MAX]; /* items[j] is request item map[j] */
    uint32_t lookups;                   /* lookups not answered + 1 while they are issued */
    bool orphan, reading;
    struct srv_batch *next, *prev; /* g->bserving */
};

static void sb_free(struct srv_batch *sb)
{
    if (!sb->orphan)
        KVM_COLD_LIST_UNLINK(sb->g->bserving, sb, next, prev);
    store_cold_batch_req_free(&sb->req);
    free(sb);
}

/* The slot of item i is staged and its grant issued: resp.r[i] says where. Otherwise the slot
 * is freed and r[i].status says why. */
static void sb_stage(struct srv_batch *sb, uint16_t i, int rc)
{
    struct kvm_cold *g = sb->g;
    uint64_t len = sb->req.it[i].length;
    struct seg_grant gr = {0};
    if (!rc)
        rc = stg_publish(g, &sb->h[i], len, &gr);
    else
        staging_abort(g->stg, sb->h[i].slot);
    sb->held[i] = false;
    sb->resp.r[i].status = rc;
    if (!rc) {
        sb->resp.r[i].seg = gr.seg_id;
        sb->resp.r[i].offset = gr.offset;
        sb->resp.r[i].length = len;
        sb->resp.r[i].grant = gr.token;
        sb->resp.r[i].token = sb->h[i].token;
    }
}

static void sb_reply(struct srv_batch *sb)
{
    struct kvm_cold *g = sb->g;
    sb->resp.n = sb->req.n;
    uint8_t body[STORE_COLD_BATCH_RESP_MAX];
    size_t blen = 0;
    int rc = store_cold_batch_resp_encode(&sb->resp, body, sizeof(body), &blen);
    KVM_ASSERT(rc == 0); /* n <= STORE_COLD_BATCH_MAX and the buffer holds the most */
    struct rpc_msg m = {.type = STORE_RPC_COLD_READ_BATCH, .body = body, .body_len = blen};
    int src = rpc_reply_send(sb->reply, 0, "", &m, NULL, NULL);
    if (src) { /* the reader never learns the tokens: release their pins now */
        if (src == KVMESH_EAGAIN)
            rpc_reply_drop(sb->reply);
        for (uint16_t i = 0; i < sb->req.n; i++) {
            if (sb->resp.r[i].status == 0)
                stg_release(g, sb->resp.r[i].token, (uint32_t)(sb->resp.r[i].token & 0xffffu));
        }
    }
    sb_free(sb);
}

static void sb_restored(void *arg, cold_batch_item_t *items, size_t n)
{
    struct srv_batch *sb = arg;
    for (size_t j = 0; j < n; j++)
        sb_stage(sb, sb->map[j], items[j].rc);
    sb_reply(sb);
}

/* Every lookup answered: one device read for the items that hold a slot. */
static void sb_read(struct srv_batch *sb)
{
    struct kvm_cold *g = sb->g;
    size_t k = 0;
    for (uint16_t i = 0; i < sb->req.n; i++) {
        if (!sb->held[i])
            continue;
        const kvm_cold_backing_t *cb = &sb->cold[i];
        if (cb->u.mat.locator_len == 0 || cb->u.mat.locator_len > COLD_LOCATOR_MAX) {
            sb_stage(sb, i, KVMESH_ECORRUPT);
            continue;
        }
        cold_batch_item_t *it = &sb->items[k];
        *it = (cold_batch_item_t){.device = cb->tier,
                                  .len = cb->u.mat.length,
                                  .checksum = cb->u.mat.checksum,
                                  .buf = staging_buf(g->stg, sb->h[i].slot, NULL, NULL)};
        it->loc.len = (uint16_t)cb->u.mat.locator_len;
        memcpy(it->loc.b, cb->u.mat.locator, it->loc.len);
        sb->map[k++] = i;
    }
    if (k == 0) {
        sb_reply(sb);
        return;
    }
    sb->reading = true;
    int rc = cold_restore_batch(g->c, sb->items, k, sb_restored, sb, NULL);
    if (rc) {
        for (size_t j = 0; j < k; j++)
            sb_stage(sb, sb->map[j], rc);
        sb_reply(sb);
    }
}

static void sb_lookup_end(struct srv_batch *sb)
{
    KVM_ASSERT(sb->lookups > 0);
    if (--sb->lookups)
        return;
    if (sb->orphan) /* the runtime closed meanwhile (g may be gone) */
        sb_free(sb);
    else
        sb_read(sb);
}

static void sb_looked_up(void *arg, int rc, const cold_route_obs_t *obs)
{
    struct sb_look *l = arg;
    struct srv_batch *sb = l->sb;
    uint16_t i = l->i;
    if (sb->orphan) {
        sb_lookup_end(sb);
        return;
    }
    struct kvm_cold *g = sb->g;
    const typeof(sb->req.it[0]) *w = &sb->req.it[i];
    staging_expect_t have = {0}; /* (no materialized cold copy now: the reader looks again) */
    rc = srv_found(g, rc, obs, &w->ident, &have);
    if (!rc) {
        staging_expect_t want = {.namespace_hash = w->namespace_h,
                                 .owner = sb->req.owner,
                                 .route_version = w->version_h,
                                 .locator_fp = w->locator_fp,
                                 .length = w->length,
                                 .checksum = w->checksum};
        rc = staging_acquire(g->stg, &want, &have, &sb->h[i]);
    }
    if (!rc) {
        sb->held[i] = true;
        sb->cold[i] = obs->cold;
    }
    sb->resp.r[i].status = rc;
    sb_lookup_end(sb);
}

/* Tests only (kvm_cold_test_refuse_batch): every owner of this process answers batched cold
 * reads as an older release does (no handler: KVMESH_ENOTSUP), so its readers fall back to one
 * object at a time. */
static atomic_bool refuse_batch;

void kvm_cold_test_refuse_batch(bool on)
{
    atomic_store(&refuse_batch, on);
}

static void on_cold_read_batch(rpc_reply *reply, struct rpc_request *req, void *arg)
{
    kvm_rt_t *rt = arg;
    struct kvm_cold *g = kvm_cold_dev(rt);
    if (atomic_load(&refuse_batch)) {
        srv_reply(reply, KVMESH_ENOTSUP, "no handler for message type 520", NULL, 0);
        return;
    }
    if (!serving(g)) {
        srv_reply(reply, KVMESH_EUNAVAILABLE, "the cold tier of this runtime is not open", NULL, 0);
        return;
    }
    struct srv_batch *sb = calloc(1, sizeof(*sb));
    if (!sb) {
        srv_reply(reply, KVMESH_ENOMEM, "out of memory", NULL, 0);
        return;
    }
    if (store_cold_batch_req_decode(req->body, req->body_len, &sb->req) != 0) {
        char msg[300];
        snprintf(msg, sizeof(msg), "batched cold read: %s", kvmesh_last_error());
        free(sb);
        srv_reply(reply, KVMESH_EPROTO, msg, NULL, 0);
        return;
    }
    sb->g = g;
    sb->reply = reply;
    KVM_COLD_LIST_PUSH(g->bserving, sb, next, prev);
    uint16_t n = sb->req.n;
    sb->lookups = (uint32_t)n + 1; /* + this frame: a lookup may answer before the loop ends */
    for (uint16_t i = 0; i < n; i++) {
        sb->look[i] = (struct sb_look){.sb = sb, .i = i};
        kvm_cold_route_lookup(g, &sb->req.it[i].ident, sb_looked_up, &sb->look[i]);
    }
    sb_lookup_end(sb);
}

/* ---- re-promotion after a restore (best effort) --------------------------------------------- */

/* promote(): a verified restore of a cold-only route gets a normal hot replica here again when
 * DRAM has room below evict_low_watermark (never evicting others for it): reserve a slot, copy
 * the verified bytes (the core keeps buf until cb), look the route up, CAS the replica in at the
 * restored version while the route is still cold-only with the same content, then commit the
 * slot; any refusal releases the slot. cb always runs (the core holds its memory until then). */
struct promo {
    struct kvm_cold *g;
    kvm_ident_t ident; /* owned */
    kvm_route_version_t expected;
    const uint8_t *buf; /* the core's restore buffer, or the staging slot's bytes (pinned) */
    uint64_t len, seg, off;
    bool reserved;
    bool stg_pinned; /* buf is staging slot stg_slot, held by a promotion pin until promo_end */
    uint32_t stg_slot;
    cold_rc_cb cb;
    void *arg;
};

static void promo_end(struct promo *p, int rc)
{
    struct kvm_cold *g = p->g;
    if (p->reserved)
        g->owner.release(g->rt, p->seg, p->off);
    if (p->stg_pinned && g->stg) { /* the slot may now recycle (its reader ACKed or expired) */
        if (rc == 0)
            g->stg_promotions++;
        staging_promote_unpin(g->stg, p->stg_slot);
        stg_reap(g, p->stg_slot);
    }
    cold_rc_cb cb = p->cb;
    void *arg = p->arg;
    kvm_ident_free(&p->ident);
    free(p);
    cb(arg, rc);
    kvm_cold_unref(g);
}

static void promo_cased(void *arg, int rc, const kvm_route_t *now)
{
    (void)now;
    struct promo *p = arg;
    if (rc == 0) {
        p->g->owner.commit(p->g->rt, p->seg, p->off);
        p->reserved = false;
    }
    promo_end(p, rc);
}

static void promo_looked_up(void *arg, int rc, const kvm_route_t *r)
{
    struct promo *p = arg;
    kvm_rt_t *rt = p->g->rt;
    if (rc == 0 &&
        (!r || kvm_route_is_tombstone(r) || !kvm_route_version_equal(&r->version, &p->expected) ||
         r->cold.kind != KVM_COLD_MATERIALIZED || r->n_replicas != 0 || r->length != p->len ||
         r->n_replicas >= KVM_MAX_REPLICAS))
        rc = KVMESH_ECONFLICT; /* the route moved on: the promotion is dropped */
    if (rc) {
        promo_end(p, rc);
        return;
    }
    kvm_route_t next;
    kvm_route_init(&next);
    rc = kvm_route_copy(&next, r);
    if (rc == 0) {
        next.replicas[next.n_replicas++] = (kvm_hot_replica_t){.owner = rt->self.id,
                                                               .segment = p->seg,
                                                               .offset = p->off,
                                                               .length = p->len,
                                                               .checksum = r->checksum};
        rc = route_cas(rt->route, &r->version, &next, promo_cased, p);
    }
    kvm_route_free(&next);
    if (rc)
        promo_end(p, rc);
}

static void promo_reserved(void *arg, int rc, const char *err, uint64_t seg, uint64_t off,
                           uint64_t token)
{
    (void)err;
    struct promo *p = arg;
    kvm_rt_t *rt = p->g->rt;
    if (rc) {
        promo_end(p, rc);
        return;
    }
    p->seg = seg;
    p->off = off;
    p->reserved = true;
    if (p->stg_pinned && (p->g->closed || !p->g->stg)) { /* the staging segment is gone */
        promo_end(p, KVMESH_ECANCELED);
        return;
    }
    uint8_t *dst;
    struct seg *pin;
    enum seg_reason why;
    rc = seg_check(rt->reg, seg, off, p->len, SEG_WRITE, token, &dst, &pin, &why);
    if (rc == 0) {
        memcpy(dst, p->buf, p->len);
        seg_unpin(rt->reg, pin);
        rc = rt->route ? route_lookup(rt->route, &p->ident, promo_looked_up, p) : KVMESH_ECLOSED;
    }
    if (rc)
        promo_end(p, rc);
}

void kvm_cold_promote(void *ctx, const kvm_ident_t *id, const kvm_route_version_t *expected,
                      const void *buf, uint64_t length, cold_rc_cb cb, void *arg)
{
    struct kvm_cold *g = ctx;
    kvm_rt_t *rt = g->rt;
    uint64_t room = (uint64_t)((double)rt->capacity * rt->cfg.evict_low_watermark);
    if (g->closed || !rt->route || rt->capacity == 0 || rt->state != KVM_MS_ACTIVE ||
        rt->used + length > room) { /* (used counts open reservations too) */
        cb(arg, KVMESH_EAGAIN);     /* no room without evicting: stays cold-only */
        return;
    }
    struct promo *p = calloc(1, sizeof(*p));
    if (!p || kvm_ident_copy(&p->ident, id) != 0) {
        free(p);
        cb(arg, KVMESH_ENOMEM);
        return;
    }
    p->g = g;
    p->expected = *expected;
    p->buf = buf;
    p->len = length;
    p->cb = cb;
    p->arg = arg;
    /* a restore this owner just staged for a remote reader: promote from the slot, holding a
     * promotion pin, so the slot's expiry or the reader's ACK waits for the copy */
    if (g->stg && g->stg_last.set && g->stg_last.ident_hash == id->hash &&
        g->stg_last.len == length && staging_promote_pin(g->stg, g->stg_last.token) == 0) {
        p->stg_pinned = true;
        p->stg_slot = g->stg_last.slot;
        p->buf = staging_buf(g->stg, p->stg_slot, NULL, NULL);
    }
    g->stg_last.set = false;
    g->refs++;
    g->owner.reserve(rt, id, length, rt->cfg.request_timeout_ms, promo_reserved, p);
}

/* ---- wiring -------------------------------------------------------------------------------- */

void kvm_cold_serve_register(kvm_rt_t *rt)
{
    if (!rt->ep)
        return;
    rpc_register_handler(rt->ep, STORE_RPC_COLD_READ, on_cold_read, rt);
    rpc_register_notify_handler(rt->ep, STORE_RPC_COLD_ACK, on_cold_ack, rt);
    rpc_register_handler(rt->ep, STORE_RPC_COLD_READ_BATCH, on_cold_read_batch, rt);
}

void kvm_cold_serve_close(struct kvm_cold *g)
{
    while (g->serving) { /* their callbacks no longer run: the callers time out */
        struct srv_read *sv = g->serving;
        rpc_reply_drop(sv->reply);
        if (sv->stage == SRV_LOOKUP) { /* its lookup still answers: freed then */
            KVM_COLD_LIST_UNLINK(g->serving, sv, next, prev);
            sv->orphan = true;
        } else {
            srv_free(sv);
        }
    }
    while (g->bserving) { /* their callbacks no longer run: the callers time out */
        struct srv_batch *sb = g->bserving;
        rpc_reply_drop(sb->reply);
        if (sb->lookups > 0) { /* its lookups still answer: freed by the last */
            KVM_COLD_LIST_UNLINK(g->bserving, sb, next, prev);
            sb->orphan = true;
        } else {
            sb_free(sb);
        }
    }
}

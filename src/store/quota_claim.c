// SPDX-License-Identifier: Apache-2.0
/*
 * quota_claim.c — the quota claim carried by a route CAS (EmbeddedWrh; quota.h, docs/tenancy.md
 * "How the store calls it"): the writer's claim blob and its answer, the primary's claim hook,
 * the claim's put payload, the accessors quota_tomb.c uses and the test-only faults. Loop thread
 * only, except the test-only atomics.
 */
#include <signal.h>
#include <stdio.h>

#include "store/quota_int.h"

/* The claim's payload of a put (put_payload.h, version 2: length, checksum, the writer and the
 * replicas' locators, exactly as publish_cas_now builds the route); a delete's is empty. */
size_t kvm_quota_put_payload(const struct kvm_item *it, uint8_t buf[KVM_PUT_PAYLOAD_MAX])
{
    const struct kvm_qitem *qi = it->q;
    if (qi->is_delete)
        return 0;
    kvm_put_payload_t p = {.length = it->len,
                           .checksum = it->checksum,
                           .has_locators = it->n_res > 0,
                           .writer = qi->content_op.writer,
                           .n = it->n_res};
    for (uint32_t i = 0; i < it->n_res && i < KVM_MAX_REPLICAS; i++)
        p.rep[i] = (kvm_hot_replica_t){.owner = it->res[i].owner.id,
                                       .segment = it->res[i].seg,
                                       .offset = it->res[i].offset,
                                       .length = it->len,
                                       .checksum = it->checksum};
    size_t n = 0;
    int rc = kvm_put_payload_encode(&p, buf, KVM_PUT_PAYLOAD_MAX, &n);
    KVM_ASSERT(rc == 0); /* n_res <= KVM_MAX_REPLICAS and the buffer is the largest payload */
    return n;
}

/* ---- the claim carried by the route CAS (EmbeddedWrh) ----------------------------------------
 * The claim blob: u8 version (1) | lp16 tenant | lp16 domain | lp16 key | lp16 op id
 * | u64 publish token | lp16 payload | lp32 hint (tn_hint_export of the writer's records).
 * The reply blob: the primary's hint after its claim (tn_hint_export), or empty. */
#define QCLAIM_VERSION 1

bool kvm_quota_cas_claim_wanted(kvm_op_t *op, struct kvm_item *it)
{
    return it->q && it->q->state == KVM_Q_RESERVED && !it->q->cas_claim_off && op->rt->quota &&
           op->rt->cfg.route_mode == ROUTE_MODE_EMBEDDED_WRH;
}

int kvm_quota_claim_blob_raw(kvm_rt_t *rt, const char *tenant, const char *domain, const char *key,
                             const char *op_id, uint64_t publish_token, const uint8_t *payload,
                             size_t payload_len, uint8_t *buf, size_t cap, size_t *len)
{
    static _Thread_local uint8_t hint[TN_HINT_MAX];
    size_t hl = 0;
    if (!rt->quota || tn_hint_export(rt->quota->tn, tenant, op_id, hint, sizeof(hint), &hl) != 0)
        hl = 0; /* no hint: the primary's claim reads first */
    kvm_wr_t w;
    kvm_wr_fixed(&w, buf, cap);
    kvm_wr_u8(&w, QCLAIM_VERSION);
    kvm_wr_lp16le(&w, tenant, strlen(tenant));
    kvm_wr_lp16le(&w, domain, strlen(domain));
    kvm_wr_lp16le(&w, key, strlen(key));
    kvm_wr_lp16le(&w, op_id, strlen(op_id));
    kvm_wr_u64le(&w, publish_token);
    kvm_wr_lp16le(&w, payload, payload_len);
    kvm_wr_lp32le(&w, hint, hl);
    if (kvm_wr_finish(&w, len) != 0)
        return kvm_errf(KVMESH_ETOOBIG, "quota claim does not fit %zu bytes", cap);
    return 0;
}

void **kvm_quota_tomb_head(kvm_rt_t *rt)
{
    return rt->quota ? &rt->quota->tomb_waiting : NULL;
}

kvm_q_release_fn kvm_quota_release_fn(kvm_rt_t *rt)
{
    KVM_ASSERT(rt->quota);
    return rt->quota->hooks.release_replica;
}

kvm_q_release_fn kvm_quota_commit_fn(kvm_rt_t *rt)
{
    KVM_ASSERT(rt->quota);
    return rt->quota->hooks.commit_replica;
}

tn_t *kvm_quota_tn(kvm_rt_t *rt)
{
    return rt->quota && !rt->quota->closing ? rt->quota->tn : NULL;
}

int kvm_quota_cas_claim_blob(kvm_op_t *op, struct kvm_item *it, uint8_t *buf, size_t cap,
                             size_t *len)
{
    struct kvm_qitem *qi = it->q;
    uint8_t payload[KVM_PUT_PAYLOAD_MAX];
    size_t pl = kvm_quota_put_payload(it, payload);
    qi->cas_claim_sent = true;
    return kvm_quota_claim_blob_raw(op->rt, qi->tenant, qi->domain, qi->key, qi->op_id,
                                    qi->content_op.seq, payload, pl, buf, cap, len);
}

void kvm_quota_cas_claimed(kvm_op_t *op, struct kvm_item *it, int rc, const kvm_route_t *r,
                           const uint8_t *reply, size_t reply_len)
{
    struct kvm_qitem *qi = it->q;
    if (!qi || qi->state != KVM_Q_RESERVED || !qi->cas_claim_sent)
        return;
    if (rc == KVMESH_ENOTSUP) { /* the primary cannot claim: the writer does (4 round trips) */
        qi->cas_claim_off = true;
        return;
    }
    bool ours = r && kvm_op_id_equal(&r->content_op, &qi->content_op);
    if (rc && !ours && op->rt->quota && atomic_load(&op->rt->quota->test_kill))
        raise(SIGKILL);    /* test-only: the primary may have claimed; the writer dies unsettled */
    if (rc == 0 || ours) { /* published with a claim made by its primary */
        qcount(op->rt, OBS_QOP_CLAIM, 0);
        qi->state = KVM_Q_CLAIMED;
        qi->predicted = r ? r->version : qi->predicted;
        if (reply_len && op->rt->quota)
            (void)tn_hint_import(op->rt->quota->tn, reply, reply_len); /* stale: a compare */
    }
}

/* A claim the tenant layer holds (tn_claim in flight): on the quota's list until its callback
 * runs, so that kvm_quota_claims_close can answer and free what tn_close leaves unanswered. */
struct qhook {
    struct qhook *prev, *next;
    kvm_rt_t *rt;
    route_claim_done_fn done;
    void *done_arg;
    char tenant[TN_TENANT_CAP];
    char op_id[TN_OPID_CAP];
};

uint32_t kvm_quota_test_fail_after_claim(kvm_rt_t *rt, uint32_t n, int rc)
{
    if (!rt->quota)
        return 0;
    atomic_store(&rt->quota->test_fail_rc, rc ? rc : KVMESH_EUNAVAILABLE);
    return atomic_exchange(&rt->quota->test_fail_n, n);
}

void kvm_quota_test_kill_after_claim(kvm_rt_t *rt, bool on)
{
    if (rt->quota)
        atomic_store(&rt->quota->test_kill, on);
}

int kvm_quota_test_fault(kvm_rt_t *rt)
{
    struct kvm_quota *q = rt->quota;
    uint32_t n = q ? atomic_load(&q->test_fail_n) : 0;
    while (n && !atomic_compare_exchange_weak(&q->test_fail_n, &n, n - 1))
        ;
    return n ? atomic_load(&q->test_fail_rc) : 0;
}

static void hook_link(struct kvm_quota *q, struct qhook *h)
{
    h->prev = NULL;
    h->next = q->claims;
    if (q->claims)
        q->claims->prev = h;
    q->claims = h;
}

static void hook_unlink(struct kvm_quota *q, struct qhook *h)
{
    if (h->prev)
        h->prev->next = h->next;
    else
        q->claims = h->next;
    if (h->next)
        h->next->prev = h->prev;
    h->prev = h->next = NULL;
}

static void hook_claimed(void *arg, int rc, const tn_op_view_t *v)
{
    (void)v;
    struct qhook *h = arg;
    KVM_ASSERT(h->rt->quota);
    hook_unlink(h->rt->quota, h);
    int fault = rc == 0 ? kvm_quota_test_fault(h->rt) : 0;
    if (fault) { /* test-only: claimed, and the CAS fails outright (nothing applied) */
        h->done(h->done_arg, kvm_errf(fault, "test fault: route CAS failed after the claim"), NULL,
                0);
        free(h);
        return;
    }
    static _Thread_local uint8_t hint[TN_HINT_MAX];
    size_t hl = 0;
    if (rc == 0 && h->rt->quota && !h->rt->quota->closing &&
        tn_hint_export(h->rt->quota->tn, h->tenant, h->op_id, hint, sizeof(hint), &hl) != 0)
        hl = 0;
    if (rc)
        kvm_errf(rc, "quota claim at the route primary refused: %s", kvmesh_last_error());
    h->done(h->done_arg, rc, hint, hl <= ROUTE_CLAIM_MAX ? hl : 0);
    free(h);
}

static int rd_str(kvm_rd_t *r, char *out, size_t cap)
{
    uint16_t n = 0;
    const uint8_t *p = kvm_rd_lp16le(r, &n);
    if (!p || n >= cap)
        return -1;
    memcpy(out, p, n);
    out[n] = 0;
    return 0;
}

/* route_claim_fn: the claim of a CAS this runtime's primary is about to apply. */
static int claim_hook(void *ctx, const uint8_t *claim, size_t claim_len, const route_claim_at_t *at,
                      route_claim_done_fn done, void *done_arg)
{
    kvm_rt_t *rt = ctx;
    struct kvm_quota *q = rt->quota;
    if (!q || q->closing)
        return kvm_errf(KVMESH_ENOTSUP, "no tenant quota handle here");
    struct qhook *h = calloc(1, sizeof(*h));
    if (!h)
        return KVMESH_ENOMEM;
    char domain[TN_DOMAIN_CAP], key[TN_KEY_CAP];
    kvm_rd_t r;
    kvm_rd_init(&r, claim, claim_len);
    uint8_t ver = kvm_rd_u8(&r);
    int bad = ver != QCLAIM_VERSION;
    bad = bad || rd_str(&r, h->tenant, sizeof(h->tenant)) || rd_str(&r, domain, sizeof(domain)) ||
          rd_str(&r, key, sizeof(key)) || rd_str(&r, h->op_id, sizeof(h->op_id));
    uint64_t publish_token = kvm_rd_u64le(&r);
    uint16_t pl = 0;
    const uint8_t *payload = kvm_rd_lp16le(&r, &pl);
    uint32_t hl = 0;
    const uint8_t *hint = kvm_rd_lp32le(&r, &hl);
    if (bad || !payload || !hint || !kvm_rd_end(&r)) {
        free(h);
        return kvm_errf(KVMESH_EPROTO, "malformed quota claim in a route CAS");
    }
    if (!find_policy(q, h->tenant, strlen(h->tenant))) {
        int rc =
            kvm_errf(KVMESH_ENOTSUP, "tenant '%s' has no quota policy at this primary", h->tenant);
        free(h);
        return rc;
    }
    if (hl)
        (void)tn_hint_import(q->tn, hint, hl); /* a stale or bad hint costs a read, no more */
    h->rt = rt;
    h->done = done;
    h->done_arg = done_arg;
    tn_claim_req_t req = {.tenant = h->tenant,
                          .domain = domain,
                          .key = key,
                          .op_id = h->op_id,
                          .generation = at->generation,
                          .fencing_token = at->fencing_token,
                          .publish_token = publish_token,
                          .next_version = at->next_version,
                          .payload = payload,
                          .payload_len = pl,
                          .cas_follows = true}; /* a finalized operation's CAS: a duplicate */
    hook_link(q, h);
    int rc = tn_claim(q->tn, &req, hook_claimed, h);
    if (rc) {
        hook_unlink(q, h);
        free(h);
    }
    return rc; /* counted by the writer (kvm_quota_cas_claimed), as its own claims are */
}

/* After tn_close (no tenant callback runs after it): the claims it left unanswered are answered
 * EUNAVAILABLE, so the route primary replies to their writers now and they retry at the shard's
 * next primary (route_client.c: a fresh view, the same claim; a claim the metadata server applied
 * before the close is the same operation id there) instead of waiting out their request
 * deadline; their records are freed. */
void kvm_quota_claims_close(kvm_rt_t *rt)
{
    struct kvm_quota *q = rt->quota;
    while (q && q->claims) {
        struct qhook *h = q->claims;
        hook_unlink(q, h);
        h->done(h->done_arg,
                kvm_errf(KVMESH_EUNAVAILABLE, "the route primary's runtime is closing"), NULL, 0);
        free(h);
    }
}

void kvm_quota_claim_hook(kvm_rt_t *rt, bool on)
{
    if (rt->route && rt->cfg.route_mode == ROUTE_MODE_EMBEDDED_WRH)
        route_set_claim_hook(rt->route, on && rt->quota ? claim_hook : NULL, rt);
}

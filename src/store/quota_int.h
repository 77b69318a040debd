// SPDX-License-Identifier: Apache-2.0
/*
 * quota_int.h — what the store's quota files share (quota.c: open/close, reconciliation and the
 * admin answers; quota_item.c: one item's reserve, recovery, claim, finalize and abort;
 * quota_claim.c: the claim carried by the route CAS and the primary's claim hook; quota_batch.c:
 * a put batch's all-or-nothing reservation). The public side is quota.h. Loop thread only,
 * except the test-only atomics.
 */
#ifndef KVMESH_STORE_QUOTA_INT_H
#define KVMESH_STORE_QUOTA_INT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/bytes.h"
#include "core/util.h"
#include "store/put_payload.h"
#include "store/quota.h"
#include "store/store.h"

#define QUOTA_FIFO_MAX 1024u /* recently written objects remembered per tenant (recovery) */

/* An object this runtime finalized for a tenant, oldest first (tenant-local recovery). */
struct qfifo_ent {
    char domain[TN_DOMAIN_CAP];
    char *key;
    uint64_t len;
};
struct qfifo {
    struct qfifo_ent e[QUOTA_FIFO_MAX];
    uint32_t head, n;
};

struct kvm_quota {
    tn_t *tn;
    uint32_t n;
    struct kvm_store_tenant_policy pol[KVM_STORE_TENANT_POLICIES_MAX];
    struct qfifo fifo[KVM_STORE_TENANT_POLICIES_MAX]; /* per policy: this runtime's writes */
    uint64_t recovery_evictions;
    /* open */
    uint32_t boot_next;
    kvm_q_open_cb open_cb;
    kvm_quota_hooks_t hooks; /* calls up into ops_item.c and quota_tomb.c (kvm_quota_open) */
    /* reconciliation */
    env_timer_id recon_timer;
    uint32_t recon_next;
    bool recon_running, closing;
    uint32_t degraded_passes;
    uint64_t recon_trips_at_start, recon_round_trips; /* metadata calls made by passes */
    uint64_t round_backlog, round_degraded;           /* sums of the round in progress */
    void *tomb_waiting;   /* quota_tomb.c: its tombstones waiting for a tenant-layer callback */
    struct qhook *claims; /* quota_claim.c: route claims waiting for tn_claim's callback */
    /* test-only (kvm_quota_test_fail_after_claim): claims still to be followed by a failed CAS */
    _Atomic uint32_t test_fail_n;
    _Atomic int test_fail_rc;
    _Atomic bool test_kill; /* kvm_quota_test_kill_after_claim */
};

static inline tn_policy_t to_tn(const struct kvm_store_tenant_policy *p)
{
    return (tn_policy_t){.policy_version = p->policy_version,
                         .max_bytes = p->max_bytes,
                         .max_objects = p->max_objects};
}

static inline const struct kvm_store_tenant_policy *find_policy(struct kvm_quota *q, const char *t,
                                                                size_t len)
{
    for (uint32_t i = 0; q && i < q->n; i++)
        if (strlen(q->pol[i].tenant) == len && memcmp(q->pol[i].tenant, t, len) == 0)
            return &q->pol[i];
    return NULL;
}

/* The result label of a quota call's rc (kvmesh_quota_operations_total). A refusal names bytes or
 * objects in its message (src/tenant/quota.c check_fits, quota_batch.c's messages). */
static inline enum obs_dim_qres qres_of(int rc)
{
    switch (rc) {
    case 0:
        return OBS_QRES_OK;
    case KVMESH_EQUOTA:
        return strstr(kvmesh_last_error(), "objects quota") ? OBS_QRES_QUOTA_OBJECTS
                                                            : OBS_QRES_QUOTA_BYTES;
    case KVMESH_ETOOBIG:
        return OBS_QRES_TOO_BIG;
    case KVMESH_EAGAIN:
        return OBS_QRES_BUSY;
    case KVMESH_ECONFLICT:
        return OBS_QRES_CONFLICT;
    case KVMESH_ECANCELED:
        return OBS_QRES_CANCELED;
    default:
        return OBS_QRES_ERROR;
    }
}

static inline void qcount(kvm_rt_t *rt, enum obs_dim_qop what, int rc)
{
    obs_count(rt->metrics, quota_operations_total, what, qres_of(rc), 1);
}

/* A loop callback's (op, item) pair: malloc'd by qctx_new, freed by the callback. */
struct qctx {
    kvm_op_t *op;
    struct kvm_item *it;
};

static inline struct qctx *qctx_new(kvm_op_t *op, struct kvm_item *it)
{
    struct qctx *c = malloc(sizeof(*c));
    if (c) {
        c->op = op;
        c->it = it;
    }
    return c;
}

/* [loop] quota_item.c: the item's kvm_qitem (it->q, owned by the item; freed by
 * kvm_quota_item_free); EINVAL for a key with NUL bytes. */
int kvm_quota_item_init(kvm_rt_t *rt, struct kvm_item *it, bool is_delete);
/* [loop] quota_item.c: forgets a tenant's remembered writes (at close). */
void kvm_quota_fifo_clear(struct qfifo *f);
/* [loop] quota_claim.c: the claim's payload of a put into buf (its length); a delete's is empty. */
size_t kvm_quota_put_payload(const struct kvm_item *it, uint8_t buf[KVM_PUT_PAYLOAD_MAX]);
/* [loop] quota_claim.c, at close after tn_close: answers ECANCELED and frees every route claim
 * still waiting for the tenant layer (their writers retry instead of waiting out the deadline). */
void kvm_quota_claims_close(kvm_rt_t *rt);

#endif

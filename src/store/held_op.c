// SPDX-License-Identifier: Apache-2.0
/*
 * held_op.c — the owner's quota-operation check of a held reservation (held_op.h): one exact
 * read of the object's accounting row, then (when locked) one exact read of the locking
 * operation, then kvm_held_decide. One struct hop per check, owned here from kvm_held_op_check
 * to its callback. Loop thread only.
 */
#include "store/held_op.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "meta/keyspace.h"
#include "store/put_payload.h"
#include "store/store.h"

enum kvm_held_verdict kvm_held_decide(const tn_objrow_t *row, const tn_op_t *op,
                                      const kvm_hot_replica_t *slot)
{
    if (!row || !row->lock_op[0] || !op || strcmp(op->id, row->lock_op) != 0)
        return KVM_HELD_REREAD; /* every operation of the object is terminal (or purged) */
    if (op->state == TN_ST_PENDING)
        return KVM_HELD_KEEP; /* may still be claimed with a payload naming this slot */
    if (op->state != TN_ST_PUBLISHING || op->kind == TN_KIND_DELETE)
        return KVM_HELD_REREAD;
    kvm_put_payload_t p;
    if (kvm_put_payload_decode(op->payload, op->payload_len, &p) != 0)
        return KVM_HELD_REREAD; /* a replay refuses such a payload as well */
    return kvm_put_payload_names(&p, &slot->owner, slot->segment, slot->offset) ? KVM_HELD_KEEP
                                                                                : KVM_HELD_REREAD;
}

struct hop {
    kvm_rt_t *rt;
    kvm_hot_replica_t slot;
    char tenant[TN_TENANT_CAP], domain[TN_DOMAIN_CAP], key[TN_KEY_CAP];
    tn_objrow_t row;
    tn_op_t op;
    kvm_held_cb cb;
    void *arg;
};

static void hop_end(struct hop *h, int rc, enum kvm_held_verdict v)
{
    h->cb(h->arg, rc, v);
    free(h);
}

static void hop_op_read(void *arg, const meta_result_t *res)
{
    struct hop *h = arg;
    if (res->rc) {
        hop_end(h, res->rc, KVM_HELD_KEEP);
        return;
    }
    bool found = res->kv.found;
    if (found && tn_op_decode(res->kv.value, res->kv.value_len, &h->op) != 0) {
        hop_end(h, KVMESH_EPROTO, KVM_HELD_KEEP); /* unreadable: keep, ask again */
        return;
    }
    hop_end(h, 0, kvm_held_decide(&h->row, found ? &h->op : NULL, &h->slot));
}

static void hop_row_read(void *arg, const meta_result_t *res)
{
    struct hop *h = arg;
    if (res->rc) {
        hop_end(h, res->rc, KVM_HELD_KEEP);
        return;
    }
    if (!res->kv.found) {
        hop_end(h, 0, kvm_held_decide(NULL, NULL, &h->slot));
        return;
    }
    if (tn_objrow_decode(res->kv.value, res->kv.value_len, &h->row) != 0) {
        hop_end(h, KVMESH_EPROTO, KVM_HELD_KEEP);
        return;
    }
    if (!h->row.lock_op[0]) {
        hop_end(h, 0, kvm_held_decide(&h->row, NULL, &h->slot));
        return;
    }
    char k[KS_KEY_CAP];
    int rc = ks_acct_op_key(k, sizeof(k), h->rt->cfg.deployment, h->tenant, h->row.lock_op);
    if (rc == 0)
        rc = meta_get(h->rt->meta, k, 0, hop_op_read, h);
    if (rc)
        hop_end(h, rc, KVM_HELD_KEEP);
}

static int copy_part(char *out, size_t cap, const void *p, size_t n)
{
    if (n >= cap || (n && memchr(p, 0, n)))
        return kvm_errf(KVMESH_EINVAL, "identity part of %zu bytes does not fit %zu", n, cap);
    memcpy(out, p, n);
    out[n] = 0;
    return 0;
}

int kvm_held_op_check(kvm_rt_t *rt, const kvm_ident_t *id, const kvm_hot_replica_t *slot,
                      kvm_held_cb cb, void *arg)
{
    if (!rt->meta)
        return kvm_errf(KVMESH_EUNAVAILABLE, "no metadata handle");
    struct hop *h = calloc(1, sizeof(*h));
    if (!h)
        return KVMESH_ENOMEM;
    int rc = copy_part(h->tenant, sizeof(h->tenant), kvm_ident_tenant(id), id->tenant_len);
    if (!rc && kvm_ident_has_domain(id))
        rc = copy_part(h->domain, sizeof(h->domain), kvm_ident_domain(id), id->domain_len);
    if (!rc)
        rc = copy_part(h->key, sizeof(h->key), kvm_ident_key(id), id->key_len);
    char k[KS_KEY_CAP];
    if (!rc)
        rc = ks_object_key(k, sizeof(k), rt->cfg.deployment, h->tenant, h->domain, h->key);
    h->rt = rt;
    h->slot = *slot;
    h->cb = cb;
    h->arg = arg;
    if (!rc)
        rc = meta_get(rt->meta, k, 0, hop_row_read, h);
    if (rc)
        free(h);
    return rc;
}

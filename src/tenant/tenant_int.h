/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tenant_int.h — internals shared by the tenant layer's files (quota.c: the handle and the
 * transaction engine; recon.c: the reconciliation pass; batch.c: batch acquisition). Not a
 * public interface.
 */
#ifndef KVMESH_TENANT_TENANT_INT_H
#define KVMESH_TENANT_TENANT_INT_H

#include "tenant/tenant.h"

/* Engine call kinds (one transition each, or a read). */
enum tn_ck {
    TN_CK_BOOT,     /* create-if-absent / match the policy */
    TN_CK_RESERVE,  /* NONE -> PENDING */
    TN_CK_CLAIM,    /* PENDING -> PUBLISHING, PUBLISHING -> PUBLISHING (replay) */
    TN_CK_FINALIZE, /* PUBLISHING -> FINALIZED */
    TN_CK_ABORT,    /* PENDING -> ABORTED (explicit or expiry) */
    TN_CK_USAGE,    /* read the usage row */
    TN_CK_GETOP,    /* read an operation record */
    TN_CK_RESCHED,  /* reconciler backoff of a PUBLISHING operation */
    TN_CK_PURGE,    /* remove a terminal record past retention */
    /* PUBLISHING -> ABORTED, the reconciler's guarded edge: only with the proof its lookup found
     * (call version = a route version above the operation's predecessor) */
    TN_CK_ABORT_SUPERSEDED,
};

/* Work other than engine calls that keeps the handle alive (a batch, a reconciliation pass):
 * tn_close() sets tn->closing; such work stops at its next callback and calls tn_aux_put. */
void tn_aux_get(tn_t *tn);
void tn_aux_put(tn_t *tn);
bool tn_closing(const tn_t *tn);
env_t *tn_env(const tn_t *tn);
meta_t *tn_meta(const tn_t *tn);
const tn_config_t *tn_cfg(const tn_t *tn);
const char *tn_dep(const tn_t *tn);
tn_stats_t *tn_stats_mut(tn_t *tn);

bool *tn_recon_busy(tn_t *tn);

/* Internal variants: with always, the callback also runs (ECANCELED) after tn_close. */
int tn_reserve_internal(tn_t *tn, const tn_reserve_req_t *req, tn_cb cb, void *arg, bool always);
int tn_abort_internal(tn_t *tn, const char *tenant, const char *domain, const char *key,
                      const char *op_id, tn_cb cb, void *arg, bool always);

/* Starts an engine call by operation id alone (always = true) (the object is read from the record).
 */
int tn_call_by_op(tn_t *tn, enum tn_ck kind, const char *tenant, const char *op_id,
                  kvm_route_version_t version, uint32_t seen_attempts, tn_cb cb, void *arg);

/* TN_CK_FINALIZE by operation id, with a delete's tombstone deadline (0 = none). */
int tn_finalize_by_op(tn_t *tn, const char *tenant, const char *op_id, kvm_route_version_t version,
                      uint64_t tomb_until, tn_cb cb, void *arg);

#endif

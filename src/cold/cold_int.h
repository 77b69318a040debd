/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cold_int.h — internals shared by the files of src/cold (not for other layers): the handle,
 * the metadata transaction engine's call record, and small codec helpers over core/bytes.h.
 *
 * Files: cold_op.c (op state machine, op record, op calls), cold_device.c (device record,
 * accounting, view, placement, device calls), cold_reclaim.c (reclaim record, reclaim calls and
 * the handoff), cold_tx.c (handle and engine), cold_worker.c (offload worker, eviction, restore,
 * reconciliation), cold_simbe.c (the in-memory backend).
 */
#ifndef KVMESH_COLD_COLD_INT_H
#define KVMESH_COLD_COLD_INT_H

#include "cold/cold.h"
#include "core/bytes.h"

enum {
    COLD_SCHEMA_OP = 260,
    COLD_SCHEMA_DEVICE = 261,
    COLD_SCHEMA_RECLAIM = 262,
};

/* ---- codec helpers ------------------------------------------------------------------------- */

static inline void cw_header(kvm_wr_t *w, uint16_t schema)
{
    kvm_wr_u16be(w, schema);
    kvm_wr_u16be(w, COLD_SCHEMA_VERSION);
}
static inline void cr_header(kvm_rd_t *r, uint16_t schema)
{
    if (kvm_rd_u16be(r) != schema || kvm_rd_u16be(r) != COLD_SCHEMA_VERSION)
        kvm_rd_fail(r);
}
static inline void cw_id128(kvm_wr_t *w, const kvm_id128_t *id)
{
    kvm_wr_bytes(w, id->b, sizeof(id->b));
}
static inline void cr_id128(kvm_rd_t *r, kvm_id128_t *id)
{
    kvm_rd_copy(r, id->b, sizeof(id->b));
}
static inline void cw_opid(kvm_wr_t *w, const kvm_op_id_t *id)
{
    cw_id128(w, &id->writer);
    kvm_wr_u64le(w, id->epoch);
    kvm_wr_u64le(w, id->seq);
}
static inline void cr_opid(kvm_rd_t *r, kvm_op_id_t *id)
{
    cr_id128(r, &id->writer);
    id->epoch = kvm_rd_u64le(r);
    id->seq = kvm_rd_u64le(r);
}
/* u16 length + bytes into dst (at most cap bytes) */
static inline void cr_lp16(kvm_rd_t *r, void *dst, size_t cap, uint16_t *n)
{
    uint16_t len = 0;
    const uint8_t *p = kvm_rd_lp16le(r, &len);
    if (!p || len > cap) {
        kvm_rd_fail(r);
        *n = 0;
        return;
    }
    if (len)
        __builtin_memcpy(dst, p, len);
    *n = len;
}
/* NUL-terminated string of at most cap-1 bytes, without NUL bytes inside */
static inline void cr_str(kvm_rd_t *r, char *dst, size_t cap)
{
    uint16_t n = 0;
    cr_lp16(r, dst, cap - 1, &n);
    dst[n] = '\0';
    for (uint16_t i = 0; i < n; i++)
        if (dst[i] == '\0')
            kvm_rd_fail(r);
}

/* kvm_errf(rc, "<what>: <the current last error>") without formatting the message into itself */
#include <stdio.h>
#include "core/util.h"
#include "kvmesh.h"
static inline int cold_errctx(int rc, const char *what)
{
    char msg[256];
    snprintf(msg, sizeof(msg), "%s", kvmesh_last_error());
    return kvm_errf(rc, "%s: %s", what, msg);
}

/* ---- the engine ---------------------------------------------------------------------------- */

#define CR_DEV 0
#define CR_OP  1
#define CR_REC 2
#define CR_N   3

typedef enum cold_ck {
    CK_DEV_REG,
    CK_DEV_HEALTH,
    CK_DEV_GET,
    CK_OP_PLAN,
    CK_OP_ADVANCE,
    CK_OP_GET,
    CK_OP_PURGE,
    CK_REC_PLAN,
    CK_REC_CANCEL,
    CK_REC_DELETED,
    CK_REC_HANDOFF,
    CK_REC_GET,
    CK_REC_RESCHED,
    CK_REC_PURGE,
} cold_ck_t;

typedef struct cold_call cold_call_t;

/* What a decide function tells the engine. */
typedef struct cold_decision {
    bool done; /* no write: finish with rc */
    int rc;
    bool repeated;
    bool put[CR_N];
    bool del[CR_N];
} cold_decision_t;

struct cold_call {
    cold_t *c;
    cold_ck_t kind;
    unsigned want; /* 1u << CR_* */
    char k[CR_N][KS_KEY_CAP];
    bool found[CR_N];
    int64_t rev[CR_N];
    /* snapshot as read, and the records to write */
    cold_device_t dev, ndev;
    cold_op_t op, nop;
    cold_reclaim_t rec, nrec;
    /* request */
    cold_device_t q_dev;
    cold_op_t q_op;
    cold_reclaim_t q_rec;
    enum cold_op_state q_to;
    cold_locator_t q_loc;
    enum cold_dev_health q_health;
    bool q_sched;
    /* loop state */
    uint32_t attempts;
    bool wrote_maybe, in_meta;
    int last_rc;
    cold_decision_t dec; /* the decision of the write in flight */
    env_timer_id timer;
    char k_due_old[2][KS_KEY_CAP], k_due_new[2][KS_KEY_CAP];
    uint8_t v[CR_N]
             [COLD_RECLAIM_ENC_MAX > COLD_OP_ENC_MAX ? COLD_RECLAIM_ENC_MAX : COLD_OP_ENC_MAX];
    /* completion */
    bool internal; /* the callback is this layer's own: it runs even when closing (to free) */
    cold_op_cb op_cb;
    cold_dev_cb dev_cb;
    cold_reclaim_cb rec_cb;
    void *arg;
    cold_call_t *prev, *next;
};

typedef struct cold_att {
    kvm_tier_id_t dev;
    const cold_backend_t *be;
    cold_dev_stats_t st; /* [loop] cold_get_device_stats */
} cold_att_t;

typedef struct cold_jobst cold_jobst_t;
typedef struct cold_sf cold_sf_t;

struct cold {
    env_t *env;
    meta_t *m;
    cold_route_ops_t route;
    cold_config_t cfg;
    char dep[KS_DEPLOYMENT_MAX + 1];
    bool closing;
    bool internal_next; /* the next call is issued by this layer's own drivers (COLD_INTERNAL) */
    cold_call_t *calls; /* engine calls in flight */
    size_t n_calls;
    size_t n_aux; /* worker/restore/recon work holding the handle */
    cold_att_t att[COLD_BACKENDS_MAX];
    size_t n_att;
    cold_dev_stats_t dev_st_none; /* counts about devices not attached here (never exported) */
    /* device view */
    cold_device_t view[COLD_DEVICES_MAX];
    size_t n_view;
    bool view_busy;
    /* offload worker */
    cold_jobst_t *q_head, *q_tail; /* queued (order per cfg.order) */
    cold_jobst_t *active;          /* in flight */
    size_t n_queued, n_active;
    double tokens;           /* rate bucket (bytes; may be negative) */
    uint64_t tokens_ns;      /* env_now_ns of the last refill */
    env_timer_id rate_timer; /* waiting for tokens */
    bool gate_open;          /* watermark gate */
    /* singleflight restores */
    cold_sf_t *sf;
    size_t n_sf;
    bool recon_busy;
    uint64_t seq; /* internal ids */
    cold_stats_t st;
};

/* Issue a call from the layer's own drivers (worker, tasks): its callback then also runs with
 * KVMESH_ECANCELED when the handle closes, so the driver can free itself. */
static inline int cold_internal_rc(cold_t *c, int rc)
{
    c->internal_next = false;
    return rc;
}
#define COLD_INTERNAL(c, e) ((c)->internal_next = true, cold_internal_rc((c), (e)))

/* engine (cold_tx.c) */
cold_call_t *cold_call_new(cold_t *c, cold_ck_t kind, unsigned want);
int cold_call_start(cold_call_t *call); /* builds nothing: keys must be set; frees on error */
int cold_key_dev(cold_t *c, char *out, const kvm_tier_id_t *id);
int cold_key_op(cold_t *c, char *out, const kvm_op_id_t *id);
int cold_key_rec(cold_t *c, char *out, const kvm_op_id_t *id);
uint64_t cold_deadline(cold_t *c, uint32_t attempts);
void cold_aux_hold(cold_t *c);
void cold_aux_release(cold_t *c); /* frees the handle when closing and nothing remains */
void cold_exec_submit(cold_t *c, cold_exec_t *io);
const cold_backend_t *cold_attached(const cold_t *c, const kvm_tier_id_t *dev);
/* The counters of an attached device, or a scratch block for one that is not (never NULL). */
cold_dev_stats_t *cold_dev_st(cold_t *c, const kvm_tier_id_t *dev);

int cold_rec_call(cold_t *c, cold_ck_t kind, const kvm_op_id_t *reclaim_op, cold_reclaim_cb cb,
                  void *arg);
/* due-index key of a record (1 = indexed, key in out; 0 = not indexed) */
int cold_due_key_op(cold_t *c, const cold_op_t *op, char *out);
int cold_due_key_rec(cold_t *c, const cold_reclaim_t *r, char *out);
#define COLD_DUE_RECLAIM_PLANNED "reclaim-planned"
#define COLD_DUE_RECLAIM_DELETED "reclaim-deleted"
#define COLD_DUE_RELEASED        "released"     /* terminal op, due for purge */
#define COLD_DUE_RECLAIM_DONE    "reclaim-done" /* terminal reclaim, due for purge */
/* the deadline a record that becomes terminal now gets (0: never purged) */
uint64_t cold_purge_deadline(cold_t *c);

/* decide functions (one per call kind, in the file of the record they change) */
void cold_decide_dev(cold_call_t *call, cold_decision_t *d);
void cold_decide_op(cold_call_t *call, cold_decision_t *d);
void cold_decide_rec(cold_call_t *call, cold_decision_t *d);

/* worker internals (cold_worker.c) */
int cold_worker_init(cold_t *c); /* defaults and checks of the scheduling fields (cold_new) */
void cold_worker_close(cold_t *c);
int cold_worker_check(const cold_t *c); /* list lengths match the counts; each job at most once */

#endif

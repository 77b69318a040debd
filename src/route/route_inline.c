/* SPDX-License-Identifier: Apache-2.0 */
/*
 * route_inline.c — the authority side of inline reads (route.h route_inline_src_t,
 * docs/protocol.md "Inline reads"): while this authority answers a READ with a settled route,
 * the store's inline source may lend the payload of a committed replica of exactly that route
 * which this runtime owns; the answer (route_auth.c reply) then carries those bytes.
 *
 * Invariants: bytes are lent only for a READ whose requester accepts them (req->limit, which a
 * peer that predates inline reads leaves 0), only for a non-tombstone route whose length fits
 * that limit and ROUTE_MSG_MAX_INLINE (ROUTE_MSG_MAX_INLINE_ATT for a READ that takes the bytes
 * attached; a value past ROUTE_MSG_MAX_INLINE whose attachment cannot be sent gets a plain
 * answer, never a copied one) (and, for the READs of one received batch message, within
 * ROUTE_INLINE_BATCH_MAX bytes over all of them), and only between begin and end on the loop
 * thread, inside one handler: the pin the source returned is given back before the handler returns,
 * unless the bytes went as the answer's attachment (route_inline_send): then the pin goes with the
 * send and is given back by its sent callback, once the env no longer reads the bytes. The service
 * never calls the source otherwise.
 */
#include "route/route_int.h"

#include <stdlib.h>

_Static_assert(ROUTE_INLINE_MAX == ROUTE_MSG_MAX_INLINE_ATT, "one bound of attached payload");
_Static_assert(ROUTE_INLINE_COPIED_MAX == ROUTE_MSG_MAX_INLINE, "one bound of copied payload");

void route_inline_begin(route_svc_t *svc, const route_msg_t *req, const kvm_route_t *route)
{
    KVM_ASSERT(!svc->inl_set);
    /* (more than the copied form's bound only when the requester takes the bytes attached) */
    uint32_t bound = (req->flags & RMSG_READ_ATT) && !svc->inl_in_batch ? ROUTE_MSG_MAX_INLINE_ATT
                                                                        : ROUTE_MSG_MAX_INLINE;
    uint32_t max = req->limit < bound ? req->limit : bound;
    if (svc->inl_in_batch && max > svc->inl_batch_left)
        max = svc->inl_batch_left; /* (the batch message's budget: route_inline_batch_begin) */
    if (!svc->inline_src.get || req->kind != RMSG_READ_REQ || max == 0 ||
        kvm_route_is_tombstone(route) || route->length > max)
        return;
    const uint8_t *data = NULL;
    size_t len = 0;
    void *pin = NULL;
    if (svc->inline_src.get(svc->inline_src.ctx, route, max, &data, &len, &pin) != 0)
        return;
    if (len != route->length || (len && !data)) { /* a source that broke its contract */
        if (svc->inline_src.put)
            svc->inline_src.put(svc->inline_src.ctx, pin);
        return;
    }
    svc->inl_data = data;
    svc->inl_len = (uint32_t)len;
    svc->inl_pin = pin;
    svc->inl_set = true;
    if (svc->inl_in_batch)
        svc->inl_batch_left -= (uint32_t)len; /* (len <= max <= left) */
}

void route_inline_batch_begin(route_svc_t *svc)
{
    /* (a batch handled inside another's handling, were an env to deliver one synchronously,
     * shares the outer one's budget) */
    if (svc->inl_in_batch++ == 0)
        svc->inl_batch_left = ROUTE_INLINE_BATCH_MAX;
}

void route_inline_batch_end(route_svc_t *svc)
{
    KVM_ASSERT(svc->inl_in_batch > 0);
    if (--svc->inl_in_batch == 0)
        svc->inl_batch_left = 0;
}

void route_inline_fill(route_svc_t *svc, route_msg_t *m)
{
    if (!svc->inl_set || m->kind != RMSG_READ_RESP || m->status != 0 || m->n_routes != 1 ||
        svc->inl_len > ROUTE_MSG_MAX_INLINE) /* (only attached: a plain answer instead) */
        return;
    m->flags |= RMSG_READ_INLINE;
    m->inl = svc->inl_data;
    m->inl_len = svc->inl_len;
}

void route_inline_end(route_svc_t *svc)
{
    if (!svc->inl_set)
        return;
    if (svc->inline_src.put)
        svc->inline_src.put(svc->inline_src.ctx, svc->inl_pin);
    svc->inl_data = NULL;
    svc->inl_len = 0;
    svc->inl_pin = NULL;
    svc->inl_set = false;
}

/* The most head bytes send_att encodes on the stack. */
#define ROUTE_INLINE_HEAD_STACK 1024

/* The pin of bytes that went as an attachment: given back by the sent callback. */
typedef struct inl_hold {
    void (*put)(void *ctx, void *pin);
    void *ctx;
    void *pin;
} inl_hold_t;

static void inl_sent(int status, void *arg)
{
    (void)status; /* written or not, the env reads the bytes no more */
    inl_hold_t *h = arg;
    if (h->put)
        h->put(h->ctx, h->pin);
    free(h);
}

/* Encodes m (the head form) and sends it with the lent bytes attached; h takes the pin on 0. */
static int send_att(route_svc_t *svc, env_node_t to, route_msg_t *m, inl_hold_t *h)
{
    /* env_send_att copies the head before it returns: a single get's answer head (one route, a
     * few hundred bytes) is encoded on the stack, one that does not fit there (its bound is
     * that of the largest route) on the heap. */
    uint8_t small[ROUTE_INLINE_HEAD_STACK];
    uint8_t *buf = small;
    size_t len = 0;
    int rc = route_msg_encode(m, small, sizeof(small), &len);
    if (rc == KVMESH_ETOOBIG) {
        size_t cap = route_msg_size_bound(m);
        if (!(buf = malloc(cap)))
            return KVMESH_ENOMEM;
        rc = route_msg_encode(m, buf, cap, &len);
    }
    if (rc == 0) {
        env_att_t att = {.data = svc->inl_data, .len = svc->inl_len, .sent = inl_sent, .arg = h};
        rc = env_send_att(svc->env, to, ROUTE_MSG_BASE + m->kind, buf, len, &att);
    }
    if (buf != small)
        free(buf);
    return rc;
}

bool route_inline_send(route_svc_t *svc, env_node_t to, const route_msg_t *req, route_msg_t *m)
{
    if (!svc->inl_set || svc->inl_len == 0 || !(req->flags & RMSG_READ_ATT) ||
        m->kind != RMSG_READ_RESP || m->status != 0 || m->n_routes != 1)
        return false;
    /* Answering a received batch (coalescing): the head joins the answer batch and the bytes
     * its attachment, copied there once in this handler (the pin is given back by
     * route_inline_end), instead of a message of its own per READ. */
    if (route_emit_att(svc, to, m, svc->inl_data, svc->inl_len))
        return true;
    inl_hold_t *h = malloc(sizeof(*h));
    if (!h)
        return false;
    *h = (inl_hold_t){.put = svc->inline_src.put, .ctx = svc->inline_src.ctx, .pin = svc->inl_pin};
    m->flags |= RMSG_READ_ATT;
    m->att_len = svc->inl_len;
    int rc = send_att(svc, to, m, h);
    if (rc != 0) {
        free(h); /* the pin stays lent: route_inline_end gives it back */
        m->flags &= ~RMSG_READ_ATT;
        m->att_len = 0;
        return rc != KVMESH_ENOTSUP && rc != KVMESH_ENOMEM; /* else sent the copied way */
    }
    svc->inl_data = NULL; /* the pin went with the send */
    svc->inl_len = 0;
    svc->inl_pin = NULL;
    svc->inl_set = false;
    return true;
}

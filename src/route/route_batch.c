// SPDX-License-Identifier: Apache-2.0
/*
 * route_batch.c — batched route messages: the outbox that groups the messages one loop turn
 * sends while the service coalesces (route_coalesce_begin/end), and the receive side that
 * unpacks a batch (route_msg.h RMSG_BATCH) into its items.
 *
 * The service coalesces in two places: a client batching window's turn (route_client.c: the
 * first attempts of every lookup/CAS started in the window), and the handling of a received
 * batch (every answer, mirror and mirror answer it produces at once). So the first requests of a
 * batched call travel as one batch per shard primary (CAS) or authority (lookup), the primary's
 * mirrors as one batch per secondary, and the answers as one batch back. Each item is a complete
 * message handled on its own by the unchanged single-message code (route_auth.c on_cas/on_read/
 * on_mirror, route_svc.c on_response): its fencing, admission and result do not depend on the
 * other items. Retransmissions go alone (route_svc.c call_timer).
 *
 * Ownership: the outbox owns its buffers (svc->outbox, freed by route_outbox_free). Loop thread.
 */
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "route/route_int.h"

/* An attachment buffer: owned by an outbox while it is filled, by the env while it is sent, then
 * kept as one of the service's spares (up to ROUTE_ATT_SPARES, reused by the next batches: a
 * buffer of up to ROUTE_INLINE_BATCH_MAX malloc'd and freed per batch made the allocator hand
 * back and fault in fresh pages on every batch), else freed. */
struct route_att_buf {
    route_svc_t *svc; /* NULL once the service is freed (while the env still sends it) */
    struct route_att_buf *next, *prev; /* in svc->att_busy while the env sends it */
    size_t cap;
    uint8_t data[];
};

typedef struct route_outbox {
    env_node_t node;
    bool reserved; /* a route_emit_reserve slot is open (encoded into, not yet committed) */
    route_batch_buf_t b;
    /* the batch's attachment (route_emit_att): the inline bytes of its RMSG_READ_ATT answers,
     * in item order, att_len bytes of att->data */
    struct route_att_buf *att;
    size_t att_len;
} route_outbox_t;

static void att_put(route_svc_t *svc, struct route_att_buf *a)
{
    if (svc && svc->n_att_spare < ROUTE_ATT_SPARES) {
        a->next = svc->att_spare;
        svc->att_spare = a;
        svc->n_att_spare++;
    } else {
        free(a);
    }
}

/* A buffer of at least cap bytes (the outbox's own, a spare, or a new one); NULL: no memory. */
static struct route_att_buf *att_room(route_svc_t *svc, struct route_att_buf *have, size_t keep,
                                      size_t cap)
{
    if (have && have->cap >= cap)
        return have;
    struct route_att_buf *a = NULL;
    if (!have && svc->att_spare) { /* (a spare too small grows below) */
        a = svc->att_spare;
        svc->att_spare = a->next;
        svc->n_att_spare--;
        if (a->cap >= cap)
            return a;
        have = a;
    }
    size_t nc = KVM_MAX(have ? have->cap * 2 : (size_t)ROUTE_OUTBOX_ATT_MIN, cap);
    nc = KVM_MIN(KVM_MAX(nc, cap), (size_t)ROUTE_INLINE_BATCH_MAX + (size_t)ROUTE_INLINE_MAX);
    if (nc < cap)
        nc = cap;
    a = malloc(sizeof(*a) + nc);
    if (!a)
        return NULL; /* (have stays as it was) */
    a->svc = svc;
    a->next = a->prev = NULL;
    a->cap = nc;
    if (have) {
        if (keep)
            memcpy(a->data, have->data, keep);
        free(have);
    }
    return a;
}

static void att_sent(int status, void *arg)
{
    (void)status; /* written or not, the env reads the bytes no more */
    struct route_att_buf *a = arg;
    route_svc_t *svc = a->svc;
    if (svc) { /* out of the busy list */
        if (a->prev)
            a->prev->next = a->next;
        else
            svc->att_busy = a->next;
        if (a->next)
            a->next->prev = a->prev;
    }
    att_put(svc, a);
}

/* Sends b's messages to node without attachment (alone when it holds one), and empties b. */
static void buf_send(route_svc_t *svc, env_node_t node, route_batch_buf_t *b)
{
    if (b->n == 1) {
        const uint8_t *m = b->buf + b->first_off;
        uint16_t kind = (uint16_t)(m[2] | (m[3] << 8));
        env_send(svc->env, node, ROUTE_MSG_BASE + kind, m, b->first_len);
    } else if (b->n > 1) {
        size_t len = 0;
        const uint8_t *p = route_batch_bytes(b, &len);
        env_send(svc->env, node, ROUTE_MSG_BASE + RMSG_BATCH, p, len);
    }
    b->n = 0;
    b->len = 0;
}

/* The outbox's message (type, p, len) for a destination the env sends no attachment to (the
 * binding carries none, or not to this peer): each attached answer re-encoded in the copied form
 * (its bytes inside it, RMSG_READ_INLINE), as an authority without attachments answers; in as
 * many batches as their bytes need. An item that cannot be re-encoded goes as it is (a head
 * without its bytes: a plain answer, its requester reads the replica). */
static void send_copied(route_svc_t *svc, route_outbox_t *o, uint32_t type, const uint8_t *p,
                        size_t len)
{
    route_batch_view_t *v = malloc(sizeof(*v));
    if (!v)
        return; /* (lost, as a message the env could not send) */
    if (type != ROUTE_MSG_BASE + RMSG_BATCH) {
        v->n = 1;
        v->kind[0] = (uint16_t)(type - ROUTE_MSG_BASE);
        v->item[0] = p;
        v->len[0] = (uint32_t)len;
    } else if (route_batch_decode(type, p, len, v) != 0) {
        free(v);
        return;
    }
    route_batch_buf_t nb;
    route_batch_buf_init(&nb);
    size_t off = 0;
    for (uint32_t i = 0; i < v->n; i++) {
        const uint8_t *item = v->item[i];
        size_t il = v->len[i];
        uint8_t *enc = NULL;
        route_msg_t m;
        if (v->kind[i] == RMSG_READ_RESP &&
            route_msg_decode(ROUTE_MSG_BASE + v->kind[i], item, il, &m) == 0) {
            if ((m.flags & RMSG_READ_ATT) && o->att_len - off >= m.att_len) {
                m.flags = (m.flags & ~RMSG_READ_ATT) | RMSG_READ_INLINE;
                m.inl = o->att->data + off;
                m.inl_len = m.att_len;
                m.att_len = 0;
                off += m.inl_len;
                size_t cap = route_msg_size_bound(&m), el = 0;
                if ((enc = malloc(cap)) && route_msg_encode(&m, enc, cap, &el) == 0) {
                    item = enc;
                    il = el;
                }
            }
            route_msg_clear(&m);
        }
        int rc = route_batch_append(&nb, item, il);
        if (rc == KVMESH_ETOOBIG && nb.n) { /* full: this batch goes now */
            buf_send(svc, o->node, &nb);
            rc = route_batch_append(&nb, item, il);
        }
        if (rc != 0)
            env_send(svc->env, o->node, ROUTE_MSG_BASE + v->kind[i], item, il);
        free(enc);
    }
    buf_send(svc, o->node, &nb);
    route_batch_buf_free(&nb);
    free(v);
}

/* Sends the batch's message (type, p, len), with the outbox's attachment when it has one. */
static void outbox_emit(route_svc_t *svc, route_outbox_t *o, uint32_t type, const uint8_t *p,
                        size_t len)
{
    if (!o->att_len) {
        env_send(svc->env, o->node, type, p, len);
        return;
    }
    struct route_att_buf *a = o->att;
    env_att_t att = {.data = a->data, .len = o->att_len, .sent = att_sent, .arg = a};
    int rc = env_send_att(svc->env, o->node, type, p, len, &att);
    if (rc == 0) { /* the buffer went with the send: busy until att_sent */
        o->att = NULL;
        a->prev = NULL;
        a->next = svc->att_busy;
        if (a->next)
            a->next->prev = a;
        svc->att_busy = a;
    } else if (rc == KVMESH_ENOTSUP || rc == KVMESH_ENOMEM) {
        send_copied(svc, o, type, p, len); /* (nothing was sent) */
    }
    o->att_len = 0;
}

static void outbox_send(route_svc_t *svc, route_outbox_t *o)
{
    if (o->b.n == 1) { /* alone: the plain message, byte for byte what an unbatched send is */
        const uint8_t *m = o->b.buf + o->b.first_off;
        uint16_t kind = (uint16_t)(m[2] | (m[3] << 8));
        outbox_emit(svc, o, ROUTE_MSG_BASE + kind, m, o->b.first_len);
    } else if (o->b.n > 1) {
        size_t len = 0;
        const uint8_t *p = route_batch_bytes(&o->b, &len);
        outbox_emit(svc, o, ROUTE_MSG_BASE + RMSG_BATCH, p, len);
        svc->stats.batches_sent++;
        svc->stats.batch_items_sent += o->b.n;
    }
    o->b.n = 0;
    o->b.len = 0;
    o->att_len = 0;
}

/* The outbox of `to` for a message of env type `type`; NULL: it goes alone (the service does
 * not coalesce now, the kind is not batchable, or no memory or room for another destination). */
static route_outbox_t *outbox_for(route_svc_t *svc, env_node_t to, uint32_t type)
{
    uint32_t kind = type - ROUTE_MSG_BASE;
    if (svc->coalesce == 0 || type < ROUTE_MSG_BASE || !route_msg_batchable((uint16_t)kind))
        return NULL;
    if (!svc->outbox && !(svc->outbox = calloc(ROUTE_OUTBOX_NODES, sizeof(route_outbox_t))))
        return NULL;
    for (uint32_t i = 0; i < svc->n_outbox; i++)
        if (svc->outbox[i].node == to)
            return &svc->outbox[i];
    if (svc->n_outbox >= ROUTE_OUTBOX_NODES) /* bounded: the rest go alone */
        return NULL;
    route_outbox_t *o = &svc->outbox[svc->n_outbox++];
    o->node = to;
    o->reserved = false;
    o->b.n = 0;
    o->b.len = 0;
    o->att_len = 0;
    return o;
}

uint8_t *route_emit_reserve(route_svc_t *svc, env_node_t to, uint32_t type, size_t cap,
                            route_emit_slot_t *slot)
{
    slot->o = NULL;
    route_outbox_t *o = outbox_for(svc, to, type);
    if (!o)
        return NULL;
    KVM_ASSERT(!o->reserved); /* one slot at a time: encoding does not emit */
    uint8_t *p = NULL;
    int rc = route_batch_reserve(&o->b, cap, &p);
    if (rc == KVMESH_ETOOBIG && o->b.n) { /* full: this batch goes now, the item starts the next */
        outbox_send(svc, o);
        rc = route_batch_reserve(&o->b, cap, &p);
    }
    if (rc != 0)
        return NULL; /* (encoded elsewhere and route_emit'ed: appended or sent alone) */
    o->reserved = true;
    slot->o = o;
    return p;
}

void route_emit_commit(route_svc_t *svc, route_emit_slot_t *slot, size_t len)
{
    (void)svc;
    route_outbox_t *o = slot->o;
    KVM_ASSERT(o && o->reserved);
    o->reserved = false;
    slot->o = NULL;
    if (len) /* (queued: sent by route_coalesce_end) */
        route_batch_commit(&o->b, len);
}

bool route_emit_att(route_svc_t *svc, env_node_t to, route_msg_t *m, const uint8_t *data,
                    uint32_t len)
{
    KVM_ASSERT(m->kind == RMSG_READ_RESP && !(m->flags & (RMSG_READ_INLINE | RMSG_READ_ATT)));
    if (len == 0 || !svc->env->ops->send_att)
        return false; /* (a binding without attachments: the copied way) */
    m->flags |= RMSG_READ_ATT;
    m->att_len = len;
    size_t cap = route_msg_size_bound(m), hl = 0;
    route_emit_slot_t slot;
    uint8_t *at = route_emit_reserve(svc, to, ROUTE_MSG_BASE + m->kind, cap, &slot);
    route_outbox_t *o = slot.o; /* (the reservation may have sent the batch before: a new one) */
    if (at) {
        struct route_att_buf *a = att_room(svc, o->att, o->att_len, o->att_len + len);
        if (!a) {
            route_emit_commit(svc, &slot, 0);
            at = NULL;
        } else {
            o->att = a;
        }
    }
    if (at && route_msg_encode(m, at, cap, &hl) != 0) {
        route_emit_commit(svc, &slot, 0);
        at = NULL;
    }
    m->flags &= ~RMSG_READ_ATT;
    m->att_len = 0;
    if (!at)
        return false; /* not batched now, or no memory: the caller sends it another way */
    route_emit_commit(svc, &slot, hl);
    memcpy(o->att->data + o->att_len, data, len); /* the one copy of the bytes at the authority */
    o->att_len += len;
    svc->stats.att_items_batched++;
    return true;
}

int route_emit(route_svc_t *svc, env_node_t to, uint32_t type, const uint8_t *buf, size_t len)
{
    route_outbox_t *o = outbox_for(svc, to, type);
    if (!o)
        return env_send(svc->env, to, type, buf, len);
    KVM_ASSERT(!o->reserved);
    int rc = route_batch_append(&o->b, buf, len);
    if (rc == KVMESH_ETOOBIG) { /* full: this batch goes now, the item starts the next */
        outbox_send(svc, o);
        rc = route_batch_append(&o->b, buf, len);
    }
    if (rc != 0)
        return env_send(svc->env, to, type, buf, len);
    return 0; /* queued: sent by route_coalesce_end */
}

void route_set_group_hooks(route_svc_t *svc, route_group_fn begin, route_group_fn end, void *ctx)
{
    KVM_ASSERT(svc->coalesce == 0);
    svc->group_begin = begin;
    svc->group_end = end;
    svc->group_ctx = ctx;
}

void route_coalesce_begin(route_svc_t *svc)
{
    if (svc->coalesce++ == 0 && svc->group_begin)
        svc->group_begin(svc->group_ctx);
}

void route_coalesce_end(route_svc_t *svc)
{
    KVM_ASSERT(svc->coalesce > 0);
    if (--svc->coalesce)
        return;
    for (uint32_t i = 0; i < svc->n_outbox; i++)
        outbox_send(svc, &svc->outbox[i]);
    svc->n_outbox = 0;
    if (svc->group_end)
        svc->group_end(svc->group_ctx); /* after the group's route messages left */
}

void route_outbox_free(route_svc_t *svc)
{
    if (!svc->outbox)
        return;
    for (uint32_t i = 0; i < ROUTE_OUTBOX_NODES; i++) {
        route_batch_buf_free(&svc->outbox[i].b);
        free(svc->outbox[i].att);
    }
    while (svc->att_spare) {
        struct route_att_buf *a = svc->att_spare;
        svc->att_spare = a->next;
        free(a);
    }
    svc->n_att_spare = 0;
    for (struct route_att_buf *a = svc->att_busy; a; a = a->next)
        a->svc = NULL; /* (still sent by the env: freed by att_sent) */
    svc->att_busy = NULL;
    free(svc->outbox);
    svc->outbox = NULL;
    svc->n_outbox = 0;
}

/*
 * Test-only broken variant (ROUTE_BUG_BATCH_ONE_RESULT): the client answers every CAS item of a
 * batch with the first item's answer (its status and route), as a receiver that does not keep
 * per-item results would; the route_batch scenarios' history checker must catch it.
 */
static void one_result(route_svc_t *svc, const env_msg_t *msg, const route_batch_view_t *v,
                       uint32_t i)
{
    route_msg_t m, mi;
    if (route_msg_decode(ROUTE_MSG_BASE + v->kind[0], v->item[0], v->len[0], &m) != 0)
        return;
    if (route_msg_decode(ROUTE_MSG_BASE + v->kind[i], v->item[i], v->len[i], &mi) == 0) {
        m.req_id = mi.req_id; /* item 0's answer, delivered as item i's */
        route_msg_clear(&mi);
        size_t cap = route_msg_size_bound(&m), len = 0;
        uint8_t *buf = malloc(cap);
        if (buf && route_msg_encode(&m, buf, cap, &len) == 0) {
            env_msg_t one = *msg;
            one.type = ROUTE_MSG_BASE + v->kind[i];
            one.data = buf;
            one.len = len;
            route_on_message(svc, &one);
        }
        free(buf);
    }
    route_msg_clear(&m);
}

void route_batch_on_message(route_svc_t *svc, const env_msg_t *msg)
{
    route_batch_view_t *v = malloc(sizeof(*v));
    if (!v)
        return;
    if (route_batch_decode(msg->type, msg->data, msg->len, v) != 0) {
        free(v);
        return; /* malformed: dropped like a malformed single message */
    }
    svc->stats.batches_received++;
    /* What the items' callbacks start (a CAS retried from a refusal's route, a lookup that
     * settles an indeterminate answer) joins one window and leaves as one batch per
     * destination, instead of one message per item on its own zero timer. */
    route_batch_begin(svc);
    route_coalesce_begin(svc);
    route_inline_batch_begin(svc); /* its READs' inline bytes: one budget (route_inline.c) */
    bool broken = (svc->bugs & ROUTE_BUG_BATCH_ONE_RESULT) && v->kind[0] == RMSG_CAS_RESP;
    /* the attachment (the inline bytes of its RMSG_READ_ATT answers, in item order): handed out
     * slice by slice by route_on_message; a batch handled inside this one (an env delivering
     * synchronously) does not see it */
    const env_payload_t *att_outer = svc->batch_att;
    size_t off_outer = svc->batch_att_off;
    bool bad_outer = svc->batch_att_bad;
    svc->batch_att = msg->payload && msg->payload->buf ? msg->payload : NULL;
    svc->batch_att_off = 0;
    svc->batch_att_bad = false;
    for (uint32_t i = 0; i < v->n && !svc->freeing; i++) {
        if (broken && i > 0 && v->kind[i] == RMSG_CAS_RESP) {
            one_result(svc, msg, v, i);
            continue;
        }
        env_msg_t one = *msg;
        one.type = ROUTE_MSG_BASE + v->kind[i];
        one.data = v->item[i];
        one.len = v->len[i];
        one.payload = NULL;             /* (an attached answer's slice: route_on_batch_item) */
        route_on_batch_item(svc, &one); /* each item exactly as if it came alone */
    }
    svc->batch_att = att_outer;
    svc->batch_att_off = off_outer;
    svc->batch_att_bad = bad_outer;
    route_inline_batch_end(svc);
    route_coalesce_end(svc);
    route_batch_end(svc);
    free(v);
}

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sim_history.c — the record of client operations of one simulated run (see sim.h).
 *
 * Invariants: ops are stored in invocation order (ids are indices); an op completes at most
 * once; end_ns >= start_ns; the number of ops never exceeds the capacity given at creation.
 */
#include "sim.h"

#include <stdlib.h>

#include "core/util.h"

struct sim_hist {
    sim_t *sim;
    sim_op_t *ops;
    size_t len, cap, pending;
};

sim_hist_t *sim_hist_new(sim_t *sim, size_t capacity)
{
    KVM_ASSERT(capacity > 0);
    sim_hist_t *h = calloc(1, sizeof(*h));
    if (!h)
        return NULL;
    h->ops = calloc(capacity, sizeof(*h->ops));
    if (!h->ops) {
        free(h);
        return NULL;
    }
    h->sim = sim;
    h->cap = capacity;
    return h;
}

void sim_hist_free(sim_hist_t *h)
{
    if (!h)
        return;
    free(h->ops);
    free(h);
}

int64_t sim_hist_begin(sim_hist_t *h, uint32_t client, uint32_t kind, uint64_t in_a, uint64_t in_b)
{
    if (h->len == h->cap) {
        sim_fail(h->sim, "history full (%zu ops): raise the capacity", h->cap);
        return -1;
    }
    sim_op_t *op = &h->ops[h->len];
    *op = (sim_op_t){
        .client = client, .kind = kind, .start_ns = sim_now(h->sim), .in_a = in_a, .in_b = in_b};
    h->pending++;
    uint64_t w[5] = {0x0b00u, client, kind, in_a, in_b};
    sim_trace_mix(h->sim, w, sizeof(w));
    return (int64_t)h->len++;
}

const sim_op_t *sim_hist_end(sim_hist_t *h, int64_t id, int status, uint64_t out_a, uint64_t out_b)
{
    KVM_ASSERT(id >= 0 && (size_t)id < h->len);
    sim_op_t *op = &h->ops[id];
    KVM_ASSERT(!op->done);
    op->done = true;
    op->end_ns = sim_now(h->sim);
    op->status = status;
    op->out_a = out_a;
    op->out_b = out_b;
    h->pending--;
    uint64_t w[5] = {0x0e00u, (uint64_t)id, (uint64_t)(int64_t)status, out_a, out_b};
    sim_trace_mix(h->sim, w, sizeof(w));
    return op;
}

size_t sim_hist_len(const sim_hist_t *h)
{
    return h->len;
}

const sim_op_t *sim_hist_get(const sim_hist_t *h, size_t i)
{
    KVM_ASSERT(i < h->len);
    return &h->ops[i];
}

size_t sim_hist_pending(const sim_hist_t *h)
{
    return h->pending;
}

void sim_hist_dump(const sim_hist_t *h, FILE *out)
{
    fprintf(out, "history (%zu ops, %zu pending):\n", h->len, h->pending);
    for (size_t i = 0; i < h->len; i++) {
        const sim_op_t *op = &h->ops[i];
        if (op->done)
            fprintf(out,
                    "  #%zu client %u kind %u [%.3f, %.3f] ms in (%llu, %llu) -> status %d out "
                    "(%llu, %llu)\n",
                    i, op->client, op->kind, (double)op->start_ns / 1e6, (double)op->end_ns / 1e6,
                    (unsigned long long)op->in_a, (unsigned long long)op->in_b, op->status,
                    (unsigned long long)op->out_a, (unsigned long long)op->out_b);
        else
            fprintf(out, "  #%zu client %u kind %u [%.3f, ...] ms in (%llu, %llu) pending\n", i,
                    op->client, op->kind, (double)op->start_ns / 1e6, (unsigned long long)op->in_a,
                    (unsigned long long)op->in_b);
    }
}

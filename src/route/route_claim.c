// SPDX-License-Identifier: Apache-2.0
/*
 * route_claim.c — owns the primary side of a CAS with a claim (route.h route_cas_claim,
 * docs/protocol.md "CAS with a claim"): the claims in flight at this runtime's primaries, the
 * call of the claim hook immediately before the CAS is applied, and the apply itself through
 * route_auth_on_cas with the sequence reserved when the claim started.
 *
 * One claim, as a state machine (a struct route_claim lives exactly while it is CLAIMING):
 *
 *   request --(route_auth_cas_would_apply false)--> answered by route_auth_on_cas (a refusal,
 *      |                                            nothing claimed)
 *      | reserve seq = ++shard seq; hold the key
 *      v
 *   CLAIMING --(hook answers rc != 0)--> replied rc (nothing applied)
 *      |
 *      | hook answers 0 (the claim recorded generation, token and the reserved version)
 *      v
 *   route_auth_on_cas with claim_seq = the reserved seq: applied and mirrored (the reply, with
 *   the hook's reply blob, is sent when mirroring ends), or refused if the shard changed while
 *   the claim was made (lost primaryship: the client retries, the claim's repeat is a replay).
 *
 * Ownership: a claim copies what it needs from the request (the next route, the expectation,
 * the addressing); the decoded request is the caller's. Loop thread only.
 */
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "route/route_int.h"

struct route_claim {
    struct route_claim *next, *prev;
    route_svc_t *svc;
    uint32_t shard;
    env_node_t from;
    route_msg_t req;   /* kind, req_id, shard, generation, token, target, expected */
    kvm_route_t route; /* the next route (owned) */
    uint64_t seq;      /* reserved sequence */
    uint64_t token;    /* the primary token the seq belongs to */
};

void route_set_claim_hook(route_svc_t *svc, route_claim_fn fn, void *ctx)
{
    svc->claim_fn = fn;
    svc->claim_ctx = fn ? ctx : NULL;
}

bool route_claim_holds(const route_svc_t *svc, uint32_t shard, const kvm_ident_t *ident)
{
    for (const struct route_claim *c = svc->claims; c; c = c->next)
        if (c->shard == shard && kvm_ident_equal(&c->route.ident, ident))
            return true;
    return false;
}

static void claim_unlink(route_svc_t *svc, struct route_claim *c)
{
    if (c->prev)
        c->prev->next = c->next;
    else
        svc->claims = c->next;
    if (c->next)
        c->next->prev = c->prev;
    KVM_ASSERT(svc->n_claims > 0);
    svc->n_claims--;
}

static void claim_free(struct route_claim *c)
{
    kvm_route_free(&c->route);
    free(c);
}

void route_claim_free_all(route_svc_t *svc)
{
    while (svc->claims) {
        struct route_claim *c = svc->claims;
        claim_unlink(svc, c);
        claim_free(c);
    }
}

/* A claim reply without routes (a refusal or an error). */
static void reply_status(route_svc_t *svc, env_node_t to, const route_msg_t *req, route_shard_t *sh,
                         int status)
{
    route_msg_t m;
    route_msg_init(&m, RMSG_CAS_CLAIM_RESP);
    m.req_id = req->req_id;
    m.shard = req->shard;
    m.generation = sh->m_gen;
    m.token = sh->m_token;
    m.status = status;
    m.target = svc->self;
    route_send(svc, to, &m);
}

static void claim_done(void *arg, int rc, const uint8_t *reply, size_t reply_len)
{
    struct route_claim *c = arg;
    route_svc_t *svc = c->svc;
    route_shard_t *sh = &svc->shards[c->shard];
    claim_unlink(svc, c);
    if (rc == 0 && reply_len > ROUTE_CLAIM_MAX)
        rc = KVMESH_EINTERNAL;
    if (rc != 0 || svc->freeing) {
        if (!svc->freeing)
            reply_status(svc, c->from, &c->req, sh, rc ? rc : KVMESH_ECANCELED);
        claim_free(c);
        return;
    }
    /* apply with the reserved version, if the shard is still ours with the same token; the
     * re-check is route_auth_on_cas's own admission (a refusal is answered there) */
    route_msg_t req = c->req;
    req.n_routes = 1;
    req.routes = &c->route;
    req.claim = NULL;
    req.claim_len = 0;
    env_msg_t raw = {.from = c->from};
    svc->claim_seq = sh->m_token == c->token ? c->seq : 0;
    svc->claim_reply = reply;
    svc->claim_reply_len = (uint32_t)reply_len;
    if (svc->claim_seq)
        route_auth_on_cas(svc, &raw, &req, sh);
    else
        reply_status(svc, c->from, &c->req, sh, KVMESH_EUNAVAILABLE);
    svc->claim_seq = 0;
    svc->claim_reply = NULL;
    svc->claim_reply_len = 0;
    claim_free(c);
}

void route_claim_on_req(route_svc_t *svc, const env_msg_t *raw, const route_msg_t *req,
                        route_shard_t *sh)
{
    if (!route_auth_cas_would_apply(svc, req, sh)) {
        route_auth_on_cas(svc, raw, req, sh); /* answers the refusal (nothing claimed) */
        return;
    }
    if (!svc->claim_fn) {
        reply_status(svc, raw->from, req, sh, KVMESH_ENOTSUP);
        return;
    }
    if (svc->n_claims >= ROUTE_MAX_CLAIMS) {
        reply_status(svc, raw->from, req, sh, KVMESH_EAGAIN); /* the client backs off */
        return;
    }
    struct route_claim *c = calloc(1, sizeof(*c));
    if (!c || kvm_route_copy(&c->route, &req->routes[0]) != 0) {
        free(c);
        reply_status(svc, raw->from, req, sh, KVMESH_ENOMEM);
        return;
    }
    c->svc = svc;
    c->shard = sh->id;
    c->from = raw->from;
    route_msg_init(&c->req, req->kind);
    c->req.req_id = req->req_id;
    c->req.shard = req->shard;
    c->req.generation = req->generation;
    c->req.token = req->token;
    c->req.target = req->target;
    c->req.expected = req->expected;
    c->token = sh->m_token;
    c->seq = ++sh->seq; /* the version this CAS publishes; later CASes get later ones */
    c->next = svc->claims;
    if (svc->claims)
        svc->claims->prev = c;
    svc->claims = c;
    svc->n_claims++;
    route_claim_at_t at = {.generation = sh->rec.generation,
                           .fencing_token = sh->m_token,
                           .next_version = {sh->m_token, c->seq}};
    int rc = svc->claim_fn(svc->claim_ctx, req->claim, req->claim_len, &at, claim_done, c);
    if (rc != 0) {
        claim_unlink(svc, c);
        claim_free(c);
        reply_status(svc, raw->from, req, sh, rc);
    }
}

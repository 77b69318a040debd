/* SPDX-License-Identifier: Apache-2.0 */
/*
 * scen_meta_cas.c — runtimes on simulated nodes share the in-memory metadata backend
 * (memory://NAME, kept alive by a handle on the world env) and race compare-and-set increments
 * of one counter under injected metadata latency, failures (some after apply: indeterminate),
 * and node crashes. Checks: no two successful CAS from one predecessor; the final counter lies
 * between the acknowledged successes and successes + indeterminate outcomes.
 *
 * It shows how a scenario hosts a shared simulated service: the store lives as long as one handle
 * on it is open, so a handle on the world env (which never crashes) keeps it across node crashes;
 * each node's stop hook closes its own handle (cancelling its pending calls) and drains the
 * node's deferred completions so that nothing leaks when the crash drops the node's queue.
 *
 * Built only when src/meta (the metadata module) is present in the tree (see CMakeLists.txt).
 * Test-only variant (--variant blind): the write is a blind PUT instead of a compare-and-set;
 * the checker must catch the lost updates.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "meta/meta.h"
#include "meta/meta_memory.h"
#include "sim.h"

#define MC_MAX_NODES 5
#define MC_OPS       40
#define MC_MAX_VALUE 100000

typedef struct mc mc_t;

typedef struct mc_node {
    mc_t *mc;
    env_t *env;
    uint32_t id;
    meta_t *m;
    env_timer_id think;
    bool closing;
} mc_node_t;

struct mc {
    sim_t *sim;
    char url[64];
    meta_t *world_m;
    uint32_t n;
    uint64_t acked, indeterminate, attempts;
    uint8_t won_from[MC_MAX_VALUE]; /* predecessor values whose CAS was acknowledged */
    uint64_t final_value;
    bool final_done;
    bool blind;
};

static uint64_t parse_val(const meta_kv_t *kv)
{
    if (!kv->found)
        return 0;
    char buf[32] = {0};
    memcpy(buf, kv->value, KVM_MIN(kv->value_len, sizeof(buf) - 1));
    return strtoull(buf, NULL, 10);
}

static void node_next(void *arg);

typedef struct cas_req {
    mc_node_t *nd;
    uint64_t from;
} cas_req_t;

static void on_txn(void *arg, const meta_result_t *res)
{
    cas_req_t *r = arg;
    mc_node_t *nd = r->nd;
    mc_t *mc = nd->mc;
    if (res->rc == 0 && res->succeeded) {
        if (mc->won_from[r->from])
            sim_fail(mc->sim, "two successful CAS from predecessor %llu",
                     (unsigned long long)r->from);
        mc->won_from[r->from] = 1;
        mc->acked++;
    } else if (res->rc != 0) {
        mc->indeterminate++;
    }
    free(r);
    if (!nd->closing && mc->attempts < MC_OPS * mc->n)
        nd->think =
            env_timer_start(nd->env, env_rand_u64(nd->env) % (5 * SIM_MSG_NS), node_next, nd);
}

static void on_get(void *arg, const meta_result_t *res)
{
    mc_node_t *nd = arg;
    mc_t *mc = nd->mc;
    if (nd->closing)
        return;
    if (res->rc != 0) {
        nd->think = env_timer_start(nd->env, 2 * SIM_MSG_NS, node_next, nd);
        return;
    }
    uint64_t v = parse_val(&res->kv);
    if (v + 1 >= MC_MAX_VALUE) {
        sim_fail(mc->sim, "counter overflow");
        return;
    }
    char buf[32];
    int len = snprintf(buf, sizeof(buf), "%llu", (unsigned long long)(v + 1));
    meta_cmp_t cmp = {.key = "counter",
                      /* BUG (variant blind): a compare that always holds */
                      .target = META_CMP_MOD_REV,
                      .op = mc->blind ? META_GT : META_EQ,
                      .num = mc->blind ? -1 : res->kv.mod_rev};
    meta_op_t put = {
        .type = META_OP_PUT, .key = "counter", .value = (const uint8_t *)buf, .value_len = len};
    cas_req_t *r = malloc(sizeof(*r));
    KVM_ASSERT(r != NULL);
    r->nd = nd;
    r->from = v;
    mc->attempts++;
    int rc = meta_txn(nd->m, &cmp, 1, &put, 1, NULL, 0, 200, on_txn, r);
    KVM_ASSERT(rc == 0);
}

static void node_next(void *arg)
{
    mc_node_t *nd = arg;
    nd->think = 0;
    int rc = meta_get(nd->m, "counter", 200, on_get, nd);
    KVM_ASSERT(rc == 0);
}

static void *mc_start(void *ctx, sim_t *sim, uint32_t node, env_t *env)
{
    mc_t *mc = ctx;
    mc_node_t *nd = calloc(1, sizeof(*nd));
    KVM_ASSERT(nd != NULL);
    *nd = (mc_node_t){.mc = mc, .env = env, .id = node};
    int rc = meta_open(&nd->m, env, mc->url, NULL);
    KVM_ASSERT(rc == 0);
    meta_memory_faults_t f = {.latency_min_ms = 1,
                              .latency_max_ms = 20,
                              .fail_ppm = 50000,
                              .fail_after_apply = (node % 2) == 0};
    meta_memory_set_faults(nd->m, &f);
    nd->think = env_timer_start(env, env_rand_u64(env) % (5 * SIM_MSG_NS), node_next, nd);
    (void)sim;
    return nd;
}

static void mc_stop(void *ctx, sim_t *sim, uint32_t node, void *state)
{
    mc_node_t *nd = state;
    nd->closing = true;
    env_timer_cancel(nd->env, nd->think);
    meta_close(nd->m); /* cancels pending calls: their callbacks free the requests */
    sim_drain_defers(sim, node);
    free(nd);
    (void)ctx;
}

static void restart_cb(void *arg)
{
    mc_t *mc = arg;
    for (uint32_t i = 0; i < mc->n; i++)
        sim_restart(mc->sim, i);
}

static void nemesis(void *arg)
{
    mc_t *mc = arg;
    uint32_t v = (uint32_t)sim_rand_range(mc->sim, 0, mc->n - 1);
    sim_crash(mc->sim, v);
    sim_schedule(mc->sim, sim_rand_range(mc->sim, 5, 50) * SIM_MSG_NS, restart_cb, mc);
    if (sim_now(mc->sim) < 2 * SIM_SEC_NS)
        sim_schedule(mc->sim, sim_rand_range(mc->sim, 20, 100) * SIM_MSG_NS, nemesis, mc);
}

static void on_final(void *arg, const meta_result_t *res)
{
    mc_t *mc = arg;
    if (res->rc != 0) {
        sim_fail(mc->sim, "final read failed: %s (%s)", kvmesh_errname(res->rc), res->errmsg);
        return;
    }
    mc->final_value = parse_val(&res->kv);
    mc->final_done = true;
}

static bool final_done(void *ctx)
{
    return ((mc_t *)ctx)->final_done;
}

static int mc_run(const sim_run_opts_t *ro, sim_result_t *res)
{
    const char *v = ro->variant ? ro->variant : "";
    if (*v && strcmp(v, "blind") != 0) {
        memset(res, 0, sizeof(*res));
        res->failed = true;
        snprintf(res->msg, sizeof(res->msg), "unknown variant '%s' (meta_cas knows blind)", v);
        return 1;
    }
    mc_t *mc = calloc(1, sizeof(*mc));
    KVM_ASSERT(mc != NULL);
    mc->blind = *v != '\0';
    sim_config_t cfg;
    sim_config_init(&cfg, ro);
    cfg.n_nodes = 3 + (uint32_t)(ro->seed % 3);
    mc->n = cfg.n_nodes;
    snprintf(mc->url, sizeof(mc->url), "memory://simcas%llu", (unsigned long long)ro->seed);
    sim_t *sim = sim_new(&cfg);
    mc->sim = sim;
    int rc = meta_open(&mc->world_m, sim_world_env(sim), mc->url, NULL);
    KVM_ASSERT(rc == 0);
    sim_set_node_hooks(sim, mc_start, mc_stop, mc);
    sim_start(sim);
    sim_schedule(sim, 30 * SIM_MSG_NS, nemesis, mc);
    sim_run_until(sim, 3 * SIM_SEC_NS);
    for (uint32_t i = 0; i < mc->n; i++)
        sim_crash(sim, i);
    rc = meta_get(mc->world_m, "counter", 1000, on_final, mc);
    KVM_ASSERT(rc == 0);
    sim_run_while_not(sim, final_done, mc, sim_now(sim) + SIM_SEC_NS);
    if (!sim_failed(sim)) {
        if (!mc->final_done)
            sim_fail(sim, "final read did not complete");
        else if (mc->final_value < mc->acked || mc->final_value > mc->acked + mc->indeterminate)
            sim_fail(sim, "counter %llu outside [acked %llu, acked + indeterminate %llu]",
                     (unsigned long long)mc->final_value, (unsigned long long)mc->acked,
                     (unsigned long long)(mc->acked + mc->indeterminate));
    }
    sim_log(sim, "attempts %llu acked %llu indeterminate %llu final %llu",
            (unsigned long long)mc->attempts, (unsigned long long)mc->acked,
            (unsigned long long)mc->indeterminate, (unsigned long long)mc->final_value);
    uint64_t w[2] = {mc->acked, mc->final_value};
    sim_trace_mix(sim, w, sizeof(w));
    meta_close(mc->world_m);
    /* world env deferred completions (none pending) are dropped with the world */
    int out = sim_finish(sim, res);
    free(mc);
    return out;
}

const sim_scenario_t scen_meta_cas = {
    .name = "meta_cas",
    .description = "runtimes race CAS on the in-memory metadata backend under faults and crashes",
    .run = mc_run,
};

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sim.c — the deterministic simulator's world: virtual clock, event queue, random streams, the
 * simulated env.h binding of each node, the simulated network, crashes and restarts, BUGGIFY and
 * the trace hash (see sim.h for the contract, docs/simulator.md for the guide).
 *
 * Invariants:
 *   - the clock never goes backwards: events are popped in (time, seq) order and seq is unique;
 *   - an event belongs to one node incarnation (or to the world); it runs only if that node is
 *     UP in that same incarnation when popped, else it is dropped without effect;
 *   - a live timer event is in the timer tree (by id) until it runs or is cancelled; cancelled
 *     events stay in the heap, flagged, and are freed when popped (lazy deletion);
 *   - every executed event is mixed into the trace hash before its callback runs, so two runs
 *     with equal hashes executed the same events at the same virtual times.
 */
#include "sim.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include <bsd/sys/tree.h>
#include <xxhash.h>

#include "core/rng.h"
#include "core/util.h"

enum sim_ev_kind {
    EV_TIMER = 1,
    EV_DEFER = 2,
    EV_MSG = 3,
    EV_NODE_CB = 4,
    EV_WORLD_CB = 5,
};

static const char *const ev_names[] = {"?", "timer", "defer", "msg", "node-cb", "world-cb"};

typedef struct sim_ev {
    uint64_t time, seq;
    uint32_t kind;
    uint32_t node; /* destination node, or SIM_WORLD */
    uint32_t inc;  /* destination incarnation at creation */
    bool cancelled;
    env_timer_id timer_id;
    RB_ENTRY(sim_ev) by_id;
    env_cb cb;
    void *arg;
    uint32_t from, type; /* EV_MSG */
    uint8_t *data;
    size_t len;
} sim_ev_t;

static int cmp_timer_id(const sim_ev_t *a, const sim_ev_t *b)
{
    return a->timer_id < b->timer_id ? -1 : (a->timer_id > b->timer_id ? 1 : 0);
}

RB_HEAD(sim_timer_tree, sim_ev);
/* libbsd's RB_GENERATE_STATIC expands to an undefined __unused; spell the attribute out */
#define SIM_RB_ATTR __attribute__((unused)) static
RB_GENERATE_INTERNAL(sim_timer_tree, sim_ev, by_id, cmp_timer_id, SIM_RB_ATTR)

typedef kvm_rng_t rng_t;

typedef struct sim_node {
    env_t env;
    sim_t *sim;
    uint32_t id;
    bool up;
    uint32_t inc;
    void *state;
    env_recv_fn recv;
    void *recv_ctx;
    rng_t rng;
    int64_t skew_ms;
    int32_t drift_ppm; /* local clocks run at (1e6 + drift_ppm) / 1e6 of virtual time */
    bool stopping;     /* inside its stop hook: a nested sim_crash is a no-op */
} sim_node_t;

struct sim {
    sim_config_t cfg;
    uint64_t now;
    uint64_t seq;
    uint64_t steps;
    uint64_t next_timer_id;
    /* heap */
    sim_ev_t **heap;
    size_t heap_len, heap_cap;
    struct sim_timer_tree timers;
    /* rng streams */
    rng_t world_rng, net_rng, bug_rng;
    /* nodes */
    sim_node_t nodes[SIM_MAX_NODES];
    sim_node_t world; /* the world env: id SIM_WORLD, always UP, cannot send */
    uint32_t n_nodes;
    sim_start_fn start;
    sim_stop_fn stop;
    void *hook_ctx;
    sim_check_fn check;
    void *check_ctx;
    /* network */
    sim_net_t net;
    bool blocked[SIM_MAX_NODES][SIM_MAX_NODES];
    /* outcome */
    XXH3_state_t *trace;
    bool failed;
    char fail_msg[512];
    uint64_t msgs_sent, msgs_delivered, msgs_dropped, msgs_duplicated, crashes;
};

/* ---- rng (xoshiro256**, seeded through splitmix64) ------------------------------------------ */

static void rng_derive(rng_t *r, uint64_t root, uint64_t a, uint64_t b)
{
    uint64_t words[3] = {root, a, b};
    uint64_t x = XXH3_64bits(words, sizeof(words));
    for (int i = 0; i < 4; i++)
        r->s[i] = kvm_splitmix64(&x);
}

static uint64_t rng_next(rng_t *r)
{
    return kvm_rng_next(r);
}

static uint64_t rng_range(rng_t *r, uint64_t lo, uint64_t hi)
{
    return kvm_rng_range(r, lo, hi);
}

static bool rng_chance(rng_t *r, double p)
{
    return kvm_rng_chance(r, p);
}

enum { STREAM_WORLD = 1, STREAM_NET = 2, STREAM_BUGGIFY = 3, STREAM_NODE = 4, STREAM_SKEW = 5 };

/* ---- trace ---------------------------------------------------------------------------------- */

static void trace_words(sim_t *sim, const uint64_t *w, size_t n)
{
    XXH3_64bits_update(sim->trace, w, n * sizeof(*w));
}

void sim_trace_mix(sim_t *sim, const void *data, size_t len)
{
    uint64_t hdr[2] = {0x5ce9a210u, len};
    trace_words(sim, hdr, 2);
    if (len)
        XXH3_64bits_update(sim->trace, data, len);
}

uint64_t sim_trace_hash(const sim_t *sim)
{
    return XXH3_64bits_digest(sim->trace);
}

bool sim_verbose(const sim_t *sim)
{
    return sim->cfg.verbose;
}

void sim_log(sim_t *sim, const char *fmt, ...)
{
    if (!sim->cfg.verbose)
        return;
    FILE *out = sim->cfg.out ? sim->cfg.out : stdout;
    fprintf(out, "%14.6f ms  ", (double)sim->now / 1e6);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(out, fmt, ap);
    va_end(ap);
    fputc('\n', out);
}

/* ---- failure -------------------------------------------------------------------------------- */

void sim_fail(sim_t *sim, const char *fmt, ...)
{
    if (sim->failed)
        return;
    sim->failed = true;
    char buf[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    snprintf(sim->fail_msg, sizeof(sim->fail_msg), "at t=%.6f ms step %llu: %s",
             (double)sim->now / 1e6, (unsigned long long)sim->steps, buf);
    sim_log(sim, "FAIL %s", buf);
}

bool sim_failed(const sim_t *sim)
{
    return sim->failed;
}

/* ---- event heap ----------------------------------------------------------------------------- */

static bool ev_less(const sim_ev_t *a, const sim_ev_t *b)
{
    return a->time < b->time || (a->time == b->time && a->seq < b->seq);
}

static void heap_swap(sim_t *sim, size_t i, size_t j)
{
    sim_ev_t *t = sim->heap[i];
    sim->heap[i] = sim->heap[j];
    sim->heap[j] = t;
}

static void heap_push(sim_t *sim, sim_ev_t *ev)
{
    if (sim->heap_len == sim->heap_cap) {
        size_t cap = sim->heap_cap ? sim->heap_cap * 2 : 1024;
        sim_ev_t **h = realloc(sim->heap, cap * sizeof(*h));
        KVM_ASSERT(h != NULL); /* a test harness: out of memory is fatal */
        sim->heap = h;
        sim->heap_cap = cap;
    }
    size_t i = sim->heap_len++;
    sim->heap[i] = ev;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!ev_less(sim->heap[i], sim->heap[p]))
            break;
        heap_swap(sim, i, p);
        i = p;
    }
}

static sim_ev_t *heap_pop(sim_t *sim)
{
    if (sim->heap_len == 0)
        return NULL;
    sim_ev_t *top = sim->heap[0];
    sim->heap[0] = sim->heap[--sim->heap_len];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < sim->heap_len && ev_less(sim->heap[l], sim->heap[m]))
            m = l;
        if (r < sim->heap_len && ev_less(sim->heap[r], sim->heap[m]))
            m = r;
        if (m == i)
            break;
        heap_swap(sim, i, m);
        i = m;
    }
    return top;
}

static void ev_free(sim_ev_t *ev)
{
    free(ev->data);
    free(ev);
}

/* Creates and queues an event; returns NULL (and fails the run) past SIM_EVENTS_MAX. */
static sim_ev_t *ev_add(sim_t *sim, uint32_t kind, uint32_t node, uint64_t delay_ns)
{
    if (sim->heap_len >= SIM_EVENTS_MAX) {
        sim_fail(sim, "event queue full (%u events): runaway scenario", SIM_EVENTS_MAX);
        return NULL;
    }
    sim_ev_t *ev = calloc(1, sizeof(*ev));
    KVM_ASSERT(ev != NULL);
    ev->time = delay_ns > UINT64_MAX - sim->now ? UINT64_MAX : sim->now + delay_ns;
    ev->seq = sim->seq++;
    ev->kind = kind;
    ev->node = node;
    ev->inc = node == SIM_WORLD ? 0 : sim->nodes[node].inc;
    heap_push(sim, ev);
    return ev;
}

/* ---- env ops -------------------------------------------------------------------------------- */

static sim_node_t *node_of(env_t *env)
{
    return (sim_node_t *)env->impl;
}

/* The node's monotonic clock: virtual time scaled by its drift (world env: no drift). */
static uint64_t local_ns(const sim_node_t *n, uint64_t t)
{
    if (n->drift_ppm == 0)
        return t;
    return (uint64_t)(((unsigned __int128)t * (uint64_t)(1000000 + n->drift_ppm)) / 1000000u);
}

/* Virtual time that must pass for d_ns to pass on the node's clock (rounded so that a timer
 * never fires early by the node's own clock). */
static uint64_t global_delay(const sim_node_t *n, uint64_t d_ns)
{
    if (n->drift_ppm == 0 || d_ns == 0)
        return d_ns;
    unsigned __int128 g = ((unsigned __int128)d_ns * 1000000u) / (uint64_t)(1000000 + n->drift_ppm);
    g += 2; /* covers both floors of local_ns() */
    return g > UINT64_MAX ? UINT64_MAX : (uint64_t)g;
}

static uint64_t op_now_ns(env_t *env)
{
    sim_node_t *n = node_of(env);
    return local_ns(n, n->sim->now);
}

static uint64_t op_wall_ms(env_t *env)
{
    sim_node_t *n = node_of(env);
    int64_t ms = (int64_t)n->sim->cfg.wall_base_ms +
                 (int64_t)(local_ns(n, n->sim->now) / 1000000u) + n->skew_ms;
    return ms < 0 ? 0 : (uint64_t)ms;
}

static uint64_t op_rand_u64(env_t *env)
{
    return rng_next(&node_of(env)->rng);
}

static env_timer_id op_timer_start(env_t *env, uint64_t delay_ns, env_cb cb, void *arg)
{
    sim_node_t *n = node_of(env);
    sim_t *sim = n->sim;
    KVM_ASSERT(cb != NULL);
    env_timer_id id = sim->next_timer_id++;
    if (!n->up)
        return id; /* work of a DOWN node is lost */
    sim_ev_t *ev = ev_add(sim, EV_TIMER, n->id, global_delay(n, delay_ns));
    if (!ev)
        return id;
    ev->timer_id = id;
    ev->cb = cb;
    ev->arg = arg;
    RB_INSERT(sim_timer_tree, &sim->timers, ev);
    return id;
}

static void op_timer_cancel(env_t *env, env_timer_id id)
{
    sim_t *sim = node_of(env)->sim;
    if (id == 0)
        return;
    sim_ev_t key = {.timer_id = id};
    sim_ev_t *ev = RB_FIND(sim_timer_tree, &sim->timers, &key);
    if (!ev)
        return;
    RB_REMOVE(sim_timer_tree, &sim->timers, ev);
    ev->cancelled = true;
}

static int op_defer(env_t *env, env_cb cb, void *arg)
{
    sim_node_t *n = node_of(env);
    KVM_ASSERT(cb != NULL);
    if (!n->up)
        return 0;
    sim_ev_t *ev = ev_add(n->sim, EV_DEFER, n->id, 0);
    if (!ev)
        return KVMESH_EAGAIN;
    ev->cb = cb;
    ev->arg = arg;
    return 0;
}

static int net_send(sim_t *sim, uint32_t from, uint32_t to, uint32_t type, const void *data,
                    size_t len);

static int op_send(env_t *env, env_node_t to, uint32_t type, const void *data, size_t len)
{
    sim_node_t *n = node_of(env);
    if (n->id == SIM_WORLD)
        return KVMESH_ENOTSUP; /* the world env has no network address */
    if (!n->up)
        return 0;
    return net_send(n->sim, n->id, to, type, data, len);
}

static void op_set_recv(env_t *env, env_recv_fn fn, void *ctx)
{
    sim_node_t *n = node_of(env);
    n->recv = fn;
    n->recv_ctx = ctx;
}

static env_node_t op_self(env_t *env)
{
    return node_of(env)->id;
}

static void *op_uv_loop(env_t *env)
{
    (void)env;
    return NULL;
}

static const struct env_ops sim_env_ops = {
    .now_ns = op_now_ns,
    .wall_ms = op_wall_ms,
    .rand_u64 = op_rand_u64,
    .timer_start = op_timer_start,
    .timer_cancel = op_timer_cancel,
    .defer = op_defer,
    .post = op_defer, /* one thread in the simulator: post is defer */
    .send = op_send,
    .set_recv = op_set_recv,
    .self = op_self,
    .uv_loop = op_uv_loop,
};

/* ---- network -------------------------------------------------------------------------------- */

bool sim_link_ok(const sim_t *sim, uint32_t from, uint32_t to)
{
    if (from == to)
        return true;
    return !sim->blocked[from][to];
}

static int net_send(sim_t *sim, uint32_t from, uint32_t to, uint32_t type, const void *data,
                    size_t len)
{
    if (to >= sim->n_nodes)
        return KVMESH_EINVAL;
    if (len > SIM_MSG_MAX)
        return KVMESH_ETOOBIG;
    sim->msgs_sent++;
    const sim_net_t *net = &sim->net;
    if (from != to) {
        if (!sim_link_ok(sim, from, to)) {
            sim->msgs_dropped++;
            sim_log(sim, "n%u -> n%u type %u dropped (partition)", from, to, type);
            return 0;
        }
        if (rng_chance(&sim->net_rng, net->drop_p)) {
            sim->msgs_dropped++;
            sim_log(sim, "n%u -> n%u type %u dropped", from, to, type);
            return 0;
        }
    }
    int copies = 1;
    if (from != to && rng_chance(&sim->net_rng, net->dup_p)) {
        copies = 2;
        sim->msgs_duplicated++;
    }
    for (int c = 0; c < copies; c++) {
        uint64_t delay = rng_range(&sim->net_rng, net->delay_min_ns,
                                   KVM_MAX(net->delay_min_ns, net->delay_max_ns));
        if (rng_chance(&sim->net_rng, net->reorder_p))
            delay += rng_range(&sim->net_rng, 0, net->reorder_max_ns);
        sim_ev_t *ev = ev_add(sim, EV_MSG, to, delay);
        if (!ev)
            return KVMESH_EAGAIN;
        ev->from = from;
        ev->type = type;
        ev->len = len;
        if (len) {
            ev->data = malloc(len);
            KVM_ASSERT(ev->data != NULL);
            memcpy(ev->data, data, len);
        }
    }
    return 0;
}

void sim_set_net(sim_t *sim, const sim_net_t *net)
{
    KVM_ASSERT(net->delay_min_ns <= net->delay_max_ns);
    sim->net = *net;
}

const sim_net_t *sim_get_net(const sim_t *sim)
{
    return &sim->net;
}

void sim_partition(sim_t *sim, const uint32_t *group)
{
    for (uint32_t i = 0; i < sim->n_nodes; i++)
        for (uint32_t j = 0; j < sim->n_nodes; j++)
            sim->blocked[i][j] = group[i] != group[j];
    if (sim->cfg.verbose) {
        char buf[4 * SIM_MAX_NODES + 1] = "";
        size_t off = 0;
        for (uint32_t i = 0; i < sim->n_nodes && off + 5 < sizeof(buf); i++)
            off += (size_t)snprintf(buf + off, sizeof(buf) - off, "%u ", group[i]);
        sim_log(sim, "partition groups: %s", buf);
    }
    uint64_t w[2] = {0xa27100u, sim->n_nodes};
    trace_words(sim, w, 2);
    for (uint32_t i = 0; i < sim->n_nodes; i++) {
        uint64_t g = group[i];
        trace_words(sim, &g, 1);
    }
}

void sim_block(sim_t *sim, uint32_t from, uint32_t to, bool blocked)
{
    KVM_ASSERT(from < sim->n_nodes && to < sim->n_nodes);
    sim->blocked[from][to] = blocked;
    uint64_t w[4] = {0xb10c0u, from, to, blocked};
    trace_words(sim, w, 4);
    sim_log(sim, "link n%u -> n%u %s", from, to, blocked ? "blocked" : "open");
}

void sim_isolate(sim_t *sim, uint32_t node)
{
    KVM_ASSERT(node < sim->n_nodes);
    for (uint32_t i = 0; i < sim->n_nodes; i++) {
        if (i == node)
            continue;
        sim->blocked[node][i] = true;
        sim->blocked[i][node] = true;
    }
    uint64_t w[2] = {0x150u, node};
    trace_words(sim, w, 2);
    sim_log(sim, "isolate n%u", node);
}

void sim_heal(sim_t *sim)
{
    memset(sim->blocked, 0, sizeof(sim->blocked));
    uint64_t w[1] = {0x4ea1u};
    trace_words(sim, w, 1);
    sim_log(sim, "heal");
}

/* ---- nodes ---------------------------------------------------------------------------------- */

env_t *sim_world_env(sim_t *sim)
{
    return &sim->world.env;
}

env_t *sim_env(sim_t *sim, uint32_t node)
{
    KVM_ASSERT(node < sim->n_nodes);
    return &sim->nodes[node].env;
}

void *sim_node_state(sim_t *sim, uint32_t node)
{
    KVM_ASSERT(node < sim->n_nodes);
    return sim->nodes[node].state;
}

bool sim_node_up(const sim_t *sim, uint32_t node)
{
    KVM_ASSERT(node < sim->n_nodes);
    return sim->nodes[node].up;
}

uint32_t sim_node_incarnation(const sim_t *sim, uint32_t node)
{
    KVM_ASSERT(node < sim->n_nodes);
    return sim->nodes[node].inc;
}

static void node_bring_up(sim_t *sim, sim_node_t *n)
{
    n->inc++;
    n->up = true;
    n->recv = NULL;
    n->recv_ctx = NULL;
    rng_derive(&n->rng, sim->cfg.seed, STREAM_NODE + ((uint64_t)n->id << 8), n->inc);
    uint64_t w[3] = {0x5747u, n->id, n->inc};
    trace_words(sim, w, 3);
    n->state = sim->start ? sim->start(sim->hook_ctx, sim, n->id, &n->env) : NULL;
}

static void node_bring_down(sim_t *sim, sim_node_t *n)
{
    n->stopping = true;
    if (sim->stop)
        sim->stop(sim->hook_ctx, sim, n->id, n->state);
    n->stopping = false;
    n->state = NULL;
    n->up = false;
    n->inc++;
    n->recv = NULL;
    n->recv_ctx = NULL;
}

void sim_crash(sim_t *sim, uint32_t node)
{
    KVM_ASSERT(node < sim->n_nodes);
    sim_node_t *n = &sim->nodes[node];
    if (!n->up || n->stopping)
        return;
    sim_log(sim, "crash n%u (incarnation %u)", node, n->inc);
    uint64_t w[3] = {0xc2a5u, node, n->inc};
    trace_words(sim, w, 3);
    sim->crashes++;
    node_bring_down(sim, n);
}

void sim_restart(sim_t *sim, uint32_t node)
{
    KVM_ASSERT(node < sim->n_nodes);
    sim_node_t *n = &sim->nodes[node];
    if (n->up)
        return;
    node_bring_up(sim, n);
    sim_log(sim, "restart n%u (incarnation %u)", node, n->inc);
}

/* ---- world ---------------------------------------------------------------------------------- */

void sim_config_init(sim_config_t *cfg, const sim_run_opts_t *ro)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->seed = ro ? ro->seed : 1;
    cfg->n_nodes = 3;
    cfg->net.delay_min_ns = 1 * SIM_MSG_NS;
    cfg->net.delay_max_ns = 10 * SIM_MSG_NS;
    cfg->max_steps = 0;
    cfg->buggify = true;
    cfg->verbose = ro ? ro->verbose : false;
    cfg->out = ro && ro->out ? ro->out : stdout;
}

sim_t *sim_new(const sim_config_t *cfg)
{
    KVM_ASSERT(cfg->n_nodes >= 1 && cfg->n_nodes <= SIM_MAX_NODES);
    KVM_ASSERT(cfg->net.delay_min_ns <= cfg->net.delay_max_ns);
    KVM_ASSERT(cfg->clock_drift_max_ppm <= SIM_DRIFT_MAX_PPM);
    sim_t *sim = calloc(1, sizeof(*sim));
    if (!sim)
        return NULL;
    sim->cfg = *cfg;
    if (!sim->cfg.max_steps)
        sim->cfg.max_steps = 10u * 1000 * 1000;
    if (!sim->cfg.wall_base_ms)
        sim->cfg.wall_base_ms = 1780000000000ull; /* 2026-05-28, fixed for determinism */
    if (!sim->cfg.out)
        sim->cfg.out = stdout;
    sim->trace = XXH3_createState();
    if (!sim->trace) {
        free(sim);
        return NULL;
    }
    XXH3_64bits_reset_withSeed(sim->trace, 0);
    sim->next_timer_id = 1;
    sim->net = cfg->net;
    RB_INIT(&sim->timers);
    rng_derive(&sim->world_rng, cfg->seed, STREAM_WORLD, 0);
    rng_derive(&sim->net_rng, cfg->seed, STREAM_NET, 0);
    rng_derive(&sim->bug_rng, cfg->seed, STREAM_BUGGIFY, 0);
    rng_t skew;
    rng_derive(&skew, cfg->seed, STREAM_SKEW, 0);
    sim->n_nodes = cfg->n_nodes;
    for (uint32_t i = 0; i < cfg->n_nodes; i++) {
        sim_node_t *n = &sim->nodes[i];
        n->env.ops = &sim_env_ops;
        n->env.impl = n;
        n->sim = sim;
        n->id = i;
        uint64_t m = cfg->clock_skew_max_ms;
        n->skew_ms = m ? (int64_t)rng_range(&skew, 0, 2 * m) - (int64_t)m : 0;
        uint64_t d = cfg->clock_drift_max_ppm;
        n->drift_ppm = d ? (int32_t)((int64_t)rng_range(&skew, 0, 2 * d) - (int64_t)d) : 0;
    }
    sim->world.env.ops = &sim_env_ops;
    sim->world.env.impl = &sim->world;
    sim->world.sim = sim;
    sim->world.id = SIM_WORLD;
    sim->world.up = true;
    rng_derive(&sim->world.rng, cfg->seed, STREAM_NODE + ((uint64_t)SIM_WORLD << 8), 0);
    uint64_t w[2] = {cfg->seed, cfg->n_nodes};
    trace_words(sim, w, 2);
    return sim;
}

void sim_set_node_hooks(sim_t *sim, sim_start_fn start, sim_stop_fn stop, void *ctx)
{
    sim->start = start;
    sim->stop = stop;
    sim->hook_ctx = ctx;
}

void sim_set_invariant(sim_t *sim, sim_check_fn fn, void *ctx)
{
    sim->check = fn;
    sim->check_ctx = ctx;
}

void sim_start(sim_t *sim)
{
    for (uint32_t i = 0; i < sim->n_nodes; i++)
        if (!sim->nodes[i].up)
            node_bring_up(sim, &sim->nodes[i]);
}

void sim_free(sim_t *sim)
{
    if (!sim)
        return;
    for (uint32_t i = 0; i < sim->n_nodes; i++)
        if (sim->nodes[i].up)
            node_bring_down(sim, &sim->nodes[i]);
    for (size_t i = 0; i < sim->heap_len; i++)
        ev_free(sim->heap[i]);
    free(sim->heap);
    XXH3_freeState(sim->trace);
    free(sim);
}

int sim_finish(sim_t *sim, sim_result_t *res)
{
    int failed = sim->failed ? 1 : 0;
    if (res) {
        memset(res, 0, sizeof(*res));
        res->failed = sim->failed;
        snprintf(res->msg, sizeof(res->msg), "%s", sim->fail_msg);
        res->trace_hash = sim_trace_hash(sim);
        res->steps = sim->steps;
        res->end_ns = sim->now;
        res->msgs_sent = sim->msgs_sent;
        res->msgs_delivered = sim->msgs_delivered;
        res->msgs_dropped = sim->msgs_dropped;
        res->msgs_duplicated = sim->msgs_duplicated;
        res->crashes = sim->crashes;
    }
    sim_free(sim);
    return failed;
}

uint64_t sim_now(const sim_t *sim)
{
    return sim->now;
}

uint64_t sim_steps(const sim_t *sim)
{
    return sim->steps;
}

uint32_t sim_n_nodes(const sim_t *sim)
{
    return sim->n_nodes;
}

uint64_t sim_rand_u64(sim_t *sim)
{
    return rng_next(&sim->world_rng);
}

uint64_t sim_rand_range(sim_t *sim, uint64_t lo, uint64_t hi)
{
    return rng_range(&sim->world_rng, lo, hi);
}

bool sim_chance(sim_t *sim, double p)
{
    return rng_chance(&sim->world_rng, p);
}

void sim_schedule(sim_t *sim, uint64_t delay_ns, env_cb cb, void *arg)
{
    KVM_ASSERT(cb != NULL);
    sim_ev_t *ev = ev_add(sim, EV_WORLD_CB, SIM_WORLD, delay_ns);
    if (!ev)
        return;
    ev->cb = cb;
    ev->arg = arg;
}

void sim_schedule_on(sim_t *sim, uint32_t node, uint64_t delay_ns, env_cb cb, void *arg)
{
    KVM_ASSERT(node < sim->n_nodes && cb != NULL);
    if (!sim->nodes[node].up)
        return;
    sim_ev_t *ev = ev_add(sim, EV_NODE_CB, node, delay_ns);
    if (!ev)
        return;
    ev->cb = cb;
    ev->arg = arg;
}

bool sim_buggify(sim_t *sim, const char *site, double p)
{
    if (!sim->cfg.buggify)
        return false;
    uint64_t h = XXH3_64bits_withSeed(site, strlen(site), sim->cfg.seed ^ 0xb0661f7ull);
    if ((h & 3) != 0)
        return false; /* site inactive for this run */
    bool fire = rng_chance(&sim->bug_rng, p);
    if (fire)
        sim_log(sim, "buggify %s", site);
    return fire;
}

void sim_drain_defers(sim_t *sim, uint32_t node)
{
    KVM_ASSERT(node < sim->n_nodes);
    sim_node_t *n = &sim->nodes[node];
    for (uint32_t round = 0; round < SIM_DRAIN_MAX; round++) {
        /* the earliest (by seq) runnable defer of this incarnation */
        sim_ev_t *first = NULL;
        for (size_t i = 0; i < sim->heap_len; i++) {
            sim_ev_t *ev = sim->heap[i];
            if (ev->kind == EV_DEFER && !ev->cancelled && ev->node == node && ev->inc == n->inc &&
                (!first || ev->seq < first->seq))
                first = ev;
        }
        if (!first)
            return;
        first->cancelled = true; /* consumed here; freed when popped */
        uint64_t w[3] = {0xd2a1u, node, first->seq};
        trace_words(sim, w, 3);
        sim_log(sim, "n%u defer (drained)", node);
        first->cb(first->arg);
    }
    sim_fail(sim, "sim_drain_defers: node n%u still deferring after %u callbacks", node,
             SIM_DRAIN_MAX);
}

/* ---- running -------------------------------------------------------------------------------- */

/* Whether ev may run now; drops events of other incarnations, cancelled timers, cut links. */
static bool ev_live(sim_t *sim, sim_ev_t *ev)
{
    if (ev->cancelled)
        return false;
    if (ev->kind == EV_TIMER)
        RB_REMOVE(sim_timer_tree, &sim->timers, ev);
    if (ev->node == SIM_WORLD)
        return true;
    sim_node_t *n = &sim->nodes[ev->node];
    bool live = n->up && n->inc == ev->inc;
    if (ev->kind == EV_MSG) {
        if (live && !sim_link_ok(sim, ev->from, ev->node)) {
            sim_log(sim, "n%u -> n%u type %u lost in flight (partition)", ev->from, ev->node,
                    ev->type);
            live = false;
        } else if (live && !n->recv) {
            sim_log(sim, "n%u -> n%u type %u: no receiver", ev->from, ev->node, ev->type);
            live = false;
        }
        if (!live)
            sim->msgs_dropped++;
    }
    return live;
}

static void ev_trace(sim_t *sim, const sim_ev_t *ev)
{
    uint64_t w[6] = {ev->time, ev->node, ev->kind, ev->timer_id, ev->from, ev->type};
    trace_words(sim, w, 6);
    if (ev->kind == EV_MSG) {
        uint64_t l = ev->len;
        trace_words(sim, &l, 1);
        if (ev->len)
            XXH3_64bits_update(sim->trace, ev->data, ev->len);
    }
    if (sim->cfg.verbose) {
        if (ev->kind == EV_MSG)
            sim_log(sim, "n%u <- n%u msg type %u len %zu", ev->node, ev->from, ev->type, ev->len);
        else if (ev->node == SIM_WORLD)
            sim_log(sim, "world %s", ev_names[ev->kind]);
        else if (ev->kind == EV_TIMER)
            sim_log(sim, "n%u timer %llu", ev->node, (unsigned long long)ev->timer_id);
        else
            sim_log(sim, "n%u %s", ev->node, ev_names[ev->kind]);
    }
}

static void ev_exec(sim_t *sim, sim_ev_t *ev)
{
    if (ev->kind == EV_MSG) {
        sim_node_t *n = &sim->nodes[ev->node];
        env_msg_t msg = {
            .from = ev->from, .to = ev->node, .type = ev->type, .data = ev->data, .len = ev->len};
        sim->msgs_delivered++;
        n->recv(n->recv_ctx, &msg);
    } else {
        ev->cb(ev->arg);
    }
}

/* Runs the first live event with time <= limit. Returns false when there is none (or failed). */
static bool step_limit(sim_t *sim, uint64_t limit)
{
    while (!sim->failed && sim->heap_len > 0 && sim->heap[0]->time <= limit) {
        sim_ev_t *ev = heap_pop(sim);
        KVM_ASSERT(ev->time >= sim->now);
        sim->now = ev->time;
        if (!ev_live(sim, ev)) {
            ev_free(ev);
            continue;
        }
        sim->steps++;
        ev_trace(sim, ev);
        ev_exec(sim, ev);
        ev_free(ev);
        if (!sim->failed && sim->check && sim->check(sim->check_ctx, sim) != 0)
            sim_fail(sim, "invariant check failed");
        if (!sim->failed && sim->steps >= sim->cfg.max_steps)
            sim_fail(sim, "step budget of %llu steps exhausted (livelock or undersized budget)",
                     (unsigned long long)sim->cfg.max_steps);
        return true;
    }
    return false;
}

bool sim_step(sim_t *sim)
{
    return step_limit(sim, UINT64_MAX);
}

sim_stop_t sim_run_until(sim_t *sim, uint64_t t_ns)
{
    while (step_limit(sim, t_ns))
        ;
    if (sim->failed)
        return SIM_FAILED;
    bool idle = sim->heap_len == 0;
    if (t_ns > sim->now)
        sim->now = t_ns;
    return idle ? SIM_IDLE : SIM_REACHED;
}

sim_stop_t sim_run_for(sim_t *sim, uint64_t d_ns)
{
    return sim_run_until(sim, d_ns > UINT64_MAX - sim->now ? UINT64_MAX : sim->now + d_ns);
}

sim_stop_t sim_run_while_not(sim_t *sim, bool (*pred)(void *ctx), void *ctx, uint64_t deadline_ns)
{
    for (;;) {
        if (sim->failed)
            return SIM_FAILED;
        if (pred(ctx))
            return SIM_REACHED;
        if (!step_limit(sim, deadline_ns))
            break;
    }
    if (sim->failed)
        return SIM_FAILED;
    if (pred(ctx))
        return SIM_REACHED;
    if (sim->heap_len > 0 && deadline_ns > sim->now)
        sim->now = deadline_ns;
    return SIM_IDLE;
}

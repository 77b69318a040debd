/* SPDX-License-Identifier: Apache-2.0 */
/*
 * scen_toy_register.c — the toy scenario that exercises every simulator knob: a multi-writer
 * atomic register replicated ABD-style over R replicas (majority quorums, retransmission on a
 * timer), driven by C clients under drops, duplicates, reorders, partitions, one-way link cuts,
 * replica crashes and restarts, and BUGGIFY faults.
 *
 * Protocol (every message is a few little-endian u64 words; `tag` names one phase of one op):
 *   write(v): QUERY all -> majority of QUERY_REPLY(ver, val) -> ver' = (max ts + 1, client)
 *             -> STORE(ver', v) all -> majority of STORE_ACK -> done
 *   read():   QUERY all -> majority -> (ver, val) = max -> STORE(ver, val) all (write-back)
 *             -> majority of STORE_ACK -> return val
 *   replica:  QUERY -> reply its (ver, val); STORE -> keep it if newer (durably: the disk lives in
 *             the scenario and survives crashes), then STORE_ACK.
 *   Clients resend the current phase's message to replicas that have not answered every RTO.
 *
 * Checks:
 *   - per step: no replica's durable version ever decreases (across crashes too);
 *   - at every completion (atomicity, with versions as the witness order): an op that completed
 *     before op X started has a version < X's (X a write) or <= X's (X a read); a read returns
 *     exactly the value written with its version;
 *   - liveness: after the faults stop (heal, restart all, mild network) every client finishes
 *     its workload within LIVENESS_NS + (ops left) * TOY_OP_HEALED_NS of virtual time.
 *
 * Test-only variants (--variant): "broken" reads from a single replica without write-back (stale
 * reads); "dupcount" counts duplicated acks twice (a quorum of one replica); "noretry" never
 * retransmits (the liveness check must fire). The checks must catch each within the CI seeds.
 */
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "sim.h"

#define TOY_MAX_REPLICAS   5
#define TOY_MAX_CLIENTS    3
#define TOY_OPS_PER_CLIENT 25
#define TOY_RTO_NS         (15 * SIM_MSG_NS)
#define TOY_FAULT_PER_OP   (40 * SIM_MSG_NS)  /* fault window per op of a client's workload */
#define LIVENESS_NS        (3 * SIM_SEC_NS)   /* after heal: the op in flight completes... */
#define TOY_OP_HEALED_NS   (150 * SIM_MSG_NS) /* ...and each remaining op within this */
#define TOY_SLOW_MAX       8                  /* delayed replies a replica holds at once */
#define TOY_WRITTEN_MAX    4096

enum { MSG_QUERY = 1, MSG_QUERY_REPLY = 2, MSG_STORE = 3, MSG_STORE_ACK = 4 };
enum { OP_READ = 1, OP_WRITE = 2 };

/*
 * Client op phases:
 *
 *   IDLE --start_op--> QUERY --majority--> STORE --majority--> IDLE (next op after think time)
 *                         |                                 \--(last op)--> DONE
 *                         \--(variant broken: read done)--> IDLE / DONE
 */
enum client_phase { PH_IDLE, PH_QUERY, PH_STORE, PH_DONE };

typedef struct toy toy_t;

typedef struct crash_req {
    toy_t *toy;
    uint32_t node;
} crash_req_t;

typedef struct slow_reply {
    bool used;
    uint32_t to, type;
    uint64_t w[3];
    struct replica *r;
} slow_reply_t;

typedef struct replica {
    toy_t *toy;
    env_t *env;
    uint32_t id;
    slow_reply_t slow[TOY_SLOW_MAX];
} replica_t;

typedef struct client {
    toy_t *toy;
    env_t *env;
    uint32_t id, cid;
    uint32_t ops_left;
    enum client_phase phase;
    int64_t hist_id;
    uint32_t kind;
    uint64_t tag;
    uint64_t val; /* value being written */
    uint32_t replied_mask, replies;
    uint64_t best_ver, best_val;
    uint64_t op_ver, op_val;
    env_timer_id rto;
} client_t;

struct toy {
    sim_t *sim;
    sim_hist_t *hist;
    uint32_t R, C;
    bool broken_read, broken_dup, broken_noretry;
    struct {
        uint64_t ver, val;
    } disk[TOY_MAX_REPLICAS];
    uint64_t last_ver[TOY_MAX_REPLICAS];
    struct {
        uint64_t ver, val;
    } written[TOY_WRITTEN_MAX];
    size_t n_written;
    uint32_t ops_per_client;
    uint32_t clients_done;
    bool faults_on;
    uint64_t fault_end_ns;
    crash_req_t crash_reqs[TOY_MAX_REPLICAS];
};

static uint32_t quorum(const toy_t *t)
{
    return t->R / 2 + 1;
}

static void send_words(env_t *env, uint32_t to, uint32_t type, const uint64_t *w, size_t n)
{
    int rc = env_send(env, to, type, w, n * sizeof(*w));
    KVM_ASSERT(rc == 0);
}

static bool read_words(const env_msg_t *m, uint64_t *w, size_t n)
{
    if (m->len != n * sizeof(*w))
        return false;
    memcpy(w, m->data, m->len);
    return true;
}

/* ---- replica -------------------------------------------------------------------------------- */

static void slow_fire(void *arg)
{
    slow_reply_t *s = arg;
    send_words(s->r->env, s->to, s->type, s->w, s->type == MSG_QUERY_REPLY ? 3 : 1);
    s->used = false;
}

static void replica_reply(replica_t *r, uint32_t to, uint32_t type, const uint64_t *w, size_t n)
{
    toy_t *t = r->toy;
    if (SIM_BUGGIFY(t->sim, "toy.slow_reply")) {
        for (int i = 0; i < TOY_SLOW_MAX; i++) {
            slow_reply_t *s = &r->slow[i];
            if (s->used)
                continue;
            *s = (slow_reply_t){.used = true, .to = to, .type = type, .r = r};
            memcpy(s->w, w, n * sizeof(*w));
            env_timer_start(r->env, 5 * TOY_RTO_NS, slow_fire, s);
            return;
        }
    }
    send_words(r->env, to, type, w, n);
}

static void restart_cb(void *arg)
{
    crash_req_t *c = arg;
    sim_restart(c->toy->sim, c->node);
}

static void crash_cb(void *arg)
{
    crash_req_t *c = arg;
    toy_t *t = c->toy;
    sim_crash(t->sim, c->node);
    uint64_t back = sim_rand_range(t->sim, 5 * SIM_MSG_NS, 80 * SIM_MSG_NS);
    sim_schedule(t->sim, back, restart_cb, c);
}

static void replica_recv(void *ctx, const env_msg_t *m)
{
    replica_t *r = ctx;
    toy_t *t = r->toy;
    uint64_t w[3];
    if (m->type == MSG_QUERY && read_words(m, w, 1)) {
        uint64_t out[3] = {w[0], t->disk[r->id].ver, t->disk[r->id].val};
        replica_reply(r, m->from, MSG_QUERY_REPLY, out, 3);
    } else if (m->type == MSG_STORE && read_words(m, w, 3)) {
        if (w[1] > t->disk[r->id].ver) {
            t->disk[r->id].ver = w[1];
            t->disk[r->id].val = w[2];
        }
        if (t->faults_on && SIM_BUGGIFY(t->sim, "toy.crash_after_store")) {
            /* stored durably but the ack is lost with the crash */
            t->crash_reqs[r->id] = (crash_req_t){t, r->id};
            sim_schedule(t->sim, 0, crash_cb, &t->crash_reqs[r->id]);
            return;
        }
        replica_reply(r, m->from, MSG_STORE_ACK, w, 1);
    } else {
        sim_fail(t->sim, "replica n%u: malformed message type %u len %zu", r->id, m->type, m->len);
    }
}

/* ---- checker -------------------------------------------------------------------------------- */

static bool written_val(const toy_t *t, uint64_t ver, uint64_t *val)
{
    if (ver == 0) {
        *val = 0;
        return true;
    }
    for (size_t i = 0; i < t->n_written; i++) {
        if (t->written[i].ver == ver) {
            *val = t->written[i].val;
            return true;
        }
    }
    return false;
}

static void check_op(toy_t *t, const sim_op_t *x)
{
    const char *what = x->kind == OP_WRITE ? "write" : "read";
    if (x->kind == OP_READ) {
        uint64_t v;
        if (!written_val(t, x->out_a, &v) || v != x->out_b) {
            sim_fail(t->sim, "read by client %u returned version %llu value %llu never written",
                     x->client, (unsigned long long)x->out_a, (unsigned long long)x->out_b);
            return;
        }
    }
    for (size_t i = 0; i < sim_hist_len(t->hist); i++) {
        const sim_op_t *p = sim_hist_get(t->hist, i);
        if (!p->done || p->status != 0 || p->end_ns >= x->start_ns)
            continue;
        bool bad = x->kind == OP_WRITE ? p->out_a >= x->out_a : p->out_a > x->out_a;
        if (bad) {
            sim_fail(t->sim,
                     "atomicity: %s by client %u [%.3f, %.3f] ms has version %llu, but op #%zu "
                     "by client %u completed at %.3f ms with version %llu",
                     what, x->client, (double)x->start_ns / 1e6, (double)x->end_ns / 1e6,
                     (unsigned long long)x->out_a, i, p->client, (double)p->end_ns / 1e6,
                     (unsigned long long)p->out_a);
            return;
        }
    }
}

static int toy_invariant(void *ctx, sim_t *sim)
{
    toy_t *t = ctx;
    for (uint32_t i = 0; i < t->R; i++) {
        if (t->disk[i].ver < t->last_ver[i]) {
            sim_fail(sim, "replica n%u durable version went back from %llu to %llu", i,
                     (unsigned long long)t->last_ver[i], (unsigned long long)t->disk[i].ver);
            return 1;
        }
        t->last_ver[i] = t->disk[i].ver;
    }
    return 0;
}

/* ---- client --------------------------------------------------------------------------------- */

static void client_start_op(void *arg);

static const char *const phase_names[] = {"idle", "query", "store", "done"};

/* The one place a client changes phase; asserts the transitions of the diagram above. */
static void client_set_phase(client_t *c, enum client_phase to)
{
    enum client_phase from = c->phase;
    bool ok = (from == PH_IDLE && to == PH_QUERY) || (from == PH_QUERY && to == PH_STORE) ||
              ((from == PH_QUERY || from == PH_STORE) && (to == PH_IDLE || to == PH_DONE));
    KVM_ASSERT(ok);
    c->phase = to;
    sim_log(c->toy->sim, "client %u: %s -> %s", c->cid, phase_names[from], phase_names[to]);
}

static void client_send_phase(client_t *c)
{
    toy_t *t = c->toy;
    for (uint32_t r = 0; r < t->R; r++) {
        if (c->replied_mask & (1u << r))
            continue;
        if (c->phase == PH_QUERY) {
            uint64_t w[1] = {c->tag};
            send_words(c->env, r, MSG_QUERY, w, 1);
        } else {
            uint64_t w[3] = {c->tag, c->op_ver, c->op_val};
            send_words(c->env, r, MSG_STORE, w, 3);
        }
    }
}

static void client_rto(void *arg)
{
    client_t *c = arg;
    c->rto = 0;
    if (c->phase != PH_QUERY && c->phase != PH_STORE)
        return;
    if (!c->toy->broken_noretry) /* BUG (variant noretry): a lost message is never resent */
        client_send_phase(c);
    c->rto = env_timer_start(c->env, TOY_RTO_NS, client_rto, c);
}

static void client_enter(client_t *c, enum client_phase ph)
{
    client_set_phase(c, ph);
    c->tag++;
    c->replied_mask = 0;
    c->replies = 0;
    env_timer_cancel(c->env, c->rto);
    client_send_phase(c);
    c->rto = env_timer_start(c->env, TOY_RTO_NS, client_rto, c);
}

static void client_complete(client_t *c)
{
    toy_t *t = c->toy;
    env_timer_cancel(c->env, c->rto);
    c->rto = 0;
    const sim_op_t *op = sim_hist_end(t->hist, c->hist_id, 0, c->op_ver, c->op_val);
    sim_log(t->sim, "client %u %s done: version %llu value %llu", c->cid,
            c->kind == OP_WRITE ? "write" : "read", (unsigned long long)c->op_ver,
            (unsigned long long)c->op_val);
    check_op(t, op);
    if (--c->ops_left == 0) {
        client_set_phase(c, PH_DONE);
        t->clients_done++;
        return;
    }
    client_set_phase(c, PH_IDLE);
    uint64_t think = env_rand_u64(c->env) % (20 * SIM_MSG_NS);
    c->rto = env_timer_start(c->env, think, client_start_op, c);
}

static void client_quorum_reached(client_t *c)
{
    toy_t *t = c->toy;
    if (c->phase == PH_QUERY) {
        if (c->kind == OP_WRITE) {
            c->op_ver = ((c->best_ver >> 8) + 1) << 8 | (c->cid + 1);
            c->op_val = c->val;
            if (t->n_written == TOY_WRITTEN_MAX) {
                sim_fail(t->sim, "written table full");
                return;
            }
            t->written[t->n_written].ver = c->op_ver;
            t->written[t->n_written].val = c->op_val;
            t->n_written++;
        } else {
            c->op_ver = c->best_ver;
            c->op_val = c->best_val;
            if (t->broken_read) {
                client_complete(c); /* BUG (variant): no write-back */
                return;
            }
        }
        client_enter(c, PH_STORE);
    } else {
        client_complete(c);
    }
}

static void client_recv(void *ctx, const env_msg_t *m)
{
    client_t *c = ctx;
    toy_t *t = c->toy;
    uint64_t w[3];
    bool ok = (m->type == MSG_QUERY_REPLY && read_words(m, w, 3)) ||
              (m->type == MSG_STORE_ACK && read_words(m, w, 1));
    if (!ok || m->from >= t->R) {
        sim_fail(t->sim, "client %u: malformed message type %u len %zu from n%u", c->cid, m->type,
                 m->len, m->from);
        return;
    }
    if (w[0] != c->tag)
        return; /* an old phase's (or duplicated) reply */
    if ((m->type == MSG_QUERY_REPLY) != (c->phase == PH_QUERY))
        return;
    uint32_t bit = 1u << m->from;
    if ((c->replied_mask & bit) && !t->broken_dup)
        return; /* duplicate */
    c->replied_mask |= bit;
    c->replies++;
    if (m->type == MSG_QUERY_REPLY && w[1] >= c->best_ver) {
        c->best_ver = w[1];
        c->best_val = w[2];
    }
    uint32_t need = quorum(t);
    if (t->broken_read && c->phase == PH_QUERY && c->kind == OP_READ)
        need = 1; /* BUG (variant): read from any one replica */
    if (c->replies == need)
        client_quorum_reached(c);
}

static void client_start_op(void *arg)
{
    client_t *c = arg;
    toy_t *t = c->toy;
    c->rto = 0;
    c->kind = (env_rand_u64(c->env) & 1) ? OP_WRITE : OP_READ;
    c->val = c->kind == OP_WRITE ? (env_rand_u64(c->env) | 1) : 0;
    c->best_ver = 0;
    c->best_val = 0;
    c->hist_id = sim_hist_begin(t->hist, c->cid, c->kind, c->val, 0);
    if (c->hist_id < 0)
        return;
    client_enter(c, PH_QUERY);
}

/* ---- node hooks and nemesis ----------------------------------------------------------------- */

static void *toy_start(void *ctx, sim_t *sim, uint32_t node, env_t *env)
{
    toy_t *t = ctx;
    if (node < t->R) {
        replica_t *r = calloc(1, sizeof(*r));
        KVM_ASSERT(r != NULL);
        *r = (replica_t){.toy = t, .env = env, .id = node};
        env_set_recv(env, replica_recv, r);
        return r;
    }
    KVM_ASSERT(sim_node_incarnation(sim, node) == 1); /* clients never crash */
    client_t *c = calloc(1, sizeof(*c));
    KVM_ASSERT(c != NULL);
    *c = (client_t){.toy = t, .env = env, .id = node, .cid = node - t->R};
    c->ops_left = t->ops_per_client;
    env_set_recv(env, client_recv, c);
    c->rto = env_timer_start(env, env_rand_u64(env) % (10 * SIM_MSG_NS), client_start_op, c);
    return c;
}

static void toy_stop(void *ctx, sim_t *sim, uint32_t node, void *state)
{
    (void)ctx;
    (void)sim;
    (void)node;
    free(state); /* replica slow replies live inside it; their timers are dropped by the sim */
}

static void nemesis(void *arg)
{
    toy_t *t = arg;
    sim_t *sim = t->sim;
    if (!t->faults_on)
        return;
    uint32_t n = t->R + t->C;
    uint64_t roll = sim_rand_range(sim, 0, 99);
    if (roll < 25) {
        uint32_t group[SIM_MAX_NODES];
        for (uint32_t i = 0; i < n; i++)
            group[i] = (uint32_t)sim_rand_range(sim, 0, 1);
        sim_partition(sim, group);
    } else if (roll < 45) {
        sim_heal(sim);
    } else if (roll < 65) {
        uint32_t r = (uint32_t)sim_rand_range(sim, 0, t->R - 1);
        if (sim_node_up(sim, r)) {
            t->crash_reqs[r] = (crash_req_t){t, r};
            crash_cb(&t->crash_reqs[r]);
        }
    } else if (roll < 72) {
        sim_isolate(sim, (uint32_t)sim_rand_range(sim, 0, n - 1));
    } else if (roll < 80) {
        uint32_t a = (uint32_t)sim_rand_range(sim, 0, n - 1);
        uint32_t b = (uint32_t)sim_rand_range(sim, 0, n - 1);
        sim_block(sim, a, b, true);
    } else {
        sim_net_t net = *sim_get_net(sim);
        net.drop_p = (double)sim_rand_range(sim, 0, 30) / 100.0;
        net.dup_p = (double)sim_rand_range(sim, 0, 20) / 100.0;
        net.reorder_p = (double)sim_rand_range(sim, 0, 30) / 100.0;
        sim_set_net(sim, &net);
        sim_log(sim, "net drop %.2f dup %.2f reorder %.2f", net.drop_p, net.dup_p, net.reorder_p);
    }
    sim_schedule(sim, sim_rand_range(sim, 5 * SIM_MSG_NS, 40 * SIM_MSG_NS), nemesis, t);
}

static void faults_end(void *arg)
{
    toy_t *t = arg;
    sim_t *sim = t->sim;
    t->faults_on = false;
    sim_heal(sim);
    for (uint32_t r = 0; r < t->R; r++)
        sim_restart(sim, r);
    sim_net_t net = *sim_get_net(sim);
    net.drop_p = KVM_MIN(net.drop_p, 0.05);
    sim_set_net(sim, &net);
    sim_log(sim, "faults end: healed, all replicas up");
}

static bool all_done(void *ctx)
{
    toy_t *t = ctx;
    return t->clients_done == t->C;
}

static int toy_run(const sim_run_opts_t *ro, sim_result_t *res)
{
    toy_t *t = calloc(1, sizeof(*t));
    KVM_ASSERT(t != NULL);
    const char *v = ro->variant ? ro->variant : "";
    t->broken_read = strcmp(v, "broken") == 0;
    t->broken_dup = strcmp(v, "dupcount") == 0;
    t->broken_noretry = strcmp(v, "noretry") == 0;
    if (*v && !t->broken_read && !t->broken_dup && !t->broken_noretry) {
        free(t);
        memset(res, 0, sizeof(*res));
        res->failed = true;
        snprintf(res->msg, sizeof(res->msg),
                 "unknown variant '%s' (toy_register knows broken, dupcount, noretry)", v);
        return 1;
    }

    /* the world's shape is drawn from a stream of its own, before the sim exists */
    uint64_t x = ro->seed ^ 0x70f1e6u;
    x = x * 0x9e3779b97f4a7c15ull + 1;
    t->R = (x >> 33) % 2 ? 5 : 3;
    t->C = 2 + (uint32_t)((x >> 40) % 2);
    t->ops_per_client = TOY_OPS_PER_CLIENT * (ro->soak ? ro->soak : 1);

    sim_config_t cfg;
    sim_config_init(&cfg, ro);
    cfg.n_nodes = t->R + t->C;
    cfg.clock_skew_max_ms = 50;
    cfg.clock_drift_max_ppm = 20000; /* 2%: RTO and think timers run on drifting clocks */
    sim_t *sim = sim_new(&cfg);
    KVM_ASSERT(sim != NULL);
    t->sim = sim;
    sim_net_t net = {
        .delay_min_ns = 1 * SIM_MSG_NS,
        .delay_max_ns = sim_rand_range(sim, 2, 10) * SIM_MSG_NS,
        .drop_p = (double)sim_rand_range(sim, 0, 20) / 100.0,
        .dup_p = (double)sim_rand_range(sim, 0, 10) / 100.0,
        .reorder_p = (double)sim_rand_range(sim, 0, 30) / 100.0,
        .reorder_max_ns = 30 * SIM_MSG_NS,
    };
    sim_set_net(sim, &net);
    t->hist = sim_hist_new(sim, (size_t)t->C * t->ops_per_client + 1);
    KVM_ASSERT(t->hist != NULL);
    sim_log(sim, "toy_register: %u replicas, %u clients, %u ops each, variant '%s'", t->R, t->C,
            t->ops_per_client, v);

    sim_set_node_hooks(sim, toy_start, toy_stop, t);
    sim_set_invariant(sim, toy_invariant, t);
    sim_start(sim);
    t->faults_on = true;
    t->fault_end_ns = TOY_FAULT_PER_OP * t->ops_per_client;
    sim_schedule(sim, sim_rand_range(sim, 0, 10 * SIM_MSG_NS), nemesis, t);
    sim_schedule(sim, t->fault_end_ns, faults_end, t);

    sim_run_until(sim, t->fault_end_ns);
    uint32_t ops_left = 0;
    for (uint32_t i = 0; i < t->C; i++) {
        const client_t *c = sim_node_state(sim, t->R + i);
        ops_left = KVM_MAX(ops_left, c->ops_left);
    }
    uint64_t window = LIVENESS_NS + (uint64_t)ops_left * TOY_OP_HEALED_NS;
    if (!sim_failed(sim) &&
        sim_run_while_not(sim, all_done, t, t->fault_end_ns + window) != SIM_REACHED &&
        !sim_failed(sim))
        sim_fail(sim,
                 "liveness: %u of %u clients finished their workload (%u ops left at most) "
                 "within %.0f ms after the faults stopped",
                 t->clients_done, t->C, ops_left, (double)window / 1e6);
    if (sim_failed(sim) && ro->verbose)
        sim_hist_dump(t->hist, ro->out ? ro->out : stdout);
    int rc = sim_finish(sim, res);
    sim_hist_free(t->hist);
    free(t);
    return rc;
}

const sim_scenario_t scen_toy_register = {
    .name = "toy_register",
    .description = "ABD replicated register under drops, dups, reorders, partitions, crashes",
    .run = toy_run,
};

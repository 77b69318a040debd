/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sim.h — the deterministic simulator: a simulated env.h binding and the harness that scenarios
 * are written against (docs/simulator.md is the guide).
 *
 * One world (sim_t) holds a virtual clock, one event queue (a min-heap by (time, sequence)), a
 * root seed from which every random stream is derived, N nodes each with its own env_t, and a
 * simulated network with delay/drop/duplicate/reorder/partition knobs. Everything runs on the
 * calling thread; nothing reads the real clock or real randomness, so one seed gives one run,
 * and the trace hash (XXH3 over every executed event) proves it.
 *
 * Random streams (all derived from cfg.seed, independent of each other so that consuming more of
 * one does not shift the others):
 *   - world:   sim_rand_*() for the scenario's workload and fault schedule;
 *   - network: delays, drops, duplicates, reorders;
 *   - buggify: SIM_BUGGIFY() site activation and firing;
 *   - node i, incarnation k: env_rand_u64() on that node's env.
 *
 * Node lifecycle (per node):
 *
 *        sim_new / sim_restart                sim_crash
 *   DOWN ----------------------> UP --------------------------> DOWN
 *        start hook creates the        stop hook destroys the
 *        node's state                  node's state; its timers,
 *                                      deferred work and the messages
 *                                      in flight to it are dropped
 *
 * Each transition bumps the node's incarnation; an event created for one incarnation never runs
 * in another. The env_t pointer of a node is stable for the whole run.
 *
 * Ownership: sim_new() returns a world the caller frees with sim_finish() (which also fills the
 * result) or sim_free(). Hook contexts and callback args are borrowed. Message bytes are copied
 * at send; received bytes are valid only during the receive callback.
 */
#ifndef KVMESH_SIM_H
#define KVMESH_SIM_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "env/env.h"

#define SIM_MAX_NODES     64u                /* nodes per world */
#define SIM_MSG_MAX       (1u << 20)         /* bytes per simulated message */
#define SIM_EVENTS_MAX    (4u * 1024 * 1024) /* pending events; beyond, the run fails */
#define SIM_MSG_NS        1000000ull         /* 1 ms, for writing knobs */
#define SIM_SEC_NS        1000000000ull
#define SIM_WORLD         UINT32_MAX /* node id of world-level events (== ENV_NODE_NONE) */
#define SIM_DRAIN_MAX     100000u    /* callbacks one sim_drain_defers() may run */
#define SIM_DRIFT_MAX_PPM 100000u    /* 10%: bound of cfg.clock_drift_max_ppm */

typedef struct sim sim_t;

/* Network knobs; may be changed during a run with sim_set_net(). Probabilities in [0, 1]. */
typedef struct sim_net {
    uint64_t delay_min_ns; /* one-way delay drawn uniformly from [min, max] */
    uint64_t delay_max_ns;
    double drop_p;    /* message lost */
    double dup_p;     /* message delivered twice (independent delays) */
    double reorder_p; /* message gets an extra delay in [0, reorder_max_ns] */
    uint64_t reorder_max_ns;
} sim_net_t;

/* Options of one run as chosen on the kvmesh-sim command line. */
typedef struct sim_run_opts {
    uint64_t seed;
    uint32_t soak;       /* >= 1: multiply workload length/size by this */
    bool verbose;        /* print the event trace and scenario logs */
    const char *variant; /* scenario-defined test-only switch (e.g. "broken"), or NULL */
    FILE *out;           /* where verbose output goes (stdout by default) */
} sim_run_opts_t;

typedef struct sim_config {
    uint64_t seed;
    uint32_t n_nodes; /* 1..SIM_MAX_NODES */
    sim_net_t net;
    uint64_t max_steps;           /* step budget: the run fails when it is exhausted (0 = 10M) */
    uint64_t wall_base_ms;        /* env_wall_ms() at virtual time 0 (0 = a fixed 2026 date) */
    uint64_t clock_skew_max_ms;   /* per-node wall clock offset drawn from [-max, +max] */
    uint32_t clock_drift_max_ppm; /* per-node clock rate error drawn from [-max, +max] ppm:
                                     env_now_ns, env_wall_ms and timers of that node follow
                                     its own clock (<= SIM_DRIFT_MAX_PPM) */
    bool buggify;                 /* enable SIM_BUGGIFY sites */
    bool verbose;
    FILE *out;
} sim_config_t;

/* Fills cfg with defaults for a run: seed/verbose/out from ro (ro may be NULL), 3 nodes,
 * 1-10 ms delays, no faults, buggify on. */
void sim_config_init(sim_config_t *cfg, const sim_run_opts_t *ro);

typedef struct sim_result {
    bool failed;
    char msg[512]; /* first failure, with the virtual time it happened */
    uint64_t trace_hash;
    uint64_t steps;
    uint64_t end_ns;
    uint64_t msgs_sent, msgs_delivered, msgs_dropped, msgs_duplicated;
    uint64_t crashes;
} sim_result_t;

/* ---- world ---------------------------------------------------------------------------------- */

/* Creates a world with cfg->n_nodes nodes, all DOWN until sim_start() (so hooks can be set
 * first). Returns NULL only when out of memory. */
sim_t *sim_new(const sim_config_t *cfg);

/* Frees the world: calls the stop hook of every UP node, drops every event. */
void sim_free(sim_t *sim);

/* Copies the outcome into *res (may be NULL), frees the world, returns 1 if the run failed,
 * else 0. The usual last line of a scenario: return sim_finish(sim, res); */
int sim_finish(sim_t *sim, sim_result_t *res);

/*
 * Node hooks. start(ctx, sim, node, env) creates the node's state for a new incarnation and
 * returns it (NULL is allowed for stateless nodes); it typically calls env_set_recv() and arms
 * timers. stop(ctx, sim, node, state) destroys it (crash or end of run); it must not send.
 * Durable state that must survive crashes belongs to the scenario (ctx), not to the node state.
 */
typedef void *(*sim_start_fn)(void *ctx, sim_t *sim, uint32_t node, env_t *env);
typedef void (*sim_stop_fn)(void *ctx, sim_t *sim, uint32_t node, void *state);
void sim_set_node_hooks(sim_t *sim, sim_start_fn start, sim_stop_fn stop, void *ctx);

/* Brings every node UP (calls start for each, in node order). */
void sim_start(sim_t *sim);

/*
 * Invariant hook: called after every step; returns 0 when everything holds, otherwise it should
 * call sim_fail() (or return non-zero, which fails the run with a generic message).
 */
typedef int (*sim_check_fn)(void *ctx, sim_t *sim);
void sim_set_invariant(sim_t *sim, sim_check_fn fn, void *ctx);

/* ---- running -------------------------------------------------------------------------------- */

typedef enum sim_stop {
    SIM_REACHED, /* virtual time reached the target (or the predicate became true) */
    SIM_IDLE,    /* no event left before the target (sim_run_until), or the deadline passed
                    before the predicate became true (sim_run_while_not) */
    SIM_FAILED,  /* sim_fail() was called, an invariant failed, or the step budget ran out */
} sim_stop_t;

/* Executes one event (then the invariant hook). Returns false when the queue is empty or the
 * run has failed. */
bool sim_step(sim_t *sim);

/* Runs events with time <= t_ns, then sets the clock to t_ns (unless failed). */
sim_stop_t sim_run_until(sim_t *sim, uint64_t t_ns);

/* Runs for d_ns of virtual time from now. */
sim_stop_t sim_run_for(sim_t *sim, uint64_t d_ns);

/* Runs until pred(ctx) is true (checked after every step) or virtual time passes deadline_ns
 * (returns SIM_IDLE then, leaving the clock at the deadline or the last event). */
sim_stop_t sim_run_while_not(sim_t *sim, bool (*pred)(void *ctx), void *ctx, uint64_t deadline_ns);

/* Marks the run failed with a message (the first failure wins) and stops every run function. */
void sim_fail(sim_t *sim, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
bool sim_failed(const sim_t *sim);

/* ---- time, randomness, scheduling ----------------------------------------------------------- */

uint64_t sim_now(const sim_t *sim); /* virtual ns since the start of the run (no drift) */
uint64_t sim_steps(const sim_t *sim);
uint32_t sim_n_nodes(const sim_t *sim);

uint64_t sim_rand_u64(sim_t *sim);                             /* world stream */
uint64_t sim_rand_range(sim_t *sim, uint64_t lo, uint64_t hi); /* uniform in [lo, hi] */
bool sim_chance(sim_t *sim, double p);                         /* true with probability p */

/* World-level callback after delay_ns (nemesis, workload drivers). Never dropped. */
void sim_schedule(sim_t *sim, uint64_t delay_ns, env_cb cb, void *arg);

/* Callback on a node after delay_ns; dropped if the node crashes first. */
void sim_schedule_on(sim_t *sim, uint32_t node, uint64_t delay_ns, env_cb cb, void *arg);

/* ---- nodes and faults ----------------------------------------------------------------------- */

env_t *sim_env(sim_t *sim, uint32_t node); /* stable for the whole run */

/* The world env: an env that never crashes and has no network address (env_send returns
 * KVMESH_ENOTSUP, env_self returns SIM_WORLD). Host shared simulated services on it (e.g. a
 * metadata store that every node reaches through calls with simulated latency). */
env_t *sim_world_env(sim_t *sim);

/*
 * Runs, now and in order, the deferred callbacks (env_defer/env_post) queued on node's current
 * incarnation, including those they defer in turn (at most SIM_DRAIN_MAX). For stop hooks:
 * teardown code that completes its pending work through env_defer (e.g. closing a handle that
 * cancels calls) can release that memory before the crash drops the queue. Timers and messages
 * are not run.
 */
void sim_drain_defers(sim_t *sim, uint32_t node);
void *sim_node_state(sim_t *sim, uint32_t node); /* start hook's result; NULL when DOWN */
bool sim_node_up(const sim_t *sim, uint32_t node);
uint32_t sim_node_incarnation(const sim_t *sim, uint32_t node);

void sim_crash(sim_t *sim, uint32_t node);   /* UP -> DOWN; no-op when already DOWN */
void sim_restart(sim_t *sim, uint32_t node); /* DOWN -> UP; no-op when already UP */

void sim_set_net(sim_t *sim, const sim_net_t *net);
const sim_net_t *sim_get_net(const sim_t *sim);

/* Partition: group[i] is node i's group; messages between different groups are dropped (at send
 * and, for messages already in flight, at delivery). Replaces any previous partition. */
void sim_partition(sim_t *sim, const uint32_t *group);
/* One-way link control: blocks (or unblocks) messages from -> to. */
void sim_block(sim_t *sim, uint32_t from, uint32_t to, bool blocked);
/* Cuts node off from every other node (both directions). */
void sim_isolate(sim_t *sim, uint32_t node);
/* Removes every partition and blocked link. */
void sim_heal(sim_t *sim);
bool sim_link_ok(const sim_t *sim, uint32_t from, uint32_t to);

/*
 * BUGGIFY: rare, deterministic fault injection at named sites. A site is active for the whole
 * run with probability 1/4 (decided from the seed and the name, so edits elsewhere do not move
 * it); an active site fires with probability p on each evaluation. Always false when cfg.buggify
 * is off. Use it in scenarios and simulated services, e.g.
 *     if (SIM_BUGGIFY(sim, "toy.slow_ack")) delay *= 10;
 */
bool sim_buggify(sim_t *sim, const char *site, double p);
#define SIM_BUGGIFY(sim, site) sim_buggify((sim), (site), 0.05)

/* ---- trace ---------------------------------------------------------------------------------- */

/* Mixes scenario observations (e.g. operation results) into the trace hash. */
void sim_trace_mix(sim_t *sim, const void *data, size_t len);
uint64_t sim_trace_hash(const sim_t *sim);
/* printf-style line in verbose mode, prefixed with the virtual time; no-op otherwise. */
void sim_log(sim_t *sim, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
bool sim_verbose(const sim_t *sim);

/* ---- history of client operations ----------------------------------------------------------- */

/*
 * A history records client operations with their virtual invocation and completion times, for
 * consistency checkers (linearizability-style "A completed before B started" reasoning). Fields
 * a/b/c are the operation's input and output, interpreted by the scenario. Bounded by the
 * capacity given at creation; sim_hist_begin returns -1 (and fails the run) when full.
 */
typedef struct sim_op {
    uint32_t client;
    uint32_t kind;             /* scenario-defined */
    uint64_t start_ns, end_ns; /* end_ns = 0 while pending */
    int status;                /* 0 or a KVMESH_E* code, set at completion */
    uint64_t in_a, in_b;       /* inputs */
    uint64_t out_a, out_b;     /* outputs */
    bool done;
} sim_op_t;

typedef struct sim_hist sim_hist_t;

sim_hist_t *sim_hist_new(sim_t *sim, size_t capacity);
void sim_hist_free(sim_hist_t *h);
int64_t sim_hist_begin(sim_hist_t *h, uint32_t client, uint32_t kind, uint64_t in_a, uint64_t in_b);
/* Completes op id (mixes it into the trace hash). Returns the recorded op. */
const sim_op_t *sim_hist_end(sim_hist_t *h, int64_t id, int status, uint64_t out_a, uint64_t out_b);
size_t sim_hist_len(const sim_hist_t *h);
const sim_op_t *sim_hist_get(const sim_hist_t *h, size_t i);
size_t sim_hist_pending(const sim_hist_t *h);
/* Prints the history (e.g. after a failure in verbose mode). */
void sim_hist_dump(const sim_hist_t *h, FILE *out);

/* ---- scenario registry ---------------------------------------------------------------------- */

typedef struct sim_scenario {
    const char *name;
    const char *description;
    /* Runs one seed; fills *res (usually via sim_finish). Returns 0 on pass, 1 on failure. */
    int (*run)(const sim_run_opts_t *ro, sim_result_t *res);
} sim_scenario_t;

/* The table in sim_scenarios.c, terminated by NULL. */
extern const sim_scenario_t *const sim_scenarios[];
const sim_scenario_t *sim_scenario_find(const char *name);

#endif

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The open's membership refresh while another refresh runs (src/store/member.c,
 * kvm_member_refresh_next): a runtime that is opening (its RPC listener up, its record being
 * published active) gets an env message from a runtime its snapshot does not list, which starts
 * a refresh (runtime.c held_kick); if that refresh is still reading the member list when the
 * publish completes, the open's own refresh must wait for it and the open must succeed. Before
 * the fix the open failed with KVMESH_EAGAIN "refresh already running" (a restarted kvmeshd
 * exited while joining).
 *
 * The order is made exact with the memory backend's test hook (meta_memory_set_hook), with no
 * timing assumption: the hook holds the publish (the member record's write in state active)
 * until a member-list range is submitted on the same handle; the test, once the publish is held,
 * sends an env message from an unknown runtime id to the opening runtime over a real RPC
 * connection; the range that message starts makes the hook release the publish first (it
 * completes on the next timer pass) and delay the range by H_RANGE_MS, so the publish's
 * callback (the open's refresh) runs while that range is in flight. Every wait is bounded.
 */
#include <jansson.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <uv.h>

#include "env/clock.h"
#include "kvmesh.h"
#include "meta/keyspace.h"
#include "meta/meta_backend.h"
#include "meta/meta_memory.h"
#include "net/rpc.h"
#include "store/proto.h"

#define H_DEP      "openrefresh"
#define H_STORE    "open_refresh"
#define H_RT_ID    "0a0b0c0d0e0f10111213141516171819" /* the opening runtime */
#define H_PEER_ID  "f0e0d0c0b0a090807060504030201000" /* a runtime no snapshot lists */
#define H_RANGE_MS 200   /* the member range started by the message: after the publish */
#define H_WAIT_MS  90000 /* bound of every wait: generous for a loaded sanitizer run */

struct hook_state {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    char prefix[KS_KEY_CAP]; /* the member records' prefix */
    meta_t *held_on;         /* the handle the publish is held on */
    char addr[128];          /* the opening runtime's RPC address, from its record */
    bool held, overlapped;
    int open_rc; /* the opener thread's result */
    bool opened;
    char open_err[512];
    kvmesh_t *kv;
};

static struct hook_state hs = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

/* The rpc address of a member record in state active, or false. */
static bool active_record_addr(const meta_op_t *op, const char *prefix, char *addr, size_t cap)
{
    if (op->type != META_OP_PUT || strncmp(op->key, prefix, strlen(prefix)) != 0)
        return false;
    json_t *o = json_loadb((const char *)op->value, op->value_len, 0, NULL);
    const char *st = o ? json_string_value(json_object_get(o, "state")) : NULL;
    const char *rpc = o ? json_string_value(json_object_get(o, "rpc")) : NULL;
    bool ok = st && rpc && strcmp(st, "active") == 0 && rpc[0];
    if (ok)
        snprintf(addr, cap, "%s", rpc);
    json_decref(o);
    return ok;
}

/* On the opening runtime's loop thread, for each of its metadata calls. */
static uint32_t hook(void *arg, meta_t *m, const char *store, const struct meta_call *c)
{
    struct hook_state *s = arg;
    uint32_t delay_ms = 0;
    if (strcmp(store, H_STORE) != 0)
        return 0;
    pthread_mutex_lock(&s->mu);
    if (c->kind == META_CALL_TXN && !s->held) {
        for (size_t i = 0; i < c->n_then && !s->held; i++)
            if (active_record_addr(&c->then_ops[i], s->prefix, s->addr, sizeof(s->addr))) {
                /* the publish: held until the message's range comes, within its deadline */
                s->held = true;
                s->held_on = m;
                delay_ms = c->deadline_ns > c->start_ns
                               ? (uint32_t)((c->deadline_ns - c->start_ns) / 2000000u)
                               : 10000;
                pthread_cond_broadcast(&s->cv);
            }
    } else if (c->kind == META_CALL_RANGE && s->held && !s->overlapped && m == s->held_on &&
               strcmp(c->prefix, s->prefix) == 0) {
        /* the refresh for the unknown sender: the publish completes first, then this range */
        meta_memory_expedite(m);
        s->overlapped = true;
        delay_ms = H_RANGE_MS;
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    return delay_ms;
}

static void *opener(void *arg)
{
    (void)arg;
    kvmesh_config_t *c = kvmesh_config_new();
    static const char *const pairs[][2] = {{"metadata_url", "memory://" H_STORE},
                                           {"deployment", H_DEP},
                                           {"runtime_id", H_RT_ID},
                                           {"memory_size", "16MiB"},
                                           {"segment_size", "16MiB"},
                                           {"max_object_size", "1MiB"},
                                           {"replicas", "1"},
                                           /* the publish is held for half of it: room for
                                            * a loaded sanitizer run to send the message */
                                           {"request_timeout_ms", "120000"},
                                           {"tombstone_retention_ms", "130000"},
                                           {NULL, NULL}};
    int rc = c ? 0 : KVMESH_ENOMEM;
    for (size_t i = 0; rc == 0 && pairs[i][0]; i++)
        rc = kvmesh_config_set(c, pairs[i][0], pairs[i][1]);
    kvmesh_t *kv = NULL;
    if (rc == 0)
        rc = kvmesh_open(&kv, c);
    kvmesh_config_free(c);
    pthread_mutex_lock(&hs.mu);
    hs.open_rc = rc;
    if (rc)
        snprintf(hs.open_err, sizeof(hs.open_err), "%s: %s", kvmesh_errname(rc),
                 kvmesh_last_error());
    hs.kv = kv;
    hs.opened = true;
    pthread_cond_broadcast(&hs.cv);
    pthread_mutex_unlock(&hs.mu);
    return NULL;
}

/* Waits (bounded) until *flag or the open ended; returns *flag. */
static bool wait_flag(const bool *flag)
{
    struct timespec ts;
    env_clock_after(CLOCK_REALTIME, H_WAIT_MS, &ts);
    pthread_mutex_lock(&hs.mu);
    int e = 0;
    while (!*flag && !hs.opened && e == 0)
        e = pthread_cond_timedwait(&hs.cv, &hs.mu, &ts);
    bool v = *flag;
    pthread_mutex_unlock(&hs.mu);
    return v;
}

static bool flag_get(const bool *flag)
{
    pthread_mutex_lock(&hs.mu);
    bool v = *flag || hs.opened;
    pthread_mutex_unlock(&hs.mu);
    return v;
}

static void tick(uv_timer_t *t)
{
    (void)t;
}

static void ep_closed(void *arg)
{
    *(bool *)arg = true;
}

/* Sends one env message from H_PEER_ID to the opening runtime at hs.addr, then runs the loop
 * (bounded) until its refresh was seen by the hook (or the open ended). */
static void send_from_unknown(void)
{
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    struct rpc_config cfg;
    rpc_config_init(&cfg);
    snprintf(cfg.local.deployment_id, sizeof(cfg.local.deployment_id), "%s", H_DEP);
    snprintf(cfg.local.runtime_id, sizeof(cfg.local.runtime_id), "%s", H_PEER_ID);
    cfg.local.runtime_epoch = 1;
    for (int i = 0; i < HS_PROTO_COUNT; i++)
        cfg.local.proto[i] = (struct hs_range){1, 1};
    rpc_endpoint *ep = NULL;
    assert_int_equal(rpc_endpoint_new(&loop, &cfg, &ep), 0);
    rpc_peer *p = NULL;
    char addr[128];
    pthread_mutex_lock(&hs.mu);
    snprintf(addr, sizeof(addr), "%s", hs.addr);
    pthread_mutex_unlock(&hs.mu);
    assert_int_equal(rpc_peer_get(ep, H_RT_ID, addr, &p), 0);
    size_t body_len = 0;
    static const uint8_t data[4] = {1, 2, 3, 4};
    /* an env type outside the route protocol's range: delivered after the refresh, ignored */
    uint8_t *body = store_env_msg_encode(0, data, sizeof(data), &body_len);
    assert_non_null(body);
    struct rpc_msg msg = {.type = STORE_RPC_ENV, .body = body, .body_len = body_len};
    assert_int_equal(rpc_notify(p, &msg, NULL, NULL), 0);
    free(body);
    uv_timer_t t;
    uv_timer_init(&loop, &t);
    uv_timer_start(&t, tick, 5, 5);
    uint64_t end = env_clock_mono_ms() + H_WAIT_MS;
    while (!flag_get(&hs.overlapped) && env_clock_mono_ms() < end)
        uv_run(&loop, UV_RUN_ONCE);
    if (!flag_get(&hs.overlapped))
        fprintf(stderr, "send_from_unknown: %s\n", rpc_peer_last_error(p));
    uv_close((uv_handle_t *)&t, NULL);
    bool closed = false;
    rpc_endpoint_close(ep, ep_closed, &closed);
    end = env_clock_mono_ms() + H_WAIT_MS;
    while (!closed && env_clock_mono_ms() < end)
        uv_run(&loop, UV_RUN_NOWAIT);
    assert_true(closed);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&loop), 0);
}

static void test_open_waits_for_running_refresh(void **state)
{
    (void)state;
    assert_int_equal(ks_prefix(hs.prefix, sizeof(hs.prefix), H_DEP, KS_MEMBER, NULL, 0), 0);
    meta_memory_set_hook(hook, &hs);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, opener, NULL), 0);
    bool held = wait_flag(&hs.held);
    if (held)
        send_from_unknown();
    pthread_join(th, NULL);
    meta_memory_set_hook(NULL, NULL);
    if (hs.open_rc)
        fprintf(stderr, "open: %s\n", hs.open_err);
    assert_true(held);
    assert_true(hs.overlapped); /* the message's refresh was in flight at the publish */
    assert_int_equal(hs.open_rc, 0);
    assert_non_null(hs.kv);
    kvmesh_close(hs.kv);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_open_waits_for_running_refresh),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench_meta_redis — cost of the redis:// metadata backend against plain Redis commands on the
 * same server in the same run. Starts its own redis-server (tests/support/testsrv) on a free
 * loopback port and prints a table of operations per second and the ratio kvmesh / raw:
 *   get      meta_sync_get            vs  GET
 *   put      meta_sync_txn (one PUT)  vs  SET
 *   cas      txn (mod_rev compare + PUT) vs  WATCH/GET/MULTI/SET/EXEC
 *   range    meta_sync_range (100)    vs  ZRANGEBYLEX + 100 x HGETALL pipelined
 * plus "get script": the backend's own get script run with EVALSHA from a plain synchronous
 * client (no kvmesh client path), to split the cost between the script and the client path;
 * each with 1 thread (round-trip bound) and with T threads sharing one handle (pipelined on its
 * one connection) vs T raw connections. Usage: bench_meta_redis [ops_per_case] [threads].
 * Absolute numbers on shared machines are noise; the ratios are what to read.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <hiredis/hiredis.h>

#include "env/clock.h"
#include "kvmesh.h"
#include "meta/meta.h"
#include "meta/meta_redis_lua.h"
#include "testsrv.h"

#define BENCH_KEYS        1000
#define BENCH_THREADS_MAX 16

enum bcase { B_GET, B_GET_SCRIPT, B_PUT, B_CAS, B_RANGE, B_COUNT };
static const char *const bcase_name[B_COUNT] = {"get", "get script", "put", "cas", "range(100)"};
static char g_get_sha[64];

static testsrv_t *g_srv;
static meta_sync_t *g_meta;
static long g_ops;

static double now_s(void)
{
    return (double)env_clock_mono_ns() / 1e9;
}

static void die(const char *what, const char *msg)
{
    fprintf(stderr, "bench_meta_redis: %s: %s\n", what, msg);
    exit(1);
}

static void key_of(char *buf, size_t cap, long i)
{
    snprintf(buf, cap, "bench/%06ld", i % BENCH_KEYS);
}

struct worker {
    pthread_t th;
    enum bcase c;
    bool raw;
    long ops;
    unsigned seed;
};

static void kvm_one(enum bcase c, long i)
{
    char key[64];
    key_of(key, sizeof(key), i);
    meta_result_t *r = NULL;
    int rc = 0;
    switch (c) {
    case B_GET:
    case B_GET_SCRIPT:
        rc = meta_sync_get(g_meta, key, &r);
        break;
    case B_PUT: {
        meta_op_t op = {.type = META_OP_PUT,
                        .key = key,
                        .value = (const uint8_t *)"value-0123456789",
                        .value_len = 16};
        rc = meta_sync_txn(g_meta, NULL, 0, &op, 1, NULL, 0, &r);
        break;
    }
    case B_CAS: {
        rc = meta_sync_get(g_meta, key, &r);
        if (rc)
            break;
        meta_cmp_t cmp = {
            .key = key, .target = META_CMP_MOD_REV, .op = META_EQ, .num = r->kv.mod_rev};
        meta_result_free(r);
        r = NULL;
        meta_op_t op = {
            .type = META_OP_PUT, .key = key, .value = (const uint8_t *)"value-cas", .value_len = 9};
        rc = meta_sync_txn(g_meta, &cmp, 1, &op, 1, NULL, 0, &r);
        break;
    }
    case B_RANGE:
        rc = meta_sync_range(g_meta, "bench/", NULL, 100, &r);
        break;
    case B_COUNT:
        break;
    }
    if (rc)
        die("kvmesh call", r ? r->errmsg : kvmesh_last_error());
    meta_result_free(r);
}

static void raw_one(redisContext *rc, enum bcase c, long i)
{
    char key[80];
    snprintf(key, sizeof(key), "raw:");
    key_of(key + 4, sizeof(key) - 4, i);
    redisReply *r = NULL;
    switch (c) {
    case B_GET:
        r = redisCommand(rc, "GET %s", key);
        break;
    case B_GET_SCRIPT:
        r = redisCommand(rc, "EVALSHA %s 1 kvm:{kvmesh}: %s", g_get_sha, key + 4);
        if (!r || r->type != REDIS_REPLY_ARRAY)
            die("EVALSHA get", r && r->type == REDIS_REPLY_ERROR ? r->str : "bad reply");
        break;
    case B_PUT:
        r = redisCommand(rc, "SET %s %s", key, "value-0123456789");
        break;
    case B_CAS: {
        /* optimistic CAS the Redis way: WATCH, read, MULTI/SET/EXEC */
        redisAppendCommand(rc, "WATCH %s", key);
        redisAppendCommand(rc, "GET %s", key);
        for (int k = 0; k < 2; k++) {
            if (redisGetReply(rc, (void **)&r) != REDIS_OK)
                die("raw", rc->errstr);
            freeReplyObject(r);
        }
        redisAppendCommand(rc, "MULTI");
        redisAppendCommand(rc, "SET %s %s", key, "value-cas");
        redisAppendCommand(rc, "EXEC");
        for (int k = 0; k < 2; k++) {
            if (redisGetReply(rc, (void **)&r) != REDIS_OK)
                die("raw", rc->errstr);
            freeReplyObject(r);
        }
        if (redisGetReply(rc, (void **)&r) != REDIS_OK)
            die("raw", rc->errstr);
        break;
    }
    case B_RANGE: {
        redisReply *z = redisCommand(rc, "ZRANGEBYLEX raw:idx [raw:bench/ + LIMIT 0 100");
        if (!z)
            die("raw", rc->errstr);
        for (size_t k = 0; k < z->elements; k++)
            redisAppendCommand(rc, "HGETALL raw:h:%s", z->element[k]->str);
        for (size_t k = 0; k < z->elements; k++) {
            if (redisGetReply(rc, (void **)&r) != REDIS_OK)
                die("raw", rc->errstr);
            freeReplyObject(r);
        }
        freeReplyObject(z);
        r = NULL;
        break;
    }
    case B_COUNT:
        break;
    }
    if (r)
        freeReplyObject(r);
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    redisContext *rc = NULL;
    if (w->raw) {
        rc = redisConnect("127.0.0.1", testsrv_port(g_srv));
        if (!rc || rc->err)
            die("raw connect", rc ? rc->errstr : "oom");
    }
    for (long i = 0; i < w->ops; i++) {
        long k = (long)(rand_r(&w->seed) % BENCH_KEYS);
        if (w->raw)
            raw_one(rc, w->c, k);
        else
            kvm_one(w->c, k);
    }
    if (rc)
        redisFree(rc);
    return NULL;
}

static double run_case(enum bcase c, bool raw, int threads)
{
    struct worker w[BENCH_THREADS_MAX];
    long per = g_ops / threads;
    double t0 = now_s();
    for (int i = 0; i < threads; i++) {
        w[i] = (struct worker){.c = c, .raw = raw, .ops = per, .seed = 12345u + (unsigned)i};
        pthread_create(&w[i].th, NULL, worker_main, &w[i]);
    }
    for (int i = 0; i < threads; i++)
        pthread_join(w[i].th, NULL);
    double dt = now_s() - t0;
    return (double)(per * threads) / dt;
}

static void preload(void)
{
    redisContext *rc = redisConnect("127.0.0.1", testsrv_port(g_srv));
    if (!rc || rc->err)
        die("raw connect", rc ? rc->errstr : "oom");
    for (long i = 0; i < BENCH_KEYS; i++) {
        char key[64];
        key_of(key, sizeof(key), i);
        kvm_one(B_PUT, i);
        redisAppendCommand(rc, "SET raw:%s %s", key, "value-0123456789");
        redisAppendCommand(rc, "ZADD raw:idx 0 raw:%s", key);
        redisAppendCommand(rc, "HSET raw:h:raw:%s v %s c 1 m 1 ver 1 l 0", key, "value-0123456789");
    }
    for (long i = 0; i < 3L * BENCH_KEYS; i++) {
        redisReply *r;
        if (redisGetReply(rc, (void **)&r) != REDIS_OK)
            die("preload", rc->errstr);
        freeReplyObject(r);
    }
    redisReply *r = redisCommand(rc, "SCRIPT LOAD %s", meta_redis_lua_get);
    if (!r || r->type != REDIS_REPLY_STRING)
        die("SCRIPT LOAD", rc->errstr);
    snprintf(g_get_sha, sizeof(g_get_sha), "%s", r->str);
    freeReplyObject(r);
    redisFree(rc);
}

int main(int argc, char **argv)
{
    g_ops = argc > 1 ? strtol(argv[1], NULL, 10) : 20000;
    int threads = argc > 2 ? (int)strtol(argv[2], NULL, 10) : 4;
    if (g_ops < 100 || threads < 1 || threads > BENCH_THREADS_MAX) {
        fprintf(stderr, "usage: bench_meta_redis [ops_per_case >= 100] [threads 1..%d]\n",
                BENCH_THREADS_MAX);
        return 2;
    }
    if (testsrv_start_redis(&g_srv, NULL) != 0)
        die("redis-server", kvmesh_last_error());
    if (meta_sync_open(&g_meta, testsrv_url(g_srv), NULL) != 0)
        die("meta_sync_open", kvmesh_last_error());
    preload();
    printf("redis:// backend vs plain Redis commands, same server, %ld ops per case\n", g_ops);
    printf("%-12s %8s %14s %14s %8s\n", "case", "threads", "kvmesh op/s", "raw op/s", "ratio");
    int tcounts[2] = {1, threads};
    for (int c = 0; c < B_COUNT; c++) {
        for (int t = 0; t < (threads > 1 ? 2 : 1); t++) {
            double k = run_case((enum bcase)c, false, tcounts[t]);
            double r = run_case((enum bcase)c, true, tcounts[t]);
            printf("%-12s %8d %14.0f %14.0f %8.2f\n", bcase_name[c], tcounts[t], k, r, k / r);
        }
    }
    meta_sync_close(g_meta);
    testsrv_stop(g_srv);
    return 0;
}

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ops_util.h — helpers of the ops_* integration tests (header-only, static functions): the
 * tool-process harness of tests/support/daemon.h bound to one scratch directory and the ops
 * timeouts (tools run as real processes with bounded waits, kvmeshd daemons with a ready file
 * and an admin port, HTTP/1.0 to an admin port), the cmocka checks on a run, and reading
 * values out of JSON text. Every process is started there and stopped by pid.
 */
#ifndef KVMESH_TESTS_OPS_UTIL_H
#define KVMESH_TESTS_OPS_UTIL_H

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
/* cmocka needs the three above it */
#include <setjmp.h>
#include <stddef.h>
#include <cmocka.h>

#include "daemon.h"
#include "env/clock.h"
#include "kvmesh.h"
#include "testsrv.h"

#define OPS_CMD_TIMEOUT_MS   90000 /* one tool invocation (chromium included) */
#define OPS_READY_TIMEOUT_MS 30000 /* a daemon joining */
#define OPS_MAX_ARGS         TDAEMON_MAX_ARGS

static tdaemon_env_t ops_env;
#define ops_tmpdir      (ops_env.tmpdir)
#define ops_bin_kvmesh  (ops_env.bin_kvmesh)
#define ops_bin_kvmeshd (ops_env.bin_kvmeshd)

/* Runs argv (NULL-terminated) to completion, bounded, capturing stdout and stderr. */
static inline void ops_runv(tdaemon_out_t *o, const char *const *argv)
{
    tdaemon_runv(&ops_env, o, NULL, argv, OPS_CMD_TIMEOUT_MS);
}

static inline void ops_run(tdaemon_out_t *o, const char *first, ...)
{
    va_list ap;
    va_start(ap, first);
    tdaemon_runl(&ops_env, o, NULL, OPS_CMD_TIMEOUT_MS, first, ap);
    va_end(ap);
}

#define OPS_ASSERT_RUN TDAEMON_ASSERT_RUN
#define OPS_ASSERT_HAS TDAEMON_ASSERT_HAS

static inline void ops_write_file(const char *path, const char *text)
{
    if (tdaemon_write_file(path, text) != 0)
        fail_msg("cannot write %s: %s", path, strerror(errno));
}

static inline int ops_setup(void)
{
    return tdaemon_env_setup(&ops_env, "kvmesh-ops");
}

static inline int ops_teardown(void)
{
    return tdaemon_env_teardown(&ops_env);
}

/* The cmocka group setup/teardown of an ops test that needs nothing else. */
static inline int ops_group_setup(void **state)
{
    (void)state;
    return ops_setup();
}

static inline int ops_group_teardown(void **state)
{
    (void)state;
    return ops_teardown();
}

/* Starts the metadata backend of one run (etcd, or redis-server; a cmocka failure naming it
 * when it cannot start) into *srv, names the deployment "<prefix>-<etcd|redis>-<pid>" into dep
 * and its config path "<ops_tmpdir>/<dep>.yaml" into cfg. Returns the backend's URL (it lives as
 * long as *srv; the caller stops *srv with testsrv_stop()). */
static inline const char *ops_backend_start(bool etcd, testsrv_t **srv, const char *prefix,
                                            char *dep, size_t dep_cap, char *cfg, size_t cfg_cap)
{
    int rc = etcd ? testsrv_start_etcd(srv) : testsrv_start_redis(srv, NULL);
    if (rc != 0)
        fail_msg("cannot start %s: %s", etcd ? "etcd" : "redis-server", kvmesh_last_error());
    snprintf(dep, dep_cap, "%s-%s-%ld", prefix, etcd ? "etcd" : "redis", (long)getpid());
    snprintf(cfg, cfg_cap, "%s/%s.yaml", ops_tmpdir, dep);
    return testsrv_url(*srv);
}

/* Starts kvmeshd --config cfg_path [extra flags...] as daemon i with a fresh admin port; waits
 * until it wrote its ready file. extra is a NULL-terminated list (may be NULL). */
static inline int ops_daemon_start(tdaemon_t *d, int i, const char *cfg_path,
                                   const char *const *extra)
{
    return tdaemon_start(&ops_env, d, i, cfg_path, extra, OPS_READY_TIMEOUT_MS);
}

/* ---- JSON / text scraping ------------------------------------------------------------------ */

/* The unsigned number after "key": in text at or after from (NULL: not found). */
static inline const char *ops_json_u64(const char *text, const char *key, unsigned long long *out)
{
    char pat[128];
    snprintf(pat, sizeof(pat), "\"%s\":", key);
    const char *p = strstr(text, pat);
    if (!p)
        return NULL;
    p += strlen(pat);
    char *end;
    *out = strtoull(p, &end, 10);
    return end == p ? NULL : end;
}

#endif

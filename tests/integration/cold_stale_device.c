// SPDX-License-Identifier: Apache-2.0
/*
 * cold_stale_device.c — a write-through put whose cold copy was placed from a device view of
 * before an operator's drain (docs/cold.md "Durable puts", "Several devices"). One storage
 * runtime, in-memory metadata, two real LocalDir devices in a temporary directory,
 * cold_write_through on, request_timeout_ms 4000:
 *   1. 8 puts succeed (each usage-committed on one of the devices);
 *   2. the device view is frozen (kvm_cold_test_freeze_view) and placement pinned to device 0
 *      (kvm_cold_test_pin_device0), then device 0 is drained (kvmesh_admin_device_lifecycle): a
 *      put places its cold copy on device 0 from the stale view; its reserve is refused by the
 *      drained record. The put must answer promptly (well within its deadline: < 1500 ms of the
 *      4000) with KVMESH_EUNAVAILABLE and a message naming the device id and "draining"; device 0
 *      keeps its used bytes and files and holds nothing reserved;
 *   3. with the view refreshing again and placement free, the next put succeeds on device 1;
 *   4. the remote case: a second storage runtime B (its own LocalDir device) joins; a put of A
 *      pinned to B waits for B's offload by polling the op record. With the views frozen, B's
 *      device is drained and A puts onto it again: B's job withdraws the op (PLANNED -> RELEASED)
 *      and A's put must answer promptly with KVMESH_EUNAVAILABLE and a message naming B's device
 *      id and "draining", as the local case does; B's device holds nothing reserved.
 * Before the fix the refused reserve was retried with backoff until the job parked, so the put
 * waited for its deadline and answered KVMESH_ETIMEDOUT: step 2 fails. Before the remote wait
 * read the device record, step 4's put answered KVMESH_EIO saying only that the cold operation
 * was released.
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api/kvmesh_tools.h"
#include "cold_itest.h"
#include "coldfiles.h"
#include "env/clock.h"
#include "kvmesh.h"
#include "proc.h"
#include "tmpdir.h"

void kvm_cold_test_pin_device0(bool on); /* (store/cold_glue.h) */
void kvm_cold_test_freeze_view(bool on); /* (store/cold_glue.h) */

#define OBJ_LEN       (32u << 10)
#define N_FIRST       8u
#define TIMEOUT_MS    4000u
#define PROMPT_MS     1500u /* the refused put must answer before this */
#define WAIT_VIEW_MAX 50u   /* bounded: puts tried while the view catches up (step 3) */

static char tmpdir[64];
static kvmesh_t *kv;
static kvmesh_t *kvb;   /* step 4: the second storage runtime */
static size_t ndev = 2; /* the device records the admin listing must show */
static kvmesh_admin_t *adm;
static const kvmesh_scope_t sc = {"stale", NULL};

static void cleanup(void)
{
    kvm_cold_test_freeze_view(false);
    kvm_cold_test_pin_device0(false);
    if (kvb) {
        kvmesh_close(kvb);
        kvb = NULL;
    }
    tcold_cleanup(&kv, &adm, tmpdir);
}

#define CHECK(c) TPROC_CHECK(c, cleanup)

static int put_opts(uint32_t i, uint8_t *buf, const kvmesh_put_opts_t *opts)
{
    char k[32];
    snprintf(k, sizeof(k), "stale-%05u", i);
    memset(buf, (int)(i * 7 + 1), OBJ_LEN);
    return kvmesh_put(kv, &sc, k, strlen(k), buf, OBJ_LEN, opts);
}

static int put(uint32_t i, uint8_t *buf)
{
    return put_opts(i, buf, NULL);
}

/* The record of the device whose root ends in suffix (5 characters: "/dev0"). */
static void device_at(const char *suffix, kvmesh_admin_device_t *out)
{
    kvmesh_admin_device_t dv[8];
    size_t n = 0;
    bool more = false, found = false;
    CHECK(kvmesh_admin_devices(adm, NULL, 8, dv, &n, &more) == 0 && n == ndev && !more);
    for (size_t i = 0; i < n; i++) {
        size_t rl = strlen(dv[i].root);
        CHECK(rl > 5 && !dv[i].malformed);
        if (strcmp(dv[i].root + rl - 5, suffix) == 0) {
            *out = dv[i];
            found = true;
        }
    }
    CHECK(found);
}

/* The records of device 0 (root ends in /dev0) and device 1 (/dev1). */
static void devices(kvmesh_admin_device_t *d0, kvmesh_admin_device_t *d1)
{
    CHECK(tcold_devices2(adm, d0, d1));
}

/* A storage runtime of the deployment on root0 (and root1 as its second device when set). */
static kvmesh_t *open_storage(const char *root0, const char *root1, const char *url,
                              const char *dep)
{
    char extra[160];
    snprintf(extra, sizeof(extra), "localdir:%s:64MiB", root1 ? root1 : "");
    const char *const cfg[][2] = {{"metadata_url", url},
                                  {"deployment", dep},
                                  {"memory_size", "4MiB"},
                                  {"segment_size", "1MiB"},
                                  {"max_object_size", "256KiB"},
                                  {"replicas", "1"},
                                  {"request_timeout_ms", "4000"},
                                  {"cold_kind", "localdir"},
                                  {"cold_root", root0},
                                  {"cold_capacity", "64MiB"},
                                  {"cold_write_through", "true"},
                                  {root1 ? "cold_devices" : NULL, extra}, /* last: optional */
                                  {NULL, NULL}};
    kvmesh_t *k = NULL;
    kvmesh_config_t *c = kvmesh_config_new();
    CHECK(tproc_config_setv(c, cfg) == 0);
    CHECK(kvmesh_open(&k, c) == 0);
    kvmesh_config_free(c);
    return k;
}

static void open_runtime(const char *root0, const char *root1, const char *url, const char *dep)
{
    kv = open_storage(root0, root1, url, dep);
    CHECK(tproc_admin_open(url, dep, &adm) == 0);
}

/* 4. A's put pinned to B, whose device was drained after A's view was read. */
static void remote_drained(const char *url, const char *dep, uint8_t *buf)
{
    char rootb[128];
    snprintf(rootb, sizeof(rootb), "%s/devb", tmpdir);
    CHECK(mkdir(rootb, 0700) == 0);
    kvb = open_storage(rootb, NULL, url, dep);
    ndev = 3;
    CHECK(cold_itest_wait_storage(kv, 2));
    char idb[KVMESH_ID_HEX_LEN + 1];
    uint64_t epb = 0;
    CHECK(kvmesh_self(kvb, idb, &epb) == 0);
    const char *pin[1] = {idb};
    kvmesh_put_opts_t on_b = {.preferred_owners = pin, .n_preferred = 1, .hard_pin = true};
    /* A's view lists B's device once a put pinned to B is durable there (bounded) */
    uint32_t i = 100, tries = 0;
    int rc;
    while ((rc = put_opts(i++, buf, &on_b)) != 0 && ++tries < WAIT_VIEW_MAX)
        usleep(20 * 1000);
    CHECK(rc == 0);
    kvmesh_admin_device_t db, eb;
    device_at("/devb", &db);
    CHECK(db.used > 0 && tcold_count_files(rootb) > 0);
    kvm_cold_test_freeze_view(true);
    usleep(400 * 1000); /* a refresh already in flight at the freeze ends before the drain */
    bool changed = false;
    CHECK(kvmesh_admin_device_lifecycle(adm, db.id, "drain", &db, &changed) == 0 && changed);
    uint64_t t0 = env_clock_mono_ms();
    rc = put_opts(i, buf, &on_b);
    uint64_t took = env_clock_mono_ms() - t0;
    const char *msg = kvmesh_last_error();
    printf("remote stale put: %s after %" PRIu64 " ms (deadline %u ms): %s\n", kvmesh_errname(rc),
           took, TIMEOUT_MS, msg);
    CHECK(rc == KVMESH_EUNAVAILABLE);
    CHECK(took < PROMPT_MS);
    CHECK(strstr(msg, db.id) != NULL && strstr(msg, "draining") != NULL);
    device_at("/devb", &eb);
    CHECK(eb.used == db.used && eb.reserved == 0);
    kvm_cold_test_freeze_view(false);
}

int main(void)
{
    CHECK(ttmp_make(tmpdir, sizeof(tmpdir), "kvmesh-cold-stale") == 0);
    char root0[128], root1[128], dep[64], url[96];
    snprintf(root0, sizeof(root0), "%s/dev0", tmpdir);
    snprintf(root1, sizeof(root1), "%s/dev1", tmpdir);
    CHECK(mkdir(root0, 0700) == 0 && mkdir(root1, 0700) == 0);
    snprintf(dep, sizeof(dep), "coldstale%d", (int)getpid());
    snprintf(url, sizeof(url), "memory://%s", dep);
    open_runtime(root0, root1, url, dep);
    uint8_t *buf = malloc(OBJ_LEN);
    CHECK(buf);

    /* 1. write-through puts succeed */
    for (uint32_t i = 0; i < N_FIRST; i++)
        CHECK(put(i, buf) == 0);
    kvmesh_admin_device_t d0, d1;
    devices(&d0, &d1);
    size_t f0 = tcold_count_files(root0), f1 = tcold_count_files(root1);
    CHECK(f0 + f1 == N_FIRST && d0.used == (uint64_t)f0 * OBJ_LEN);

    /* 2. a put placed on device 0 from the view of before its drain */
    kvm_cold_test_freeze_view(true);
    kvm_cold_test_pin_device0(true);
    usleep(400 * 1000); /* a refresh already in flight at the freeze ends before the drain */
    bool changed = false;
    CHECK(kvmesh_admin_device_lifecycle(adm, d0.id, "drain", &d0, &changed) == 0 && changed);
    uint64_t t0 = env_clock_mono_ms();
    int rc = put(N_FIRST, buf);
    uint64_t took = env_clock_mono_ms() - t0;
    const char *msg = kvmesh_last_error();
    printf("stale put: %s after %" PRIu64 " ms (deadline %u ms): %s\n", kvmesh_errname(rc), took,
           TIMEOUT_MS, msg);
    CHECK(rc == KVMESH_EUNAVAILABLE);
    CHECK(took < PROMPT_MS);
    CHECK(strstr(msg, d0.id) != NULL && strstr(msg, "draining") != NULL);
    kvmesh_admin_device_t e0, e1;
    devices(&e0, &e1);
    CHECK(e0.used == d0.used && e0.reserved == 0 && tcold_count_files(root0) == f0);

    /* 3. the refreshed view places the next put on device 1 */
    kvm_cold_test_pin_device0(false);
    kvm_cold_test_freeze_view(false);
    uint32_t tries = 0;
    while ((rc = put(N_FIRST + 1 + tries, buf)) != 0 && ++tries < WAIT_VIEW_MAX)
        usleep(20 * 1000);
    CHECK(rc == 0);
    devices(&e0, &e1);
    printf("after the drain: device 0 used %" PRIu64 ", device 1 used %" PRIu64 " (was %" PRIu64
           "), %u puts refused while the view caught up\n",
           e0.used, e1.used, d1.used, tries);
    CHECK(e0.used == d0.used && e1.used == d1.used + OBJ_LEN);
    CHECK(tcold_count_files(root0) == f0 && tcold_count_files(root1) == f1 + 1);
    remote_drained(url, dep, buf);
    free(buf);
    cleanup();
    printf("cold_stale_device: ok\n");
    return 0;
}

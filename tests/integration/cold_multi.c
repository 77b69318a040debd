// SPDX-License-Identifier: Apache-2.0
/*
 * cold_multi.c — several cold devices in one runtime (docs/cold.md "Several devices"). One
 * storage runtime, in-memory metadata, two real LocalDir devices in a temporary directory
 * (device 0 from cold_kind/cold_root, device 1 from cold_devices), cold_write_through on (so a
 * put's success means its cold copy is usage-committed), 2 MiB of DRAM, reclaim_grace_ms 0:
 *   1. a working set of 3x DRAM (192 x 32 KiB): every put succeeds; both device records are in
 *      metadata, each with used > 0, reserved = 0 and used = its LocalDir files x 32 KiB (the
 *      placement among this runtime's devices picks the one with the most room);
 *   2. every object reads back byte-exact (most of them restored from cold);
 *   3. device 0 is drained (kvmesh_admin_device_lifecycle, what `kvmesh admin devices drain`
 *      runs): new puts land only on device 1 (a put placed from the view of before the drain is
 *      refused by the reserve, never written to device 0): device 0's used bytes and files stay
 *      as they were, device 1's grow by exactly 32 KiB per acknowledged put.
 * With `pin` (kvm_cold_test_pin_device0: placement only ever picks device 0, the behaviour of
 * one device per runtime) step 1 fails: device 1 holds nothing. Every wait is bounded.
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
#include "kvmesh.h"
#include "coldfiles.h"
#include "env/clock.h"
#include "proc.h"
#include "tmpdir.h"

void kvm_cold_test_pin_device0(bool on); /* (store/cold_glue.h) */

#define OBJ_LEN   (32u << 10)
#define N_OBJ     192u /* 6 MiB: 3x the 2 MiB of DRAM */
#define N_DRAINED 16u  /* puts acknowledged after the drain */
#define TRIES_MAX 200u /* bounded: puts tried after the drain */

static char tmpdir[64];
static kvmesh_t *kv;
static kvmesh_admin_t *adm;
static const kvmesh_scope_t sc = {"multi", NULL};

static void cleanup(void)
{
    tcold_cleanup(&kv, &adm, tmpdir);
}

#define CHECK(c) TPROC_CHECK(c, cleanup)

static void key(uint32_t i, char *k, size_t cap)
{
    snprintf(k, cap, "multi-%05u", i);
}

static int put(uint32_t i, uint8_t *buf)
{
    char k[32];
    key(i, k, sizeof(k));
    tcold_fill_words(buf, OBJ_LEN, i);
    return kvmesh_put(kv, &sc, k, strlen(k), buf, OBJ_LEN, NULL);
}

/* The records of device 0 (root ends in /dev0) and device 1 (/dev1). */
static void devices(kvmesh_admin_device_t *d0, kvmesh_admin_device_t *d1)
{
    CHECK(tcold_devices2(adm, d0, d1));
}

int main(int argc, char **argv)
{
    bool pin = argc > 1 && strcmp(argv[1], "pin") == 0;
    bool single = argc > 1 && strcmp(argv[1], "single") == 0; /* (timing comparison only) */
    uint64_t t0 = env_clock_mono_ms();
    kvm_cold_test_pin_device0(pin);
    CHECK(ttmp_make(tmpdir, sizeof(tmpdir), "kvmesh-cold-multi") == 0);
    char root0[128], root1[128], extra[160], dep[64], url[96];
    snprintf(root0, sizeof(root0), "%s/dev0", tmpdir);
    snprintf(root1, sizeof(root1), "%s/dev1", tmpdir);
    CHECK(mkdir(root0, 0700) == 0 && mkdir(root1, 0700) == 0);
    snprintf(extra, sizeof(extra), "localdir:%s:64MiB:second", root1);
    snprintf(dep, sizeof(dep), "coldmulti%d", (int)getpid());
    snprintf(url, sizeof(url), "memory://%s", dep);
    const char *const cfg[][2] = {{"metadata_url", url},
                                  {"deployment", dep},
                                  {"memory_size", "2MiB"},
                                  {"segment_size", "1MiB"},
                                  {"max_object_size", "256KiB"},
                                  {"reclaim_grace_ms", "0"}, /* evicted bytes reused at once */
                                  {"replicas", "1"},
                                  {"request_timeout_ms", "1500"},
                                  {"cold_kind", "localdir"},
                                  {"cold_root", root0},
                                  {"cold_capacity", "64MiB"},
                                  {NULL, NULL}};
    kvmesh_config_t *c = kvmesh_config_new();
    CHECK(tproc_config_setv(c, cfg) == 0);
    CHECK(single || kvmesh_config_set(c, "cold_devices", extra) == 0);
    CHECK(kvmesh_config_set(c, "cold_write_through", "true") == 0);
    CHECK(kvmesh_open(&kv, c) == 0);
    kvmesh_config_free(c);
    CHECK(tproc_admin_open(url, dep, &adm) == 0);
    uint8_t *buf = malloc(OBJ_LEN);
    CHECK(buf);

    /* 1. 4x DRAM; both devices hold objects; used = files */
    for (uint32_t i = 0; i < N_OBJ; i++) {
        CHECK(put(i, buf) == 0);
    }
    printf("phase 1: %u puts in %" PRIu64 " ms\n", N_OBJ, env_clock_mono_ms() - t0);
    if (single) {
        cleanup();
        return 0;
    }
    kvmesh_admin_device_t d0, d1;
    devices(&d0, &d1);
    size_t f0 = tcold_count_files(root0), f1 = tcold_count_files(root1);
    printf("after %u puts: device 0 used %" PRIu64 " (%zu files), device 1 used %" PRIu64
           " (%zu files), tags '%s' / '%s'\n",
           N_OBJ, d0.used, f0, d1.used, f1, d0.tags, d1.tags);
    CHECK(d0.used > 0 && d1.used > 0);
    CHECK(d0.reserved == 0 && d1.reserved == 0);
    CHECK(d0.used == (uint64_t)f0 * OBJ_LEN && d1.used == (uint64_t)f1 * OBJ_LEN);
    CHECK(f0 + f1 == N_OBJ); /* write-through: every acknowledged put has its cold copy */
    CHECK(strcmp(d1.tags, "second") == 0 && strcmp(d0.owner, d1.owner) == 0);

    /* 2. every object byte-exact */
    CHECK(tcold_read_back_words(kv, &sc, N_OBJ, OBJ_LEN, key));

    printf("phase 2: every object read back by %" PRIu64 " ms\n", env_clock_mono_ms() - t0);

    /* 3. drain device 0: new puts go to device 1 only */
    bool changed = false;
    CHECK(kvmesh_admin_device_lifecycle(adm, d0.id, "drain", &d0, &changed) == 0 && changed);
    CHECK(strcmp(d0.lifecycle, "draining") == 0 && !d0.schedulable);
    uint64_t used0 = d0.used, used1 = d1.used;
    uint32_t acked = 0, refused = 0;
    for (uint32_t t = 0; t < TRIES_MAX && acked < N_DRAINED; t++) {
        int rc = put(N_OBJ + t, buf);
        if (rc == 0)
            acked++;
        else { /* placed on device 0 from the view of before the drain */
            refused++;
            printf("put refused: %s: %s\n", kvmesh_errname(rc), kvmesh_last_error());
        }
    }
    printf("phase 3: puts after the drain done by %" PRIu64 " ms\n", env_clock_mono_ms() - t0);
    devices(&d0, &d1);
    size_t g0 = tcold_count_files(root0), g1 = tcold_count_files(root1);
    printf("after the drain: %u puts acknowledged, %u refused; device 0 used %" PRIu64
           " (%zu files), device 1 used %" PRIu64 " (%zu files)\n",
           acked, refused, d0.used, g0, d1.used, g1);
    CHECK(acked == N_DRAINED);
    CHECK(d0.used == used0 && g0 == f0);
    CHECK(d1.used == used1 + (uint64_t)N_DRAINED * OBJ_LEN && g1 == f1 + N_DRAINED);
    CHECK(d0.reserved == 0 && d1.reserved == 0);
    free(buf);
    cleanup();
    printf("cold_multi: ok\n");
    return 0;
}

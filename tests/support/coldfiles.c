// SPDX-License-Identifier: Apache-2.0
/*
 * coldfiles.c — LocalDir device directories as the cold-tier tests see them (coldfiles.h).
 */
#include "coldfiles.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tmpdir.h"

static bool is_obj(const char *name)
{
    size_t l = strlen(name);
    return l > 4 && strcmp(name + l - 4, ".obj") == 0;
}

static bool flip(const char *f, off_t at)
{
    int fd = open(f, O_RDWR);
    if (fd < 0) {
        perror(f);
        return false;
    }
    uint8_t b;
    bool ok = pread(fd, &b, 1, at) == 1;
    b ^= 0x5a;
    ok = ok && pwrite(fd, &b, 1, at) == 1;
    if (!ok)
        fprintf(stderr, "%s: cannot flip the byte at %lld\n", f, (long long)at);
    close(fd);
    return ok;
}

/* Visits every object file under root/ld: counts them, and flips the byte at `at` when at >= 0.
 * (size_t)-1 when a flip failed. */
static size_t walk(const char *root, off_t at)
{
    char ld[512];
    snprintf(ld, sizeof(ld), "%s/ld", root);
    DIR *top = opendir(ld);
    if (!top)
        return 0;
    size_t n = 0;
    bool ok = true;
    struct dirent *d;
    while ((d = readdir(top)) != NULL) {
        if (d->d_name[0] == '.')
            continue;
        char sub[800];
        snprintf(sub, sizeof(sub), "%s/%s", ld, d->d_name);
        DIR *s = opendir(sub);
        if (!s)
            continue;
        struct dirent *e;
        while ((e = readdir(s)) != NULL) {
            if (!is_obj(e->d_name))
                continue;
            if (at >= 0) {
                char f[1200];
                snprintf(f, sizeof(f), "%s/%s", sub, e->d_name);
                ok = flip(f, at) && ok;
            }
            n++;
        }
        closedir(s);
    }
    closedir(top);
    return ok ? n : (size_t)-1;
}

size_t tcold_count_files(const char *root)
{
    return walk(root, -1);
}

size_t tcold_corrupt_files(const char *root, off_t at)
{
    return walk(root, at);
}

void tcold_remove_dir(char *dir)
{
    (void)ttmp_remove(dir); /* what it could not remove is named on stderr */
}

bool tcold_devices2(kvmesh_admin_t *adm, kvmesh_admin_device_t *d0, kvmesh_admin_device_t *d1)
{
    kvmesh_admin_device_t dv[8];
    size_t n = 0;
    bool more = false, got0 = false, got1 = false;
    if (kvmesh_admin_devices(adm, NULL, 8, dv, &n, &more) != 0 || n != 2 || more)
        return false;
    for (size_t i = 0; i < n; i++) {
        size_t rl = strlen(dv[i].root);
        if (rl <= 5 || dv[i].malformed)
            return false;
        if (strcmp(dv[i].root + rl - 5, "/dev0") == 0) {
            *d0 = dv[i];
            got0 = true;
        } else if (strcmp(dv[i].root + rl - 5, "/dev1") == 0) {
            *d1 = dv[i];
            got1 = true;
        }
    }
    return got0 && got1;
}

void tcold_cleanup(kvmesh_t **kv, kvmesh_admin_t **adm, char *dir)
{
    if (adm && *adm) {
        kvmesh_admin_close(*adm);
        *adm = NULL;
    }
    if (kv && *kv) {
        kvmesh_close(*kv);
        *kv = NULL;
    }
    if (dir)
        tcold_remove_dir(dir);
}

void tcold_fill_words(uint8_t *buf, size_t len, uint32_t i)
{
    for (size_t k = 0; k + 8 <= len; k += 8) {
        uint64_t x = ((uint64_t)i << 32) ^ (k * 0x9e3779b97f4a7c15ull);
        memcpy(buf + k, &x, 8);
    }
}

bool tcold_read_back_words(kvmesh_t *kv, const kvmesh_scope_t *sc, uint32_t n, size_t len,
                           void (*key_of)(uint32_t i, char *k, size_t cap))
{
    uint8_t *want = malloc(len);
    if (!want)
        return false;
    bool ok = true;
    for (uint32_t i = 0; ok && i < n; i++) {
        char k[64];
        key_of(i, k, sizeof(k));
        void *out = NULL;
        size_t got = 0;
        int rc = kvmesh_get(kv, sc, k, strlen(k), &out, &got);
        tcold_fill_words(want, len, i);
        ok = rc == 0 && got == len && memcmp(out, want, len) == 0;
        if (!ok)
            fprintf(stderr, "read back %s: rc %d (%s), %zu bytes%s\n", k, rc, kvmesh_last_error(),
                    got, rc == 0 && got == len ? ", other bytes" : "");
        if (rc == 0)
            kvmesh_free(out);
    }
    free(want);
    return ok;
}

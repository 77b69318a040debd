// SPDX-License-Identifier: Apache-2.0
/*
 * cold_nfs.c — the NFS target check of cold_nfs.h: parse /proc/self/mountinfo (bounded: at most
 * COLD_NFS_LINES_MAX lines of at most COLD_NFS_LINE_MAX bytes), pick the mount holding the
 * directory, check its type and options, cross-check statfs.
 */
#include "cold/cold_nfs.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/vfs.h>

#include "cold/backend_impl.h"
#include "kvmesh.h"

#define COLD_NFS_LINE_MAX  4096
#define COLD_NFS_LINES_MAX 100000
#define COLD_NFS_MAGIC     0x6969 /* NFS_SUPER_MAGIC (linux/magic.h) */

/* Copies a mountinfo field, undoing its octal escapes (\040 = space, ...). */
static void unescape(const char *in, char *out, size_t cap)
{
    size_t o = 0;
    for (size_t i = 0; in[i] && o + 1 < cap; i++) {
        if (in[i] == '\\' && in[i + 1] >= '0' && in[i + 1] <= '7' && in[i + 2] >= '0' &&
            in[i + 2] <= '7' && in[i + 3] >= '0' && in[i + 3] <= '7') {
            out[o++] = (char)((in[i + 1] - '0') * 64 + (in[i + 2] - '0') * 8 + (in[i + 3] - '0'));
            i += 3;
        } else {
            out[o++] = in[i];
        }
    }
    out[o] = 0;
}

/* True when mount point m is path itself or a directory above it. */
static bool covers(const char *m, const char *path)
{
    size_t n = strlen(m);
    if (n == 1 && m[0] == '/')
        return true;
    return strncmp(m, path, n) == 0 && (path[n] == 0 || path[n] == '/');
}

static bool has_opt(const char *opts, const char *want)
{
    size_t n = strlen(want);
    for (const char *p = opts; *p;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && strncmp(p, want, n) == 0)
            return true;
        if (!e)
            break;
        p = e + 1;
    }
    return false;
}

int cold_nfs_find_mount(const char *path, const char *mountinfo, cold_nfs_mount_t *out,
                        cold_backend_err_t *err)
{
    const char *file = mountinfo ? mountinfo : "/proc/self/mountinfo";
    memset(out, 0, sizeof(*out));
    FILE *f = fopen(file, "r");
    if (!f)
        return cold_seterr(err, KVMESH_EIO, "cold backend: cannot read %s: %s (errno %d)", file,
                           strerror(errno), errno);
    char *line = malloc(COLD_NFS_LINE_MAX);
    if (!line) {
        fclose(f);
        return KVMESH_ENOMEM;
    }
    size_t best = 0;
    bool found = false;
    for (int n = 0; n < COLD_NFS_LINES_MAX && fgets(line, COLD_NFS_LINE_MAX, f); n++) {
        /* id parent major:minor root mount_point mount_opts [optional...] - type source super */
        char *save = NULL, *tok[6] = {0};
        int k = 0;
        char *w = strtok_r(line, " \n", &save);
        while (w && k < 6) {
            tok[k++] = w;
            w = k < 6 ? strtok_r(NULL, " \n", &save) : NULL;
        }
        if (k < 6)
            continue;
        char *t = NULL;
        while ((t = strtok_r(NULL, " \n", &save)) && strcmp(t, "-") != 0) {
        }
        char *type = t ? strtok_r(NULL, " \n", &save) : NULL;
        char *source = type ? strtok_r(NULL, " \n", &save) : NULL;
        char *super = source ? strtok_r(NULL, " \n", &save) : NULL;
        if (!type)
            continue;
        char mp[sizeof(out->mount_point)];
        unescape(tok[4], mp, sizeof(mp));
        size_t len = strlen(mp);
        if (!covers(mp, path) || len < best)
            continue;
        best = len;
        found = true;
        snprintf(out->mount_point, sizeof(out->mount_point), "%s", mp);
        snprintf(out->fstype, sizeof(out->fstype), "%s", type);
        snprintf(out->mount_opts, sizeof(out->mount_opts), "%s", tok[5]);
        snprintf(out->super_opts, sizeof(out->super_opts), "%s", super ? super : "");
    }
    free(line);
    fclose(f);
    if (!found)
        return cold_seterr(err, KVMESH_ENOENT, "cold backend: no mount in %s holds %s", file, path);
    return 0;
}

int cold_nfs_check(const char *root, const char *mountinfo, cold_backend_err_t *err)
{
    char canon[PATH_MAX];
    if (!realpath(root, canon))
        return cold_seterr(err, KVMESH_ECONFIG,
                           "cold backend: cold_root %s (configured as NFS): %s (errno %d); mount "
                           "the NFS export there before starting",
                           root, strerror(errno), errno);
    cold_nfs_mount_t m;
    int rc = cold_nfs_find_mount(canon, mountinfo, &m, err);
    if (rc)
        return rc == KVMESH_ENOENT ? cold_seterr(err, KVMESH_ECONFIG, "%s", err ? err->msg : "")
                                   : rc;
    if (strcmp(m.fstype, "nfs") != 0 && strcmp(m.fstype, "nfs4") != 0)
        return cold_seterr(
            err, KVMESH_ECONFIG,
            "cold backend: cold_root %s is configured as NFS (cold_nfs) but is on filesystem type "
            "%s (mount %s); mount the NFS export there or set cold_nfs "
            "to false",
            root, m.fstype, m.mount_point);
    if (has_opt(m.mount_opts, "ro"))
        return cold_seterr(
            err, KVMESH_ECONFIG,
            "cold backend: NFS cold_root %s is mounted read-only (%s on %s); remount "
            "it rw",
            root, m.fstype, m.mount_point);
    if (has_opt(m.super_opts, "soft"))
        return cold_seterr(
            err, KVMESH_ECONFIG,
            "cold backend: NFS cold_root %s is a soft mount (%s on %s): a slow server "
            "would turn into I/O errors; remount it with hard",
            root, m.fstype, m.mount_point);
    if (!mountinfo) {
        struct statfs sf;
        if (statfs(canon, &sf) != 0)
            return cold_seterr(err, KVMESH_ECONFIG, "cold backend: statfs %s: %s (errno %d)", root,
                               strerror(errno), errno);
        if ((unsigned long)sf.f_type != COLD_NFS_MAGIC)
            return cold_seterr(err, KVMESH_ECONFIG,
                               "cold backend: cold_root %s is listed as %s but statfs reports "
                               "filesystem type 0x%lx, not NFS; check the mount",
                               root, m.fstype, (unsigned long)sf.f_type);
    }
    return 0;
}

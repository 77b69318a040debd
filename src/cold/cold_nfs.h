/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cold_nfs.h — validation of an NFS cold target (specification "Backends, devices, and
 * scheduling": NFS targets use a validated NFS/NFS4 directory mount; docs/cold.md "NFS
 * targets"). Owns nothing: pure checks over /proc/self/mountinfo and statfs.
 *
 * The mount holding the directory is the mountinfo entry whose mount point is the longest
 * path-component prefix of the directory's canonical path (the last such entry: later mounts
 * shadow earlier ones). It must have filesystem type nfs or nfs4, be mounted read-write (no
 * "ro" in its mount options) and hard (no "soft" in its super options: a soft mount turns a slow
 * server into silent I/O errors), and statfs must report NFS_SUPER_MAGIC.
 */
#ifndef KVMESH_COLD_COLD_NFS_H
#define KVMESH_COLD_COLD_NFS_H

#include <stdbool.h>
#include <stddef.h>

#include "cold/cold_backend.h"

typedef struct cold_nfs_mount {
    char mount_point[512];
    char fstype[32];
    char mount_opts[256];
    char super_opts[512];
} cold_nfs_mount_t;

/* Finds the mount holding `path` in a mountinfo file (NULL = /proc/self/mountinfo).
 * 0, KVMESH_ENOENT (no entry), KVMESH_EIO (unreadable); err names the file. */
int cold_nfs_find_mount(const char *path, const char *mountinfo, cold_nfs_mount_t *out,
                        cold_backend_err_t *err);

/* 0 when `root` is a usable NFS target; KVMESH_ECONFIG with a message naming the path, the
 * filesystem type found and what to do otherwise. mountinfo NULL = /proc/self/mountinfo, and
 * then statfs is checked too (a test passing its own mountinfo skips statfs). */
int cold_nfs_check(const char *root, const char *mountinfo, cold_backend_err_t *err);

#endif

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * coldfiles.h — the cold-tier tests' view of a LocalDir device directory (docs/cold.md
 * "LocalDir"): the complete object files under <root>/ld/<shard>/ (names ending in ".obj";
 * temporaries do not), counted, or corrupted by flipping one payload byte of each; the records
 * of a runtime's two devices /dev0 and /dev1 from metadata; and the tests' cleanup (their
 * runtime and admin handles closed, their scratch directory removed).
 *
 * Ownership: nothing is kept; the caller owns the directory. Threading: any thread, but not
 * while another thread of the test changes the same files.
 */
#ifndef KVMESH_TESTS_SUPPORT_COLDFILES_H
#define KVMESH_TESTS_SUPPORT_COLDFILES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "api/kvmesh_tools.h"
#include "kvmesh.h"

/* The LocalDir object files under root (0 when root/ld cannot be opened). */
size_t tcold_count_files(const char *root);

/* XORs the byte at offset `at` of every LocalDir object file under root with 0x5a (the header
 * is 64 bytes, so 64 + n is payload byte n). Returns the files changed, or (size_t)-1 when a
 * file could not be read or written (the reason on stderr). */
size_t tcold_corrupt_files(const char *root, off_t at);

/* Removes dir and everything below it (rm -rf) when dir[0] is not NUL, then empties dir (the
 * tests' cleanup, safe to call twice). A failure is reported on stderr. */
void tcold_remove_dir(char *dir);

/* The payload pattern of cold_multi and cold_mixed: len bytes (a multiple of 8) of 64-bit words
 * in host byte order, the word at offset k being (i << 32) ^ (k * 0x9e3779b97f4a7c15). */
void tcold_fill_words(uint8_t *buf, size_t len, uint32_t i);

/* Reads objects 0..n-1 (keyed by key_of(i), at most 63 characters) under sc through kv. True when
 * each reads back as len bytes of tcold_fill_words(i); the first that does not is named on
 * stderr. */
bool tcold_read_back_words(kvmesh_t *kv, const kvmesh_scope_t *sc, uint32_t n, size_t len,
                           void (*key_of)(uint32_t i, char *k, size_t cap));

/* The records of the two devices of a runtime whose roots end in /dev0 and /dev1, listed through
 * adm, into *d0 and *d1. True when the listing is exactly those two records, none malformed. */
bool tcold_devices2(kvmesh_admin_t *adm, kvmesh_admin_device_t *d0, kvmesh_admin_device_t *d1);

/* A cold test's cleanup: closes *adm and *kv where set (leaving them NULL), then
 * tcold_remove_dir(dir) when dir is not NULL. Safe to call twice. */
void tcold_cleanup(kvmesh_t **kv, kvmesh_admin_t **adm, char *dir);

#endif

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cold_simbe.h — the in-memory cold backend (simulator, unit and metadata tests): the
 * cold_backend.h table over a mutex-guarded table of payloads owned by the test. See
 * cold_simbe.c for its locators and fault knobs.
 */
#ifndef KVMESH_COLD_COLD_SIMBE_H
#define KVMESH_COLD_COLD_SIMBE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "cold/cold_backend.h"

typedef struct cold_simbe cold_simbe_t;

cold_simbe_t *cold_simbe_new(uint64_t capacity); /* NULL when out of memory */
void cold_simbe_free(cold_simbe_t *s);
/* The table + handle to attach (cold_attach_backend); valid while s lives. */
cold_backend_t cold_simbe_backend(cold_simbe_t *s);
/* Whether a live payload is stored at this locator (checkers). */
bool cold_simbe_has(cold_simbe_t *s, const uint8_t *loc, size_t len);
/* Flips a byte of a stored payload (get must then fail verification). */
int cold_simbe_corrupt(cold_simbe_t *s, const cold_locator_t *loc);
/* The next `puts` writes and `gets` reads fail with KVMESH_EIO. */
void cold_simbe_fail(cold_simbe_t *s, uint32_t puts, uint32_t gets);
void cold_simbe_stat(cold_simbe_t *s, uint64_t *used, uint64_t *objects);

#endif

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * status_page.h — the live status page of a runtime's admin port: one self-contained HTML
 * document (inline CSS and JS, no external assets) served at GET / to clients that accept
 * text/html. It refreshes itself from /healthz, /stats, /cluster and /metrics.
 *
 * The bytes are generated from status_page.html (status_page_gen.cmake); they are static and
 * immutable, so any thread may serve them.
 */
#ifndef KVMESH_OBS_STATUS_PAGE_H
#define KVMESH_OBS_STATUS_PAGE_H

#include <stdbool.h>
#include <stddef.h>

extern const char obs_status_page_html[];
extern const size_t obs_status_page_len;

/* Does this request get the HTML page rather than the JSON index? GET or HEAD of exactly "/"
 * (no query string) whose Accept header names text/html. accept may be NULL (then no). */
bool obs_status_page_wanted(const char *method, const char *uri, const char *accept);

#endif

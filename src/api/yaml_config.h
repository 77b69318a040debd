/* SPDX-License-Identifier: Apache-2.0 */
/*
 * yaml_config.h — the daemon's configuration file: a strict subset of YAML over the field
 * table of config.c.
 *
 * Accepted (one document, one flat mapping):
 *   - optional "---" first line (after comments/blank lines) and optional "..." last line;
 *   - blank lines and comment lines ("# ...");
 *   - "field: value" at column 0; value plain, 'single-quoted' ('' = a quote) or
 *     "double-quoted" (escapes \" \\ \n \t); a plain value ends at " #" (a comment);
 *   - an empty value ("field:" or "field: ''") sets the empty string.
 * Rejected with KVMESH_ECONFIG and a message "SOURCE:LINE: ..." naming the field when one is
 * known: indentation, tabs, nesting, sequences, flow collections, anchors, tags, block scalars,
 * duplicate fields, unknown fields, values the table rejects, NUL bytes, lines over
 * KVM_YAML_LINE_MAX bytes, files over KVM_YAML_FILE_MAX bytes.
 *
 * Ownership: inputs are borrowed; cfg is written only when the whole file is valid (all fields
 * applied to a copy first), so a failed load leaves cfg unchanged. Cross-field rules are not
 * checked here (kvm_config_validate does that).
 */
#ifndef KVMESH_API_YAML_CONFIG_H
#define KVMESH_API_YAML_CONFIG_H

#include <stddef.h>

#include "api/config.h"
#include "api/kvmesh_tools.h"

#define KVM_YAML_LINE_MAX 4096
#define KVM_YAML_FILE_MAX KVMESH_TOOLS_YAML_FILE_MAX

/* Applies the text (len bytes, need not be NUL-terminated) to cfg. source names it in
 * messages (a file name, "<stdin>"). */
int kvm_config_load_yaml(struct kvmesh_config *cfg, const char *text, size_t len,
                         const char *source);
/* Reads path (at most KVM_YAML_FILE_MAX bytes) and applies it; KVMESH_EIO when unreadable. */
int kvm_config_load_file(struct kvmesh_config *cfg, const char *path);
/* Writes cfg as a YAML file that kvm_config_load_yaml reads back to the same config: every
 * field, with its help as a comment. Returns the length written (truncated at cap like
 * snprintf) */
size_t kvm_config_dump_yaml(const struct kvmesh_config *cfg, char *buf, size_t cap);

#endif

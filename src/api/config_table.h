/* SPDX-License-Identifier: Apache-2.0 */
/*
 * config_table.h — internal view of the configuration field table (config.c) for the YAML
 * loader, the CLI flag parser and the documentation generator.
 *
 * The table is static and immutable; pointers into it live for the whole process.
 */
#ifndef KVMESH_API_CONFIG_TABLE_H
#define KVMESH_API_CONFIG_TABLE_H

#include <stddef.h>
#include <stdint.h>

#include "api/config.h"
#include "api/kvmesh_tools.h"

enum kvm_cfg_type {
    KVM_CFG_STRING = 0, /* bounded string, checked by a per-field syntax rule */
    KVM_CFG_SIZE,       /* byte count with optional unit (KiB, MiB, GiB, TiB, KB, MB, ...) */
    KVM_CFG_UINT,       /* unsigned 32-bit integer within [min, max] */
    KVM_CFG_DOUBLE,     /* finite double within [dmin, dmax] */
    KVM_CFG_BOOL,       /* true|false|yes|no|on|off|1|0 */
    KVM_CFG_ENUM,       /* one of a fixed list of words, stored as its index */
};

/* Syntax rules for string fields. */
enum kvm_cfg_syntax {
    KVM_CFG_SYN_ANY = 0,         /* printable, no control characters */
    KVM_CFG_SYN_URL,             /* memory://NAME | redis://... | etcd://... */
    KVM_CFG_SYN_NAME,            /* [A-Za-z0-9_.-]{1,63} */
    KVM_CFG_SYN_HEXID_OPT,       /* "" or 32 hex digits */
    KVM_CFG_SYN_HOSTPORT,        /* host:port, port 0..65535 */
    KVM_CFG_SYN_HOSTPORT_OPT,    /* "" or host:port */
    KVM_CFG_SYN_TENANT,          /* 1..64 of [A-Za-z0-9_.-], first alphanumeric */
    KVM_CFG_SYN_HTTP_URL_OPT,    /* "" or http(s)://... without spaces */
    KVM_CFG_SYN_TENANT_POLICIES, /* "" or tenant:max_bytes:max_objects[:version][,...] */
    KVM_CFG_SYN_TENANT_WEIGHTS,  /* "" or tenant:weight[,...] */
    KVM_CFG_SYN_TENANT_PLACE,    /* "" or tenant:owner[+owner...][:soft|hard][,...] */
    KVM_CFG_SYN_COLD_DEVICES,    /* "" or kind:root[:capacity[:tags]][;...] */
};

#define KVM_CFG_ENUM_MAX 4

typedef struct kvm_cfg_field {
    const char *name;
    enum kvm_cfg_type type;
    size_t offset; /* into struct kvmesh_config */
    size_t size;   /* member size (strings: buffer capacity including NUL) */
    const char *default_value;
    uint64_t min, max;                       /* SIZE, UINT */
    double dmin, dmax;                       /* DOUBLE */
    enum kvm_cfg_syntax syntax;              /* STRING */
    const char *words[KVM_CFG_ENUM_MAX + 1]; /* ENUM, NULL-terminated */
    const char *help;
} kvm_cfg_field_t;

/* Every field, in documentation order. *n receives the count. */
const kvm_cfg_field_t *kvm_config_table(size_t *n);
/* The field named `name` (exact match), or NULL. */
const kvm_cfg_field_t *kvm_config_lookup(const char *name);
/* Writes what the field accepts ("1..8", "auto|tcp|shm", "a size 1MiB..16GiB", ...) into buf. */
void kvm_config_allowed(const kvm_cfg_field_t *f, char *buf, size_t cap);
/* "string", "size", "uint", "double", "bool" or "enum". */
const char *kvm_config_type_name(enum kvm_cfg_type t);
/* Parses a size with optional unit into *out. 0 or KVMESH_ECONFIG (message names `what`). */
int kvm_config_parse_size(const char *what, const char *s, uint64_t *out);
/* The row of the docs/configuration.md field table for f ("| `name` | type | `default` | allowed
 * | help |", '|' escaped), NUL-terminated, truncated at cap. The header is
 * KVM_CONFIG_MARKDOWN_HEADER. */
#define KVM_CONFIG_MARKDOWN_HEADER KVMESH_TOOLS_CONFIG_MARKDOWN_HEADER
void kvm_config_markdown_row(const kvm_cfg_field_t *f, char *buf, size_t cap);
/* Formats a byte count in the largest exact binary unit ("256MiB", "1536", "0"). */
void kvm_config_format_size(uint64_t v, char *buf, size_t cap);

#endif

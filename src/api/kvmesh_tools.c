/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kvmesh_tools.c — the internal tools interface (api/kvmesh_tools.h) over the configuration
 * table (config.c) and the YAML loader (yaml_config.c). kvmesh_runtime_of is in kvmesh.c,
 * beside struct kvmesh.
 */
#include <string.h>

#include "api/config_table.h"
#include "api/kvmesh_tools.h"
#include "api/yaml_config.h"
#include "core/util.h"

bool kvmesh_tools_config_has(const char *field)
{
    return kvm_config_lookup(field) != NULL;
}

const char *kvmesh_tools_config_type(const char *field)
{
    const kvm_cfg_field_t *f = kvm_config_lookup(field);
    return f ? kvm_config_type_name(f->type) : NULL;
}

static int unknown(const char *field, char *buf, size_t cap)
{
    if (buf && cap)
        buf[0] = '\0';
    return kvm_errf(KVMESH_ECONFIG, "unknown configuration field \"%s\"", field ? field : "");
}

int kvmesh_tools_config_allowed(const char *field, char *buf, size_t cap)
{
    const kvm_cfg_field_t *f = kvm_config_lookup(field);
    if (!f)
        return unknown(field, buf, cap);
    kvm_config_allowed(f, buf, cap);
    return 0;
}

int kvmesh_tools_config_markdown_row(const char *field, char *buf, size_t cap)
{
    const kvm_cfg_field_t *f = kvm_config_lookup(field);
    if (!f)
        return unknown(field, buf, cap);
    kvm_config_markdown_row(f, buf, cap);
    return 0;
}

const char *kvmesh_tools_config_str(const kvmesh_config_t *cfg, const char *field)
{
    const kvm_cfg_field_t *f = kvm_config_lookup(field);
    KVM_ASSERT(cfg && f && (f->type == KVM_CFG_STRING || f->type == KVM_CFG_ENUM));
    const char *src = (const char *)cfg + f->offset;
    if (f->type == KVM_CFG_STRING)
        return src;
    uint32_t x;
    memcpy(&x, src, sizeof(x));
    size_t nw = 0;
    while (f->words[nw])
        nw++;
    KVM_ASSERT(x < nw);
    return f->words[x];
}

uint64_t kvmesh_tools_config_uint(const kvmesh_config_t *cfg, const char *field)
{
    const kvm_cfg_field_t *f = kvm_config_lookup(field);
    KVM_ASSERT(cfg && f);
    const char *src = (const char *)cfg + f->offset;
    switch (f->type) {
    case KVM_CFG_SIZE: {
        uint64_t x;
        memcpy(&x, src, sizeof(x));
        return x;
    }
    case KVM_CFG_UINT: {
        uint32_t x;
        memcpy(&x, src, sizeof(x));
        return x;
    }
    case KVM_CFG_BOOL: {
        bool b;
        memcpy(&b, src, sizeof(b));
        return b ? 1 : 0;
    }
    default:
        KVM_ASSERT(!"kvmesh_tools_config_uint: not a size, uint or bool field");
        return 0;
    }
}

int kvmesh_tools_config_validate(const kvmesh_config_t *cfg)
{
    return kvm_config_validate(cfg);
}

int kvmesh_tools_config_load_yaml(kvmesh_config_t *cfg, const char *text, size_t len,
                                  const char *source)
{
    return kvm_config_load_yaml(cfg, text, len, source);
}

int kvmesh_tools_config_load_file(kvmesh_config_t *cfg, const char *path)
{
    return kvm_config_load_file(cfg, path);
}

size_t kvmesh_tools_config_dump_yaml(const kvmesh_config_t *cfg, char *buf, size_t cap)
{
    return kvm_config_dump_yaml(cfg, buf, cap);
}

int kvmesh_tools_parse_size(const char *what, const char *s, uint64_t *out)
{
    return kvm_config_parse_size(what, s, out);
}

void kvmesh_tools_format_size(uint64_t v, char *buf, size_t cap)
{
    kvm_config_format_size(v, buf, cap);
}

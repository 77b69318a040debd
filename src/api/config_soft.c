// SPDX-License-Identifier: Apache-2.0
/*
 * config_soft.c — parsers of the soft tenant isolation fields of the configuration table
 * (docs/tenancy.md "Soft isolation", docs/configuration.md): tenant_weights and
 * tenant_placement. Pure: they validate (out == NULL) or fill the store's entries; a refusal
 * names the entry and the part that is wrong.
 */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "api/config.h"
#include "core/ident.h"
#include "kvmesh.h"
#include "store/store_config.h"

static int soft_fail(char *why, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int soft_fail(char *why, size_t cap, const char *fmt, ...)
{
    if (why && cap) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, cap, fmt, ap);
        va_end(ap);
    }
    return KVMESH_ECONFIG;
}

/* Splits v at commas into entries (each copied into item, at most cap_items entries); calls
 * fn for each. */
typedef int (*entry_fn)(char *item, uint32_t index, void *out, char *why, size_t cap);

static int each_entry(const char *v, uint32_t max, const char *what, entry_fn fn, void *out,
                      uint32_t *n_out, char *why, size_t cap)
{
    uint32_t n = 0;
    const char *p = v;
    while (*p) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (n == max)
            return soft_fail(why, cap, "lists more than %u %s", max, what);
        char item[KVM_CFG_STR_MAX];
        if (len == 0 || len >= sizeof(item))
            return soft_fail(why, cap, "has an empty entry (entry %u)", n + 1);
        memcpy(item, p, len);
        item[len] = '\0';
        int rc = fn(item, n, out, why, cap);
        if (rc)
            return rc;
        n++;
        p = end ? end + 1 : p + len;
        if (end && !*p)
            return soft_fail(why, cap, "ends with a comma");
    }
    if (n_out)
        *n_out = n;
    return 0;
}

static int check_tenant(const char *t, uint32_t index, char *why, size_t cap)
{
    if (kvm_ident_check_tenant(t, strlen(t)) != 0)
        return soft_fail(why, cap,
                         "entry %u: tenant '%.64s' breaks the tenant id rule (1..64 of "
                         "[A-Za-z0-9_.-], first alphanumeric)",
                         index + 1, t);
    return 0;
}

struct weights_out {
    struct kvm_store_tenant_weight tmp[KVM_STORE_TENANT_SOFT_MAX];
};

static int weight_entry(char *item, uint32_t index, void *out, char *why, size_t cap)
{
    struct weights_out *o = out;
    char *colon = strchr(item, ':');
    if (!colon)
        return soft_fail(why, cap, "entry %u is not tenant:weight", index + 1);
    *colon = '\0';
    const char *w = colon + 1;
    int rc = check_tenant(item, index, why, cap);
    if (rc)
        return rc;
    for (uint32_t i = 0; i < index; i++)
        if (strcmp(o->tmp[i].tenant, item) == 0)
            return soft_fail(why, cap, "tenant '%s' is listed twice", item);
    uint32_t x = 0;
    size_t wl = strlen(w);
    bool ok = wl >= 1 && wl <= 2;
    for (size_t i = 0; ok && i < wl; i++) {
        ok = isdigit((unsigned char)w[i]) != 0;
        x = x * 10 + (uint32_t)(w[i] - '0');
    }
    if (!ok || x < 1 || x > KVM_CFG_FAIR_WEIGHT_MAX)
        return soft_fail(why, cap, "entry %u (%s): weight '%.16s' is not an integer 1..%d",
                         index + 1, item, w, KVM_CFG_FAIR_WEIGHT_MAX);
    snprintf(o->tmp[index].tenant, sizeof(o->tmp[index].tenant), "%s", item);
    o->tmp[index].weight = x;
    return 0;
}

int kvm_config_parse_weights(const char *v, struct kvm_store_tenant_weight *out, uint32_t *n,
                             char *why, size_t cap)
{
    struct weights_out o;
    uint32_t k = 0;
    int rc =
        each_entry(v, KVM_STORE_TENANT_SOFT_MAX, "tenant weights", weight_entry, &o, &k, why, cap);
    if (rc)
        return rc;
    if (out)
        memcpy(out, o.tmp, k * sizeof(o.tmp[0]));
    if (n)
        *n = k;
    return 0;
}

struct place_out {
    struct kvm_store_tenant_placement tmp[KVM_STORE_TENANT_SOFT_MAX];
};

static bool hex32(const char *s)
{
    if (strlen(s) != 32)
        return false;
    for (int i = 0; i < 32; i++)
        if (!isxdigit((unsigned char)s[i]))
            return false;
    return true;
}

static int place_entry(char *item, uint32_t index, void *out, char *why, size_t cap)
{
    struct place_out *o = out;
    char *parts[4] = {0};
    int np = 0;
    for (char *q = item, *tok; np < 4 && (tok = strsep(&q, ":")) != NULL;)
        parts[np++] = tok;
    if (np < 2 || np > 3)
        return soft_fail(why, cap, "entry %u is not tenant:owner[+owner...][:soft|hard]",
                         index + 1);
    int rc = check_tenant(parts[0], index, why, cap);
    if (rc)
        return rc;
    for (uint32_t i = 0; i < index; i++)
        if (strcmp(o->tmp[i].tenant, parts[0]) == 0)
            return soft_fail(why, cap, "tenant '%s' is listed twice", parts[0]);
    struct kvm_store_tenant_placement *t = &o->tmp[index];
    memset(t, 0, sizeof(*t));
    snprintf(t->tenant, sizeof(t->tenant), "%s", parts[0]);
    for (char *q = parts[1], *tok; (tok = strsep(&q, "+")) != NULL;) {
        if (t->n_owners == KVM_STORE_PLACE_OWNERS_MAX)
            return soft_fail(why, cap, "entry %u (%s): more than %d preferred owners", index + 1,
                             t->tenant, KVM_STORE_PLACE_OWNERS_MAX);
        if (!hex32(tok))
            return soft_fail(why, cap,
                             "entry %u (%s): owner '%.40s' is not a runtime id (32 hex digits)",
                             index + 1, t->tenant, tok);
        snprintf(t->owners[t->n_owners++], sizeof(t->owners[0]), "%s", tok);
    }
    if (np == 3 && strcmp(parts[2], "hard") != 0 && strcmp(parts[2], "soft") != 0)
        return soft_fail(why, cap, "entry %u (%s): mode '%.16s' is not soft or hard", index + 1,
                         t->tenant, parts[2]);
    t->hard = np == 3 && strcmp(parts[2], "hard") == 0;
    return 0;
}

int kvm_config_parse_placement(const char *v, struct kvm_store_tenant_placement *out, uint32_t *n,
                               char *why, size_t cap)
{
    struct place_out o;
    uint32_t k = 0;
    int rc = each_entry(v, KVM_STORE_TENANT_SOFT_MAX, "tenant placements", place_entry, &o, &k, why,
                        cap);
    if (rc)
        return rc;
    if (out)
        memcpy(out, o.tmp, k * sizeof(o.tmp[0]));
    if (n)
        *n = k;
    return 0;
}

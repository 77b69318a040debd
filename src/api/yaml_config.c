/* SPDX-License-Identifier: Apache-2.0 */
/*
 * yaml_config.c — strict flat-mapping YAML subset loader for the configuration (see
 * yaml_config.h for the accepted grammar).
 *
 * Why a hand-written subset instead of libcyaml: the configuration is one flat mapping of
 * scalars whose validation already lives in the field table; every error must name the line
 * and the field, and anything outside the subset must be an error rather than silently
 * reinterpreted. A line-oriented parser of ~250 lines does that with exact line numbers and no
 * second schema to keep in sync. Invariant: every byte of input is either consumed by the
 * grammar or causes an error; the parser never reads past len.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/config_table.h"
#include "api/yaml_config.h"
#include "core/util.h"

#define YAML_MAX_FIELDS 128 /* duplicate tracking; the table is far smaller */

static int yerr(const char *src, unsigned line, const char *field, const char *msg)
{
    if (field)
        return kvm_errf(KVMESH_ECONFIG, "%s:%u: field \"%s\": %s", src, line, field, msg);
    return kvm_errf(KVMESH_ECONFIG, "%s:%u: %s", src, line, msg);
}

/* Parses the value part (after "key:" and spaces) of one line into out (cap bytes). */
static int parse_value(const char *p, const char *end, char *out, size_t cap, const char **why)
{
    size_t n = 0;
    if (p < end && (*p == '"' || *p == '\'')) {
        char q = *p++;
        for (;;) {
            if (p >= end) {
                *why = "unterminated quoted value";
                return -1;
            }
            char c = *p++;
            if (c == q) {
                if (q == '\'' && p < end && *p == '\'') { /* '' inside single quotes */
                    p++;
                } else {
                    break;
                }
            } else if (q == '"' && c == '\\') {
                if (p >= end) {
                    *why = "unterminated escape in quoted value";
                    return -1;
                }
                char e = *p++;
                switch (e) {
                case '"':
                case '\\':
                    c = e;
                    break;
                case 'n':
                    c = '\n';
                    break;
                case 't':
                    c = '\t';
                    break;
                default:
                    *why = "unsupported escape in double-quoted value (allowed \\\" \\\\ \\n \\t)";
                    return -1;
                }
            }
            if (n + 1 >= cap) {
                *why = "value too long";
                return -1;
            }
            out[n++] = c;
        }
        while (p < end && *p == ' ')
            p++;
        if (p < end && *p != '#') {
            *why = "unexpected text after quoted value";
            return -1;
        }
        out[n] = '\0';
        return 0;
    }
    /* Plain scalar: up to " #" or end, trailing spaces trimmed. */
    if (p < end && strchr("[]{}&*!|>%@`", *p)) {
        *why = "flow collections, anchors, aliases, tags and block scalars are not supported; "
               "quote the value";
        return -1;
    }
    if (p < end && *p == '-' && (p + 1 == end || p[1] == ' ')) {
        *why = "sequences are not supported; each field takes one scalar value";
        return -1;
    }
    const char *s = p;
    while (p < end) {
        if (*p == '#' && p > s && p[-1] == ' ')
            break;
        if (*p == '#' && p == s)
            break;
        if (*p == ':' && (p + 1 == end || p[1] == ' ')) {
            *why = "a plain value may not contain \": \" (nested mappings are not supported); "
                   "quote the value";
            return -1;
        }
        p++;
    }
    const char *e = p;
    while (e > s && e[-1] == ' ')
        e--;
    if ((size_t)(e - s) + 1 > cap) {
        *why = "value too long";
        return -1;
    }
    memcpy(out, s, (size_t)(e - s));
    out[e - s] = '\0';
    return 0;
}

static bool is_key_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-';
}

int kvm_config_load_yaml(struct kvmesh_config *cfg, const char *text, size_t len,
                         const char *source)
{
    const char *src = source ? source : "<config>";
    if (!cfg || (!text && len))
        return kvm_errf(KVMESH_EINVAL, "kvm_config_load_yaml: cfg and text must be set");
    if (len > KVM_YAML_FILE_MAX)
        return kvm_errf(KVMESH_ECONFIG, "%s: file is %zu bytes; at most %u allowed", src, len,
                        KVM_YAML_FILE_MAX);
    struct kvmesh_config tmp = *cfg;
    const kvm_cfg_field_t *seen[YAML_MAX_FIELDS];
    unsigned seen_line[YAML_MAX_FIELDS];
    size_t nseen = 0;
    bool doc_started = false, doc_ended = false, any_content = false;
    char *value = malloc(KVM_YAML_LINE_MAX + 1);
    if (!value)
        return kvm_errf(KVMESH_ENOMEM, "out of memory loading %s", src);
    int rc = 0;
    unsigned line = 0;
    size_t pos = 0;
    /* Skip a UTF-8 byte order mark. */
    if (len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0)
        pos = 3;
    while (pos < len) {
        line++;
        const char *ls = text + pos;
        const char *nl = memchr(ls, '\n', len - pos);
        const char *le = nl ? nl : text + len;
        pos = (size_t)(le - text) + (nl ? 1 : 0);
        if (le > ls && le[-1] == '\r')
            le--;
        size_t ll = (size_t)(le - ls);
        if (ll > KVM_YAML_LINE_MAX) {
            rc = yerr(src, line, NULL, "line too long");
            goto out;
        }
        if (memchr(ls, '\0', ll)) {
            rc = yerr(src, line, NULL, "NUL byte in configuration file");
            goto out;
        }
        for (size_t i = 0; i < ll; i++) {
            unsigned char c = (unsigned char)ls[i];
            if (c == '\t') {
                rc = yerr(src, line, NULL,
                          "tab character; YAML indentation and separators use "
                          "spaces");
                goto out;
            }
            if (c < 0x20 || c == 0x7f) {
                rc = yerr(src, line, NULL, "control character in configuration file");
                goto out;
            }
        }
        /* Blank or comment-only line. */
        const char *p = ls;
        while (p < le && *p == ' ')
            p++;
        if (p == le || *p == '#')
            continue;
        if (doc_ended) {
            rc = yerr(src, line, NULL, "content after the document end marker \"...\"");
            goto out;
        }
        if (p != ls) {
            rc = yerr(src, line, NULL,
                      "indented line: the configuration is one flat mapping of `field: value` "
                      "lines starting at column 1");
            goto out;
        }
        if (ll >= 3 && memcmp(ls, "---", 3) == 0 && (ll == 3 || ls[3] == ' ')) {
            if (doc_started || any_content) {
                rc = yerr(src, line, NULL, "only one YAML document is allowed");
                goto out;
            }
            doc_started = true;
            const char *q = ls + 3;
            while (q < le && *q == ' ')
                q++;
            if (q < le && *q != '#') {
                rc = yerr(src, line, NULL, "unexpected text after \"---\"");
                goto out;
            }
            continue;
        }
        if (ll >= 3 && memcmp(ls, "...", 3) == 0 && (ll == 3 || ls[3] == ' ')) {
            doc_ended = true;
            continue;
        }
        any_content = true;
        /* key */
        const char *k = ls;
        while (p < le && is_key_char(*p))
            p++;
        char key[80];
        size_t kl = (size_t)(p - k);
        if (kl == 0 || p == le || *p != ':' || kl >= sizeof(key)) {
            if (*k == '-')
                rc = yerr(src, line, NULL, "sequences are not supported; expected `field: value`");
            else
                rc = yerr(src, line, NULL, "expected `field: value`");
            goto out;
        }
        memcpy(key, k, kl);
        key[kl] = '\0';
        p++; /* ':' */
        if (p < le && *p != ' ') {
            rc = yerr(src, line, key, "expected a space after ':'");
            goto out;
        }
        while (p < le && *p == ' ')
            p++;
        const kvm_cfg_field_t *f = kvm_config_lookup(key);
        if (!f) {
            /* Reuse the table's unknown-field message (with its suggestion). */
            char msg[400];
            kvmesh_config_set(&tmp, key, "");
            snprintf(msg, sizeof(msg), "%s", kvmesh_last_error());
            rc = yerr(src, line, key, msg);
            goto out;
        }
        for (size_t i = 0; i < nseen; i++) {
            if (seen[i] == f) {
                char msg[96];
                snprintf(msg, sizeof(msg), "duplicate field (first set on line %u)", seen_line[i]);
                rc = yerr(src, line, key, msg);
                goto out;
            }
        }
        const char *why = NULL;
        if (parse_value(p, le, value, KVM_YAML_LINE_MAX + 1, &why) != 0) {
            rc = yerr(src, line, key, why);
            goto out;
        }
        if (kvmesh_config_set(&tmp, key, value) != 0) {
            /* The table's message starts with "FIELD: "; prefix the location only. */
            char msg[512];
            snprintf(msg, sizeof(msg), "%s", kvmesh_last_error());
            rc = kvm_errf(KVMESH_ECONFIG, "%s:%u: %s", src, line, msg);
            goto out;
        }
        KVM_ASSERT(nseen < YAML_MAX_FIELDS);
        seen[nseen] = f;
        seen_line[nseen++] = line;
    }
    *cfg = tmp;
out:
    free(value);
    return rc;
}

int kvm_config_load_file(struct kvmesh_config *cfg, const char *path)
{
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return kvm_errf(KVMESH_EIO, "cannot open configuration file %s: %s", path, strerror(errno));
    char *buf = malloc(KVM_YAML_FILE_MAX + 1);
    if (!buf) {
        fclose(fp);
        return kvm_errf(KVMESH_ENOMEM, "out of memory reading %s", path);
    }
    size_t n = fread(buf, 1, KVM_YAML_FILE_MAX + 1, fp);
    int rc;
    if (ferror(fp))
        rc = kvm_errf(KVMESH_EIO, "cannot read configuration file %s: %s", path, strerror(errno));
    else if (n > KVM_YAML_FILE_MAX)
        rc = kvm_errf(KVMESH_ECONFIG, "%s: file is larger than %u bytes", path, KVM_YAML_FILE_MAX);
    else
        rc = kvm_config_load_yaml(cfg, buf, n, path);
    free(buf);
    fclose(fp);
    return rc;
}

size_t kvm_config_dump_yaml(const struct kvmesh_config *cfg, char *buf, size_t cap)
{
    size_t n;
    const kvm_cfg_field_t *t = kvm_config_table(&n);
    size_t off = 0;
    char v[KVM_CFG_STR_MAX + 8];
#define EMIT(...)                                                                                  \
    do {                                                                                           \
        int w_ = snprintf(buf + (off < cap ? off : cap), off < cap ? cap - off : 0, __VA_ARGS__);  \
        if (w_ > 0)                                                                                \
            off += (size_t)w_;                                                                     \
    } while (0)
    for (size_t i = 0; i < n; i++) {
        if (kvmesh_config_get(cfg, t[i].name, v, sizeof(v)) != 0)
            v[0] = '\0';
        EMIT("# %s\n%s: \"", t[i].help, t[i].name);
        for (const char *p = v; *p; p++) {
            if (*p == '"' || *p == '\\')
                EMIT("\\%c", *p);
            else
                EMIT("%c", *p);
        }
        EMIT("\"\n");
    }
#undef EMIT
    return off;
}

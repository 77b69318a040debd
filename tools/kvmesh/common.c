/* SPDX-License-Identifier: Apache-2.0 */
/*
 * common.c — option parsing, config building, client runtime opening, progress line, latency
 * statistics and deterministic payloads shared by the kvmesh verbs (see cli.h).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <xxhash.h>

#include "api/kvmesh_tools.h"
#include "cli.h"

#define CLI_HELP_WIDTH 100

size_t cli_common_opts(struct cli_common *c, cli_opt_t *opts, size_t n, size_t cap)
{
    const cli_opt_t common[] = {
        {"metadata", "URL", CLI_STR, &c->metadata,
         "metadata backend of the deployment (memory://NAME, redis://HOST:PORT[/DB], "
         "etcd://HOST:PORT); default: the config's metadata_url"},
        {"deployment", "NAME", CLI_STR, &c->deployment,
         "deployment name (metadata key prefix); default: the config's deployment"},
        {"tenant", "ID", CLI_STR, &c->tenant, "tenant scope; default: the config's default_tenant"},
        {"domain", "NAME", CLI_STR, &c->domain, "domain scope inside the tenant; default: none"},
        {"config", "FILE", CLI_STR, &c->config,
         "read configuration fields from a YAML file (docs/configuration.md)"},
        {"set", "FIELD=VALUE", CLI_SET, &c->sets,
         "set any configuration field; repeatable, applied after --config"},
        {"timeout-ms", "MS", CLI_U64, &c->timeout_ms,
         "per-request deadline (the config's request_timeout_ms)"},
        {"help", NULL, CLI_FLAG, &c->help, "show this help"},
    };
    for (size_t i = 0; i < sizeof(common) / sizeof(common[0]) && n < cap; i++)
        opts[n++] = common[i];
    return n;
}

static const cli_opt_t *find_opt(const cli_opt_t *opts, size_t n, const char *name, size_t len)
{
    for (size_t i = 0; i < n; i++)
        if (strlen(opts[i].name) == len && strncmp(opts[i].name, name, len) == 0)
            return &opts[i];
    return NULL;
}

int cli_parse(const char *verb, const cli_opt_t *opts, size_t nopts, int argc, char **argv,
              const char **pos, size_t maxpos, size_t *npos)
{
    *npos = 0;
    bool only_pos = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (only_pos || a[0] != '-' || strcmp(a, "-") == 0) {
            if (*npos >= maxpos) {
                fprintf(stderr, "kvmesh %s: unexpected argument \"%s\"; see kvmesh %s --help\n",
                        verb, a, verb);
                return CLI_EXIT_USAGE;
            }
            pos[(*npos)++] = a;
            continue;
        }
        if (strcmp(a, "--") == 0) {
            only_pos = true;
            continue;
        }
        if (a[1] != '-') {
            if (strcmp(a, "-h") == 0) {
                const cli_opt_t *h = find_opt(opts, nopts, "help", 4);
                if (h) {
                    *(bool *)h->dst = true;
                    continue;
                }
            }
            fprintf(stderr,
                    "kvmesh %s: unknown option \"%s\" (options are --long); see kvmesh %s "
                    "--help\n",
                    verb, a, verb);
            return CLI_EXIT_USAGE;
        }
        const char *name = a + 2;
        const char *eq = strchr(name, '=');
        size_t nl = eq ? (size_t)(eq - name) : strlen(name);
        const cli_opt_t *o = find_opt(opts, nopts, name, nl);
        if (!o) {
            fprintf(stderr, "kvmesh %s: unknown option \"--%.*s\"; see kvmesh %s --help\n", verb,
                    (int)nl, name, verb);
            return CLI_EXIT_USAGE;
        }
        const char *val = NULL;
        if (o->kind == CLI_FLAG) {
            if (eq) {
                fprintf(stderr, "kvmesh %s: option --%s takes no value\n", verb, o->name);
                return CLI_EXIT_USAGE;
            }
            *(bool *)o->dst = true;
            continue;
        }
        if (eq) {
            val = eq + 1;
        } else if (i + 1 < argc) {
            val = argv[++i];
        } else {
            fprintf(stderr, "kvmesh %s: option --%s needs a value (%s)\n", verb, o->name, o->arg);
            return CLI_EXIT_USAGE;
        }
        switch (o->kind) {
        case CLI_STR:
        case CLI_CSV:
            *(const char **)o->dst = val;
            break;
        case CLI_U64: {
            char *end;
            errno = 0;
            unsigned long long x = strtoull(val, &end, 10);
            if (!val[0] || *end || errno || val[0] == '-') {
                fprintf(stderr, "kvmesh %s: --%s: \"%s\" is not an unsigned integer\n", verb,
                        o->name, val);
                return CLI_EXIT_USAGE;
            }
            *(uint64_t *)o->dst = x;
            break;
        }
        case CLI_SIZE: {
            char what[64];
            snprintf(what, sizeof(what), "--%s", o->name);
            if (kvmesh_tools_parse_size(what, val, (uint64_t *)o->dst) != 0) {
                fprintf(stderr, "kvmesh %s: %s\n", verb, kvmesh_last_error());
                return CLI_EXIT_USAGE;
            }
            break;
        }
        case CLI_SET: {
            struct cli_sets *s = o->dst;
            if (!strchr(val, '=')) {
                fprintf(stderr, "kvmesh %s: --%s: \"%s\" is not FIELD=VALUE\n", verb, o->name, val);
                return CLI_EXIT_USAGE;
            }
            if (s->n >= CLI_MAX_SETS) {
                fprintf(stderr, "kvmesh %s: at most %d --%s options\n", verb, CLI_MAX_SETS,
                        o->name);
                return CLI_EXIT_USAGE;
            }
            s->items[s->n++] = val;
            break;
        }
        case CLI_FLAG:
            break;
        }
    }
    return 0;
}

void cli_usage(FILE *out, const char *verb, const char *synopsis, const char *desc,
               const cli_opt_t *opts, size_t nopts)
{
    fprintf(out, "usage: kvmesh %s %s\n\n%s\n", verb, synopsis, desc);
    if (nopts)
        fprintf(out, "\noptions:\n");
    for (size_t i = 0; i < nopts; i++) {
        char left[64];
        snprintf(left, sizeof(left), "--%s%s%s", opts[i].name, opts[i].arg ? " " : "",
                 opts[i].arg ? opts[i].arg : "");
        /* Wrap the help at CLI_HELP_WIDTH columns under its own column. */
        const char *h = opts[i].help;
        int col = fprintf(out, "  %-26s ", left);
        if (col > 29) {
            fprintf(out, "\n%29s", "");
        }
        size_t width = CLI_HELP_WIDTH - 29;
        while (*h) {
            size_t n = strlen(h);
            if (n > width) {
                n = width;
                while (n > 0 && h[n] != ' ')
                    n--;
                if (n == 0)
                    n = width;
            }
            fprintf(out, "%.*s\n", (int)n, h);
            h += n;
            while (*h == ' ')
                h++;
            if (*h)
                fprintf(out, "%29s", "");
        }
    }
}

void cli_report(const char *verb, const char *what, int rc)
{
    const char *d = kvmesh_last_error();
    fprintf(stderr, "kvmesh %s: %s: %s%s%s\n", verb, what, kvmesh_strerror(rc), d[0] ? ": " : "",
            d);
}

int cli_apply_set(kvmesh_config_t *cfg, const char *item, const char *verb)
{
    const char *eq = strchr(item, '=');
    char field[96];
    if (!eq || (size_t)(eq - item) >= sizeof(field)) {
        fprintf(stderr, "kvmesh %s: --set \"%s\" is not FIELD=VALUE\n", verb, item);
        return CLI_EXIT_USAGE;
    }
    memcpy(field, item, (size_t)(eq - item));
    field[eq - item] = '\0';
    if (kvmesh_config_set(cfg, field, eq + 1) != 0) {
        fprintf(stderr, "kvmesh %s: --set %s\n", verb, kvmesh_last_error());
        return CLI_EXIT_USAGE;
    }
    return 0;
}

int cli_build_config(const struct cli_common *c, kvmesh_config_t *cfg, const char *verb)
{
    if (c->config && kvmesh_tools_config_load_file(cfg, c->config) != 0) {
        fprintf(stderr, "kvmesh %s: %s\n", verb, kvmesh_last_error());
        return CLI_EXIT_USAGE;
    }
    if (c->metadata && kvmesh_config_set(cfg, "metadata_url", c->metadata) != 0) {
        fprintf(stderr, "kvmesh %s: --metadata: %s\n", verb, kvmesh_last_error());
        return CLI_EXIT_USAGE;
    }
    if (c->deployment && kvmesh_config_set(cfg, "deployment", c->deployment) != 0) {
        fprintf(stderr, "kvmesh %s: --deployment: %s\n", verb, kvmesh_last_error());
        return CLI_EXIT_USAGE;
    }
    if (c->timeout_ms) {
        char v[32];
        snprintf(v, sizeof(v), "%" PRIu64, c->timeout_ms);
        if (kvmesh_config_set(cfg, "request_timeout_ms", v) != 0) {
            fprintf(stderr, "kvmesh %s: --timeout-ms: %s\n", verb, kvmesh_last_error());
            return CLI_EXIT_USAGE;
        }
    }
    for (size_t i = 0; i < c->sets.n; i++) {
        int rc = cli_apply_set(cfg, c->sets.items[i], verb);
        if (rc)
            return rc;
    }
    return 0;
}

int cli_open_client(const struct cli_common *c, const char *verb, kvmesh_t **out,
                    kvmesh_config_t **cfg_out)
{
    kvmesh_config_t *cfg = kvmesh_config_new();
    if (!cfg) {
        fprintf(stderr, "kvmesh %s: out of memory\n", verb);
        return CLI_EXIT_FAIL;
    }
    int rc = cli_build_config(c, cfg, verb);
    if (rc)
        goto fail;
    /* A tool joins as a client-only runtime: it stores nothing. */
    if (kvmesh_config_set(cfg, "memory_size", "0") != 0) {
        rc = CLI_EXIT_FAIL;
        goto fail;
    }
    if (kvmesh_tools_config_validate(cfg) != 0) {
        fprintf(stderr, "kvmesh %s: %s\n", verb, kvmesh_last_error());
        rc = CLI_EXIT_USAGE;
        goto fail;
    }
    int e = kvmesh_open(out, cfg);
    if (e != 0) {
        const char *d = kvmesh_last_error();
        fprintf(stderr, "kvmesh %s: cannot join deployment \"%s\" at %s: %s%s%s\n", verb,
                kvmesh_tools_config_str(cfg, "deployment"),
                kvmesh_tools_config_str(cfg, "metadata_url"), kvmesh_strerror(e), d[0] ? ": " : "",
                d);
        rc = CLI_EXIT_FAIL;
        goto fail;
    }
    if (cfg_out)
        *cfg_out = cfg;
    else
        kvmesh_config_free(cfg);
    return 0;
fail:
    kvmesh_config_free(cfg);
    return rc;
}

int cli_open_runtime(kvmesh_t **out, kvmesh_config_t *cfg, const char *verb)
{
    int rc = kvmesh_open(out, cfg);
    if (rc == KVMESH_ENOTSUP &&
        strcmp(kvmesh_tools_config_str(cfg, "route_mode"), "embedded_wrh") == 0 &&
        strstr(kvmesh_last_error(), "route_mode")) {
        static bool noted;
        if (!noted)
            fprintf(stderr, "kvmesh %s: note: %s; using route_mode metadata_only\n", verb,
                    kvmesh_last_error());
        noted = true;
        kvmesh_config_set(cfg, "route_mode", "metadata_only");
        rc = kvmesh_open(out, cfg);
    }
    return rc;
}

void cli_lat_init(cli_lat_t *l)
{
    memset(l, 0, sizeof(*l));
    l->rng = 0x9e3779b97f4a7c15ull;
}

void cli_lat_add(cli_lat_t *l, uint64_t ns)
{
    if (!l->ns) {
        l->ns = malloc(CLI_LAT_MAX * sizeof(uint64_t));
        if (!l->ns)
            return;
    }
    l->seen++;
    if (l->n < CLI_LAT_MAX) {
        l->ns[l->n++] = ns;
        return;
    }
    l->rng ^= l->rng << 13;
    l->rng ^= l->rng >> 7;
    l->rng ^= l->rng << 17;
    uint64_t j = l->rng % l->seen;
    if (j < CLI_LAT_MAX)
        l->ns[j] = ns;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

uint64_t cli_lat_pct(cli_lat_t *l, double pct)
{
    if (l->n == 0)
        return 0;
    qsort(l->ns, l->n, sizeof(uint64_t), cmp_u64);
    size_t idx = (size_t)((pct / 100.0) * (double)(l->n - 1) + 0.5);
    if (idx >= l->n)
        idx = l->n - 1;
    return l->ns[idx];
}

void cli_lat_free(cli_lat_t *l)
{
    free(l->ns);
    memset(l, 0, sizeof(*l));
}

void cli_progress_init(cli_progress_t *p, FILE *out, uint64_t non_tty_interval_ms)
{
    memset(p, 0, sizeof(*p));
    p->out = out;
    p->tty = isatty(fileno(out));
    p->interval_ns = p->tty ? 100000000ull : non_tty_interval_ms * 1000000ull;
}

void cli_progress(cli_progress_t *p, bool force, const char *fmt, ...)
{
    uint64_t now = kvmesh_tools_now_ns();
    if (!force && p->last_ns && now - p->last_ns < p->interval_ns)
        return;
    p->last_ns = now;
    char line[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    size_t n = strlen(line);
    if (p->tty) {
        fprintf(p->out, "\r%s", line);
        for (size_t i = n; i < p->last_len; i++)
            fputc(' ', p->out);
        p->last_len = n;
    } else {
        fprintf(p->out, "%s\n", line);
    }
    fflush(p->out);
}

void cli_progress_done(cli_progress_t *p)
{
    if (p->tty && p->last_len) {
        fputc('\n', p->out);
        fflush(p->out);
    }
    p->last_len = 0;
}

static inline uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void cli_fill(void *buf, size_t len, uint64_t seed)
{
    uint8_t *b = buf;
    uint64_t s = seed;
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t v = splitmix(&s);
        memcpy(b + i, &v, 8);
    }
    if (i < len) {
        uint64_t v = splitmix(&s);
        memcpy(b + i, &v, len - i);
    }
}

size_t cli_check(const void *buf, size_t len, uint64_t seed)
{
    const uint8_t *b = buf;
    uint64_t s = seed;
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t v = splitmix(&s);
        if (memcmp(b + i, &v, 8) != 0)
            goto diff;
    }
    if (i < len) {
        uint64_t v = splitmix(&s);
        if (memcmp(b + i, &v, len - i) != 0)
            goto diff;
    }
    return len;
diff : {
    /* Locate the exact byte within the word. */
    uint64_t s2 = seed;
    for (size_t j = 0; j < len; j += 8) {
        uint64_t v = splitmix(&s2);
        const uint8_t *vb = (const uint8_t *)&v;
        for (size_t k = 0; k < 8 && j + k < len; k++)
            if (b[j + k] != vb[k])
                return j + k;
    }
    return len;
}
}

uint64_t cli_hash64(const void *p, size_t n)
{
    return XXH3_64bits(p, n);
}

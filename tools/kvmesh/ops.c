/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ops.c — the object and cluster verbs of the kvmesh tool (put, get, rm, stat, route, members)
 * and the configuration listing (config). Each verb joins the deployment as a client-only
 * runtime, does one thing, and closes the runtime before exiting.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "api/kvmesh_tools.h"
#include "cli.h"

#define OPS_MAX_OPTS   24
#define OPS_MEMBER_CAP 1024 /* members listed by `kvmesh members` */

static kvmesh_scope_t scope_of(const struct cli_common *c, const kvmesh_config_t *cfg)
{
    kvmesh_scope_t s = {.tenant =
                            c->tenant ? c->tenant : kvmesh_tools_config_str(cfg, "default_tenant"),
                        .domain = c->domain};
    return s;
}

/* Reads a whole stream, bounded by max bytes. */
static int read_all(FILE *f, size_t max, char **out, size_t *len)
{
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap);
    if (!b)
        return -ENOMEM;
    for (;;) {
        if (n == cap) {
            if (cap > max) {
                free(b);
                return -EFBIG;
            }
            char *nb = realloc(b, cap * 2);
            if (!nb) {
                free(b);
                return -ENOMEM;
            }
            b = nb;
            cap *= 2;
        }
        size_t r = fread(b + n, 1, cap - n, f);
        n += r;
        if (r == 0)
            break;
    }
    if (ferror(f)) {
        free(b);
        return -EIO;
    }
    if (n > max) {
        free(b);
        return -EFBIG;
    }
    *out = b;
    *len = n;
    return 0;
}

struct verb_ctx {
    struct cli_common c;
    cli_opt_t opts[OPS_MAX_OPTS];
    size_t nopts;
    const char *pos[CLI_MAX_POS];
    size_t npos;
};

/* Parses the command line; returns -1 to continue, or an exit code (help printed, bad args). */
static int verb_begin(struct verb_ctx *v, const char *verb, const char *syn, const char *desc,
                      const cli_opt_t *extra, size_t nextra, int argc, char **argv, size_t min_pos,
                      size_t max_pos)
{
    memset(&v->c, 0, sizeof(v->c));
    v->nopts = 0;
    for (size_t i = 0; i < nextra; i++)
        v->opts[v->nopts++] = extra[i];
    v->nopts = cli_common_opts(&v->c, v->opts, v->nopts, OPS_MAX_OPTS);
    int rc = cli_parse(verb, v->opts, v->nopts, argc, argv, v->pos, CLI_MAX_POS, &v->npos);
    if (rc)
        return rc;
    if (v->c.help) {
        cli_usage(stdout, verb, syn, desc, v->opts, v->nopts);
        return CLI_EXIT_OK;
    }
    if (v->npos < min_pos || v->npos > max_pos) {
        fprintf(stderr, "kvmesh %s: expected %s; see kvmesh %s --help\n", verb, syn, verb);
        return CLI_EXIT_USAGE;
    }
    return -1;
}

int cmd_put(int argc, char **argv)
{
    struct verb_ctx v;
    const char *file = NULL;
    uint64_t replicas = 0;
    const cli_opt_t extra[] = {
        {"file", "PATH", CLI_STR, &file, "read the value from a file"},
        {"replicas", "N", CLI_U64, &replicas, "replicas for this object (default: config)"},
    };
    int rc = verb_begin(&v, "put", "[options] KEY [VALUE | -]",
                        "Stores VALUE under KEY (overwriting). The value comes from the VALUE "
                        "argument, from --file PATH, or from stdin when VALUE is \"-\".",
                        extra, 2, argc, argv, 1, 2);
    if (rc >= 0)
        return rc;
    if ((v.npos == 2) == (file != NULL)) {
        fprintf(stderr, "kvmesh put: give exactly one of VALUE, \"-\" (stdin) or --file PATH\n");
        return CLI_EXIT_USAGE;
    }
    if (replicas > KVMESH_MAX_REPLICAS) {
        fprintf(stderr, "kvmesh put: --replicas %" PRIu64 " is out of range; allowed 1..%d\n",
                replicas, KVMESH_MAX_REPLICAS);
        return CLI_EXIT_USAGE;
    }
    kvmesh_t *kv = NULL;
    kvmesh_config_t *cfg = NULL;
    char *data = NULL;
    size_t len = 0;
    bool owned = false;
    if ((rc = cli_open_client(&v.c, "put", &kv, &cfg)) != 0)
        return rc;
    if (file || strcmp(v.pos[1], "-") == 0) {
        FILE *f = file ? fopen(file, "rb") : stdin;
        if (!f) {
            fprintf(stderr, "kvmesh put: cannot open %s: %s\n", file, strerror(errno));
            rc = CLI_EXIT_FAIL;
            goto out;
        }
        int e = read_all(f, (size_t)kvmesh_tools_config_uint(cfg, "max_object_size"), &data, &len);
        if (file)
            fclose(f);
        if (e) {
            fprintf(stderr, "kvmesh put: cannot read %s: %s\n", file ? file : "stdin",
                    e == -EFBIG ? "larger than max_object_size" : strerror(-e));
            rc = CLI_EXIT_FAIL;
            goto out;
        }
        owned = true;
    } else {
        data = (char *)v.pos[1];
        len = strlen(data);
    }
    kvmesh_scope_t s = scope_of(&v.c, cfg);
    kvmesh_put_opts_t po = {.replicas = (uint32_t)replicas};
    int e = kvmesh_put(kv, &s, v.pos[0], strlen(v.pos[0]), data, len, &po);
    if (e) {
        cli_report("put", v.pos[0], e);
        rc = CLI_EXIT_FAIL;
        goto out;
    }
    fprintf(stderr, "kvmesh put: %s: %zu bytes stored\n", v.pos[0], len);
    rc = 0;
out:
    if (owned)
        free(data);
    kvmesh_close(kv);
    kvmesh_config_free(cfg);
    return rc;
}

int cmd_get(int argc, char **argv)
{
    struct verb_ctx v;
    const char *outp = NULL;
    const cli_opt_t extra[] = {
        {"out", "PATH", CLI_STR, &outp, "write the value to a file instead of stdout"},
    };
    int rc = verb_begin(&v, "get", "[options] KEY",
                        "Reads the value of KEY and writes its bytes to stdout (or --out PATH). "
                        "Exit status 3 when the key does not exist.",
                        extra, 1, argc, argv, 1, 1);
    if (rc >= 0)
        return rc;
    kvmesh_t *kv = NULL;
    kvmesh_config_t *cfg = NULL;
    if ((rc = cli_open_client(&v.c, "get", &kv, &cfg)) != 0)
        return rc;
    kvmesh_scope_t s = scope_of(&v.c, cfg);
    void *val = NULL;
    size_t len = 0;
    int e = kvmesh_get(kv, &s, v.pos[0], strlen(v.pos[0]), &val, &len);
    if (e) {
        cli_report("get", v.pos[0], e);
        rc = e == KVMESH_ENOENT ? CLI_EXIT_ENOENT : CLI_EXIT_FAIL;
        goto out;
    }
    FILE *f = outp ? fopen(outp, "wb") : stdout;
    if (!f) {
        fprintf(stderr, "kvmesh get: cannot open %s: %s\n", outp, strerror(errno));
        rc = CLI_EXIT_FAIL;
        goto out;
    }
    if (fwrite(val, 1, len, f) != len || fflush(f) != 0) {
        fprintf(stderr, "kvmesh get: write failed: %s\n", strerror(errno));
        rc = CLI_EXIT_FAIL;
    }
    if (outp)
        fclose(f);
out:
    kvmesh_free(val);
    kvmesh_close(kv);
    kvmesh_config_free(cfg);
    return rc;
}

int cmd_rm(int argc, char **argv)
{
    struct verb_ctx v;
    int rc = verb_begin(&v, "rm", "[options] KEY",
                        "Removes KEY. Exit status 3 when the key does not exist.", NULL, 0, argc,
                        argv, 1, 1);
    if (rc >= 0)
        return rc;
    kvmesh_t *kv = NULL;
    kvmesh_config_t *cfg = NULL;
    if ((rc = cli_open_client(&v.c, "rm", &kv, &cfg)) != 0)
        return rc;
    kvmesh_scope_t s = scope_of(&v.c, cfg);
    int e = kvmesh_remove(kv, &s, v.pos[0], strlen(v.pos[0]));
    if (e) {
        cli_report("rm", v.pos[0], e);
        rc = e == KVMESH_ENOENT ? CLI_EXIT_ENOENT : CLI_EXIT_FAIL;
    } else {
        fprintf(stderr, "kvmesh rm: %s removed\n", v.pos[0]);
    }
    kvmesh_close(kv);
    kvmesh_config_free(cfg);
    return rc;
}

static int route_common(const char *verb, int argc, char **argv, bool full)
{
    struct verb_ctx v;
    int rc = verb_begin(
        &v, verb, "[options] KEY",
        full ? "Prints the route of KEY: fencing token, primary sequence, length, checksum and "
               "every replica (owner runtime, segment, offset, length). Exit status 3 when the "
               "key does not exist."
             : "Prints whether KEY exists, its size, checksum and number of replicas "
               "(`key: value` lines). Exit status 3 when the key does not exist.",
        NULL, 0, argc, argv, 1, 1);
    if (rc >= 0)
        return rc;
    kvmesh_t *kv = NULL;
    kvmesh_config_t *cfg = NULL;
    if ((rc = cli_open_client(&v.c, verb, &kv, &cfg)) != 0)
        return rc;
    kvmesh_scope_t s = scope_of(&v.c, cfg);
    kvmesh_route_info_t ri;
    memset(&ri, 0, sizeof(ri));
    int e = kvmesh_route_query(kv, &s, v.pos[0], strlen(v.pos[0]), &ri);
    if (e == KVMESH_ENOENT) {
        printf("key: %s\nexists: no\n", v.pos[0]);
        rc = CLI_EXIT_ENOENT;
    } else if (e) {
        cli_report(verb, v.pos[0], e);
        rc = CLI_EXIT_FAIL;
    } else {
        printf("key: %s\ntenant: %s\n", v.pos[0], s.tenant);
        if (s.domain)
            printf("domain: %s\n", s.domain);
        printf("exists: yes\nsize: %" PRIu64 "\nchecksum: %016" PRIx64 "\nreplicas: %u\n",
               ri.length, ri.checksum, ri.n_replicas);
        if (full) {
            printf("fencing_token: %" PRIu64 "\nprimary_sequence: %" PRIu64 "\ncold_backed: %s\n",
                   ri.fencing_token, ri.primary_sequence, ri.cold_backed ? "yes" : "no");
            for (uint32_t i = 0; i < ri.n_replicas && i < KVMESH_MAX_REPLICAS; i++)
                printf("replica %u: owner %s segment %" PRIu64 " offset %" PRIu64 " length %" PRIu64
                       "\n",
                       i, ri.replicas[i].owner, ri.replicas[i].segment, ri.replicas[i].offset,
                       ri.replicas[i].length);
        }
    }
    kvmesh_close(kv);
    kvmesh_config_free(cfg);
    return rc;
}

int cmd_stat(int argc, char **argv)
{
    return route_common("stat", argc, argv, false);
}

int cmd_route(int argc, char **argv)
{
    return route_common("route", argc, argv, true);
}

int cmd_members(int argc, char **argv)
{
    struct verb_ctx v;
    bool all = false;
    const cli_opt_t extra[] = {
        {"all", NULL, CLI_FLAG, &all, "include client-only runtimes (capacity 0)"},
    };
    int rc = verb_begin(&v, "members", "[options]",
                        "Lists the runtimes of the deployment from a live membership snapshot: "
                        "id, epoch, address, state, weight, capacity and used bytes. This "
                        "tool's own client runtime is marked with '*'.",
                        extra, 1, argc, argv, 0, 0);
    if (rc >= 0)
        return rc;
    kvmesh_t *kv = NULL;
    if ((rc = cli_open_client(&v.c, "members", &kv, NULL)) != 0)
        return rc;
    kvmesh_member_info_t *m = calloc(OPS_MEMBER_CAP, sizeof(*m));
    size_t n = 0;
    char self[KVMESH_ID_HEX_LEN + 1] = "";
    uint64_t epoch = 0;
    int e = m ? kvmesh_members(kv, m, OPS_MEMBER_CAP, &n) : KVMESH_ENOMEM;
    if (e == 0)
        e = kvmesh_self(kv, self, &epoch);
    if (e) {
        cli_report("members", "membership snapshot", e);
        rc = CLI_EXIT_FAIL;
        goto out;
    }
    printf("%-1s %-32s %6s %-21s %-9s %7s %12s %12s\n", "", "id", "epoch", "address", "state",
           "weight", "capacity", "used");
    size_t shown = 0;
    for (size_t i = 0; i < n && i < OPS_MEMBER_CAP; i++) {
        if (!all && m[i].capacity_bytes == 0 && strcmp(m[i].id, self) != 0)
            continue;
        char cap[32], used[32];
        kvmesh_tools_format_size(m[i].capacity_bytes, cap, sizeof(cap));
        kvmesh_tools_format_size(m[i].used_bytes, used, sizeof(used));
        printf("%-1s %-32s %6" PRIu64 " %-21s %-9s %7.3g %12s %12s\n",
               strcmp(m[i].id, self) == 0 ? "*" : "", m[i].id, m[i].epoch, m[i].address, m[i].state,
               m[i].weight, cap, used);
        shown++;
    }
    printf("%zu member(s)%s\n", shown, n > OPS_MEMBER_CAP ? " (list truncated)" : "");
out:
    free(m);
    kvmesh_close(kv);
    return rc;
}

int cmd_config(int argc, char **argv)
{
    struct verb_ctx v;
    int rc = verb_begin(
        &v, "config", "[options] fields | dump | check | markdown",
        "fields    list every configuration field: name, type, default, allowed values, help\n"
        "dump      print the effective configuration (defaults, then --config FILE, then\n"
        "          --metadata/--deployment/--set) as a YAML file kvmeshd reads back\n"
        "check     load --config FILE and the overrides, run the cross-field checks, and\n"
        "          report the first problem (line and field for file errors)\n"
        "markdown  the field table of docs/configuration.md",
        NULL, 0, argc, argv, 1, 1);
    if (rc >= 0)
        return rc;
    size_t n;
    const kvmesh_config_field_t *t = kvmesh_config_fields(&n);
    char allowed[320];
    if (strcmp(v.pos[0], "fields") == 0) {
        for (size_t i = 0; i < n; i++) {
            kvmesh_tools_config_allowed(t[i].name, allowed, sizeof(allowed));
            printf("%s (%s, default \"%s\")\n    allowed: %s\n    %s\n", t[i].name,
                   kvmesh_tools_config_type(t[i].name), t[i].default_value, allowed, t[i].help);
        }
        return 0;
    }
    if (strcmp(v.pos[0], "markdown") == 0) {
        char row[1024];
        printf("%s", KVMESH_TOOLS_CONFIG_MARKDOWN_HEADER);
        for (size_t i = 0; i < n; i++) {
            kvmesh_tools_config_markdown_row(t[i].name, row, sizeof(row));
            printf("%s\n", row);
        }
        return 0;
    }
    if (strcmp(v.pos[0], "dump") == 0 || strcmp(v.pos[0], "check") == 0) {
        kvmesh_config_t *cfg = kvmesh_config_new();
        if (!cfg)
            return CLI_EXIT_FAIL;
        rc = cli_build_config(&v.c, cfg, "config");
        if (rc == 0 && kvmesh_tools_config_validate(cfg) != 0) {
            fprintf(stderr, "kvmesh config: %s\n", kvmesh_last_error());
            rc = CLI_EXIT_USAGE;
        }
        if (rc == 0 && strcmp(v.pos[0], "dump") == 0) {
            char *buf = malloc(1 << 16);
            if (buf) {
                size_t len = kvmesh_tools_config_dump_yaml(cfg, buf, 1 << 16);
                fwrite(buf, 1, len < (1 << 16) ? len : (1 << 16) - 1, stdout);
                free(buf);
            }
        } else if (rc == 0) {
            printf("configuration OK\n");
        }
        kvmesh_config_free(cfg);
        return rc;
    }
    fprintf(stderr, "kvmesh config: unknown action \"%s\"; see kvmesh config --help\n", v.pos[0]);
    return CLI_EXIT_USAGE;
}

/* SPDX-License-Identifier: Apache-2.0 */
/*
 * admin.c — `kvmesh admin`: the operator's view of a deployment's metadata, read directly
 * (no runtime joins) in bounded pages through api/kvmesh_tools.h:
 *   members    member records: id, epoch, state, weight, capacity, used, heartbeat, addresses
 *   segments   the memory segments each member record lists
 *   shards     shard-authority records: generation, fencing token, state, primary, set, and
 *              whether the primary is a live member
 *   cleanup    stale records of dead owners: a dry run lists them; --apply deletes the stale
 *              member records (each only if unchanged since it was read). Shard records of dead
 *              primaries are listed but never deleted: they carry the monotonic fencing token
 *              and the state-transfer source, and the route service takes them over.
 * Every listing has --json (one JSON document on stdout) or a table. Reads are pages of
 * --page records, at most --max records in all (the listing says when it stopped early).
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "api/kvmesh_tools.h"
#include "cli.h"

#define ADM_MAX_OPTS     24
#define ADM_PAGE_DEFAULT 100
#define ADM_MAX_DEFAULT  10000
#define ADM_MAX_LIMIT    1000000

struct adm {
    struct cli_common c;
    bool json, apply;
    uint64_t page, max;
    kvmesh_admin_t *a;
    const char *sub;
};

static void json_str(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            printf("\\%c", ch);
        else if (ch < 0x20)
            printf("\\u%04x", ch);
        else
            putchar(ch);
    }
    putchar('"');
}

/* ---- paging -------------------------------------------------------------------------------- */

struct members {
    kvmesh_admin_member_t *v;
    size_t n;
    bool truncated;
};

/* Reads every member record, page by page, at most max. */
static int fetch_members(struct adm *x, struct members *m)
{
    memset(m, 0, sizeof(*m));
    size_t cap = 0;
    char after[KVMESH_ID_HEX_LEN + 1] = "";
    for (;;) {
        if (m->n >= x->max) {
            m->truncated = true; /* the last page said more records follow */
            return 0;
        }
        size_t want = x->page < x->max - m->n ? (size_t)x->page : (size_t)(x->max - m->n);
        if (m->n + want > cap) {
            size_t nc = cap ? cap * 2 : 256;
            while (nc < m->n + want)
                nc *= 2;
            kvmesh_admin_member_t *nv = realloc(m->v, nc * sizeof(*nv));
            if (!nv)
                return KVMESH_ENOMEM;
            m->v = nv;
            cap = nc;
        }
        size_t got = 0;
        bool more = false;
        int rc = kvmesh_admin_members(x->a, after, want, m->v + m->n, &got, &more);
        if (rc)
            return rc;
        m->n += got;
        if (!more || got == 0)
            return 0;
        snprintf(after, sizeof(after), "%s", m->v[m->n - 1].id);
    }
}

/* fetch_members(), reporting a failure (CLI_EXIT_FAIL; m then holds nothing). */
static int load_members(struct adm *x, struct members *m)
{
    int rc = fetch_members(x, m);
    if (rc) {
        cli_report("admin", "reading member records", rc);
        free(m->v);
        memset(m, 0, sizeof(*m));
        return CLI_EXIT_FAIL;
    }
    return 0;
}

static const kvmesh_admin_member_t *find_member(const struct members *m, const char *id,
                                                uint64_t epoch)
{
    for (size_t i = 0; i < m->n; i++)
        if (strcmp(m->v[i].id, id) == 0 && (epoch == 0 || m->v[i].epoch == epoch))
            return &m->v[i];
    return NULL;
}

/* ---- subcommands --------------------------------------------------------------------------- */

static int do_members(struct adm *x, bool segments)
{
    struct members m;
    if (load_members(x, &m) != 0)
        return CLI_EXIT_FAIL;
    if (x->json) {
        printf("{\"members\":[");
        for (size_t i = 0; i < m.n; i++) {
            const kvmesh_admin_member_t *e = &m.v[i];
            printf("%s{\"id\":", i ? "," : "");
            json_str(e->id);
            if (e->malformed) {
                printf(",\"malformed\":true}");
                continue;
            }
            printf(",\"epoch\":%" PRIu64 ",\"state\":", e->epoch);
            json_str(e->state);
            printf(",\"weight\":%g,\"capacity_bytes\":%" PRIu64 ",\"used_bytes\":%" PRIu64
                   ",\"heartbeat\":%" PRIu64 ",\"rpc\":",
                   e->weight, e->capacity_bytes, e->used_bytes, e->heartbeat);
            json_str(e->rpc);
            printf(",\"data\":");
            json_str(e->data);
            printf(",\"lease\":%" PRId64 ",\"segments\":[", e->lease);
            for (uint32_t k = 0; k < e->n_segments; k++)
                printf("%s{\"id\":\"%016" PRIx64 "\",\"size_bytes\":%" PRIu64 "}", k ? "," : "",
                       e->segments[k].id, e->segments[k].size);
            printf("]}");
        }
        printf("],\"count\":%zu,\"truncated\":%s}\n", m.n, m.truncated ? "true" : "false");
    } else if (!segments) {
        printf("%-32s %6s %-9s %7s %12s %12s %9s  %s\n", "id", "epoch", "state", "weight",
               "capacity", "used", "segments", "rpc");
        for (size_t i = 0; i < m.n; i++) {
            const kvmesh_admin_member_t *e = &m.v[i];
            if (e->malformed) {
                printf("%-32s (malformed record)\n", e->id);
                continue;
            }
            char cap[32], used[32];
            kvmesh_tools_format_size(e->capacity_bytes, cap, sizeof(cap));
            kvmesh_tools_format_size(e->used_bytes, used, sizeof(used));
            printf("%-32s %6" PRIu64 " %-9s %7.3g %12s %12s %9u  %s\n", e->id, e->epoch, e->state,
                   e->weight, cap, used, e->n_segments, e->rpc);
        }
        printf("%zu member record(s)%s\n", m.n,
               m.truncated ? " (stopped at --max; more records exist)" : "");
    } else {
        printf("%-32s %-9s %-16s %12s\n", "member", "state", "segment", "size");
        size_t total = 0;
        for (size_t i = 0; i < m.n; i++) {
            const kvmesh_admin_member_t *e = &m.v[i];
            for (uint32_t k = 0; !e->malformed && k < e->n_segments; k++) {
                char sz[32];
                kvmesh_tools_format_size(e->segments[k].size, sz, sizeof(sz));
                printf("%-32s %-9s %016" PRIx64 " %12s\n", e->id, e->state, e->segments[k].id, sz);
                total++;
            }
        }
        printf("%zu segment(s) of %zu member record(s)%s\n", total, m.n,
               m.truncated ? " (stopped at --max; more records exist)" : "");
    }
    free(m.v);
    return 0;
}

static int do_shards(struct adm *x)
{
    struct members m;
    if (load_members(x, &m) != 0)
        return CLI_EXIT_FAIL;
    int rc = 0;
    kvmesh_admin_shard_t *page = calloc((size_t)x->page, sizeof(*page));
    if (!page) {
        free(m.v);
        return CLI_EXIT_FAIL;
    }
    if (x->json)
        printf("{\"shards\":[");
    else
        printf("%6s %-12s %10s %8s %-32s %-5s %s\n", "shard", "state", "generation", "token",
               "primary", "live", "authority set");
    uint32_t next = 0;
    size_t shown = 0;
    bool truncated = false;
    for (;;) {
        if (shown >= x->max) {
            truncated = true; /* the last page said more records follow */
            break;
        }
        size_t want = x->page < x->max - shown ? (size_t)x->page : (size_t)(x->max - shown);
        size_t got = 0;
        bool more = false;
        rc = kvmesh_admin_shards(x->a, next, want, page, &got, &more);
        if (rc)
            break;
        for (size_t i = 0; i < got; i++) {
            const kvmesh_admin_shard_t *s = &page[i];
            bool live = !s->malformed && find_member(&m, s->primary, s->primary_epoch) != NULL;
            if (x->json) {
                printf("%s{\"shard\":%u", shown ? "," : "", s->shard);
                if (s->malformed) {
                    printf(",\"malformed\":true}");
                } else {
                    printf(",\"state\":\"%s\",\"generation\":%" PRIu64 ",\"token\":%" PRIu64
                           ",\"primary\":\"%s\",\"primary_epoch\":%" PRIu64
                           ",\"primary_live\":%s,\"set\":[",
                           s->state, s->generation, s->token, s->primary, s->primary_epoch,
                           live ? "true" : "false");
                    for (uint32_t k = 0; k < s->n_set; k++)
                        printf("%s\"%s\"", k ? "," : "", s->set[k]);
                    printf("]}");
                }
            } else if (s->malformed) {
                printf("%6u (malformed record)\n", s->shard);
            } else {
                printf("%6u %-12s %10" PRIu64 " %8" PRIu64 " %-32s %-5s", s->shard, s->state,
                       s->generation, s->token, s->primary, live ? "yes" : "NO");
                for (uint32_t k = 0; k < s->n_set; k++)
                    printf("%s%.8s", k ? "," : " ", s->set[k]);
                printf("\n");
            }
            shown++;
        }
        if (!more || got == 0)
            break;
        next = page[got - 1].shard + 1;
    }
    free(page);
    free(m.v);
    if (rc) {
        if (x->json)
            printf("]}\n");
        cli_report("admin", "reading shard records", rc);
        return CLI_EXIT_FAIL;
    }
    if (x->json)
        printf("],\"count\":%zu,\"truncated\":%s}\n", shown, truncated ? "true" : "false");
    else
        printf("%zu shard record(s)%s\n", shown,
               truncated ? " (stopped at --max; more records exist)" : "");
    return 0;
}

static int do_cleanup(struct adm *x)
{
    struct members m;
    if (load_members(x, &m) != 0)
        return CLI_EXIT_FAIL;
    int rc = 0;
    if (x->json)
        printf("{\"apply\":%s,\"stale_members\":[", x->apply ? "true" : "false");
    else
        printf("%s\n", x->apply ? "cleanup (--apply): deleting stale member records"
                                : "cleanup dry run (nothing is changed; --apply deletes):");
    size_t stale = 0, deleted = 0;
    int ret = 0;
    for (size_t i = 0; i < m.n; i++) {
        const kvmesh_admin_member_t *e = &m.v[i];
        bool alive = false;
        if ((rc = kvmesh_admin_lease_alive(x->a, e->lease, &alive)) != 0) {
            cli_report("admin", "lease check", rc);
            ret = CLI_EXIT_FAIL;
            break;
        }
        const char *why = e->malformed                    ? "malformed record"
                          : e->lease == 0                 ? "not bound to a lease"
                          : !alive                        ? "its lease has expired"
                          : strcmp(e->state, "gone") == 0 ? "state gone"
                                                          : NULL;
        if (!why)
            continue;
        stale++;
        bool del = false;
        if (x->apply && (rc = kvmesh_admin_member_delete(x->a, e->id, e->mod_rev, &del)) != 0) {
            cli_report("admin", e->id, rc);
            ret = CLI_EXIT_FAIL;
        }
        deleted += del;
        if (x->json) {
            printf("%s{\"id\":", stale > 1 ? "," : "");
            json_str(e->id);
            printf(",\"reason\":\"%s\",\"deleted\":%s}", why, del ? "true" : "false");
        } else {
            printf("  member %s: %s%s\n", e->id, why,
                   !x->apply ? ""
                   : del     ? " -> deleted"
                             : " -> kept (changed since it was read)");
        }
    }
    /* Shard-authority records of primaries that are not live members. */
    kvmesh_admin_shard_t *page = calloc((size_t)x->page, sizeof(*page));
    size_t dead = 0, scanned = 0;
    uint32_t next = 0;
    if (x->json)
        printf("],\"dead_primaries\":[");
    while (page && ret == 0 && scanned < x->max) {
        size_t got = 0;
        bool more = false;
        size_t want = x->page < x->max - scanned ? (size_t)x->page : (size_t)(x->max - scanned);
        if ((rc = kvmesh_admin_shards(x->a, next, want, page, &got, &more)) != 0) {
            cli_report("admin", "reading shard records", rc);
            ret = CLI_EXIT_FAIL;
            break;
        }
        for (size_t i = 0; i < got; i++) {
            const kvmesh_admin_shard_t *s = &page[i];
            if (s->malformed || find_member(&m, s->primary, s->primary_epoch))
                continue;
            if (x->json)
                printf("%s{\"shard\":%u,\"primary\":\"%s\",\"primary_epoch\":%" PRIu64 "}",
                       dead ? "," : "", s->shard, s->primary, s->primary_epoch);
            else
                printf("  shard %u: primary %s epoch %" PRIu64
                       " is not a live member (record kept: the route service takes it over)\n",
                       s->shard, s->primary, s->primary_epoch);
            dead++;
        }
        scanned += got;
        if (!more || got == 0)
            break;
        next = page[got - 1].shard + 1;
    }
    free(page);
    if (x->json)
        printf("],\"stale\":%zu,\"deleted\":%zu}\n", stale, deleted);
    else
        printf("%zu stale member record(s)%s; %zu shard record(s) of dead primaries\n", stale,
               x->apply ? "" : " (dry run)", dead);
    if (!x->json && x->apply)
        printf("%zu deleted\n", deleted);
    free(m.v);
    return ret;
}

int cmd_admin(int argc, char **argv)
{
    struct adm x;
    memset(&x, 0, sizeof(x));
    x.page = ADM_PAGE_DEFAULT;
    x.max = ADM_MAX_DEFAULT;
    cli_opt_t opts[ADM_MAX_OPTS] = {
        {"json", NULL, CLI_FLAG, &x.json, "print one JSON document instead of a table"},
        {"apply", NULL, CLI_FLAG, &x.apply,
         "cleanup: delete the stale records (without it, cleanup is a dry run)"},
        {"page", "N", CLI_U64, &x.page, "records per metadata read, 1..256 (default 100)"},
        {"max", "N", CLI_U64, &x.max,
         "read at most N records of each kind, 1..1000000 (default 10000)"},
    };
    size_t nopts = cli_common_opts(&x.c, opts, 4, ADM_MAX_OPTS);
    const char *pos[CLI_MAX_POS];
    size_t npos = 0;
    static const char syn[] = "members | segments | shards | cleanup [--apply] [options]";
    static const char desc[] =
        "Reads the deployment's metadata directly (no runtime joins), in bounded pages:\n"
        "members   member records: id, epoch, state, weight, capacity, used, segments, rpc\n"
        "segments  the memory segments of every member record\n"
        "shards    shard-authority records: state, generation, fencing token, primary (and\n"
        "          whether it is a live member), authority set\n"
        "cleanup   stale records of dead owners: member records that are malformed, not bound\n"
        "          to a lease, bound to an expired lease, or in state gone; a dry run lists\n"
        "          them, --apply deletes each one unless it changed since it was read. Shard\n"
        "          records of dead primaries are listed, never deleted (the fencing token must\n"
        "          stay monotonic; the route service takes them over).\n"
        "Needs a shared metadata backend (redis:// or etcd://).";
    int rc = cli_parse("admin", opts, nopts, argc, argv, pos, CLI_MAX_POS, &npos);
    if (rc)
        return rc;
    if (x.c.help) {
        cli_usage(stdout, "admin", syn, desc, opts, nopts);
        return CLI_EXIT_OK;
    }
    if (npos != 1) {
        fprintf(stderr, "kvmesh admin: expected one of members, segments, shards, cleanup; see "
                        "kvmesh admin --help\n");
        return CLI_EXIT_USAGE;
    }
    x.sub = pos[0];
    bool known = strcmp(x.sub, "members") == 0 || strcmp(x.sub, "segments") == 0 ||
                 strcmp(x.sub, "shards") == 0 || strcmp(x.sub, "cleanup") == 0;
    if (!known) {
        fprintf(stderr,
                "kvmesh admin: unknown subcommand \"%s\"; expected members, segments, shards or "
                "cleanup\n",
                x.sub);
        return CLI_EXIT_USAGE;
    }
    if (x.apply && strcmp(x.sub, "cleanup") != 0) {
        fprintf(stderr, "kvmesh admin %s: --apply belongs to cleanup\n", x.sub);
        return CLI_EXIT_USAGE;
    }
    if (x.page < 1 || x.page > KVMESH_ADMIN_PAGE_MAX) {
        fprintf(stderr, "kvmesh admin: --page %" PRIu64 " is out of range; allowed 1..%d\n", x.page,
                KVMESH_ADMIN_PAGE_MAX);
        return CLI_EXIT_USAGE;
    }
    if (x.max < 1 || x.max > ADM_MAX_LIMIT) {
        fprintf(stderr, "kvmesh admin: --max %" PRIu64 " is out of range; allowed 1..%d\n", x.max,
                ADM_MAX_LIMIT);
        return CLI_EXIT_USAGE;
    }
    kvmesh_config_t *cfg = kvmesh_config_new();
    if (!cfg)
        return CLI_EXIT_FAIL;
    rc = cli_build_config(&x.c, cfg, "admin");
    if (rc) {
        kvmesh_config_free(cfg);
        return rc;
    }
    const char *url = kvmesh_tools_config_str(cfg, "metadata_url");
    if (strncmp(url, "memory://", 9) == 0) {
        fprintf(stderr,
                "kvmesh admin: metadata %s is private to the process that holds it; give "
                "--metadata redis://HOST:PORT or etcd://HOST:PORT of the deployment\n",
                url);
        kvmesh_config_free(cfg);
        return CLI_EXIT_USAGE;
    }
    int e = kvmesh_admin_open(cfg, &x.a);
    if (e) {
        fprintf(stderr, "kvmesh admin: cannot open metadata %s: %s: %s\n", url, kvmesh_strerror(e),
                kvmesh_last_error());
        kvmesh_config_free(cfg);
        return CLI_EXIT_FAIL;
    }
    if (strcmp(x.sub, "members") == 0)
        rc = do_members(&x, false);
    else if (strcmp(x.sub, "segments") == 0)
        rc = do_members(&x, true);
    else if (strcmp(x.sub, "shards") == 0)
        rc = do_shards(&x);
    else
        rc = do_cleanup(&x);
    kvmesh_admin_close(x.a);
    kvmesh_config_free(cfg);
    return rc;
}

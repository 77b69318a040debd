/* SPDX-License-Identifier: Apache-2.0 */
/*
 * obs_prom.h — a strict parser of the Prometheus text exposition format (0.0.4), written for
 * the tests: it rejects anything our /metrics must never produce.
 *
 * Checked: every line ends in '\n'; only "# HELP" / "# TYPE" comments; metric and label names
 * valid; HELP (escapes \\ and \n only) and TYPE (counter, gauge, histogram) once per family and
 * both before its first sample; a family's samples contiguous; sample names match their family
 * (histograms: _bucket with `le`, _sum, _count); label values quoted with escapes \\ \" \n only;
 * no duplicate label names; no duplicate series; values parse as floats; counters >= 0 and named
 * *_total; histogram buckets strictly increasing in `le`, cumulative (non-decreasing), ending in
 * +Inf, with exactly one _sum and one _count per series and _count == the +Inf bucket.
 */
#ifndef KVMESH_OBS_PROM_H
#define KVMESH_OBS_PROM_H

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PROM_MAX_LABELS 8

struct prom_sample {
    int family;
    char name[128];
    int nl;
    char lname[PROM_MAX_LABELS][64];
    char lval[PROM_MAX_LABELS][256];
    double v;
};

struct prom_family {
    char name[128];
    char type[16];
    bool help, typed, closed;
    size_t nseries;
};

struct prom {
    struct prom_family fam[256];
    int nfam;
    struct prom_sample *s;
    size_t ns, cap;
    char err[256];
};

static bool prom_name_ok(const char *n, bool metric)
{
    if (!*n)
        return false;
    for (const char *p = n; *p; p++) {
        char c = *p;
        bool alpha =
            (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (metric && c == ':');
        if (!(alpha || (p != n && c >= '0' && c <= '9')))
            return false;
    }
    return metric || strncmp(n, "__", 2) != 0;
}

static int prom_fail(struct prom *p, size_t line, const char *msg)
{
    snprintf(p->err, sizeof(p->err), "line %zu: %s", line, msg);
    return -1;
}

static int prom_find(struct prom *p, const char *name)
{
    for (int i = 0; i < p->nfam; i++)
        if (strcmp(p->fam[i].name, name) == 0)
            return i;
    return -1;
}

static bool prom_float(const char *s, double *v)
{
    if (strcmp(s, "+Inf") == 0) {
        *v = INFINITY;
        return true;
    }
    if (strcmp(s, "-Inf") == 0) {
        *v = -INFINITY;
        return true;
    }
    if (strcmp(s, "NaN") == 0) {
        *v = NAN;
        return true;
    }
    char *end;
    if (!*s)
        return false;
    *v = strtod(s, &end);
    return *end == '\0' && strspn(s, "0123456789.eE+-") == strlen(s);
}

/* "name{labels}" key of a sample without its `le` label (histogram series identity). */
static void prom_series_key(const struct prom_sample *s, bool skip_le, const char *name, char *out,
                            size_t n)
{
    size_t o = (size_t)snprintf(out, n, "%s{", name);
    for (int i = 0; i < s->nl && o < n; i++)
        if (!skip_le || strcmp(s->lname[i], "le") != 0)
            o += (size_t)snprintf(out + o, n - o, "%s=%s,", s->lname[i], s->lval[i]);
    if (o < n)
        snprintf(out + o, n - o, "}");
}

static const char *prom_label(const struct prom_sample *s, const char *name)
{
    for (int i = 0; i < s->nl; i++)
        if (strcmp(s->lname[i], name) == 0)
            return s->lval[i];
    return NULL;
}

static int prom_cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int prom_parse(struct prom *p, const char *text, size_t len)
{
    memset(p, 0, sizeof(*p));
    if (len == 0 || text[len - 1] != '\n')
        return prom_fail(p, 0, "empty or missing final newline");
    int cur = -1;
    size_t lineno = 0;
    for (size_t i = 0; i < len;) {
        const char *nl = memchr(text + i, '\n', len - i);
        size_t ll = (size_t)(nl - (text + i));
        char line[4096];
        lineno++;
        if (ll >= sizeof(line))
            return prom_fail(p, lineno, "line too long");
        memcpy(line, text + i, ll);
        line[ll] = '\0';
        i += ll + 1;
        if (ll == 0)
            return prom_fail(p, lineno, "empty line");
        if (line[0] == '#') {
            char kind[8], name[128];
            int off = 0;
            if (sscanf(line, "# %7s %127s %n", kind, name, &off) < 2)
                return prom_fail(p, lineno, "comment that is not HELP or TYPE");
            if (!prom_name_ok(name, true))
                return prom_fail(p, lineno, "invalid metric name in comment");
            int f = prom_find(p, name);
            if (f < 0) {
                if (p->nfam == 256)
                    return prom_fail(p, lineno, "too many families");
                if (cur >= 0)
                    p->fam[cur].closed = true;
                f = p->nfam++;
                snprintf(p->fam[f].name, sizeof(p->fam[f].name), "%s", name);
                cur = f;
            } else if (f != cur || p->fam[f].nseries > 0) {
                return prom_fail(p, lineno, "HELP/TYPE after samples or for a closed family");
            }
            const char *rest = line + off;
            if (strcmp(kind, "HELP") == 0) {
                if (p->fam[f].help)
                    return prom_fail(p, lineno, "duplicate HELP");
                for (const char *q = rest; *q; q++)
                    if (*q == '\\' && q[1] != '\\' && q[1] != 'n')
                        return prom_fail(p, lineno, "bad escape in HELP");
                    else if (*q == '\\')
                        q++;
                p->fam[f].help = true;
            } else if (strcmp(kind, "TYPE") == 0) {
                if (p->fam[f].typed)
                    return prom_fail(p, lineno, "duplicate TYPE");
                if (strcmp(rest, "counter") && strcmp(rest, "gauge") && strcmp(rest, "histogram"))
                    return prom_fail(p, lineno, "unexpected TYPE");
                snprintf(p->fam[f].type, sizeof(p->fam[f].type), "%s", rest);
                p->fam[f].typed = true;
            } else {
                return prom_fail(p, lineno, "comment that is not HELP or TYPE");
            }
            continue;
        }
        /* a sample */
        if (p->ns == p->cap) {
            p->cap = p->cap ? 2 * p->cap : 1024;
            p->s = realloc(p->s, p->cap * sizeof(*p->s));
        }
        struct prom_sample *s = &p->s[p->ns];
        memset(s, 0, sizeof(*s));
        size_t k = 0;
        while (line[k] && line[k] != '{' && line[k] != ' ' && k < sizeof(s->name) - 1) {
            s->name[k] = line[k];
            k++;
        }
        if (!prom_name_ok(s->name, true))
            return prom_fail(p, lineno, "invalid sample name");
        if (line[k] == '{') {
            k++;
            while (line[k] != '}') {
                if (s->nl == PROM_MAX_LABELS)
                    return prom_fail(p, lineno, "too many labels");
                size_t a = 0;
                while (line[k] && line[k] != '=' && a < 63)
                    s->lname[s->nl][a++] = line[k++];
                if (line[k] != '=' || line[k + 1] != '"' || !prom_name_ok(s->lname[s->nl], false))
                    return prom_fail(p, lineno, "invalid label name");
                k += 2;
                size_t b = 0;
                while (line[k] != '"') {
                    if (!line[k] || b >= 255)
                        return prom_fail(p, lineno, "unterminated label value");
                    if (line[k] == '\\') {
                        char e = line[k + 1];
                        if (e != '\\' && e != '"' && e != 'n')
                            return prom_fail(p, lineno, "bad escape in label value");
                        s->lval[s->nl][b++] = e == 'n' ? '\n' : e;
                        k += 2;
                    } else {
                        s->lval[s->nl][b++] = line[k++];
                    }
                }
                k++;
                for (int j = 0; j < s->nl; j++)
                    if (strcmp(s->lname[j], s->lname[s->nl]) == 0)
                        return prom_fail(p, lineno, "duplicate label name");
                s->nl++;
                if (line[k] == ',')
                    k++;
                else if (line[k] != '}')
                    return prom_fail(p, lineno, "expected ',' or '}' after a label");
            }
            k++;
        }
        if (line[k] != ' ')
            return prom_fail(p, lineno, "expected a space before the value");
        k++;
        char val[64];
        int vn = 0;
        while (line[k] && line[k] != ' ' && vn < 63)
            val[vn++] = line[k++];
        val[vn] = '\0';
        if (line[k] != '\0') /* no timestamps in our output */
            return prom_fail(p, lineno, "trailing data after the value");
        if (!prom_float(val, &s->v))
            return prom_fail(p, lineno, "value is not a float");
        if (cur < 0)
            return prom_fail(p, lineno, "sample before any HELP/TYPE");
        struct prom_family *f = &p->fam[cur];
        if (!f->help || !f->typed)
            return prom_fail(p, lineno, "sample before its family's HELP and TYPE");
        size_t fl = strlen(f->name);
        bool match;
        if (strcmp(f->type, "histogram") == 0)
            match = strncmp(s->name, f->name, fl) == 0 &&
                    (strcmp(s->name + fl, "_bucket") == 0 || strcmp(s->name + fl, "_sum") == 0 ||
                     strcmp(s->name + fl, "_count") == 0);
        else
            match = strcmp(s->name, f->name) == 0;
        if (!match) {
            int other = prom_find(p, s->name);
            return prom_fail(p, lineno,
                             other >= 0 ? "sample of a closed family (not contiguous)"
                                        : "sample outside its family");
        }
        bool is_bucket = strcmp(s->name + fl, "_bucket") == 0;
        if (is_bucket != (prom_label(s, "le") != NULL))
            return prom_fail(p, lineno, "`le` label only and always on _bucket samples");
        if (strcmp(f->type, "counter") == 0 &&
            (!(s->v >= 0) || fl < 6 || strcmp(f->name + fl - 6, "_total") != 0))
            return prom_fail(p, lineno, "counter negative or not named *_total");
        s->family = cur;
        f->nseries++;
        p->ns++;
    }
    /* duplicate series */
    char **keys = calloc(p->ns ? p->ns : 1, sizeof(char *));
    for (size_t i = 0; i < p->ns; i++) {
        keys[i] = malloc(2600);
        prom_series_key(&p->s[i], false, p->s[i].name, keys[i], 2600);
    }
    qsort(keys, p->ns, sizeof(char *), prom_cmp_str);
    int rc = 0;
    for (size_t i = 1; i < p->ns; i++)
        if (strcmp(keys[i - 1], keys[i]) == 0)
            rc = prom_fail(p, 0, "duplicate series");
    for (size_t i = 0; i < p->ns; i++)
        free(keys[i]);
    free(keys);
    if (rc)
        return rc;
    /* histogram series */
    for (size_t i = 0; i < p->ns; i++) {
        const struct prom_sample *s = &p->s[i];
        const struct prom_family *f = &p->fam[s->family];
        if (strcmp(f->type, "histogram") != 0 || strcmp(s->name + strlen(f->name), "_count"))
            continue;
        char want[2600], got[2600];
        prom_series_key(s, true, f->name, want, sizeof(want));
        double prev_le = -INFINITY, prev_v = 0, inf_v = -1;
        int nsum = 0, ncount = 0;
        for (size_t j = 0; j < p->ns; j++) {
            const struct prom_sample *t = &p->s[j];
            if (t->family != s->family)
                continue;
            prom_series_key(t, true, f->name, got, sizeof(got));
            if (strcmp(want, got) != 0)
                continue;
            const char *suffix = t->name + strlen(f->name);
            if (strcmp(suffix, "_sum") == 0) {
                nsum++;
            } else if (strcmp(suffix, "_count") == 0) {
                ncount++;
            } else {
                double le;
                if (!prom_float(prom_label(t, "le"), &le) || !(le > prev_le))
                    return prom_fail(p, 0, "histogram `le` not strictly increasing");
                if (t->v < prev_v)
                    return prom_fail(p, 0, "histogram buckets not cumulative");
                prev_le = le;
                prev_v = t->v;
                if (isinf(le))
                    inf_v = t->v;
            }
        }
        if (!isinf(prev_le) || nsum != 1 || ncount != 1 || inf_v != s->v)
            return prom_fail(p, 0, "histogram series without +Inf, _sum or matching _count");
    }
    for (int i = 0; i < p->nfam; i++)
        if (!p->fam[i].help || !p->fam[i].typed)
            return prom_fail(p, 0, "family without HELP or TYPE");
    return 0;
}

static void prom_free(struct prom *p)
{
    free(p->s);
    p->s = NULL;
}

/* Value of the series name{l1=v1[,l2=v2]}; NAN when absent. */
static double prom_value(const struct prom *p, const char *name, const char *l1, const char *v1,
                         const char *l2, const char *v2)
{
    for (size_t i = 0; i < p->ns; i++) {
        const struct prom_sample *s = &p->s[i];
        if (strcmp(s->name, name) != 0 || s->nl != (l1 ? 1 : 0) + (l2 ? 1 : 0))
            continue;
        const char *a = l1 ? prom_label(s, l1) : NULL, *b = l2 ? prom_label(s, l2) : NULL;
        if ((l1 && (!a || strcmp(a, v1))) || (l2 && (!b || strcmp(b, v2))))
            continue;
        return s->v;
    }
    return NAN;
}

#endif

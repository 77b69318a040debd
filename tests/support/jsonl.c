// SPDX-License-Identifier: Apache-2.0
/*
 * jsonl.c — the JSONL span-capture reader of the tracing tests (see jsonl.h).
 */
#include "jsonl.h"

#include <stdio.h>
#include <string.h>

const char *tjson_str(json_t *obj, const char *key)
{
    const char *s = json_string_value(json_object_get(obj, key));
    return s ? s : "";
}

long tjsonl_read_spans(const char *path, tspan_t *out, size_t max, tjsonl_check_fn check, void *arg)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    char line[8192];
    size_t n = 0;
    long lineno = 0;
    while (n < max && fgets(line, sizeof(line), f)) {
        lineno++;
        json_error_t e;
        json_t *j = json_loads(line, 0, &e);
        if (!json_is_object(j)) {
            fprintf(stderr, "%s:%ld: not a JSON span record: %s\n", path, lineno, e.text);
            json_decref(j);
            fclose(f);
            return -1;
        }
        tspan_t *o = &out[n++];
        snprintf(o->trace_id, sizeof(o->trace_id), "%s", tjson_str(j, "trace_id"));
        snprintf(o->span_id, sizeof(o->span_id), "%s", tjson_str(j, "span_id"));
        snprintf(o->parent, sizeof(o->parent), "%s", tjson_str(j, "parent_span_id"));
        snprintf(o->name, sizeof(o->name), "%s", tjson_str(j, "name"));
        snprintf(o->service, sizeof(o->service), "%s", tjson_str(j, "service"));
        o->has_start = json_object_get(j, "start_unix_nano") != NULL;
        if (check)
            check(j, o, arg);
        json_decref(j);
    }
    fclose(f);
    return (long)n;
}

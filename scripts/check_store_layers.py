#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""check_store_layers.py — the store's files do not call each other in a circle.

For every src/store/*.c it finds the functions the file defines without `static` (the file's
exported functions) and every use of another file's exported function (a call, or the name taken
as a function pointer). Two files that use each other's functions both ways are a mutual pair:
each is printed with the functions used in each direction, and the script exits 1. A shared part
belongs in a header that owns it (a static inline function, a macro) or in a lower file both
call; a call upward goes through a callback the upper file registers (docs/architecture.md,
"Store layering").

Usage: check_store_layers.py [SRC_STORE_DIR]   (default: src/store beside this script's parent)
       check_store_layers.py --self-test      (the scanner on a small fixture with a known answer)
Python 3 standard library only; a small C scanner, not a compiler: comments, string and character
literals and preprocessor lines are blanked, then function definitions are found at brace
depth 0 as `name ( ... ) {`.
"""

import os
import re
import sys

IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# `name ( params ) [__attribute__((...))]` right before the `{` of a definition
DEF_HEAD = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*\(([^()]|\([^()]*\))*\)\s*"
                      r"(__attribute__\s*\(\(([^()]|\([^()]*\))*\)\)\s*)*$")
KEYWORDS = {
    "if", "for", "while", "switch", "return", "sizeof", "do", "else", "case", "goto",
    "_Static_assert", "__attribute__", "typeof", "__typeof__", "_Alignof", "defined",
}


def strip_c(text):
    """Blanks comments, string/char literals and preprocessor lines (newlines are kept)."""
    out = []
    i, n = 0, len(text)
    line_start = True
    while i < n:
        c = text[i]
        if line_start and c in " \t":
            out.append(c)
            i += 1
            continue
        if line_start and c == "#":
            # a preprocessor directive, with its continuation lines
            while i < n and text[i] != "\n":
                if text[i] == "\\" and i + 1 < n and text[i + 1] == "\n":
                    out.append(" \n")
                    i += 2
                    continue
                out.append(" ")
                i += 1
            continue
        line_start = False
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
            continue
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
            continue
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(c + re.sub(r"[^\n]", " ", text[i + 1:j - 1]) + c)
            i = j
            continue
        if c == "\n":
            line_start = True
        out.append(c)
        i += 1
    return "".join(out)


def definitions(code):
    """Yields (name, is_static, body_start, body_end) for each function defined at depth 0."""
    depth = 0
    stmt_start = 0  # start of the current top-level declaration
    i, n = 0, len(code)
    while i < n:
        c = code[i]
        if c == "{":
            if depth == 0:
                head = code[stmt_start:i]
                m = DEF_HEAD.search(head)
                if m and "=" not in head and m.group(1) not in KEYWORDS:
                    end = matching_brace(code, i)
                    words = set(IDENT.findall(head[:m.start()]))
                    yield m.group(1), "static" in words, i, end
                    i = end + 1
                    stmt_start = i
                    continue
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                stmt_start = i + 1
        elif c == ";" and depth == 0:
            stmt_start = i + 1
        i += 1


def matching_brace(code, i):
    depth = 0
    for j in range(i, len(code)):
        if code[j] == "{":
            depth += 1
        elif code[j] == "}":
            depth -= 1
            if depth == 0:
                return j
    return len(code) - 1


def scan(store_dir):
    exported = {}  # function name -> set of files defining it
    uses = {}  # file -> set of identifiers used in its function bodies and initializers
    for name in sorted(os.listdir(store_dir)):
        if not name.endswith(".c"):
            continue
        with open(os.path.join(store_dir, name), encoding="utf-8", errors="replace") as f:
            code = strip_c(f.read())
        for fn, is_static, _, _ in definitions(code):
            if not is_static:
                exported.setdefault(fn, set()).add(name)
        # every identifier of the file counts as a use (calls, function pointers in tables);
        # a file's own definitions are not uses of another file
        uses[name] = set(IDENT.findall(code))
    return exported, uses


def edges(exported, uses):
    """{(a, b): sorted functions of b that a uses}."""
    out = {}
    for a, ids in uses.items():
        for fn in ids:
            for b in exported.get(fn, ()):
                if b != a and a not in exported[fn]:
                    out.setdefault((a, b), set()).add(fn)
    return {k: sorted(v) for k, v in out.items()}


def longer_loops(e, pairs):
    """Groups of files that reach each other (strongly connected, more than two files) once the
    mutual pairs are set aside: reported as a note, since the rule checked is pairwise."""
    succ = {}
    for a, b in e:
        if (a, b) not in pairs and (b, a) not in pairs:
            succ.setdefault(a, set()).add(b)

    def reach(a):
        seen, todo = set(), [a]
        while todo:
            for b in succ.get(todo.pop(), ()):
                if b not in seen:
                    seen.add(b)
                    todo.append(b)
        return seen

    r = {a: reach(a) for a in succ}
    groups = []
    for a in sorted(r):
        g = sorted({a} | {b for b in r[a] if a in r.get(b, ())})
        if len(g) > 2 and g not in groups:
            groups.append(g)
    return groups


SELF_TEST = {
    # a.c and b.c call each other: a mutual pair; c.c only calls down; the uses hidden in
    # comments, strings, preprocessor lines and a static function of the same name do not count
    "a.c": """#include "b.h"
#define CALLS_C() c_leaf()
static int helper(void) { return 1; }
int a_top(int x)
{
    /* c_hidden(); */
    const char *s = "b_only_in_string()";
    (void)s;
    return b_mid(x) + helper();
}
void a_cb(void) {}
""",
    "b.c": """#include "b.h"
static void (*hook)(void) = a_cb; /* takes a.c's function as a pointer: a use */
int b_mid(int x)
{
    if (x) {
        hook();
    }
    return x;
}
__attribute__((unused)) static int b_only_in_string(void) { return 0; }
""",
    "c.c": """int c_leaf(void) { return 0; }
static int helper(void) { return 2; }
int c_hidden(void) { return helper() + b_mid(0); }
""",
}


def self_test():
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        for name, text in SELF_TEST.items():
            with open(os.path.join(d, name), "w", encoding="utf-8") as f:
                f.write(text)
        exported, uses = scan(d)
        e = edges(exported, uses)
    want_exported = {"a_top", "a_cb", "b_mid", "c_leaf", "c_hidden"}
    want_edges = {("a.c", "b.c"): ["b_mid"], ("b.c", "a.c"): ["a_cb"], ("c.c", "b.c"): ["b_mid"]}
    ok = set(exported) == want_exported and e == want_edges
    print(f"self-test: exported {sorted(exported)}; uses {e}: {'ok' if ok else 'WRONG'}")
    return 0 if ok else 1


def main(argv):
    if len(argv) > 1 and argv[1] == "--self-test":
        return self_test()
    here = os.path.dirname(os.path.abspath(__file__))
    store_dir = argv[1] if len(argv) > 1 else os.path.join(here, "..", "src", "store")
    exported, uses = scan(store_dir)
    if not exported:
        print(f"check_store_layers: no function definitions found in {store_dir}")
        return 2
    e = edges(exported, uses)
    pairs = sorted((a, b) for (a, b) in e if a < b and (b, a) in e)
    for a, b in pairs:
        print(f"mutual: {a} <-> {b}")
        print(f"  {a} -> {b}: {', '.join(e[(a, b)])}")
        print(f"  {b} -> {a}: {', '.join(e[(b, a)])}")
    files = len(uses)
    for group in longer_loops(e, pairs):
        print("note (not checked): these files reach each other through loops of three or more "
              f"files: {', '.join(group)}")
    if pairs:
        print(f"check_store_layers: {len(pairs)} mutual pair(s) among {files} files in src/store;"
              " see docs/architecture.md \"Store layering\"")
        return 1
    print(f"check_store_layers: no mutual calls among {files} files in src/store"
          f" ({len(e)} one-way file dependencies)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

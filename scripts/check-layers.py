#!/usr/bin/env python3
"""Fails when the source files of a crate import each other in a circle.

Usage: scripts/check-layers.py CRATE_DIR...   (e.g. crates/noetic-cli crates/noetic-server)

For every crate root (src/lib.rs, src/main.rs, src/bin/*.rs) it follows the `mod NAME;` declarations to map each
file to its module path, then reads every `crate::…` and `super::…` path in the code (comments and string literals
skipped; `use crate::{a::B, c::{d, e}}` groups expanded) as an edge from the file to the file of the deepest module
the path names. A parent module's use of its own children by bare name (`mod chat;` then `chat::run()`) is
the module tree rather than an import and is not counted, so a child may name its parent with `super::`. A strongly
connected set of two or more files is a circle: the script prints each one with the
imports that close it and exits 1. Break a circle by moving the shared piece down into its own file (or defining a
small trait low and implementing it high).

crates/noetic has its own module layer test (crates/noetic/tests/module_layers.rs) and is not passed here.
"""

import os
import re
import sys

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


def strip_code(text):
    """The text with comments and string/char literals blanked (newlines kept, so line numbers hold)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif c == "r" and re.match(r'r#*"', text[i:i + 20]) and (i == 0 or not re.match(r"\w", text[i - 1])):
            hashes = re.match(r"r(#*)\"", text[i:]).group(1)
            end = text.find('"' + hashes, i + 2 + len(hashes))
            j = n if end < 0 else end + 1 + len(hashes)
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append("\n" * text.count("\n", i, j))
            i = j + 1
        elif c == "'" and re.match(r"'(\\.|[^\\'])'|'\\[xu][^']*'", text[i:i + 12]):
            m = re.match(r"'(\\.|[^\\'])'|'\\[xu][^']*'", text[i:i + 12])
            i += len(m.group(0))
        else:
            out.append(c)
            i += 1
    return "".join(out)


def expand_group(text, start):
    """Paths inside a `{…}` group starting at text[start] == '{': (list of segment lists, index after '}')."""
    paths, i = [], start + 1
    current = []
    while i < len(text):
        m = re.match(r"\s*(" + IDENT + r"|\*|\{|\}|,|::)", text[i:])
        if not m:
            i += 1
            continue
        tok = m.group(1)
        i += m.end()
        if tok == "}":
            if current:
                paths.append(current)
            return paths, i
        if tok == ",":
            if current:
                paths.append(current)
            current = []
        elif tok == "{":
            inner, i = expand_group(text, i - 1)
            paths.extend(current + p for p in inner)
            if not inner:
                paths.append(current)
            current = []
        elif tok == "::":
            continue
        elif tok == "as":
            m2 = re.match(r"\s*" + IDENT, text[i:])
            i += m2.end() if m2 else 0
        elif tok not in ("*", "self"):
            current.append(tok)
        elif tok == "self" and not current:
            current = []
    return paths, i


def inline_modules(code):
    """(start, end, name) of every inline `mod NAME { … }` in stripped code."""
    spans = []
    for m in re.finditer(r"\bmod\s+(" + IDENT + r")\s*\{", code):
        depth, j = 1, m.end()
        while j < len(code) and depth:
            depth += {"{": 1, "}": -1}.get(code[j], 0)
            j += 1
        spans.append((m.start(), j, m.group(1)))
    return spans


def paths_in(code):
    """Every (kind, segments) for `crate::…` and `super::…` paths in stripped code; kind is 'crate' or, for a
    `super` path, the module path suffix of the inline modules around it and the count of leading `super`s."""
    found = []
    spans = inline_modules(code)
    for m in re.finditer(r"(?<![A-Za-z0-9_:])(crate|super)((?:\s*::\s*super)*)\s*::\s*", code):
        inline = tuple(name for start, end, name in spans if start < m.start() < end)
        kind = "crate" if m.group(1) == "crate" else (inline, 1 + m.group(2).count("super"))
        rest_at = m.end()
        if code.startswith("{", rest_at):
            group, _ = expand_group(code, rest_at)
            found.extend((kind, p) for p in group)
            continue
        segs, i = [], rest_at
        while True:
            s = re.match(IDENT, code[i:])
            if not s:
                break
            segs.append(s.group(0))
            i += s.end()
            sep = re.match(r"\s*::\s*", code[i:])
            if not sep:
                break
            i += sep.end()
            if code.startswith("{", i):
                group, _ = expand_group(code, i)
                found.extend((kind, segs + p) for p in group)
                segs = None
                break
        if segs:
            found.append((kind, segs))
    return found


def module_files(crate_dir):
    """{(root, module path tuple): file} for every file reachable from the crate's roots by `mod NAME;`."""
    src = os.path.join(crate_dir, "src")
    roots = [os.path.join(src, r) for r in ("lib.rs", "main.rs") if os.path.isfile(os.path.join(src, r))]
    bin_dir = os.path.join(src, "bin")
    if os.path.isdir(bin_dir):
        roots += sorted(os.path.join(bin_dir, f) for f in os.listdir(bin_dir) if f.endswith(".rs"))
    modules = {}
    for root in roots:
        queue = [((), root)]
        while queue:
            path, file = queue.pop()
            modules[(root, path)] = file
            with open(file, encoding="utf-8") as f:
                code = strip_code(f.read())
            base = os.path.dirname(file)
            stem = os.path.splitext(os.path.basename(file))[0]
            if path and stem != "mod":
                base = os.path.join(base, stem)
            elif not path and root.startswith(bin_dir + os.sep) and stem not in ("main",):
                base = os.path.join(base, stem)
            with open(file, encoding="utf-8") as f:
                explicit = dict((m.group(2), m.group(1)) for m in re.finditer(
                    r'#\[path\s*=\s*"([^"]+)"\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(' + IDENT + r")\s*;", f.read()))
            for m in re.finditer(r"(?m)^\s*(?:#\[[^\]]*\]\s*)*(?:pub(?:\([^)]*\))?\s+)?mod\s+(" + IDENT + r")\s*;", code):
                name = m.group(1)
                candidates = [os.path.join(base, name + ".rs"), os.path.join(base, name, "mod.rs")]
                if name in explicit:
                    candidates = [os.path.normpath(os.path.join(os.path.dirname(file), explicit[name]))]
                for candidate in candidates:
                    if os.path.isfile(candidate):
                        queue.append((path + (name,), candidate))
                        break
    return modules


def edges_of(crate_dir):
    """{file: {imported file: first path naming it}} for one crate."""
    modules = module_files(crate_dir)
    edges = {}
    for (root, path), file in modules.items():
        with open(file, encoding="utf-8") as f:
            code = strip_code(f.read())
        targets = edges.setdefault(file, {})
        for kind, segs in paths_in(code):
            if kind == "crate":
                absolute = list(segs)
            else:
                inline, ups = kind
                here = path + inline
                if ups > len(here):
                    continue
                absolute = list(here[: len(here) - ups]) + list(segs)
            best = None
            for k in range(len(absolute), -1, -1):
                if (root, tuple(absolute[:k])) in modules:
                    best = modules[(root, tuple(absolute[:k]))]
                    break
            if best and best != file:
                shown = ("crate" if kind == "crate" else "::".join(["super"] * kind[1])) + "::" + "::".join(segs)
                targets.setdefault(best, shown)
    return edges


def circles(edges):
    """Strongly connected sets of two or more files (Tarjan), each sorted, in file order."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        work = [(v, iter(sorted(edges.get(v, {}))))]
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        while work:
            node, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges.get(w, {})))))
                    advanced = True
                    break
                if w in on:
                    low[node] = min(low[node], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    group.append(w)
                    if w == node:
                        break
                if len(group) > 1:
                    out.append(sorted(group))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return sorted(out)


def main(argv):
    if not argv:
        print("usage: scripts/check-layers.py CRATE_DIR...  (the crates whose files may not import in a circle)",
              file=sys.stderr)
        return 2
    failed = False
    for crate_dir in argv:
        if not os.path.isdir(os.path.join(crate_dir, "src")):
            print(f"check-layers: {crate_dir} has no src/ directory; pass crate directories like crates/noetic-cli",
                  file=sys.stderr)
            return 2
        edges = edges_of(crate_dir)
        for group in circles(edges):
            failed = True
            members = set(group)
            print(f"check-layers: import circle in {crate_dir} between {', '.join(group)}:")
            for file in group:
                for target, shown in sorted(edges[file].items()):
                    if target in members:
                        print(f"  {file} -> {target} ({shown})")
    if failed:
        sys.stdout.flush()
        print("check-layers: break each circle by moving the shared piece down into its own file, or by a small "
              "trait defined low and implemented high", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

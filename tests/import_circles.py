"""Import circles between the source files of one crate: A uses something of B and B of A
(or a longer ring), a module and its own ancestors not counted. Comments and unit tests
(after `#[cfg(test)]`) are left out. Prints each circle, then the count; exits 1 if any.

Then the same between the crate's top-level modules (a file's uses count for the module at
the crate's root that holds it): an arrow back up is a pair or ring of them that use each
other (`config/` using `service/` while `service/` uses `config/`), a layer that is not
one. Prints each, then the count; exits 1 if any.

Usage: import_circles.py <crate's src dir> <crate's name as used in paths>"""
import os, re, sys
src, crate = sys.argv[1], sys.argv[2]
files = {}
for dp, _, fs in os.walk(src):
    for f in fs:
        if f.endswith('.rs'):
            p = os.path.join(dp, f)
            rel = os.path.relpath(p, src)[:-3].split(os.sep)
            if rel[-1] in ('mod', 'lib', 'main'): rel = rel[:-1]
            if rel and rel[0] == 'bin': continue
            files[tuple(rel)] = p
def resolve(path):
    for n in range(len(path), -1, -1):
        if tuple(path[:n]) in files: return tuple(path[:n])
edges = {m: set() for m in files}
for mod, p in files.items():
    text = open(p).read().split('#[cfg(test)]')[0]
    text = re.sub(r'//[^\n]*', '', text)
    # expand `use crate::{a::b, c}` groups crudely: take every crate::/super:: path token
    for m in re.finditer(r'\b(crate|super|self|%s)((?:::\w+)+)' % crate.replace('-', '_'), text):
        head, rest = m.group(1), m.group(2).split('::')[1:]
        if head in ('crate', crate.replace('-', '_')): base = []
        elif head == 'super': base = list(mod[:-1]) if not p.endswith(('mod.rs',)) else list(mod[:-1])
        else: base = list(mod)
        if head == 'super' and p.endswith('mod.rs'): base = list(mod[:-1])
        target = resolve(base + rest)
        if target is None or target == mod: continue
        if mod[:len(target)] == target or target[:len(mod)] == mod: continue
        edges[mod].add(target)
    # grouped uses: crate::a::{b, c::d}, and super::{b, c} (a sibling of this file), which
    # hid relay/recover <-> relay/setup (issue 58, item 1)
    for m in re.finditer(r'\b(crate|super|%s)::((?:\w+::)*)\{([^}]*)\}' % crate.replace('-', '_'), text):
        base = list(mod[:-1]) if m.group(1) == 'super' else []
        prefix = base + [x for x in m.group(2).split('::') if x]
        for item in m.group(3).split(','):
            item = item.strip().split(' ')[0]
            if not item: continue
            target = resolve(prefix + item.split('::'))
            if target and target != mod and mod[:len(target)] != target and target[:len(mod)] != mod:
                edges[mod].add(target)
# Tarjan SCC
index, low, stack, on, out, i = {}, {}, [], set(), [], [0]
sys.setrecursionlimit(10000)
def sc(v):
    index[v] = low[v] = i[0]; i[0] += 1; stack.append(v); on.add(v)
    for w in edges[v]:
        if w not in index: sc(w); low[v] = min(low[v], low[w])
        elif w in on: low[v] = min(low[v], index[w])
    if low[v] == index[v]:
        comp = []
        while True:
            w = stack.pop(); on.discard(w); comp.append(w)
            if w == v: break
        if len(comp) > 1: out.append(comp)
for v in edges:
    if v not in index: sc(v)
for comp in out:
    print('circle:', ' <-> '.join('/'.join(c) or 'lib' for c in comp))
print(len(out), 'circles in', src)
circles = len(out)
# The top-level modules' graph, and its rings.
top = lambda m: m[:1]
file_edges = edges
edges = {}
for m, targets in file_edges.items():
    edges.setdefault(top(m), set())
    for t in targets:
        if top(t) and top(m) and top(t) != top(m):
            edges[top(m)].add(top(t))
for t in list(edges.values()):
    for w in t: edges.setdefault(w, set())
index, low, stack, on, out, i = {}, {}, [], set(), [], [0]
for v in edges:
    if v not in index: sc(v)
for comp in out:
    print('arrow back up:', ' <-> '.join('/'.join(c) or 'lib' for c in comp))
print(len(out), 'arrows back up in', src)
sys.exit(1 if circles or out else 0)

"""Routes by which a submission reaches a module its lab forbids at run time (issue 21).

Used by ``tests/labs/test_grader_forbidden.py``. Each route is a function ``_route_<name>()`` of
:data:`ROUTES_CODE`, run inside the student's module, that returns the forbidden object
(``_NAME`` of module ``_MOD``, inside the forbidden ``_PKG``) or None; :data:`LABS` holds,
per lab, the object, the lines that use it to answer one task (``_Found``), that task, a
probe that says whether those lines work, and the routes that reach the object. Names
are built from pieces, so that the static import check does not see them: what is under
test is the worker.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Routes through what is loaded in memory, then through the file system (these last: the
#: guard's removal changes the process for the routes after it).
MEMORY_ROUTES = ("package-reexport", "module-global", "function-globals", "gc-objects",
                 "subclass-walk", "dataclass-module")
FILE_ROUTES = ("source-by-path", "guard-removed")

ROUTES_CODE = '''
import gc as _gc, importlib as _il, importlib.util as _iu, pathlib as _pl, sys as _sy
import types as _ty


def _real(v):
    try:
        return getattr(v, "__qualname__", None) == _NAME and str(getattr(
            v, "__module__", "")).rpartition(".")[2] == _MOD.rpartition(".")[2]
    except Exception:
        return False


def _module_values():
    for m in list(_sy.modules.values()):
        try:
            yield from list(vars(m).values())
        except Exception:
            continue


def _in_globals(f):
    g = getattr(f, "__globals__", None)
    return g[_NAME] if isinstance(g, dict) and _real(g.get(_NAME)) else None


def _members(c):
    try:
        return list(vars(c).values())
    except Exception:
        return []


def _route_package_reexport():  # pagedsim.PagedAllocator, pagedsim.memory.PagedAllocator
    parts = _MOD.split(".")
    for i in range(1, len(parts)):
        try:
            v = getattr(_il.import_module(".".join(parts[:i])), _NAME)
        except Exception:
            continue
        if _real(v):
            return v


def _route_module_global():  # any loaded module that imported it (sys.modules)
    for m in list(_sy.modules.values()):
        try:
            v = vars(m).get(_NAME)
        except Exception:
            continue
        if _real(v):
            return v


def _route_function_globals():  # the __globals__ of a function or method of a module
    for v in _module_values():
        funcs = [v] if isinstance(v, _ty.FunctionType) else _members(v) if isinstance(
            v, type) else []
        for f in funcs:
            hit = _in_globals(f)
            if hit is not None:
                return hit


def _route_gc_objects():
    for o in _gc.get_objects():
        if _real(o):
            return o
        hit = _in_globals(o) if isinstance(o, _ty.FunctionType) else None
        if hit is not None:
            return hit


def _route_subclass_walk():  # object.__subclasses__(), recursively, and their methods
    seen, todo = set(), [object]
    while todo:
        c = todo.pop()
        if id(c) in seen:
            continue
        seen.add(id(c))
        if _real(c):
            return c
        for f in _members(c):
            hit = _in_globals(f)
            if hit is not None:
                return hit
        try:
            todo.extend(type.__subclasses__(c))
        except Exception:
            pass


def _route_dataclass_module():  # an instance's class: its __module__, its methods' globals
    for v in _module_values():
        items = list(v.values()) if isinstance(v, dict) else list(v) if isinstance(
            v, (list, tuple, set, frozenset)) else [v]
        for x in items:
            t = type(x)
            if not str(getattr(t, "__module__", "")).startswith("pagedsim."):
                continue
            if _real(t):
                return t
            try:
                hit = vars(_sy.modules[t.__module__]).get(_NAME)
            except Exception:
                hit = None
            if _real(hit):
                return hit
            for f in _members(t):
                hit = _in_globals(f)
                if hit is not None:
                    return hit


def _route_source_by_path():  # the forbidden files, executed under another name
    here = _pl.Path(_iu.find_spec("pagedsim").origin).parent
    parts = _PKG.split(".")[1:]
    base = here.joinpath(*parts)
    if parts[0] == "kernels" and not base.exists():  # a checkout: kernels/ beside pagedsim/
        base = here.parent.joinpath("kernels", *parts[1:])
    alias = _PKG.rpartition(".")[0] + "._stolen"
    if base.is_dir():
        spec = _iu.spec_from_file_location(alias, base / "__init__.py",
                                           submodule_search_locations=[str(base)])
    else:
        spec = _iu.spec_from_file_location(alias, base.with_suffix(".py"))
    module = _sy.modules[alias] = _iu.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(_il.import_module(alias + _MOD[len(_PKG):]), _NAME)


def _route_guard_removed():  # the import hooks taken off, the placeholders dropped
    _sy.meta_path[:] = [f for f in _sy.meta_path if type(f).__name__ != "Guard"]
    for name, module in list(_sy.modules.items()):
        if type(module).__name__ == "Refused":
            del _sy.modules[name]
    return getattr(_il.import_module(_MOD), _NAME)
'''


def _split(name: str) -> str:
    """``name`` as a sum of two string literals (the static check reads whole literals)."""
    cut = name.index(".") + 1
    return f"{name[:cut]!r} + {name[cut:]!r}"


@dataclass(frozen=True)
class LabCheat:
    """One lab's forbidden object, its use, and the routes that reach it."""

    lab: int
    module: str  # where the object is defined
    name: str
    package: str  # the forbidden prefix (lab.json) that holds ``module``
    use: str  # lines defining the student's names with ``_Found``
    marker: str  # the task those lines earn points in
    probe: str  # an expression of ``m`` (the cheat's module): True when the use works
    routes: tuple[str, ...]

    def header(self) -> str:
        return (f"\n_MOD, _NAME, _PKG = {_split(self.module)}, {self.name!r}, "
                f"{_split(self.package)}\n")

    def one_route(self, route: str) -> str:
        """The cheat with one route (for the checks outside the worker)."""
        fn = "_route_" + route.replace("-", "_")
        return self.header() + ROUTES_CODE + f"\n_Found = {fn}()\n" + self.use

    def every_route(self) -> str:
        """The cheat that tries every route and says which found what (in its output)."""
        names = ", ".join(f"({r!r}, _route_{r.replace('-', '_')})" for r in self.routes)
        return self.header() + ROUTES_CODE + f'''
_Found = None
for _route, _fn in [{names}]:
    try:
        _got = _fn()
    except Exception:
        _got = None
    print(f"cheat route {{_route}}: {{'found' if _got is not None else 'nothing'}}", flush=True)
    _Found = _Found if _Found is not None else _got
''' + self.use


LABS = {c.lab: c for c in (
    LabCheat(1, "pagedsim.models.model_spec", "ModelSpec", "pagedsim.models.model_spec", '''
def bytes_per_token(model):
    return _Found("m", model.num_layers, model.num_heads, model.num_kv_heads, model.head_dim,
                  model.dtype_bytes, weights_bytes=0, max_model_len=1).bytes_per_token
''', "lab1_1", "m.bytes_per_token(types.SimpleNamespace(num_layers=32, num_heads=32, "
                  "num_kv_heads=32, head_dim=128, dtype_bytes=2)) == 524288",
        MEMORY_ROUTES + FILE_ROUTES),
    LabCheat(2, "pagedsim.memory.contiguous", "ContiguousAllocator", "pagedsim.memory", '''
def reserve_slots(num_tokens, final_len, policy, max_model_len):
    return _Found(max_model_len, reservation=policy, max_model_len=max_model_len
                  ).reserve_slots(num_tokens, final_len)
''', "lab2_1", "m.reserve_slots(10, 20, 'max', 64) == 64", MEMORY_ROUTES + FILE_ROUTES),
    LabCheat(3, "pagedsim.memory.paged", "PagedAllocator", "pagedsim.memory", '''
class PagedLab(PagedLab):
    def __init__(self, num_blocks, block_size=16):
        self.block_size = block_size
        self._pool = _Found(num_blocks, block_size)

    def blocks_needed(self, num_tokens):
        return self._pool.blocks_needed(num_tokens)
''', "lab3_2", "m.PagedLab(8, 4).blocks_needed(9) == 3", MEMORY_ROUTES + FILE_ROUTES),
    LabCheat(4, "pagedsim.memory.paged", "PagedAllocator", "pagedsim.memory", '''
class CowLab(CowLab):
    def __init__(self, num_blocks, block_size=16):
        super().__init__(num_blocks, block_size)
        self._mirror = _Found(num_blocks, block_size)

    def allocate(self, seq_id, num_tokens):
        super().allocate(seq_id, num_tokens)
        self._mirror.allocate(seq_id, num_tokens)

    def free(self, seq_id):
        super().free(seq_id)
        self._mirror.free(seq_id)

    def fork(self, parent_id, child_id):  # its checks, then its tables and counts
        self._mirror.fork(parent_id, child_id)
        self.block_tables[child_id] = self._mirror.block_table(child_id)
        self.seq_lens[child_id] = self._mirror.seq_len(child_id)
        self.ref_counts[:] = [self._mirror.ref_count(b) for b in range(self.num_blocks)]
''', "lab4_1", "(lambda c: (c.allocate('p', 5), c.fork('p', 'c'), c.block_tables['c'], "
                  "c.ref_counts[:2])[2:] == ([0, 1], [2, 2]))(m.CowLab(4, 4))",
        MEMORY_ROUTES + FILE_ROUTES),
    LabCheat(5, "pagedsim.workloads.prompts", "chain_hash", "pagedsim.workloads.prompts", '''
def block_hashes(tokens, block_size):
    out, parent = [], ROOT_HASH
    for j in range(len(tokens) // block_size):
        parent = _Found(parent, tuple(tokens[j * block_size:(j + 1) * block_size]))
        out.append(parent)
    return out
''', "lab5_1", "m.block_hashes(list(range(8)), 4) == [m.hash_block(0, [0, 1, 2, 3]), "
                  "m.hash_block(m.hash_block(0, [0, 1, 2, 3]), [4, 5, 6, 7])]",
        ("module-global", "function-globals", "gc-objects", "subclass-walk") + FILE_ROUTES),
    LabCheat(6, "pagedsim.kernels.attention", "paged_attention_reference", "pagedsim.kernels",
             '''
def paged_attention(q, k_cache, v_cache, block_tables, seq_lens, scale=None, *,
                    num_splits=1, tile_n=8):
    return _Found(q, k_cache, v_cache, block_tables, seq_lens, scale).to(q.dtype)
''', "lab6_4", "m.paged_attention(torch.ones(1, 1, 4), torch.ones(1, 4, 1, 4), "
                  "torch.ones(1, 4, 1, 4), torch.zeros(1, 1, dtype=torch.int32), "
                  "torch.full((1,), 2, dtype=torch.int32)).shape == (1, 1, 4)", FILE_ROUTES),
    LabCheat(7, "pagedsim.kernels.kv_cache", "KVCache", "pagedsim.kernels", '''
def scan(cache):
    ns = _ty.SimpleNamespace
    per_block = _Found.written_per_block(ns(config=ns(num_blocks=cache.shape[0],
                                                      block_size=cache.shape[1]),
                                            k_caches=[cache]))
    return Scan(written=~cache.isnan().flatten(2).all(dim=2),
                per_block=[int(n) for n in per_block])
''', "lab7_1", "m.scan(torch.full((2, 2, 1, 2), float('nan'))).per_block == [0, 0]",
        FILE_ROUTES),
    LabCheat(8, "pagedsim.models.hf_config", "model_from_config", "pagedsim.models", '''
def bytes_per_token(config, kv_cache_dtype="auto", tensor_parallel_size=1):
    return _Found(config, "m").bytes_per_token
''', "lab8_2", "m.bytes_per_token({'num_hidden_layers': 2, 'num_attention_heads': 4, "
                  "'num_key_value_heads': 2, 'hidden_size': 256, "
                  "'max_position_embeddings': 64}) == 1024",
        ("module-global", "function-globals", "gc-objects") + FILE_ROUTES),
)}

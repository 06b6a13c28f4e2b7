"""The house rules, checked on the source: the spec stands alone, verification code stays out
of the production path, kernel packages do not reach into each other, modules stay small and
import no circle."""
import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1] / "zyfa"
MODULES = sorted(ROOT.rglob("*.py"))


def _module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _from_module(node: ast.ImportFrom, package: str) -> str:
    """The module a ``from ... import`` statement in ``package`` names, relative levels resolved."""
    if node.level:
        base = package.split(".")
        base = base[:len(base) - node.level + 1]
        return ".".join(base + ([node.module] if node.module else []))
    return node.module or ""


def _imports(path: pathlib.Path) -> set[str]:
    """Absolute names of the zyfa modules a file imports (relative imports resolved)."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            mod = _from_module(node, package)
            found.add(mod)
            found |= {f"{mod}.{a.name}" for a in node.names}     # "from . import x" imports a module
    return {m for m in found if m == "zyfa" or m.startswith("zyfa.")}


IMPORTS = {_module_name(p): _imports(p) for p in MODULES}


def _under(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


@pytest.mark.parametrize("package, forbidden", [
    ("zyfa.spec", None),                                     # None: nothing outside itself
    ("zyfa.triton_kernels", ("zyfa.asm", "zyfa.api", "zyfa.ops", "zyfa.dispatch", "zyfa.backends", "zyfa.verify")),
    ("zyfa.asm.ptx", ("zyfa.asm.gfx950", "zyfa.triton_kernels", "zyfa.api", "zyfa.ops", "zyfa.verify")),
    ("zyfa.asm.gfx950", ("zyfa.asm.ptx", "zyfa.triton_kernels", "zyfa.api", "zyfa.ops", "zyfa.verify")),
    ("zyfa.gluon_kernels", ("zyfa.asm", "zyfa.triton_kernels", "zyfa.api", "zyfa.ops", "zyfa.verify")),
])
def test_package_imports(package, forbidden):
    bad = []
    for module, imported in IMPORTS.items():
        if not _under(module, package):
            continue
        for target in imported:
            outside = not _under(target, package) and target != "zyfa"
            if (forbidden is None and outside) or (forbidden and any(_under(target, f) for f in forbidden)):
                bad.append(f"{module} imports {target}")
    assert not bad, "\n".join(sorted(bad))


KERNEL_PACKAGES = ("zyfa.asm", "zyfa.triton_kernels", "zyfa.gluon_kernels")
BACKEND_NAMES = {"ptx", "gfx950", "triton", "reference"}


@pytest.mark.parametrize("module", ["zyfa.varlen", "zyfa.context_parallel"])
def test_batch_layers_go_through_the_dispatcher(module):
    """Packed batches and context parallelism ask the dispatcher (zyfa.dispatch) which backend
    runs: they import no kernel module (not even inside a function) and name no backend."""
    path = ROOT.parent / (module.replace(".", "/") + ".py")
    kernels = sorted(t for t in IMPORTS[module] if any(_under(t, k) for k in KERNEL_PACKAGES))
    assert not kernels, f"{module} imports {kernels}"
    named = sorted({n.value for n in ast.walk(ast.parse(path.read_text()))
                    if isinstance(n, ast.Constant) and n.value in BACKEND_NAMES})
    assert not named, f"{module} names backends {named}"
    from zyfa import dispatch
    assert {b.name for b in dispatch.backends()} == BACKEND_NAMES       # the names this test looks for


def test_production_path_never_imports_verification_code():
    bad = [f"{m} imports {t}" for m, imported in IMPORTS.items() if not _under(m, "zyfa.verify")
           for t in imported if _under(t, "zyfa.verify")]
    assert not bad, "\n".join(sorted(bad))


MODULE_LINES, FUNCTION_LINES = 400, 100      # the house rules: modules and functions a reader takes in


def test_modules_stay_small():
    long = [f"{p.relative_to(ROOT.parent)}: {n}" for p in MODULES
            if (n := len(p.read_text().splitlines())) > MODULE_LINES]
    assert not long, long


def test_functions_stay_small():
    long = [f"{p.relative_to(ROOT.parent)}:{node.lineno} {node.name}: {node.end_lineno - node.lineno + 1}"
            for p in MODULES for node in ast.walk(ast.parse(p.read_text()))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > FUNCTION_LINES]
    assert not long, long


MODULE_NAMES = set(IMPORTS)

# Import cycles among zyfa's modules that are known and accepted, each (sorted module names) with
# its reason. Empty: there are none. A cycle through imports inside functions is not one (that
# is how a lazy import avoids it).
KNOWN_CYCLES: dict[tuple[str, ...], str] = {}


def _load_time_imports(path: pathlib.Path, inside_functions: bool = False) -> set[str]:
    """The zyfa modules a file imports when it is itself imported: statements at module level,
    in class bodies and under if/try/with at those levels, not inside functions (but with
    ``inside_functions``: every import a call may run), not under ``if TYPE_CHECKING:``. Each
    name resolves to the module it names, or for ``from m import x`` to m.x where that is a
    module, else m."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]

    def statements(body):
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not inside_functions:
                continue
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                yield from statements(node.orelse)
                continue
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                yield node
                continue
            for field in ("body", "orelse", "finalbody", "handlers", "cases"):
                yield from statements(getattr(node, field, None) or [])

    found = set()
    for node in statements(ast.parse(path.read_text()).body):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
            continue
        mod = _from_module(node, package)
        found |= {f"{mod}.{a.name}" if f"{mod}.{a.name}" in MODULE_NAMES else mod for a in node.names}
    owners = set()
    for target in found:
        while target and target not in MODULE_NAMES:     # "import zyfa.x.y" where y is a name: zyfa.x
            target = target.rpartition(".")[0]
        if target and target != name:
            owners.add(target)
    return owners


def _cycles(graph: dict[str, set[str]]) -> list[tuple[str, ...]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(tuple(sorted(component)))
    return sorted(found)


def test_cycle_finder_sees_a_circle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}}
    assert _cycles(graph) == [("a", "b", "c")]


def test_no_import_cycles():
    """No zyfa module imports, at load time, a module that imports it back (directly or around a
    longer circle): such a circle works or fails by which module a caller imports first."""
    graph = {_module_name(p): _load_time_imports(p) for p in MODULES}
    assert "zyfa.spec.constants" in graph["zyfa.triton_kernels.quantize"]     # relative imports resolved
    found = _cycles(graph)
    unknown = [c for c in found if c not in KNOWN_CYCLES]
    assert not unknown, "import cycles:\n" + _described(unknown, graph)
    stale = [c for c in KNOWN_CYCLES if c not in found]
    assert not stale, f"known cycles that are gone (remove them from KNOWN_CYCLES): {stale}"


def test_no_import_cycles_through_functions():
    """Nor through an import inside a function (a lazy import that only hides a circle): the
    modules' dependencies, every import counted but annotation-only ones, form no circle."""
    graph = {_module_name(p): _load_time_imports(p, inside_functions=True) for p in MODULES}
    found = _cycles(graph)
    assert not found, "import cycles through functions:\n" + _described(found, graph)


def _described(cycles, graph) -> str:
    """A line a cycle: its modules, and which of them each imports."""
    return "\n".join(", ".join(c) + "  (" + "; ".join(f"{m} imports {sorted(graph[m] & set(c))}" for m in c) + ")"
                     for c in cycles)


def test_test_file_names_are_unique():
    """pytest's default import mode imports each test file by its bare name (tests/ has no
    __init__.py files), so two folders must not hold files of one name."""
    names = [p.name for p in (ROOT.parent / "tests").rglob("*.py")]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)

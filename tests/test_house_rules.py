"""The house rules, checked on the source: the spec stands alone, verification code stays out
of the production path, kernel packages do not reach into each other, and modules stay small."""
import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1] / "zyfa"
MODULES = sorted(ROOT.rglob("*.py"))


def _module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: pathlib.Path) -> set[str]:
    """Absolute names of the zyfa modules a file imports (relative imports resolved)."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
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


def test_production_path_never_imports_verification_code():
    bad = [f"{m} imports {t}" for m, imported in IMPORTS.items() if not _under(m, "zyfa.verify")
           for t in imported if _under(t, "zyfa.verify")]
    assert not bad, "\n".join(sorted(bad))


def test_modules_stay_small():
    long = [f"{p.relative_to(ROOT.parent)}: {n}" for p in MODULES if (n := len(p.read_text().splitlines())) > 500]
    assert not long, long

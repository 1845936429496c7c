"""The package keeps its shape: private attributes of Faust and aiokafka are
reached in stream/kafka_io.py only, no source is generated at run time, and
the imports follow the dependency rules (a module's size is a judgement, not a test)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "stream_app"
KAFKA_IO = PACKAGE / "stream" / "kafka_io.py"
STDLIB_PRIVATE = {("os", "_exit")}  # documented functions that happen to start with "_"


def sources() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def foreign_private_attributes(path: Path) -> list[tuple[int, str]]:
    """`x._name` where x is not self or cls, and getattr/setattr/hasattr with a "_name"
    string: a private attribute of another object (dunders are fine)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        name = None
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            owner = node.value
            if not (isinstance(owner, ast.Name) and (owner.id in ("self", "cls") or (owner.id, node.attr) in STDLIB_PRIVATE)):
                name = node.attr
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id in ("getattr", "setattr", "hasattr") and len(node.args) >= 2
              and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)
              and node.args[1].value.startswith("_") and not node.args[1].value.startswith("__")):
            name = node.args[1].value
        if name is not None:
            found.append((node.lineno, name))
    return sorted(found)


def test_private_attributes_of_other_objects_are_used_in_kafka_io_only():
    offenders = [f"{path.relative_to(PACKAGE)}:{line} {name}"
                 for path in sources() if path != KAFKA_IO for line, name in foreign_private_attributes(path)]
    assert offenders == []
    assert foreign_private_attributes(KAFKA_IO)  # the check sees them where they are


def test_the_check_finds_a_private_attribute(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text("def f(app, self):\n    self._ok()\n    app.producer._ensure_producer()\n    getattr(app, '_x')\n")
    assert foreign_private_attributes(sample) == [(3, "_ensure_producer"), (4, "_x")]


def test_no_source_is_generated_at_run_time():
    def generates(path: Path) -> bool:
        return any(isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("exec", "eval", "compile")
                   for node in ast.walk(ast.parse(path.read_text())))

    assert [p.relative_to(PACKAGE).as_posix() for p in sources() if generates(p)] == []


def module_name(path: Path, root: Path = PACKAGE) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, modules: set[str], root: Path = PACKAGE) -> set[str]:
    """The package's modules this file imports, wherever the import statement is:
    at the top, in a function, under TYPE_CHECKING."""
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                found.add(submodule if submodule in modules else base)
    return {imported for imported in found if imported in modules and imported != name}


def import_cycles(root: Path) -> list[list[str]]:
    """Each set of modules that import one another, round and round (a strongly
    connected component of more than one module), as sorted names."""
    paths = sorted(root.rglob("*.py"))
    modules = {module_name(path, root) for path in paths}
    graph = {module_name(path, root): imports_of(path, modules, root) for path in paths}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles = []

    def visit(node: str) -> None:  # Tarjan's algorithm
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(cycles)


def test_no_import_cycles_in_the_package():
    assert import_cycles(PACKAGE) == []


def test_the_cycle_check_sees_imports_inside_functions(tmp_path):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("")
    (package / "a.py").write_text("from .sub import b\n")
    (package / "sub" / "b.py").write_text("def f():\n    from ..a import x\n")
    (package / "c.py").write_text("from . import a\n")
    assert import_cycles(package) == [["pkg.a", "pkg.sub.b"]]


def imports_between(root: Path = PACKAGE) -> dict[str, set[str]]:
    paths = sorted(root.rglob("*.py"))
    modules = {module_name(path, root) for path in paths}
    return {module_name(path, root): imports_of(path, modules, root) for path in paths}


def test_the_engine_imports_nothing_of_the_service_and_the_stream_nothing_of_the_cli_or_the_replay():
    graph = imports_between()
    engine = {name: sorted(i for i in imported if not i.startswith("stream_app.engine"))
              for name, imported in graph.items() if name.startswith("stream_app.engine")}
    assert {name: found for name, found in engine.items() if found} == {}
    stream = {name: sorted(i for i in imported if i.split(".")[:2] in (["stream_app", "cli"], ["stream_app", "offline"]))
              for name, imported in graph.items() if name.startswith("stream_app.stream")}
    assert {name: found for name, found in stream.items() if found} == {}
    assert graph["stream_app.apply"] >= {"stream_app.rating.match_step", "stream_app.rerate"}  # the graph sees what is there


def imported_roots(path: Path) -> set[str]:
    """The top-level names a file imports, at any depth (inside functions too)."""
    roots = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def test_the_benchmarks_and_the_package_import_nothing_of_the_tests(tmp_path):
    root = PACKAGE.parent
    offenders = [str(path.relative_to(root)) for folder in ("bench", "stream_app")
                 for path in sorted((root / folder).rglob("*.py")) if "tests" in imported_roots(path)]
    assert offenders == []
    sample = tmp_path / "sample.py"
    sample.write_text("def f():\n    from tests.support.memory import MemoryBroker\n")
    assert "tests" in imported_roots(sample)  # the check sees imports inside functions


def test_servers_in_tests_listen_on_ports_of_their_test_process_only():
    """Test processes run side by side (pytest-xdist): none may be handed a port another
    uses. Tests take ports from their process's block (tests/support/ports.py), never from
    the kernel (stream_app.processes.free_port: the ephemeral range every process shares);
    the blocks do not overlap and end below Linux's ephemeral range."""
    import re

    from tests.support import ports

    tests = PACKAGE.parent / "tests"
    offenders = [str(path.relative_to(tests)) for path in sorted(tests.rglob("*.py"))
                 if re.search(r"from stream_app\.processes import [^\n]*\bfree_port\b|processes\.free_port\(",
                              path.read_text())]
    assert offenders == []
    blocks = [set(range(ports.FIRST + ports.BLOCK * i, ports.FIRST + ports.BLOCK * (i + 1))) for i in range(ports.BLOCKS)]
    assert sum(map(len, blocks)) == len(set().union(*blocks))
    assert max(max(block) for block in blocks) < 32_768

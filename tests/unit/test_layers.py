"""Every import points down the layers, and no modules or packages import each other in a
cycle. Read from the source (``ast``), function-level imports included, so a lazy import
cannot hide an upward one."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: lowest first; a module may import its own layer's package and any lower layer. Peers share a
#: rank and must not import each other.
LAYERS: list[tuple[int, str, str]] = [
    (0, "cdclake", "the package itself (this name alone, not a prefix), empty"),
    (0, "cdclake.errors", "the error types every layer raises"),
    (0, "cdclake.pglz", "PostgreSQL's compression: below WAL images and TOAST values"),
    (0, "cdclake.native", "picks the compiled twins of hot functions, or their Python"),
    (0, "cdclake.zipimports", "a Python worker reads the zip archives on its path once"),
    (0, "cdclake.mixing", "the bit mix behind hash partitioning of keys"),
    (0, "cdclake.parquet", "which columns of a Parquet file get a dictionary"),
    (1, "cdclake.lsn", "LSNs, segment names, timeline histories: every layer's vocabulary"),
    (1, "cdclake.config", "the one configuration object, passed down"),
    (2, "cdclake.wal", "segments -> records (pg_waldump's view)"),
    (3, "cdclake.tuples", "tuple deforming and type codecs"),
    (4, "cdclake.catalog", "the data dictionary and the SQL to the source"),
    (5, "cdclake.decoding", "decoder, reorder buffer, reassembly, output plugins"),
    (5, "cdclake.archive", "the object store and WAL shipping (reads wal only)"),
    (5, "cdclake.sparkenv", "where Spark runs: the master, cdclake shipped to executors"),
    (6, "cdclake.stream", "the stream's progress, kept in the store"),
    (7, "cdclake.spark", "decoding on Spark"),
    (7, "cdclake.lake", "the change stream merged into Iceberg"),
    (7, "cdclake.quality", "Great Expectations over the stream and the mirrors"),
    (8, "cdclake.snapshot", "the initial snapshot: copies on Spark into the lake"),
    (9, "cdclake.pipeline", "sequences the steps of a run"),
    (9, "cdclake.local", "local PostgreSQL and S3 for the demo and tests"),
    (10, "cdclake.waldump", "the waldump command"),
    (10, "cdclake.demo", "the demo command"),
    (10, "cdclake.cli", "the command line: imports commands by name"),
    (10, "dags", "Airflow DAG files, thin"),
]


def layer_of(module: str) -> tuple[int, str]:
    for rank, name, _why in LAYERS:
        if module == name or (name != "cdclake" and module.startswith(name + ".")):
            return rank, name
    raise AssertionError(f"module {module} is in no layer: add it to LAYERS")


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports(path: Path, module: str, known: set[str]) -> Iterator[tuple[int, str]]:
    """(line, imported module) for every import of a known module, lazy ones too."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield from _known(node.lineno, alias.name, known)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            # `from pkg import mod` imports the module pkg.mod when there is one
            subs = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in known]
            if subs:
                for sub in subs:
                    yield node.lineno, sub
            else:
                yield from _known(node.lineno, target, known)


def _known(line: int, name: str, known: set[str]) -> Iterator[tuple[int, str]]:
    while name and name not in known:
        name = name.rpartition(".")[0]
    if name:
        yield line, name


def graph(roots: list[tuple[Path, Path]],
          outside: frozenset[str] = frozenset()) -> dict[str, list[tuple[int, str]]]:
    """module -> its imports of modules in the tree (and of the ``outside`` packages);
    ``roots`` are (directory, import root)."""
    files = {module_name(p, base): p for d, base in roots for p in sorted(d.rglob("*.py"))}
    known = set(files) | outside
    return {m: [(ln, t) for ln, t in imports(p, m, known) if t != m] for m, p in files.items()}


def upward(g: dict[str, list[tuple[int, str]]]) -> list[str]:
    out = []
    for m, targets in sorted(g.items()):
        rank, name = layer_of(m)
        for line, t in targets:
            trank, tname = layer_of(t)
            if tname != name and trank >= rank:
                out.append(f"{m}:{line} imports {t} ({name} -> {tname})")
    return out


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component with more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def module_edges(g: dict[str, list[tuple[int, str]]]) -> dict[str, set[str]]:
    return {m: {t for _ln, t in ts} for m, ts in g.items()}


def package_edges(g: dict[str, list[tuple[int, str]]]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for m, ts in g.items():
        a = layer_of(m)[1]
        out.setdefault(a, set()).update(layer_of(t)[1] for _ln, t in ts)
        out[a].discard(a)
    return out


def project_graph() -> dict[str, list[tuple[int, str]]]:
    return graph([(ROOT / "src" / "cdclake", ROOT / "src"), (ROOT / "dags", ROOT)])


def test_no_import_points_up() -> None:
    bad = upward(project_graph())
    assert not bad, "imports from a lower layer to a higher one:\n" + "\n".join(bad)


def test_no_import_cycle() -> None:
    g = project_graph()
    assert not cycles(module_edges(g)), f"module import cycles: {cycles(module_edges(g))}"
    assert not cycles(package_edges(g)), f"package import cycles: {cycles(package_edges(g))}"


def test_every_module_has_a_layer() -> None:
    for m in project_graph():
        layer_of(m)


def test_the_checker_finds_an_upward_import_and_a_cycle(tmp_path: Path) -> None:
    """The checks above can fail: a synthetic tree with both faults."""
    pkg = tmp_path / "cdclake"
    for sub, text in {
        "__init__.py": "",
        "wal/__init__.py": "",
        "wal/reader.py": "def f():\n    from cdclake.decoding import decode\n",
        "decoding/__init__.py": "",
        "decoding/decode.py": "from . import stream\n",
        "decoding/stream.py": "from cdclake.decoding.decode import x\nimport cdclake.wal.reader\n",
    }.items():
        (pkg / sub).parent.mkdir(parents=True, exist_ok=True)
        (pkg / sub).write_text(text)
    g = graph([(pkg, tmp_path)])
    assert upward(g) == ["cdclake.wal.reader:2 imports cdclake.decoding.decode "
                         "(cdclake.wal -> cdclake.decoding)"]
    assert cycles(module_edges(g)) == [["cdclake.decoding.decode", "cdclake.decoding.stream",
                                        "cdclake.wal.reader"]]
    assert cycles(package_edges(g)) == [["cdclake.decoding", "cdclake.wal"]]
    with pytest.raises(AssertionError, match="in no layer"):
        layer_of("cdclake.nowhere")


#: what each part of the test tree and the benchmarks may import of the test tree: unit tests
#: need no server, so they import no oracle or end-to-end helper; shared helpers live in
#: tests/support, which imports no suite
TEST_IMPORTS: dict[str, tuple[str, ...]] = {
    "tests.support": ("tests.support",),
    "tests.unit": ("tests.unit", "tests.support"),
    "tests.oracle": ("tests.oracle", "tests.support", "tests.unit"),
    "tests.e2e": ("tests.e2e", "tests.support", "tests.oracle"),
    "bench": ("bench", "tests.support"),
}


def tree_imports(roots: list[tuple[Path, Path]]) -> list[str]:
    """``module:line imports target`` for every import of the test tree that
    :data:`TEST_IMPORTS` does not allow."""
    bad = []
    for m, targets in sorted(graph(roots).items()):
        part = next((p for p in TEST_IMPORTS if m == p or m.startswith(p + ".")), None)
        for line, t in targets:
            if part is None or not t.startswith(("tests", "bench")):
                continue
            if not any(t == a or t.startswith(a + ".") for a in TEST_IMPORTS[part]):
                bad.append(f"{m}:{line} imports {t}")
    return bad


def test_the_test_tree_imports_downward_too() -> None:
    bad = tree_imports([(ROOT / "tests", ROOT), (ROOT / "bench", ROOT)])
    assert not bad, "imports across the test tree's parts:\n" + "\n".join(bad)


#: package -> what it may not import at all, even where the ranks allow it, and why
FORBIDDEN: dict[str, tuple[tuple[str, ...], str]] = {
    "cdclake.snapshot": (("cdclake.spark",), "the snapshot does not depend on the decode job"),
    "dags": (("cdclake",), "DAG files are thin: the pipeline and the configuration only"),
}
#: what a package named in FORBIDDEN may import nonetheless
ALLOWED: dict[str, tuple[str, ...]] = {"dags": ("cdclake.pipeline", "cdclake.config")}


def _within(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def forbidden(g: dict[str, list[tuple[int, str]]]) -> list[str]:
    bad = []
    for m, targets in sorted(g.items()):
        for package, (banned, why) in FORBIDDEN.items():
            if not (m == package or m.startswith(package + ".")):
                continue
            for line, t in targets:
                if _within(t, banned) and not _within(t, ALLOWED.get(package, ())):
                    bad.append(f"{m}:{line} imports {t} ({why})")
    return bad


def test_no_forbidden_import() -> None:
    bad = forbidden(project_graph())
    assert not bad, "\n".join(bad)


#: the pyiceberg merge runs where Spark is not: nothing it imports, however deep (lazy imports
#: too), is Spark's
SPARKLESS = ("cdclake.lake.merge", "cdclake.lake.arrowmerge", "cdclake.lake.engine")
SPARK = ("pyspark", "py4j", "cdclake.sparkenv", "cdclake.spark", "cdclake.lake.sparkmerge")


def spark_reached(g: dict[str, list[tuple[int, str]]], starts: tuple[str, ...]) -> list[str]:
    """The imports of Spark in everything ``starts`` import, transitively."""
    seen: set[str] = set()
    todo = list(starts)
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo += [t for _, t in g.get(m, ())]
    return sorted(f"{m}:{line} imports {t}" for m in seen for line, t in g.get(m, ())
                  if _within(t, SPARK))


def test_the_pyiceberg_merge_imports_nothing_of_spark() -> None:
    g = graph([(ROOT / "src" / "cdclake", ROOT / "src")], frozenset({"pyspark", "py4j"}))
    assert set(SPARKLESS) <= set(g)
    bad = spark_reached(g, SPARKLESS)
    assert not bad, "\n".join(bad)


def test_spark_reached_through_the_pyiceberg_merge_is_found() -> None:
    g = {"cdclake.lake.merge": [(1, "cdclake.lake.tables")],
         "cdclake.lake.tables": [(7, "pyspark"), (8, "cdclake.lsn")], "cdclake.lsn": []}
    assert spark_reached(g, SPARKLESS) == ["cdclake.lake.tables:7 imports pyspark"]


def test_the_forbidden_imports_are_found() -> None:
    g = {"cdclake.snapshot.driver": [(1, "cdclake.spark.job"), (2, "cdclake.sparkenv.session")],
         "dags.d": [(3, "cdclake.lake.merge"), (4, "cdclake.pipeline.steps")]}
    assert forbidden(g) == [
        "cdclake.snapshot.driver:1 imports cdclake.spark.job (the snapshot does not depend on "
        "the decode job)",
        "dags.d:3 imports cdclake.lake.merge (DAG files are thin: the pipeline and the "
        "configuration only)"]

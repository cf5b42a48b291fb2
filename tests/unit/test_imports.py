"""The modules of src/ import only downward: the graph of their imports of each other (every `import` and
`from ... import`, at the top or inside a function) has no cycle, and the package's folders (its rooms by role)
import only those below them, in the order of FLOORS."""

import ast

from helpers.runs import ROOT

SRC = ROOT / "src" / "transformer_lab"


def import_graph() -> dict[str, set[str]]:
    modules = {}
    for path in SRC.rglob("*.py"):
        name = ".".join(("transformer_lab", *path.relative_to(SRC).with_suffix("").parts)).removesuffix(".__init__")
        modules[name] = path
    graph = {name: set() for name in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
            elif isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                continue
            graph[name] |= {t for t in targets if t in modules and t != name}
    return graph


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph, as the modules along it, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        state[node] = 2
        path.pop()
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_the_cycle_finder_finds_one():
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b"}, "b": set()}) is None


# The package's rooms from the ground up: each imports only from its own floor or the floors below (a room
# of a floor from the others of it, none either way): the one-line errors; the values a setting may take; what a run
# leaves on disk; models; data; batches; objectives; the configuration and its checks; the attention maps;
# Transformers checkpoints; callbacks; a run; the Python API; the commands.
FLOORS = [
    {"errors"},
    {"choices"},
    {"store"},
    {"models"},
    {"data"},
    {"batching"},
    {"tasks"},
    {"config"},
    {"analysis"},
    {"pretrained"},
    {"callbacks"},
    {"run"},
    {"api"},
    {"commands"},
    {"__main__"},
]
FLAT = {"__init__", "__main__", "errors", "choices"}  # the package root's few modules


def room(module: str) -> str:
    return (module.split(".") + ["__init__"])[1]


def floor(module: str) -> int:
    return next(i for i, rooms in enumerate(FLOORS) if room(module) in rooms)


def climbs(graph: dict[str, set[str]]) -> list[str]:
    """Imports of a room above the importer's, or of another room on its own floor."""
    return sorted(
        f"{a} -> {b}"
        for a, targets in graph.items()
        for b in targets
        if room(a) not in ("__init__",) and room(a) != room(b) and floor(b) >= floor(a)
    )


def test_the_climb_finder_finds_one():
    assert climbs({"transformer_lab.store.rundir": {"transformer_lab.run.main"}}) == [
        "transformer_lab.store.rundir -> transformer_lab.run.main"
    ]
    assert climbs({"transformer_lab.run.main": {"transformer_lab.store.rundir"}}) == []


def test_the_package_root_holds_a_few_modules_and_every_room_has_its_floor():
    flat = {path.stem for path in SRC.glob("*.py")}
    assert flat <= FLAT and len(flat) <= 5, sorted(flat)
    rooms = {path.name for path in SRC.iterdir() if path.is_dir() and (path / "__init__.py").exists()}
    assert rooms | flat - {"__init__"} <= set().union(*FLOORS), rooms - set().union(*FLOORS)


def test_rooms_import_only_downward():
    assert climbs(import_graph()) == []


def test_src_has_no_import_cycle():
    graph = import_graph()
    assert len(graph) > 50 and graph["transformer_lab.run.main"]  # (the search finds the modules and their imports)
    assert cycle(graph) is None, " -> ".join(cycle(graph))

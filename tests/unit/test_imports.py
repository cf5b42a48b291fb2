"""The modules of src/ import only downward: the graph of their imports of each other (every `import` and
`from ... import`, at the top or inside a function) has no cycle."""

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


def test_src_has_no_import_cycle():
    graph = import_graph()
    assert len(graph) > 50 and graph["transformer_lab.run.main"]  # (the search finds the modules and their imports)
    assert cycle(graph) is None, " -> ".join(cycle(graph))

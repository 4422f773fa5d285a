"""The shape of the package (docs/architecture.md): small files and classes, layers without circles."""

from __future__ import annotations

import ast
import builtins
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "eventlog"
FILE_LINES_MAX = 500
CLASS_LINES_MAX = 300

# Each layer may import only the layers below it (and itself); docs/architecture.md draws them.
# A layer names modules, or packages standing for every module in them.
LAYERS = [
    {"_limits", "errors"},
    {"store"},
    {"record"},
    {"core"},
    {"services"},
    {"log"},
    {"aio", "transfer", "views", "diff", "events", "__init__"},
]
FACADES = {"events", "__init__"}
"""The two modules that name the agent layer's public names beside the core's (and `open` gives
the agent layer's defaults): the only ones of the layers above that may import it."""
EXECUTORS_AND_UP = {
    "agent",  # the standard kinds, AgentReducer, the policies and the executors: the core never imports them
    "demo",
    "cli",
    "ui",
    "langgraph",
    "wayflow",
    "openai_agents",
    "adk",
    "testing",  # the store contract as tests (eventlog.testing): on top, never imported by the core
}


def _layer(module: str) -> int | None:
    for i, layer in enumerate(LAYERS):
        if any(module == name or module.startswith(name + ".") for name in layer):
            return i
    return None


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE).with_suffix("")
        name = ".".join(rel.parts)
        out[name.removesuffix(".__init__") if name != "__init__" else "__init__"] = path
    return out


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """Modules of the package that `name` imports, anywhere in the file (inside functions too)."""
    package = name.split(".")[:-1] if path.name != "__init__.py" else name.split(".")
    if name == "__init__":
        package = []
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)] if node.level > 1 else package
                parts = [*base, *(node.module.split(".") if node.module else [])]
            elif node.module and node.module.split(".")[0] == "eventlog":
                parts = node.module.split(".")[1:]
            else:
                continue
            target = ".".join(parts) or "__init__"
            for alias in node.names:
                sub = f"{target}.{alias.name}" if target != "__init__" else alias.name
                found.add(sub if sub in known else target)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "eventlog":
                    found.add(".".join(alias.name.split(".")[1:]) or "__init__")
    return {m for m in found if m in known and m != name}


def _top(module: str) -> str:
    return module.split(".")[0] if module.split(".")[0] in EXECUTORS_AND_UP else module


def test_no_file_and_no_class_is_too_long() -> None:
    long_files, long_classes = [], []
    for path in PACKAGE.rglob("*.py"):
        lines = path.read_text().count("\n")
        if lines > FILE_LINES_MAX:
            long_files.append((str(path.relative_to(PACKAGE)), lines))
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and node.end_lineno is not None:
                size = node.end_lineno - node.lineno + 1
                if size > CLASS_LINES_MAX:
                    long_classes.append((f"{path.relative_to(PACKAGE)}:{node.name}", size))
    assert not long_files, f"files over {FILE_LINES_MAX} lines: {long_files}"
    assert not long_classes, f"classes over {CLASS_LINES_MAX} lines: {long_classes}"


def test_no_import_circle() -> None:
    modules = _modules()
    graph = {name: _imports(name, path, set(modules)) for name, path in modules.items()}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if nxt == "__init__" or node.startswith(nxt + ".") or nxt.startswith(node + "."):
                continue  # a package and its own modules
            if state.get(nxt) == 1:
                raise AssertionError("import circle: " + " -> ".join([*stack[stack.index(nxt) :], nxt]))
            if nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name)


def test_the_core_layers_import_only_downwards() -> None:
    modules = _modules()
    wrong = []
    for name, path in modules.items():
        layer = _layer(name)
        if layer is None:
            continue
        for target in _imports(name, path, set(modules)):
            below = _layer(target)
            if below is not None and below > layer:
                wrong.append(f"{name} imports {target}")
            if _top(target) in EXECUTORS_AND_UP and not (name in FACADES and _top(target) == "agent"):
                wrong.append(f"{name} (core) imports {target} (the agent layer, an integration or a tool)")
    assert not wrong, wrong


def test_every_module_has_a_layer() -> None:
    """A new module is placed: in a layer of the core, or among the agent layer and those above it."""
    placed = [m for m in _modules() if _layer(m) is None and _top(m) not in EXECUTORS_AND_UP and m != "__main__"]
    assert not placed, f"modules in no layer (tests/test_architecture.py, LAYERS): {placed}"


def test_the_package_root_holds_only_the_faces() -> None:
    """The layers show in the folders: the root keeps the facade, the log and its faces."""
    root = sorted(p.stem for p in PACKAGE.glob("*.py"))
    assert root == ["__init__", "__main__", "_limits", "aio", "demo", "diff", "errors", "events", "log", "views"]


def _facade_names(path: Path) -> set[str]:
    """Names the facade itself defines (not re-exports): `open`, `__version__`."""
    out = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, ast.Assign):
            out |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return out


def test_executors_and_integrations_do_not_import_the_facade() -> None:
    """They import the module that defines each name; only what the facade defines itself comes from it."""
    own = _facade_names(PACKAGE / "__init__.py")
    wrong = []
    for path in PACKAGE.rglob("*.py"):
        name = ".".join(path.relative_to(PACKAGE).with_suffix("").parts)
        if _top(name.removesuffix(".__init__")) not in EXECUTORS_AND_UP or name.startswith(("cli", "demo", "ui")):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            facade = isinstance(node, ast.ImportFrom) and (
                (node.level and not node.module and node.level == name.count(".") + 1)
                or (not node.level and node.module == "eventlog")
            )
            if facade and any(alias.name not in own for alias in node.names):  # type: ignore[union-attr]
                wrong.append(f"{name}: {[a.name for a in node.names]}")  # type: ignore[union-attr]
            if isinstance(node, ast.Import) and any(a.name == "eventlog" for a in node.names):
                wrong.append(f"{name}: import eventlog")
    assert not wrong, f"import the modules they use, not eventlog itself: {wrong}"


# Names that import, call or unpickle what data names, and the only modules that may use them:
# every framework value is read through langgraph/_serde.py's SafeSerializer, a WayFlow
# restore through wayflow/_serialize.py after its type check, and `--kinds` imports the
# modules a user names on the command line (docs/durability.md, guarantee 7).
DECODERS_ALLOWED = {
    "JsonPlusSerializer": {"langgraph._serde"},
    "EncryptedSerializer": {"langgraph._serde"},  # only around a SafeSerializer
    "Reviver": {"langgraph._serde"},
    "import_module": {"langgraph._serde", "cli._common"},
    "__import__": set(),
    "autodeserialize": set(),
    "autodeserialize_from_dict": {"wayflow._serialize"},
    "autodeserialize_any_from_dict": set(),
    "deserialize": set(),
    "deserialize_from_dict": set(),
    "pickle": set(),
    "cloudpickle": set(),
    "dill": set(),
    "marshal": set(),
    "shelve": set(),
    "unsafe_load": set(),
    "full_load": set(),
    "eval": set(),
    "exec": set(),
}


def test_no_decoder_can_import_or_call() -> None:
    """Only the modules above use a decoder that could import or call what stored bytes name."""
    wrong = []
    for name, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            used: list[str] = []
            if isinstance(node, ast.Name):
                used = [node.id]
            elif isinstance(node, ast.Attribute):
                used = [node.attr]
            elif isinstance(node, ast.ImportFrom):
                used = [*(node.module or "").split("."), *(a.name for a in node.names)]
            elif isinstance(node, ast.Import):
                used = [part for a in node.names for part in a.name.split(".")]
            wrong += [f"{name}:{node.lineno} uses {u}" for u in used if name not in DECODERS_ALLOWED.get(u, {name})]
    assert not wrong, wrong


WRITES_OF_A_LIFE = {"append", "append_many", "fork", "delete_run", "prune"}
"""The log's writes that a caller decides on a read of a run (its head, its state, an offset)."""


def test_every_write_above_the_core_names_the_life_it_was_decided_on() -> None:
    """Above the core, a write fenced by a head (`expected_offset`), and every fork and every
    prune of a log (its `before` is an offset read), also names the run number of the life it read (`run_number=`, None where the run as it is now is
    meant): a head alone lets a run deleted and made again to the same head through, and the
    write decided on one life would land in the next (docs/concepts.md, "A run's lives")."""
    below = {"core", "services", "store", "record", "testing", "log.py", "aio.py"}
    unfenced = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.relative_to(PACKAGE).parts[0] in below:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            named = {k.arg for k in node.keywords}
            pruned = node.func.attr == "prune" and ast.unparse(node.func.value).endswith("log")
            decided = node.func.attr == "fork" or pruned or "expected_offset" in named
            if node.func.attr in WRITES_OF_A_LIFE and decided and "run_number" not in named:
                unfenced.append(f"{path.relative_to(PACKAGE)}:{node.lineno}: {ast.unparse(node)[:100]}")
    assert unfenced == []


READS_OF_A_LIFE = {"state_at", "read", "entry", "list", "load", "load_latest", "run_info"}
"""The log's reads (and its checkpoints') that take `run_number=`."""
READ_ALONE = {
    "cli/_commands.py:_resolve": "a checkpoint id is looked up by itself; its callers read under `log.pinned`",
    "demo.py:_workflow": "its reads are of two runs, neither joined with the other's life",
    "ui/app.py:state_fragment": "its routes are wrapped by `one_life` (`log.pinned`)",
    "demo.py:_conversation": "its conversations are written by it alone, each read by itself",
    "wayflow/_conversation.py:rewind": "its later `run_info` is of the branch, another run, read by itself",
    "cli/_commands.py:_cmd_verify": "its `run_info` reads count the progress bar's total, joined with nothing",
}
NOT_RUN_READS = {"views.py:load_views": "its `load` is an entry point's, not a run's"}


class _Readers:
    """Which functions of the package above the core read a run, themselves or through another
    such function (a view's lookup, a row of the runs list): a name called in a module is the
    function that module defines by it, or the one it imports by it."""

    def __init__(self, trees: dict[Path, ast.Module]) -> None:
        self.imported: dict[tuple[Path, str], Path] = {}
        for rel, tree in trees.items():
            for node in ast.walk(tree):
                if not (isinstance(node, ast.ImportFrom) and node.module):
                    continue
                if node.level:
                    base = Path(*rel.parent.parts[: len(rel.parent.parts) - node.level + 1], *node.module.split("."))
                elif node.module.startswith(f"{PACKAGE.name}."):
                    base = Path(*node.module.split(".")[1:])
                else:
                    continue
                found = next((m for m in (base.with_suffix(".py"), base / "__init__.py") if m in trees), None)
                for alias in node.names if found else ():
                    self.imported[(rel, alias.asname or alias.name)] = found  # type: ignore[assignment]
        self.functions = [
            (rel, fn)
            for rel, tree in trees.items()
            for fn in ast.walk(tree)
            if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef)
        ]
        self.defined = {(rel, fn.name) for rel, fn in self.functions}
        self.reading: set[tuple[Path, str]] = set()
        while more := {
            (rel, fn.name)
            for rel, fn in self.functions
            if (rel, fn.name) not in self.reading
            and f"{rel}:{fn.name}" not in NOT_RUN_READS
            and any(isinstance(n, ast.Call) and self.read_by(rel, n) for n in _own_nodes(fn))
        }:
            self.reading |= more

    def read_by(self, rel: Path, call: ast.Call) -> str | None:
        """The name by which `call`, made in module `rel`, reads a run: one of the log's reads (a
        method), or a function of the package that reads one; None for any other call."""
        if isinstance(call.func, ast.Attribute):
            return call.func.attr if call.func.attr in READS_OF_A_LIFE | {"life"} else None
        name = getattr(call.func, "id", None)
        if name is None or hasattr(builtins, name):
            return None
        where = rel if (rel, name) in self.defined else self.imported.get((rel, name))
        return name if (where, name) in self.reading else None


def test_every_read_above_the_core_after_a_life_is_of_that_life() -> None:
    """Above the core, a function that read a run's life (`life`, `run_info`) and then reads the
    run again, itself or through a function of the package that reads it, joins the two only
    when the later read names that life (`run_number=`, or the `RunInfo` read handed to a
    function) or is made inside `log.pinned`: else the
    run deleted and made again between them hands out one life's values with the other's
    (docs/concepts.md, "A run's lives")."""
    below = {"core", "services", "store", "record", "testing", "log.py", "aio.py"}
    trees = {
        path.relative_to(PACKAGE): ast.parse(path.read_text())
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.relative_to(PACKAGE).parts[0] not in below
    }
    readers = _Readers(trees)
    unpinned = []
    for rel, fn in readers.functions:
        if f"{rel}:{fn.name}" in READ_ALONE:
            continue
        inside = {
            id(node)
            for w in ast.walk(fn)
            if isinstance(w, ast.With) and "pinned" in ast.unparse(w.items[0].context_expr)
            for node in ast.walk(w)
        }
        calls = [(n, readers.read_by(rel, n)) for n in _own_nodes(fn) if isinstance(n, ast.Call)]
        lives = [c.lineno for c, name in calls if name in ("life", "run_info")]
        handed_a_life = [
            a.arg for a in fn.args.args if a.annotation is not None and "RunInfo" in ast.unparse(a.annotation)
        ]
        lives += [fn.lineno] * bool(handed_a_life)  # a function handed a life reads of it
        infos = set(handed_a_life) | {  # names bound to a life read: a call handed one reads of that life
            t.id
            for n in _own_nodes(fn)
            if isinstance(n, ast.Assign)
            and isinstance(n.value, ast.Call)
            and readers.read_by(rel, n.value) == "run_info"
            for t in n.targets
            if isinstance(t, ast.Name)
        }
        for c, name in calls:
            passed = [*c.args, *(k.value for k in c.keywords)]
            handed = {a.id for a in passed if isinstance(a, ast.Name)} | {  # a life read, its number
                a.value.id
                for a in passed
                if isinstance(a, ast.Attribute) and a.attr == "number" and isinstance(a.value, ast.Name)
            }
            if (
                lives
                and name not in (None, "life")
                and c.lineno > min(lives)
                and "run_number" not in {k.arg for k in c.keywords}
                and not handed & (infos | {"number", "run_number"})
                and id(c) not in inside
            ):
                unpinned.append(f"{rel}:{c.lineno} {fn.name}: {ast.unparse(c)[:100]}")
    assert unpinned == [], "\n".join(unpinned)


def _own_nodes(fn: ast.AST) -> list[ast.AST]:
    """The nodes of a function's body, not those of the functions defined in it."""
    out: list[ast.AST] = []
    todo = list(ast.iter_child_nodes(fn))
    while todo:
        node = todo.pop()
        out.append(node)
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            todo.extend(ast.iter_child_nodes(node))
    return out

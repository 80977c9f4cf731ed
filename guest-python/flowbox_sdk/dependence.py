"""Which constructs of a script take their path from a reply, for a plan: the host projects a
script against placeholder replies, which follow one path of several, and says so where it
matters — most of all for loops whose trip count a reply decides.

The analysis is static and deliberately generous: a name is reply-dependent when anything it is
assigned from is (an `await`, a primitive's result, another such name, a call of a function
that returns one), without regard to order; a function parameter is when any call passes it
such a value, and a pipeline stage's first parameter always is. Names keep Python's scopes: a
function's (or lambda's) parameters and the names its own body binds, short of its `global`
and `nonlocal` ones, are its own; any other name is the enclosing function's or the module's
(comprehensions and class bodies are not scopes here). A construct is reported when its
condition (or iterable: a comprehension's too, which may size a fan-out) depends on a reply,
and a loop also when a `break` or `return` under such a condition ends it.

A read-only tool's result is not a reply: a plan calls such a tool for real (a `list_dir` of a
granted folder, say), so what it returns is what the run will get — as long as its arguments
depend on no reply.

Each construct also names the lines of its branches (a loop's body, an `if`'s two arms, a
match's cases): whether, or how often, those run is what the placeholders decided, so a plan
can tell which of its leaves it counted there.
"""

import ast
from typing import NamedTuple

from .script import child_nodes, walk

# What a script awaits to get a reply.
_PRIMITIVES = frozenset({"agent", "parallel", "pipeline", "call_tool"})

# Methods that put a value into the object they are called on.
_FILLING = frozenset({"append", "extend", "insert", "add", "update", "setdefault"})


# Nodes are told apart by their exact type, as in `script.child_nodes` (cheaper than
# `isinstance` in the guest; the tree is the parser's).
_FUNCTIONS = frozenset({ast.FunctionDef, ast.AsyncFunctionDef})
_SCOPES = frozenset({ast.Lambda} | _FUNCTIONS)
# A function's body: every statement class derives from `ast.stmt` directly.
_STATEMENTS = frozenset(ast.stmt.__subclasses__())
_FOR_LOOPS = frozenset({ast.For, ast.AsyncFor})
_COMPREHENSIONS = frozenset({ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp})
_TARGET_ASSIGNMENTS = frozenset({ast.AugAssign, ast.AnnAssign, ast.NamedExpr})
_ITERATIONS = frozenset({ast.For, ast.AsyncFor, ast.comprehension})
_WITHS = frozenset({ast.With, ast.AsyncWith})
# The nodes `_flows` has pairs for.
_FLOWING = frozenset(
    {ast.Assign, ast.Call} | _TARGET_ASSIGNMENTS | _ITERATIONS | _WITHS | _FUNCTIONS
)
# What has a `break` or `return` of its own.
_NESTED = frozenset({ast.While, ast.Lambda} | _FOR_LOOPS | _FUNCTIONS)
_EXITS = frozenset({ast.Break, ast.Return})
# What binds a name of its own beside `ast.Name` (in a store or del context).
_IMPORTS = frozenset({ast.Import, ast.ImportFrom})
_NAMED_BINDINGS = frozenset({ast.ClassDef, ast.ExceptHandler, ast.MatchAs, ast.MatchStar})


class Construct(NamedTuple):
    """A construct whose path a reply decides."""

    line: int
    construct: str  # `while`, `for`, `comprehension`, `if`, `conditional expression`, `match`
    loop_trip_count: bool
    # The (first, last) lines of the branches whose running the reply decides.
    branches: tuple

    def note(self) -> dict:
        """As a plan lists it."""
        return {"line": self.line, "construct": self.construct,
                "loop_trip_count": self.loop_trip_count}  # fmt: skip


def reply_dependence(tree: ast.Module, read_only: frozenset = frozenset()) -> list:
    """The reply-dependent constructs of `tree`, by line, as `Construct`s. `read_only`: the
    names of the tools a plan calls for real."""
    scoped = _scoped_nodes(tree)
    keys = _name_keys(scoped)
    reads = _Reads(keys, read_only)
    tainted = _tainted_names(scoped, keys, reads)

    def depends(node):
        awaits, names = reads(node)
        return awaits or not (names.isdisjoint(tainted) and names.isdisjoint(_PRIMITIVES))

    found = []
    for node, _ in scoped:
        kind = type(node)
        if kind is ast.While:
            if depends(node.test) or _exits_on_reply(node, depends):
                found.append(Construct(node.lineno, "while", True, (_span(node.body),)))
        elif kind in _FOR_LOOPS:
            if depends(node.iter) or _exits_on_reply(node, depends):
                found.append(Construct(node.lineno, "for", True, (_span(node.body),)))
        elif kind in _COMPREHENSIONS:
            # How many items (a fan-out's width, say) a reply decides.
            if any(depends(generator.iter) for generator in node.generators):
                found.append(Construct(node.lineno, "comprehension", True, (_span([node]),)))
        elif kind is ast.If:
            if depends(node.test):
                arms = (node.body, node.orelse) if node.orelse else (node.body,)
                found.append(Construct(node.lineno, "if", False, tuple(map(_span, arms))))
        elif kind is ast.IfExp:
            if depends(node.test):
                arms = (_span([node.body]), _span([node.orelse]))
                found.append(Construct(node.lineno, "conditional expression", False, arms))
        elif kind is ast.Match:
            if depends(node.subject):
                cases = tuple(
                    (case.pattern.lineno, case.body[-1].end_lineno) for case in node.cases
                )
                found.append(Construct(node.lineno, "match", False, cases))
    found.sort()
    return found


def _span(nodes: list) -> tuple:
    """The first and last line of some consecutive nodes."""
    return (nodes[0].lineno, nodes[-1].end_lineno)


def _scoped_nodes(tree: ast.Module) -> list:
    """Every node of `tree` as (node, scope), `scope` the innermost function or lambda whose
    body holds it (None: the module). A function's decorators, defaults and annotations are
    its enclosing scope's."""
    scoped = [(tree, None)]
    for node, scope in scoped:
        kind = type(node)
        if kind in _FUNCTIONS:
            for child in child_nodes(node):
                scoped.append((child, node if type(child) in _STATEMENTS else scope))
        elif kind is ast.Lambda:
            for child in child_nodes(node):
                scoped.append((child, node if child is node.body else scope))
        else:
            for child in child_nodes(node):
                scoped.append((child, scope))
    return scoped


def _name_keys(scoped: list) -> dict:
    """The key of every `ast.Name` in `scoped` (and of every function's name, by its
    definition), which tells its scope: (function, name) for a name local to a function, the
    name itself for the module's. Flows and taint are by key, so each scope has its own."""
    parents = {}
    bound = {}
    declared = {}
    global_names = {}
    for node, scope in scoped:
        kind = type(node)
        if kind in _SCOPES:
            parents[node] = scope
            bound[node] = set(_parameters(node, everything=True))
        if scope is None:
            continue
        if kind is ast.Name:
            if type(node.ctx) is not ast.Load:
                bound[scope].add(node.id)
        elif kind in _FUNCTIONS or kind in _NAMED_BINDINGS:
            if node.name is not None:
                bound[scope].add(node.name)
        elif kind in _IMPORTS:
            for alias in node.names:
                bound[scope].add(alias.asname or alias.name.partition(".")[0])
        elif kind is ast.MatchMapping:
            if node.rest is not None:
                bound[scope].add(node.rest)
        elif kind is ast.Nonlocal:
            declared.setdefault(scope, set()).update(node.names)
        elif kind is ast.Global:
            declared.setdefault(scope, set()).update(node.names)
            global_names.setdefault(scope, set()).update(node.names)
    for scope, names in declared.items():
        bound[scope] -= names
    keys = {}
    for node, scope in scoped:
        kind = type(node)
        if kind is ast.Name or kind in _FUNCTIONS:
            name = node.id if kind is ast.Name else node.name
            # Outwards to the scope that binds it; a `global` one goes to the module.
            while scope is not None and name not in bound[scope]:
                scope = None if name in global_names.get(scope, ()) else parents[scope]
            keys[node] = name if scope is None else (scope, name)
    return keys


class _Reads:
    """What evaluating a node reads: `reads(node)` is whether it awaits anything but a
    read-only tool's call, and the keys of the names it reads or writes (a read-only tool's
    call adds its arguments', not the `call_tool` it names)."""

    __slots__ = ("_keys", "_read_only")

    def __init__(self, keys: dict, read_only: frozenset):
        self._keys = keys
        self._read_only = read_only

    def __call__(self, node: ast.AST) -> tuple:
        names = set()
        skipped = set()
        for child in walk(node):
            kind = type(child)
            if kind is ast.Await:
                tool = self._read_only_call(child.value)
                if tool is None:
                    return True, names
                skipped.add(tool)
            elif kind is ast.Name and child not in skipped:
                names.add(self._keys[child])
        return False, names

    def _read_only_call(self, value: ast.AST):
        """The `call_tool` name of `call_tool("a read-only tool", ...)`, else None."""
        if type(value) is not ast.Call or not self._read_only:
            return None
        func, arguments = value.func, value.args
        if (
            type(func) is ast.Name
            and func.id == "call_tool"
            and self._keys[func] == "call_tool"  # the module's, not a local of that name
            and arguments
            and type(arguments[0]) is ast.Constant
            and arguments[0].value in self._read_only
        ):
            return func
        return None


def _stored_names(targets: list, keys: dict) -> list:
    return [keys[child] for target in targets for child in walk(target) if type(child) is ast.Name]


def _parameters(function, everything: bool = False) -> list:
    """The names a call can pass `function` one by one; `everything`: its `*` and `**` too."""
    arguments = function.args
    names = [a.arg for a in arguments.posonlyargs + arguments.args] + [
        a.arg for a in arguments.kwonlyargs
    ]
    if everything:
        names.extend(a.arg for a in (arguments.vararg, arguments.kwarg) if a is not None)
    return names


def _tainted_names(scoped: list, keys: dict, reads: _Reads) -> set:
    """The keys of the reply-dependent names, from every node of the tree: a fixed point over
    the tree's flows, each a set of names taking what a value holds, which are found once."""
    functions = {}
    for node, _ in scoped:
        if type(node) in _FUNCTIONS:
            functions.setdefault(keys[node], []).append(node)
    # (names, None) always take a reply; (names, (awaits, read)) when the value awaits or
    # reads a reply-dependent name or a primitive.
    flows = []
    for node, _ in scoped:
        if type(node) in _FLOWING:
            for names, value in _flows(node, functions, keys):
                flows.append((names, None if value is None else reads(value)))
    tainted = set()
    changed = True
    while changed:
        before = len(tainted)
        for names, reads in flows:
            if (
                reads is None
                or reads[0]
                or not (reads[1].isdisjoint(tainted) and reads[1].isdisjoint(_PRIMITIVES))
            ):
                tainted.update(names)
        changed = len(tainted) != before
    return tainted



def _flows(node: ast.AST, functions: dict, keys: dict):
    """(names, value) pairs: the keys `names` take what `value` holds (`value` None: always)."""
    kind = type(node)
    if kind is ast.Assign:
        yield _stored_names(node.targets, keys), node.value
    elif kind in _TARGET_ASSIGNMENTS:
        if node.value is not None:
            yield _stored_names([node.target], keys), node.value
    elif kind in _ITERATIONS:
        yield _stored_names([node.target], keys), node.iter
    elif kind in _WITHS:
        for item in node.items:
            if item.optional_vars is not None:
                yield _stored_names([item.optional_vars], keys), item.context_expr
    elif kind in _FUNCTIONS:
        # A function returning a reply makes its calls replies.
        for child in walk(node):
            if type(child) is ast.Return and child.value is not None:
                yield [keys[node]], child.value
    elif kind is ast.Call:
        yield from _call_flows(node, functions, keys)


def _call_flows(call: ast.Call, functions: dict, keys: dict):
    func = call.func
    if type(func) is ast.Attribute and func.attr in _FILLING:
        # `items.append(reply)` fills `items` with it.
        for argument in call.args:
            yield _stored_names([func.value], keys), argument
    if type(func) is not ast.Name:
        return
    if func.id == "pipeline":
        # A stage's first parameter is the previous stage's reply.
        for stage in call.args[1:]:
            for function in _callables(stage, functions, keys):
                parameters = _parameters(function)
                if parameters:
                    yield [(function, parameters[0])], None
    for function in functions.get(keys[func], ()):
        # A parameter takes what a call passes it.
        parameters = _parameters(function)
        for name, argument in zip(parameters, call.args):
            yield [(function, name)], argument
        for keyword in call.keywords:
            if keyword.arg in parameters:
                yield [(function, keyword.arg)], keyword.value


def _callables(stage: ast.AST, functions: dict, keys: dict) -> list:
    kind = type(stage)
    if kind is ast.Lambda:
        return [stage]
    if kind is ast.Name:
        return functions.get(keys[stage], [])
    return []


def _exits_on_reply(loop: ast.AST, depends) -> bool:
    """Whether a `break` or `return` of `loop`'s own body sits under a reply-dependent `if`."""
    for statement in loop.body:
        if type(statement) in _NESTED:
            continue
        for node in _own_nodes(statement):
            if type(node) is ast.If and depends(node.test):
                for branch in node.body + node.orelse:
                    if any(type(n) in _EXITS for n in _own_nodes(branch)):
                        return True
    return False


def _own_nodes(node: ast.AST):
    """`node` and what it contains, short of nested loops and functions (whose `break` and
    `return` are their own)."""
    pending = [node]
    while pending:
        current = pending.pop()
        yield current
        for child in child_nodes(current):
            if type(child) not in _NESTED:
                pending.append(child)

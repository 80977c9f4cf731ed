"""Which constructs of a script take their path from a reply, for a plan: the host projects a
script against placeholder replies, which follow one path of several, and says so where it
matters — most of all for loops whose trip count a reply decides.

The analysis is static and deliberately generous: a name is reply-dependent when anything it is
assigned from is (an `await`, a primitive's result, another such name, a call of a function
that returns one), without regard to scope or order; a function parameter is when a call passes
it such a value, and a pipeline stage's first parameter always is. A construct is reported when
its condition (or iterable: a comprehension's too, which may size a fan-out) depends on a
reply, and a loop also when a `break` or `return`
under such a condition ends it.
"""

import ast

from .script import child_nodes, walk

# What a script awaits to get a reply.
_PRIMITIVES = frozenset({"agent", "parallel", "pipeline", "call_tool"})

# Methods that put a value into the object they are called on.
_FILLING = frozenset({"append", "extend", "insert", "add", "update", "setdefault"})


# Nodes are told apart by their exact type, as in `script.child_nodes` (cheaper than
# `isinstance` in the guest; the tree is the parser's).
_FUNCTIONS = frozenset({ast.FunctionDef, ast.AsyncFunctionDef})
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


def reply_dependence(tree: ast.Module) -> list:
    """The reply-dependent constructs of `tree`, by line: dicts with `line`, `construct` and
    `loop_trip_count`."""
    nodes = walk(tree)
    tainted = _tainted_names(nodes)
    found = []
    for node in nodes:
        kind = type(node)
        if kind is ast.While:
            if _depends(node.test, tainted) or _exits_on_reply(node, tainted):
                found.append((node.lineno, "while", True))
        elif kind in _FOR_LOOPS:
            if _depends(node.iter, tainted) or _exits_on_reply(node, tainted):
                found.append((node.lineno, "for", True))
        elif kind in _COMPREHENSIONS:
            # How many items (a fan-out's width, say) a reply decides.
            if any(_depends(generator.iter, tainted) for generator in node.generators):
                found.append((node.lineno, "comprehension", True))
        elif kind is ast.If:
            if _depends(node.test, tainted):
                found.append((node.lineno, "if", False))
        elif kind is ast.IfExp:
            if _depends(node.test, tainted):
                found.append((node.lineno, "conditional expression", False))
        elif kind is ast.Match:
            if _depends(node.subject, tainted):
                found.append((node.lineno, "match", False))
    found.sort()
    return [
        {"line": line, "construct": construct, "loop_trip_count": is_loop}
        for line, construct, is_loop in found
    ]


def _depends(node: ast.AST, tainted: set) -> bool:
    """Whether evaluating `node` may read a reply."""
    awaits, names = _reads(node)
    return awaits or not (names.isdisjoint(tainted) and names.isdisjoint(_PRIMITIVES))


def _reads(node: ast.AST) -> tuple:
    """Whether `node` awaits anything, and the names it reads or writes."""
    names = set()
    for child in walk(node):
        kind = type(child)
        if kind is ast.Await:
            return True, names
        if kind is ast.Name:
            names.add(child.id)
    return False, names


def _stored_names(target: ast.AST) -> list:
    return [child.id for child in walk(target) if type(child) is ast.Name]


def _parameters(function) -> list:
    arguments = function.args
    return [a.arg for a in arguments.posonlyargs + arguments.args] + [
        a.arg for a in arguments.kwonlyargs
    ]


def _tainted_names(nodes: list) -> set:
    """The reply-dependent names, from every node of the tree: a fixed point over the tree's
    flows, each a set of names taking what a value holds, which are found once."""
    functions = {}
    for node in nodes:
        if type(node) in _FUNCTIONS:
            functions.setdefault(node.name, []).append(node)
    # (names, None) always take a reply; (names, (awaits, read)) when the value awaits or
    # reads a reply-dependent name or a primitive.
    flows = []
    for node in nodes:
        if type(node) in _FLOWING:
            for targets, value in _flows(node, functions):
                names = [name for target in targets for name in _stored_names(target)]
                flows.append((names, None if value is None else _reads(value)))
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


def _flows(node: ast.AST, functions: dict):
    """(targets, value) pairs: `targets` take what `value` holds (`value` None: always)."""
    kind = type(node)
    if kind is ast.Assign:
        yield node.targets, node.value
    elif kind in _TARGET_ASSIGNMENTS:
        if node.value is not None:
            yield [node.target], node.value
    elif kind in _ITERATIONS:
        yield [node.target], node.iter
    elif kind in _WITHS:
        for item in node.items:
            if item.optional_vars is not None:
                yield [item.optional_vars], item.context_expr
    elif kind in _FUNCTIONS:
        # A function returning a reply makes its calls replies.
        for child in walk(node):
            if type(child) is ast.Return and child.value is not None:
                yield [ast.Name(id=node.name)], child.value
    elif kind is ast.Call:
        yield from _call_flows(node, functions)


def _call_flows(call: ast.Call, functions: dict):
    func = call.func
    if type(func) is ast.Attribute and func.attr in _FILLING:
        # `items.append(reply)` fills `items` with it.
        for argument in call.args:
            yield [func.value], argument
    if type(func) is ast.Name and func.id == "pipeline":
        # A stage's first parameter is the previous stage's reply.
        for stage in call.args[1:]:
            for function in _callables(stage, functions):
                parameters = _parameters(function)
                if parameters:
                    yield [ast.Name(id=parameters[0])], None
    if type(func) is ast.Name and func.id in functions:
        # A parameter takes what a call passes it.
        for function in functions[func.id]:
            parameters = _parameters(function)
            for name, argument in zip(parameters, call.args):
                yield [ast.Name(id=name)], argument
            for keyword in call.keywords:
                if keyword.arg in parameters:
                    yield [ast.Name(id=keyword.arg)], keyword.value


def _callables(stage: ast.AST, functions: dict) -> list:
    kind = type(stage)
    if kind is ast.Lambda:
        return [stage]
    if kind is ast.Name:
        return functions.get(stage.id, [])
    return []


def _exits_on_reply(loop: ast.AST, tainted: set) -> bool:
    """Whether a `break` or `return` of `loop`'s own body sits under a reply-dependent `if`."""
    for statement in loop.body:
        if type(statement) in _NESTED:
            continue
        for node in _own_nodes(statement):
            if type(node) is ast.If and _depends(node.test, tainted):
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

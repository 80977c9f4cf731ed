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


def reply_dependence(tree: ast.Module) -> list:
    """The reply-dependent constructs of `tree`, by line: dicts with `line`, `construct` and
    `loop_trip_count`."""
    tainted = _tainted_names(tree)
    found = []
    for node in walk(tree):
        if isinstance(node, ast.While):
            if _depends(node.test, tainted) or _exits_on_reply(node, tainted):
                found.append((node.lineno, "while", True))
        elif isinstance(node, (ast.For, ast.AsyncFor)):
            if _depends(node.iter, tainted) or _exits_on_reply(node, tainted):
                found.append((node.lineno, "for", True))
        elif isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            # How many items (a fan-out's width, say) a reply decides.
            if any(_depends(generator.iter, tainted) for generator in node.generators):
                found.append((node.lineno, "comprehension", True))
        elif isinstance(node, ast.If):
            if _depends(node.test, tainted):
                found.append((node.lineno, "if", False))
        elif isinstance(node, ast.IfExp):
            if _depends(node.test, tainted):
                found.append((node.lineno, "conditional expression", False))
        elif isinstance(node, ast.Match):
            if _depends(node.subject, tainted):
                found.append((node.lineno, "match", False))
    found.sort()
    return [
        {"line": line, "construct": construct, "loop_trip_count": is_loop}
        for line, construct, is_loop in found
    ]


def _depends(node: ast.AST, tainted: set) -> bool:
    """Whether evaluating `node` may read a reply."""
    for child in walk(node):
        if isinstance(child, ast.Await):
            return True
        if isinstance(child, ast.Name) and (child.id in tainted or child.id in _PRIMITIVES):
            return True
    return False


def _stored_names(target: ast.AST):
    for child in walk(target):
        if isinstance(child, ast.Name):
            yield child.id


def _parameters(function) -> list:
    arguments = function.args
    return [a.arg for a in arguments.posonlyargs + arguments.args] + [
        a.arg for a in arguments.kwonlyargs
    ]


def _tainted_names(tree: ast.Module) -> set:
    functions = {}
    for node in walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            functions.setdefault(node.name, []).append(node)
    tainted = set()
    changed = True
    while changed:
        before = len(tainted)
        for node in walk(tree):
            for targets, value in _flows(node, functions):
                if value is None or _depends(value, tainted):
                    for target in targets:
                        tainted.update(_stored_names(target))
        changed = len(tainted) != before
    return tainted


def _flows(node: ast.AST, functions: dict):
    """(targets, value) pairs: `targets` take what `value` holds (`value` None: always)."""
    if isinstance(node, ast.Assign):
        yield node.targets, node.value
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.NamedExpr)):
        if node.value is not None:
            yield [node.target], node.value
    elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
        yield [node.target], node.iter
    elif isinstance(node, (ast.With, ast.AsyncWith)):
        for item in node.items:
            if item.optional_vars is not None:
                yield [item.optional_vars], item.context_expr
    elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        # A function returning a reply makes its calls replies.
        for child in walk(node):
            if isinstance(child, ast.Return) and child.value is not None:
                yield [ast.Name(id=node.name)], child.value
    elif isinstance(node, ast.Lambda):
        pass
    elif isinstance(node, ast.Call):
        yield from _call_flows(node, functions)


def _call_flows(call: ast.Call, functions: dict):
    func = call.func
    if isinstance(func, ast.Attribute) and func.attr in _FILLING:
        # `items.append(reply)` fills `items` with it.
        for argument in call.args:
            yield [func.value], argument
    if isinstance(func, ast.Name) and func.id == "pipeline":
        # A stage's first parameter is the previous stage's reply.
        for stage in call.args[1:]:
            for function in _callables(stage, functions):
                parameters = _parameters(function)
                if parameters:
                    yield [ast.Name(id=parameters[0])], None
    if isinstance(func, ast.Name) and func.id in functions:
        # A parameter takes what a call passes it.
        for function in functions[func.id]:
            parameters = _parameters(function)
            for name, argument in zip(parameters, call.args):
                yield [ast.Name(id=name)], argument
            for keyword in call.keywords:
                if keyword.arg in parameters:
                    yield [ast.Name(id=keyword.arg)], keyword.value


def _callables(stage: ast.AST, functions: dict) -> list:
    if isinstance(stage, ast.Lambda):
        return [stage]
    if isinstance(stage, ast.Name):
        return functions.get(stage.id, [])
    return []


# What has a `break` or `return` of its own.
_NESTED = (ast.For, ast.AsyncFor, ast.While, ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


def _exits_on_reply(loop: ast.AST, tainted: set) -> bool:
    """Whether a `break` or `return` of `loop`'s own body sits under a reply-dependent `if`."""
    for statement in loop.body:
        if isinstance(statement, _NESTED):
            continue
        for node in _own_nodes(statement):
            if isinstance(node, ast.If) and _depends(node.test, tainted):
                for branch in node.body + node.orelse:
                    if any(isinstance(n, (ast.Break, ast.Return)) for n in _own_nodes(branch)):
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
            if not isinstance(child, _NESTED):
                pending.append(child)

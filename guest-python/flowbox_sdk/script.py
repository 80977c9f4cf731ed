"""From source text to code: parse, read the literal `meta`, find the entry point among the three
script forms, and compile a direct body as the module itself or, where it returns early, wrapped
into an async function. Only the AST is transformed, never the text, so every line number the
script's author sees is the script's own.
"""

import ast
import math
import sys
import types
import typing
from typing import Any, NamedTuple

from .errors import INVALID_META, NO_ENTRY_POINT, SYNTAX, ScriptFailure

FILENAME = "<workflow>"
# The async function a direct body is wrapped into; the guard keeps scripts from naming it.
BODY_FUNCTION = "__flowbox_body__"
# A direct body whose only `return` ends it runs as the module, with that `return` compiled as
# an assignment of this global (see `build`).
RESULT = "__flowbox_result__"
# The guest is 32-bit: a size beyond 2**31 (`'a' * 10**10`) raises OverflowError before any
# memory is asked for. Such a request is the script running out of memory, so a handler of
# `MemoryError` also catches it: its type is wrapped in a call of this global (a dunder name no
# script can rebind), which CPython evaluates while matching, with the exception at hand.
MEMORY_ERRORS = "__flowbox_memory_errors__"
# Each `return value` of the entry function is compiled as `return __flowbox_returned__(value,
# line)`, a call of this global, so a result that is not JSON is reported at the line of the
# `return` that produced it.
RETURNED = "__flowbox_returned__"
_SIZE_OVERFLOW_MESSAGES = (
    "cannot fit 'int' into an index-sized integer",
    "Python int too large to convert to C ssize_t",
)


def script_line(error: BaseException) -> int | None:
    """The line of the innermost traceback frame that is the script's own."""
    line = None
    traceback = error.__traceback__
    while traceback is not None:
        if traceback.tb_frame.f_code.co_filename == FILENAME:
            line = traceback.tb_lineno
        traceback = traceback.tb_next
    return line


def function_line(function) -> int | None:
    """The line a function (or method) of the script's own is defined at; None for any other
    callable."""
    if isinstance(function, types.MethodType):
        function = function.__func__
    if not isinstance(function, types.FunctionType) or function.__code__.co_filename != FILENAME:
        return None
    return function.__code__.co_firstlineno


def caller_line() -> int | None:
    """The script line that called the SDK function this is called from."""
    frame = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename != FILENAME:
        frame = frame.f_back
    return None if frame is None else frame.f_lineno


def is_size_overflow(error: BaseException) -> bool:
    """Whether `error` is CPython refusing a size too large for the guest's address space."""
    if not isinstance(error, OverflowError):
        return False
    message = str(error)
    # "repeated string is too long", "repeated bytes are too long", "join() result is too
    # long for a Python string", ...
    return message in _SIZE_OVERFLOW_MESSAGES or "too long" in message


def memory_errors(caught):
    """What `except MemoryError` catches: also a size overflow, when that is the exception
    being matched (and only then, so `except OverflowError` further down still sees the
    others)."""
    if is_size_overflow(sys.exception()):
        return (*(caught if isinstance(caught, tuple) else (caught,)), OverflowError)
    return caught


class Entry(NamedTuple):
    """Compiled module code, the name of the global function that starts the script (None when
    the module itself is the script's body, its result in RESULT) and, when the entry has a
    single `return value`, that statement's line: then its result can only come from there, and
    no `return` is wrapped in a call of RETURNED."""

    code: types.CodeType
    function: str | None
    return_line: int | None


def parse(source: str) -> ast.Module:
    # CPython runs a file that starts with a UTF-8 byte-order mark (an editor's habit), and so
    # does flowbox: one leading U+FEFF is dropped, which moves no line.
    if source.startswith("\ufeff"):
        source = source[1:]
    try:
        # What `ast.parse` does, without its Python-level wrapper (~3 k fuel a run).
        return compile(source, FILENAME, "exec", ast.PyCF_ONLY_AST, dont_inherit=True)
    except SyntaxError as error:
        raise _syntax_failure(error) from None
    except ValueError as error:  # Python 3.11 reports null bytes this way
        raise ScriptFailure(SYNTAX, f"the script cannot be parsed: {error}") from None


def build(tree: ast.Module, may_catch_memory_errors: bool, may_declare_scope: bool) -> Entry:
    """Picks the script's form, transforms the tree for it and compiles it.

    A direct body runs as the module itself, compiled with top-level `await` allowed, when its
    only `return` (if any) is its last statement and it declares no `global` or `nonlocal`
    name (see `may_declare_scope`): one code object where a wrapped body needs two, and the
    compiler's cost is mostly per code object. Otherwise it is wrapped into an async function,
    where an early `return` ends it and each name keeps the scope it was written for. A script
    whose text cannot name `MemoryError` (see `may_name_memory_error`) needs no search for its
    handlers."""
    flags = 0
    form = _body_form(tree)
    if form is None:
        function = _entry_function(tree)
        return_line = _report_return_lines(tree, function)
    elif form is _ENDS_IN_RETURN and not may_declare_scope:
        function = None
        return_line = _return_as_result(tree)
        flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    else:
        _wrap_body(tree)
        function = BODY_FUNCTION
        return_line = _report_return_lines(tree, function)
    if may_catch_memory_errors:
        _catch_size_overflows(tree)
    try:
        code = compile(tree, FILENAME, "exec", flags)
    except SyntaxError as error:
        raise _syntax_failure(error) from None
    return Entry(code, function, return_line)


def may_use_random(source: str) -> bool:
    """False when a guarded script cannot draw from the `random` module's shared generator: an
    ASCII text that names neither `random` nor `statistics` (whose `NormalDist.samples` draws
    from it, and which holds the module as an attribute); a guarded script reaches a module
    only by importing it by name, and no other module of the contract reaches the generator.
    Outside ASCII the parser's NFKC normalisation can spell either name."""
    return not source.isascii() or "random" in source or "statistics" in source


def may_declare_scope(source: str) -> bool:
    """False when `source` holds no `global` or `nonlocal` statement: a text without either
    word (keywords are only ever ASCII: the parser normalises identifiers, not keywords)."""
    return "global" in source or "nonlocal" in source


def may_name_memory_error(source: str) -> bool:
    """False when no name in `source` can be `MemoryError`: an ASCII text without the word
    (outside ASCII, the parser's NFKC normalisation can turn other letters into it)."""
    return not source.isascii() or "MemoryError" in source


def _node_classes() -> list:
    """Every class of AST node this Python has."""
    classes = []
    pending = [ast.AST]
    while pending:
        for subclass in pending.pop().__subclasses__():
            if subclass not in classes:
                classes.append(subclass)
                pending.append(subclass)
    return classes


def _holds_nodes(annotation) -> bool:
    """Whether a field of this type (from `_field_types`, Python 3.13+) can hold a node."""
    if isinstance(annotation, type):
        return issubclass(annotation, ast.AST)
    return any(_holds_nodes(argument) for argument in typing.get_args(annotation))


def _child_fields(node_class: type) -> tuple:
    """The fields of `node_class` that can hold nodes, in order; where Python does not say
    which (before 3.13, or a field without a type), all of them."""
    field_types = getattr(node_class, "_field_types", None)
    if field_types is None:
        return node_class._fields
    return tuple(
        name
        for name in node_class._fields
        if name not in field_types or _holds_nodes(field_types[name])
    )


# The fields each class of node has children in, and (as keys) the classes the walks below
# yield: every class but the expression contexts (Load, Store, Del), which only repeat what
# their node already says and which no check looks for.
_CHILD_FIELDS = {
    node_class: _child_fields(node_class)
    for node_class in _node_classes()
    if not issubclass(node_class, ast.expr_context)
}


def child_nodes(node: ast.AST) -> list:
    """The nodes directly below `node`, as `ast.iter_child_nodes` yields them but without
    expression contexts, as a list and faster: the SDK walks every script's tree several
    times before it runs. Only exact types are tested (a type test is cheaper than
    `isinstance`): the tree comes from the parser and from this module, never from a script."""
    children = []
    for name in _CHILD_FIELDS[type(node)]:
        value = getattr(node, name, None)
        if type(value) is list:
            for item in value:
                if type(item) in _CHILD_FIELDS:
                    children.append(item)
        elif type(value) in _CHILD_FIELDS:
            children.append(value)
    return children


def walk(tree: ast.AST) -> list:
    """Every node of `tree`, itself included, in the order `ast.walk` yields them (but without
    expression contexts, as `child_nodes`)."""
    nodes = [tree]
    for node in nodes:
        nodes.extend(child_nodes(node))
    return nodes


def _syntax_failure(error: SyntaxError) -> ScriptFailure:
    return ScriptFailure(SYNTAX, error.msg, error.lineno)


# --- forms -------------------------------------------------------------------------------


_ASYNC = frozenset({ast.Await, ast.AsyncFor, ast.AsyncWith})
# Nodes with a scope of their own: what is inside them is not the entry's.
_SCOPES = frozenset({ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef})
_FUNCTIONS = frozenset({ast.FunctionDef, ast.AsyncFunctionDef})
_YIELDS = frozenset({ast.Yield, ast.YieldFrom})


# The forms of a direct body (see `_body_form`).
_ENDS_IN_RETURN = "ends in its only return"
_RETURNS_EARLY = "returns early"


def _body_form(tree: ast.Module) -> str | None:
    """None when the script is no direct body: no `await` (or `async for`/`async with`) and no
    `return` outside any function or class. Otherwise `_ENDS_IN_RETURN` when its only `return`,
    if any, is its last statement and no `yield` is outside a function (which only a function
    can hold), else `_RETURNS_EARLY`."""
    body = tree.body
    if not body:
        return None
    last = body[-1]
    pending = body[:-1]
    direct = type(last) is ast.Return
    early = False
    if direct:
        pending.extend(child_nodes(last))
    else:
        pending.append(last)
    while pending and not (direct and early):
        node = pending.pop()
        kind = type(node)
        if kind is ast.Return:
            direct = early = True
        elif kind in _YIELDS:
            early = True
        elif kind in _ASYNC or (kind is ast.comprehension and node.is_async):
            direct = True
        if kind not in _SCOPES:
            pending.extend(child_nodes(node))
    if not direct:
        return None
    return _RETURNS_EARLY if early else _ENDS_IN_RETURN


def _return_as_result(tree: ast.Module) -> int | None:
    """Turns a direct body's final `return value` into an assignment of RESULT, at the same
    place, and returns its line; a final bare `return` becomes `pass`. The statement changes
    class in place (`Return` and `Assign` have the same layout), which costs less than making
    a new one."""
    last = tree.body[-1]
    if type(last) is not ast.Return:
        return None
    if last.value is None:
        last.__class__ = ast.Pass
        return None
    line = last.lineno
    last.targets = [
        _new_node(
            ast.Name, id=RESULT, ctx=_STORE, lineno=line, col_offset=last.col_offset,
            end_lineno=last.end_lineno, end_col_offset=last.end_col_offset,
        )
    ]  # fmt: skip
    last.type_comment = None
    last.__class__ = ast.Assign
    return line


_STORE = ast.Store()


def _wrap_body(tree: ast.Module) -> None:
    """Moves every top-level statement into `async def __flowbox_body__():`, keeping each
    statement's own location, so helpers defined in the body become closures over its names.
    The nodes are made without their classes' `__init__`, which checks every field and costs
    more than the rest of the wrapping."""
    body = tree.body
    first, last = body[0], body[-1]
    arguments = _new_node(
        ast.arguments, posonlyargs=[], args=[], vararg=None, kwonlyargs=[], kw_defaults=[],
        kwarg=None, defaults=[],
    )  # fmt: skip
    wrapper = _new_node(
        ast.AsyncFunctionDef, name=BODY_FUNCTION, args=arguments, body=body, decorator_list=[],
        returns=None, type_comment=None, lineno=first.lineno, col_offset=first.col_offset,
        end_lineno=last.end_lineno, end_col_offset=last.end_col_offset,
    )  # fmt: skip
    if "type_params" in ast.AsyncFunctionDef._fields:  # Python 3.12+
        wrapper.type_params = []
    tree.body = [wrapper]


def _new_node(node_class: type, **fields) -> ast.AST:
    node = node_class.__new__(node_class)
    node.__dict__.update(fields)
    return node


def _report_return_lines(tree: ast.Module, function: str) -> int | None:
    """Where the entry function's result comes from (each top-level definition of that name;
    nested functions keep their own returns). A single `return value` in a function that does
    not yield is the only place, and its line is returned; otherwise the value of every
    `return` is wrapped in a call of RETURNED with the statement's line."""
    returns = []
    yields = False
    pending = [
        statement
        for node in tree.body
        if type(node) in _FUNCTIONS and node.name == function
        for statement in node.body
    ]
    while pending:
        node = pending.pop()
        kind = type(node)
        if kind in _SCOPES:
            continue
        if kind is ast.Return and node.value is not None:
            returns.append(node)
        elif kind in _YIELDS:
            yields = True  # a generator's result is the generator, whatever it returns
        pending.extend(child_nodes(node))
    if len(returns) == 1 and not yields:
        return returns[0].lineno
    for node in returns:
        value = node.value
        # Each new node at the value's place, as `fix_missing_locations` would put them,
        # without walking the value again.
        place = {
            "lineno": value.lineno,
            "col_offset": value.col_offset,
            "end_lineno": value.end_lineno,
            "end_col_offset": value.end_col_offset,
        }
        node.value = ast.Call(
            func=ast.Name(id=RETURNED, ctx=ast.Load(), **place),
            args=[value, ast.Constant(node.lineno, **place)],
            keywords=[],
            **place,
        )
    return None


def _catch_size_overflows(tree: ast.Module) -> None:
    """Makes `except MemoryError` (alone or in a tuple) catch size overflows too."""
    for handler in walk(tree):
        if not isinstance(handler, ast.ExceptHandler) or handler.type is None:
            continue
        caught = handler.type
        names = caught.elts if isinstance(caught, ast.Tuple) else [caught]
        if not any(isinstance(name, ast.Name) and name.id == "MemoryError" for name in names):
            continue
        wrapper = ast.Name(id=MEMORY_ERRORS, ctx=ast.Load())
        handler.type = ast.copy_location(ast.Call(func=wrapper, args=[caught], keywords=[]), caught)
        ast.fix_missing_locations(handler.type)


def _entry_function(tree: ast.Module) -> str:
    defined = {
        node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    }
    for name in ("main", "run"):
        if name in defined:
            return name
    raise ScriptFailure(
        NO_ENTRY_POINT,
        "the script has no entry point: define `async def main():` and return the result from "
        "it, or write the steps at the top level (with await) and end with `return result`",
    )


# --- meta --------------------------------------------------------------------------------


def extract_meta(tree: ast.Module) -> dict | None:
    """The script's `meta` dict, checked, or None when the script has none."""
    first_assignment = None
    meta_node = None
    for statement in tree.body:
        if not isinstance(statement, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            continue
        if _assigns_meta(statement):
            if meta_node is not None:
                raise _meta_error(
                    f"meta is assigned twice (lines {meta_node.lineno} and "
                    f"{statement.lineno}); assign it once",
                    statement,
                )
            if first_assignment is not None:
                raise _meta_error(
                    f"meta must be the first assignment in the script, but line "
                    f"{first_assignment.lineno} assigns something before it (meta is on line "
                    f"{statement.lineno})",
                    statement,
                )
            meta_node = statement
        if first_assignment is None:
            first_assignment = statement
    if meta_node is None:
        return None
    if not (
        isinstance(meta_node, ast.Assign)
        and len(meta_node.targets) == 1
        and isinstance(meta_node.targets[0], ast.Name)
    ):
        raise _meta_error("meta must be assigned on its own, as `meta = {...}`", meta_node)
    if not isinstance(meta_node.value, ast.Dict):
        raise _meta_error(
            f"meta must be a dict literal, found {_describe_node(meta_node.value)}",
            meta_node.value,
        )
    meta = _literal(meta_node.value)
    _check_meta_fields(meta, meta_node.value)
    return meta


def _assigns_meta(statement: ast.stmt) -> bool:
    if isinstance(statement, ast.Assign):
        targets = statement.targets
    else:
        targets = [statement.target]
    # Only names bound by the statement count: `meta["x"] = 1` uses meta, it does not assign it.
    pending = list(targets)
    while pending:
        target = pending.pop()
        if isinstance(target, ast.Name) and target.id == "meta":
            return True
        if isinstance(target, (ast.Tuple, ast.List)):
            pending.extend(target.elts)
        elif isinstance(target, ast.Starred):
            pending.append(target.value)
    return False


def _meta_error(message: str, node: ast.AST) -> ScriptFailure:
    return ScriptFailure(INVALID_META, message, node.lineno)


def _literal(node: ast.expr) -> Any:
    """The value of a literal-only expression; tuples become lists."""
    if isinstance(node, ast.Constant):
        value = node.value
        if isinstance(value, float) and not math.isfinite(value):
            raise _meta_error("meta numbers must be finite", node)
        if value is None or isinstance(value, (str, bool, int, float)):
            return value
        raise _meta_error(
            f"meta may only contain str, int, float, bool and None constants, found "
            f"{type(value).__name__} {value!r}",
            node,
        )
    if (
        isinstance(node, ast.UnaryOp)
        and isinstance(node.op, (ast.USub, ast.UAdd))
        and isinstance(node.operand, ast.Constant)
        and type(node.operand.value) in (int, float)
    ):
        number = _literal(node.operand)
        return -number if isinstance(node.op, ast.USub) else number
    if isinstance(node, ast.Dict):
        result = {}
        for key, value in zip(node.keys, node.values):
            if key is None:
                raise _meta_error("meta cannot use ** unpacking; write the keys out", value)
            if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
                raise _meta_error(
                    f"meta keys must be string constants, found {_describe_node(key)}", key
                )
            if key.value in result:
                raise _meta_error(f"meta has the key {key.value!r} twice", key)
            result[key.value] = _literal(value)
        return result
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_literal(element) for element in node.elts]
    raise _meta_error(
        f"meta may only contain literals (strings, numbers, booleans, None, lists and dicts), "
        f"found {_describe_node(node)}",
        node,
    )


def _describe_node(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return f"the name '{node.id}'"
    if isinstance(node, ast.Constant):
        return f"the constant {node.value!r}"
    if isinstance(node, ast.Starred):
        return "* unpacking"
    descriptions = (
        (ast.Call, "a function call"),
        (ast.JoinedStr, "an f-string"),
        ((ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp), "a comprehension"),
        (ast.IfExp, "a conditional expression"),
        ((ast.BinOp, ast.BoolOp, ast.Compare, ast.UnaryOp), "an operator expression"),
        (ast.Set, "a set (use a list)"),
        (ast.Attribute, "an attribute access"),
        (ast.Subscript, "a subscript"),
        (ast.Lambda, "a lambda"),
        (ast.Await, "an await expression"),
        (ast.NamedExpr, "an assignment expression"),
        ((ast.List, ast.Tuple), "a list"),
    )
    for kinds, description in descriptions:
        if isinstance(node, kinds):
            return description
    return f"a {type(node).__name__} expression"


def _check_meta_fields(meta: dict, node: ast.Dict) -> None:
    value_nodes = {
        key.value: value for key, value in zip(node.keys, node.values)
    }  # keys are all string constants by now
    for field in ("name", "description"):
        if field not in meta:
            raise _meta_error(f'meta needs a "{field}": a non-empty string', node)
        if not isinstance(meta[field], str) or not meta[field].strip():
            raise _meta_error(f'meta "{field}" must be a non-empty string', value_nodes[field])
    if "phases" not in meta:
        return
    phases_node = value_nodes["phases"]
    if not isinstance(meta["phases"], list):
        raise _meta_error(
            'meta "phases" must be a list of {"title": ..., "detail": ...} dicts', phases_node
        )
    for index, phase in enumerate(meta["phases"]):
        where = phases_node.elts[index]
        if not isinstance(phase, dict):
            raise _meta_error(
                f'meta "phases"[{index}] must be a dict like {{"title": "..."}}', where
            )
        title = phase.get("title")
        if not isinstance(title, str) or not title.strip():
            raise _meta_error(f'meta "phases"[{index}] needs a non-empty string "title"', where)
        if "detail" in phase and not isinstance(phase["detail"], str):
            raise _meta_error(f'meta "phases"[{index}] "detail" must be a string', where)
        unknown = sorted(str(key) for key in phase if key not in ("title", "detail"))
        if unknown:
            raise _meta_error(
                f'meta "phases"[{index}] has unknown keys {", ".join(unknown)}; a phase has '
                '"title" and an optional "detail"',
                where,
            )

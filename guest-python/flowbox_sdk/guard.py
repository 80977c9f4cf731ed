"""The script guard: an AST check that runs after parsing and before anything executes, and
rejects with a line-numbered message what a workflow script has no business doing (imports
outside the contract's modules, private and dunder attributes, frames, the builtins the
contract refuses). It exists for clear, early errors, so that no builtin a script names fails
later with a NameError; the WebAssembly boundary is what actually contains a script.
"""

import _string  # the parser behind str.format, to read replacement fields exactly as it does
import ast

from .contract import LITERAL_ATTRIBUTE_NAME, MODULES, REFUSED_BUILTINS
from .errors import FORBIDDEN, ScriptFailure
from .modules import available_modules_hint
from .script import child_nodes, walk

# Attributes that reach frames, code objects and tracebacks, from which globals and builtins
# are one step away. `co_*` is matched by prefix.
_INTERNAL_ATTRIBUTES = frozenset(
    {
        "gi_frame", "gi_code", "gi_yieldfrom",
        "cr_frame", "cr_code", "cr_await", "cr_origin",
        "ag_frame", "ag_code", "ag_await",
        "f_back", "f_builtins", "f_code", "f_globals", "f_locals", "f_trace", "f_lasti",
        "f_lineno", "f_generator",
        "tb_frame", "tb_next", "tb_lasti", "tb_lineno",
        "mro", "with_traceback",
    }
)  # fmt: skip

# Special methods a class in a script may define: value behaviour only, no attribute hooks,
# descriptors, metaclass or pickling machinery.
SPECIAL_METHODS = frozenset(
    {
        "__init__", "__post_init__", "__repr__", "__str__",
        "__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__hash__", "__bool__",
        "__len__", "__iter__", "__next__", "__contains__",
        "__getitem__", "__setitem__", "__delitem__", "__call__", "__enter__", "__exit__",
        "__add__", "__sub__", "__mul__", "__truediv__", "__floordiv__", "__mod__",
        "__neg__", "__abs__", "__radd__", "__rsub__", "__rmul__",
    }
)  # fmt: skip


def check_script(tree: ast.Module) -> None:
    """Raises `ScriptFailure(forbidden)` for the first construct the guard rejects."""
    _Guard(tree).visit(tree)


_DEFINITIONS = frozenset({ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef})
_NAMED_CAPTURES = frozenset({ast.ExceptHandler, ast.MatchAs, ast.MatchStar})


def _bound_names(tree: ast.Module) -> set:
    """Every name the script binds anywhere, scopes ignored. (Nodes are told apart by their
    exact type, as in `script.child_nodes`.)"""
    bound = set()
    for node in walk(tree):
        kind = type(node)
        if kind is ast.Name:
            if type(node.ctx) is not ast.Load:
                bound.add(node.id)
        elif kind in _DEFINITIONS:
            bound.add(node.name)
        elif kind is ast.arg:
            bound.add(node.arg)
        elif kind is ast.alias:
            bound.add(node.asname or node.name.split(".")[0])
        elif kind in _NAMED_CAPTURES:
            if node.name:
                bound.add(node.name)
        elif kind is ast.MatchMapping and node.rest:
            bound.add(node.rest)
    return bound


def _is_dunder(name: str) -> bool:
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


def _reject(message: str, node: ast.AST) -> ScriptFailure:
    return ScriptFailure(FORBIDDEN, message, node.lineno)


class _Guard:
    """Visits the tree as `ast.NodeVisitor` does: each node with the `visit_` method of its
    class (found in `_VISITS` by exact type), else its children."""

    def __init__(self, tree: ast.Module):
        self._tree = tree
        self._bound = None  # the names the script binds, found when first needed
        self._special_methods = set()  # ids of the defs that are special methods of a class

    def visit(self, node: ast.AST) -> None:
        method = _VISITS.get(type(node))
        if method is None:
            self.generic_visit(node)
        else:
            method(self, node)

    def generic_visit(self, node: ast.AST) -> None:
        for child in child_nodes(node):
            self.visit(child)

    # --- names ---------------------------------------------------------------------------

    def _binds(self, name: str) -> bool:
        """Whether the script binds `name` anywhere. Only a name the contract refuses or
        restricts needs asking, which most scripts never use, so the walk is left until then."""
        if self._bound is None:
            self._bound = _bound_names(self._tree)
        return name in self._bound

    def _check_name(self, name: str, node: ast.AST) -> None:
        if not name.startswith("__"):
            return
        if name == "__name__":
            raise _reject(
                f"name '__name__' is not available: a workflow script is not a "
                "module and its main() is called for you, so `if __name__ == '__main__':` is "
                "not needed",
                node,
            )
        if _is_dunder(name):
            raise _reject(
                f"name '{name}' is not allowed: names with double underscores "
                "belong to Python's internals",
                node,
            )

    def visit_Name(self, node: ast.Name) -> None:
        # A script that binds one of the contract's builtin names itself
        # (`input = args["input"]`) is using its own variable, which is fine.
        self._check_name(node.id, node)
        if type(node.ctx) is not ast.Load:
            return
        reason = REFUSED_BUILTINS.get(node.id)
        if reason and not self._binds(node.id):
            raise _reject(f"{node.id}() is not available: {reason}", node)
        reason = LITERAL_ATTRIBUTE_NAME.get(node.id)
        if reason and not self._binds(node.id):  # not the callee of a call `visit_Call` checked
            raise _reject(f"{node.id} can only be called directly: {reason}", node)

    def visit_Call(self, node: ast.Call) -> None:
        function = node.func
        if (
            isinstance(function, ast.Name)
            and function.id in LITERAL_ATTRIBUTE_NAME
            and not self._binds(function.id)
        ):
            self._check_literal_attribute_call(function.id, node)
            for child in (*node.args, *node.keywords):
                self.visit(child)
            return
        self.generic_visit(node)

    def _check_literal_attribute_call(self, name: str, node: ast.Call) -> None:
        """`getattr(obj, "name", default)` and `hasattr(obj, "name")` are `obj.name` with a
        fallback, so the name is held to the same rules; one computed at run time could be
        anything, so it must be a literal."""
        arguments = node.args
        if any(isinstance(argument, ast.Starred) for argument in arguments[:2]):
            raise _reject(
                f"{name}() with * arguments is not available: {LITERAL_ATTRIBUTE_NAME[name]}",
                node,
            )
        if len(arguments) < 2:
            return  # a TypeError when it runs, naming what is missing
        attribute = arguments[1]
        if not (isinstance(attribute, ast.Constant) and isinstance(attribute.value, str)):
            raise _reject(
                f"{name}() with a computed attribute name is not available: "
                f"{LITERAL_ATTRIBUTE_NAME[name]}",
                node,
            )
        if attribute.value != "__name__":  # readable, as in visit_Attribute
            self._check_attribute(attribute.value, node)

    def visit_arg(self, node: ast.arg) -> None:
        self._check_name(node.arg, node)
        self.generic_visit(node)

    def visit_Global(self, node: ast.Global) -> None:
        for name in node.names:
            self._check_name(name, node)

    visit_Nonlocal = visit_Global

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        if node.name:
            self._check_name(node.name, node)
        self.generic_visit(node)

    def visit_MatchAs(self, node: ast.MatchAs) -> None:
        if node.name:
            self._check_name(node.name, node)
        self.generic_visit(node)

    visit_MatchStar = visit_MatchAs

    def visit_MatchMapping(self, node: ast.MatchMapping) -> None:
        if node.rest:
            self._check_name(node.rest, node)
        self.generic_visit(node)

    # --- attributes ----------------------------------------------------------------------

    def _check_attribute(self, attribute: str, node: ast.AST) -> None:
        if attribute.startswith("_"):
            raise _reject(
                f"attribute '{attribute}' is not accessible: attributes starting "
                "with an underscore are private in workflow scripts",
                node,
            )
        if attribute in _INTERNAL_ATTRIBUTES or attribute.startswith("co_"):
            raise _reject(
                f"attribute '{attribute}' is not accessible: frames, code objects "
                "and tracebacks are not available to workflow scripts",
                node,
            )

    def visit_Attribute(self, node: ast.Attribute) -> None:
        # Reading `__name__` (as in `type(error).__name__`) yields a string and walks nowhere.
        readable_name = node.attr == "__name__" and isinstance(node.ctx, ast.Load)
        if not (readable_name or _is_super_special_method(node)):
            self._check_attribute(node.attr, node)
        if node.attr in ("format", "format_map"):
            self._check_format(node)
        self.generic_visit(node)

    def visit_MatchClass(self, node: ast.MatchClass) -> None:
        for attribute in node.kwd_attrs:
            self._check_attribute(attribute, node)
        self.generic_visit(node)

    def _check_format(self, node: ast.Attribute) -> None:
        """`str.format` walks attributes named in its template (`"{0.__class__}"`), so it is
        allowed only on a literal whose fields read no attribute."""
        receiver = node.value
        if not (isinstance(receiver, ast.Constant) and isinstance(receiver.value, str)):
            raise _reject(
                f".{node.attr}() is only allowed on a string literal; "
                "use an f-string",
                node,
            )
        try:
            fields = _replacement_fields(receiver.value)
        except ValueError as error:
            raise _reject(f"malformed format string: {error}", node) from None
        for field in fields:
            _, rest = _string.formatter_field_name_split(field)
            if any(is_attribute for is_attribute, _ in rest):
                raise _reject(
                    f"the format field '{{{field}}}' reads an attribute; "
                    "use an f-string",
                    node,
                )

    # --- definitions ---------------------------------------------------------------------

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._check_name(node.name, node)
        for statement in node.body:
            if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)) and _is_dunder(
                statement.name
            ):
                if statement.name not in SPECIAL_METHODS:
                    raise _reject(
                        f"defining '{statement.name}' is not allowed; special "
                        f"methods a class may define: {', '.join(sorted(SPECIAL_METHODS))}",
                        statement,
                    )
                self._special_methods.add(id(statement))
        self.generic_visit(node)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        if id(node) not in self._special_methods:
            self._check_name(node.name, node)
        self.generic_visit(node)

    visit_AsyncFunctionDef = visit_FunctionDef

    # --- imports and the rest ------------------------------------------------------------

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name not in MODULES:
                raise _reject(
                    f"import of '{alias.name}' is not allowed in workflow scripts. "
                    f"{available_modules_hint()}",
                    node,
                )
            if alias.asname:
                self._check_name(alias.asname, node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            raise _reject(
                f"relative imports are not allowed in workflow scripts. "
                f"{available_modules_hint()}",
                node,
            )
        if node.module not in MODULES:
            raise _reject(
                f"import of '{node.module}' is not allowed in workflow scripts. "
                f"{available_modules_hint()}",
                node,
            )
        for alias in node.names:
            if alias.name == "*":
                raise _reject(
                    f"'from {node.module} import *' is not allowed; import the names "
                    f"you use, e.g. 'from {node.module} import name'",
                    node,
                )
            self._check_attribute(alias.name, node)
            if alias.asname:
                self._check_name(alias.asname, node)

    def visit_TryStar(self, node: ast.AST) -> None:
        raise _reject(
            f"'except*' is not supported in workflow scripts; use a plain 'except'",
            node,
        )


# Each `visit_` method of the guard by the class of node it checks.
_VISITS = {
    getattr(ast, name.removeprefix("visit_")): method
    for name, method in vars(_Guard).items()
    if name.startswith("visit_")
}


def _is_super_special_method(node: ast.Attribute) -> bool:
    """`super().__init__(...)` and friends: a class's special methods may call the parent's."""
    call = node.value
    return (
        node.attr in SPECIAL_METHODS
        and isinstance(call, ast.Call)
        and isinstance(call.func, ast.Name)
        and call.func.id == "super"
        and not call.args
        and not call.keywords
    )


def _replacement_fields(template: str) -> list:
    """The field names of a str.format template, including fields nested in format specs."""
    fields = []
    pending = [template]
    while pending:
        for _, field, spec, _ in _string.formatter_parser(pending.pop()):
            if field is not None:
                fields.append(field)
            if spec:
                pending.append(spec)
    return fields

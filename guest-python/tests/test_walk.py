"""The SDK's own tree walks (script.child_nodes, script.walk) see what `ast`'s do, in order,
except the expression contexts (Load, Store, Del)."""

import ast
from pathlib import Path

from flowbox_sdk import script

SOURCES = sorted((Path(script.__file__).parent).glob("*.py"))


def _not_contexts(nodes) -> list:
    return [node for node in nodes if not isinstance(node, ast.expr_context)]


def test_walk_yields_the_nodes_of_ast_walk_in_its_order():
    for source in SOURCES:
        tree = ast.parse(source.read_text(), str(source))
        expected = _not_contexts(ast.walk(tree))
        assert [id(node) for node in script.walk(tree)] == [id(node) for node in expected]


def test_child_nodes_are_those_of_ast_iter_child_nodes():
    for source in SOURCES:
        for node in _not_contexts(ast.walk(ast.parse(source.read_text(), str(source)))):
            assert script.child_nodes(node) == _not_contexts(ast.iter_child_nodes(node))


def test_expression_contexts_are_left_out():
    tree = ast.parse("x = y")
    assert not any(isinstance(node, ast.expr_context) for node in script.walk(tree))
    assert [type(node) for node in script.walk(tree)] == [ast.Module, ast.Assign, ast.Name, ast.Name]


def test_fields_are_read_from_their_types_where_python_gives_them():
    class Node(ast.AST):  # as Python 3.13+ describes a node class
        _fields = ("value", "kind", "elts", "names", "keys", "count", "untyped")
        _field_types = {
            "value": ast.expr,
            "kind": str | None,
            "elts": list[ast.expr],
            "names": list[str],
            "keys": list[ast.expr | None],
            "count": int,
        }

    assert script._child_fields(Node) == ("value", "elts", "keys", "untyped")

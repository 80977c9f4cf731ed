"""The SDK's own tree walks (script.child_nodes, script.walk) see what `ast`'s do, in order."""

import ast
from pathlib import Path

from flowbox_sdk import script

SOURCES = sorted((Path(script.__file__).parent).glob("*.py"))


def test_walk_yields_the_nodes_of_ast_walk_in_its_order():
    for source in SOURCES:
        tree = ast.parse(source.read_text(), str(source))
        assert [id(node) for node in script.walk(tree)] == [id(node) for node in ast.walk(tree)]


def test_child_nodes_are_those_of_ast_iter_child_nodes():
    for source in SOURCES:
        for node in ast.walk(ast.parse(source.read_text(), str(source))):
            assert script.child_nodes(node) == list(ast.iter_child_nodes(node))

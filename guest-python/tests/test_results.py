"""The result must be JSON: tuples become lists, text stays unescaped, and anything else is an
`invalid-result` error naming the offending path."""

import json

import pytest
from fakehost import src

from flowbox_sdk import runner
from flowbox_sdk.jsonvalue import MAX_DEPTH, NotJson, check_json, to_json


def test_json_values_round_trip(host):
    script = (
        'return {"s": "x", "i": -3, "f": 1.5, "b": False, "n": None, "l": [1], "t": (1, (2,))}\n'
    )
    assert host.run(script) == {
        "s": "x",
        "i": -3,
        "f": 1.5,
        "b": False,
        "n": None,
        "l": [1],
        "t": [1, [2]],
    }


def test_result_text_is_not_ascii_escaped(host):
    assert runner.run(host, "return {'é': '日本'}\n", "{}") == '{"é": "日本"}'


def test_dict_and_int_subclasses_are_json(host):
    script = src(
        """
        import collections, enum

        class N(enum.IntEnum):
            A = 2

        return [collections.Counter("aa"), N.A]
        """
    )
    assert host.run(script) == [{"a": 2}, 2]


@pytest.mark.parametrize(
    "value, message",
    [
        ('{"items": [0, 1, {"score": float("nan")}]}', 'result["items"][2]["score"] is NaN'),
        ('{"x": float("inf")}', 'result["x"] is infinity'),
        ('[-float("inf")]', "result[0] is -infinity"),
        ('{"x": {1, 2}}', 'result["x"] is a set; use a list'),
        ("frozenset()", "result is a set; use a list"),
        ('{"a": {1: "one"}}', 'result["a"] has the key 1 (int); JSON object keys must be strings'),
        (
            '{("a", "b"): 1}',
            "result has the key ('a', 'b') (tuple); JSON object keys must be strings",
        ),
        ('[b"raw"]', "result[0] is bytes; decode them to a str"),
        (
            '{"r": agent("x")}',
            'result["r"] is an awaitable that was never awaited (AgentCall); add await',
        ),
        ("[len]", "result[0] is a callable (len); call it"),
        (
            '{"o": object()}',
            'result["o"] is a value of type object; use a str, number, bool, None, list or dict',
        ),
        ('{"quote\\"d": [1j]}', 'result["quote\\"d"][0] is a value of type complex'),
    ],
)
def test_invalid_results_name_the_path(host, value, message):
    failure = host.fail(f"return {value}\n")
    assert failure.kind == "invalid-result"
    assert failure.message.startswith(message)
    assert failure.line == 1


def test_deep_nesting_is_refused_cleanly(host):
    failure = host.fail("x = []\nfor _ in range(100000):\n    x = [x]\nreturn x\n")
    assert failure.kind == "invalid-result"
    assert failure.message == f"result is nested more than {MAX_DEPTH} levels deep"


def test_nesting_up_to_the_limit_is_fine(host):
    script = f"x = 1\nfor _ in range({MAX_DEPTH}):\n    x = [x]\nreturn x\n"
    value = host.run(script)
    for _ in range(MAX_DEPTH):
        value = value[0]
    assert value == 1


def test_circular_reference_is_named(host):
    failure = host.fail("a = {'k': [1]}\na['k'].append(a)\nreturn a\n")
    assert failure.kind == "invalid-result"
    assert failure.message == 'result["k"][1] refers back to result (a circular reference)'


def test_shared_but_acyclic_values_are_fine(host):
    assert host.run("x = [1]\nreturn [x, x, {'a': x}]\n") == [[1], [1], {"a": [1]}]


def test_int_too_long_for_json(host):
    failure = host.fail("return 10 ** 5000\n")
    assert failure.kind == "invalid-result"
    assert failure.message.startswith("result cannot be written as JSON:")


def test_to_json_reports_under_the_given_root():
    with pytest.raises(NotJson, match=r'^prompt\["a"\] is NaN$'):
        to_json({"a": float("nan")}, "prompt")
    assert to_json((1, "é"), "x") == '[1, "é"]'


def test_check_json_walks_without_recursion():
    value = [1]
    for _ in range(MAX_DEPTH - 1):
        value = [value]
    check_json(value, "v")
    json.dumps(value)


def test_first_problem_in_document_order_is_reported():
    with pytest.raises(NotJson, match=r"^v\[0\]\[1\] is a set"):
        check_json([[1, {2}], {3}], "v")


def test_none_result(host):
    assert runner.run(host, "async def main():\n    pass\n", "{}") == "null"


def test_generator_result_is_refused(host):
    script = src(
        """
        def numbers():
            yield 1

        return numbers()
        """
    )
    failure = host.fail(script)
    assert failure.message.startswith("result is a value of type generator")


# --- the line of the `return` ---------------------------------------------------------------


def test_an_invalid_result_names_the_line_of_the_return_in_main(host):
    script = src(
        """
        meta = {"name": "n", "description": "d"}

        def helper():
            return {"fine": [1]}

        async def main():
            x = helper()
            if x:
                return {
                    "a": [1, 2, float("nan")],
                }
            return x
        """
    )
    failure = host.fail(script)
    assert (failure.kind, failure.line) == ("invalid-result", 9)
    assert failure.message == 'result["a"][2] is NaN'


def test_an_invalid_result_names_the_line_of_the_return_in_a_direct_body(host):
    script = src(
        """
        def make():
            return {1, 2}

        items = make()
        for item in items:
            if item > 1:
                return {"items": items}
        return []
        """
    )
    failure = host.fail(script)
    assert (failure.kind, failure.line, failure.message) == (
        "invalid-result",
        7,
        'result["items"] is a set; use a list',
    )


def test_the_return_that_ends_the_function_is_the_one_named(host):
    script = src(
        """
        async def run():
            try:
                return [1]
            finally:
                return [float("inf")]
        """
    )
    assert host.fail(script).line == 5


def test_a_sync_main_names_its_own_return_of_an_awaitable(host):
    script = src(
        """
        async def helper():
            return {"s": {1}}

        def main():
            return helper()
        """
    )
    assert host.fail(script).line == 5


def test_a_generator_main_names_no_return_it_did_not_reach(host):
    script = src(
        """
        def main():
            yield 1
            return [1]
        """
    )
    failure = host.fail(script)
    assert failure.message.startswith("result is a value of type generator")
    assert failure.line is None


def test_a_result_with_a_lone_surrogate_names_the_return(host):
    failure = host.fail('x = 1\nreturn {"k": "\\ud800"}\n')
    assert (failure.kind, failure.line) == ("invalid-result", 2)
    assert "lone surrogate" in failure.message


def test_returned_values_pass_through_unchanged(host):
    script = src(
        """
        async def main():
            value = {"b": 2, "a": [1.5, 10**40, None]}
            return value
        """
    )
    assert runner.run(host, script, "{}") == f'{{"b": 2, "a": [1.5, {10**40}, null]}}'

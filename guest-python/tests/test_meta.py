"""`meta`: literal-only, first assignment, required fields, and every way it can be wrong."""

import pytest
from fakehost import src

BODY = "\nasync def main():\n    return 1\n"


def meta_failure(host, meta_source: str):
    failure = host.check_fails(meta_source + BODY)
    assert failure.kind == "invalid-meta"
    assert failure.line is not None
    return failure


def test_literal_values_of_every_allowed_kind(host):
    meta = host.check(
        src(
            """
            meta = {
                "name": "n",
                "description": "d",
                "numbers": [1, -2, +3.5, -0.25],
                "flags": {"on": True, "off": False, "none": None},
                "pair": ("a", ("b", 1)),
                "phases": [{"title": "Plan", "detail": "think"}, {"title": "Do"}],
            }
            """
        )
        + BODY
    )
    assert meta == {
        "name": "n",
        "description": "d",
        "numbers": [1, -2, 3.5, -0.25],
        "flags": {"on": True, "off": False, "none": None},
        "pair": ["a", ["b", 1]],
        "phases": [{"title": "Plan", "detail": "think"}, {"title": "Do"}],
    }


def test_module_docstring_may_precede_meta(host):
    meta = host.check('"""About."""\nmeta = {"name": "n", "description": "d"}' + BODY)
    assert meta["name"] == "n"


def test_meta_may_be_used_by_the_script(host):
    script = 'meta = {"name": "n", "description": "d"}\nmeta["extra"] = 1\nreturn meta\n'
    assert host.run(script) == {"name": "n", "description": "d", "extra": 1}


def test_non_ascii_meta_is_kept_as_text(host):
    host.run('meta = {"name": "résumé", "description": "日本"}\nreturn 1\n')
    assert host.named("started") == [('{"name": "résumé", "description": "日本"}',)]


def test_assignment_before_meta_names_both_lines(host):
    failure = meta_failure(host, 'x = 1\nmeta = {"name": "n", "description": "d"}')
    assert failure.line == 2
    assert "line 1 assigns something before it" in failure.message
    assert "meta is on line 2" in failure.message


def test_meta_assigned_twice(host):
    failure = meta_failure(
        host, 'meta = {"name": "n", "description": "d"}\nmeta = {"name": "m", "description": "d"}'
    )
    assert failure.line == 2
    assert "lines 1 and 2" in failure.message


@pytest.mark.parametrize(
    "meta_source, found",
    [
        ('meta = dict(name="n")', "found a function call"),
        ("meta = other", "found the name 'other'"),
        ("meta = [1]", "found a list"),
        ('meta = "x"', "found the constant 'x'"),
    ],
)
def test_meta_must_be_a_dict_literal(host, meta_source, found):
    failure = meta_failure(host, meta_source)
    assert "meta must be a dict literal" in failure.message
    assert found in failure.message


@pytest.mark.parametrize(
    "meta_source",
    [
        'meta = other = {"name": "n", "description": "d"}',
        'meta, other = {"name": "n", "description": "d"}, 1',
        'meta: dict = {"name": "n", "description": "d"}',
        'meta += {"name": "n"}',
    ],
)
def test_meta_must_be_assigned_alone(host, meta_source):
    failure = meta_failure(host, meta_source)
    assert "meta = {...}" in failure.message


@pytest.mark.parametrize(
    "value, found",
    [
        ("some_name", "the name 'some_name'"),
        ("len('x')", "a function call"),
        ('f"x{1}"', "an f-string"),
        ("[x for x in 'ab']", "a comprehension"),
        ("{x: 1 for x in 'ab'}", "a comprehension"),
        ("1 if True else 2", "a conditional expression"),
        ("1 + 2", "an operator expression"),
        ("not True", "an operator expression"),
        ("-True", "an operator expression"),
        ("{1, 2}", "a set (use a list)"),
        ("x.y", "an attribute access"),
        ("x[0]", "a subscript"),
        ("lambda: 1", "a lambda"),
        ("[*other]", "* unpacking"),
        ("b'bytes'", "found bytes b'bytes'"),
        ("...", "found ellipsis Ellipsis"),
        ("1j", "found complex 1j"),
    ],
)
def test_non_literal_values_are_named(host, value, found):
    failure = meta_failure(host, f'meta = {{"name": "n", "description": "d",\n  "x": {value}}}')
    assert found in failure.message
    assert failure.line == 2


def test_double_star_unpacking(host):
    failure = meta_failure(host, 'meta = {"name": "n", "description": "d", **other}')
    assert "** unpacking" in failure.message


def test_keys_must_be_string_constants(host):
    failure = meta_failure(host, 'meta = {"name": "n", "description": "d", 1: "x"}')
    assert "keys must be string constants, found the constant 1" in failure.message


def test_duplicate_keys(host):
    failure = meta_failure(host, 'meta = {"name": "n", "description": "d", "name": "m"}')
    assert "the key 'name' twice" in failure.message


def test_infinite_number(host):
    failure = meta_failure(host, 'meta = {"name": "n", "description": "d", "x": 1e999}')
    assert "finite" in failure.message


@pytest.mark.parametrize("field", ["name", "description"])
def test_required_fields(host, field):
    other = "description" if field == "name" else "name"
    failure = meta_failure(host, f'meta = {{"{other}": "x"}}')
    assert f'meta needs a "{field}"' in failure.message


@pytest.mark.parametrize("value", ['""', '"   "', "1", "None", '["n"]'])
def test_name_must_be_a_non_empty_string(host, value):
    failure = meta_failure(host, f'meta = {{"description": "d",\n "name": {value}}}')
    assert 'meta "name" must be a non-empty string' in failure.message
    assert failure.line == 2


@pytest.mark.parametrize(
    "phases, message",
    [
        ('"plan"', '"phases" must be a list'),
        ('["plan"]', '"phases"[0] must be a dict'),
        ('[{"title": "a"}, {"detail": "x"}]', '"phases"[1] needs a non-empty string "title"'),
        ('[{"title": ""}]', '"phases"[0] needs a non-empty string "title"'),
        ('[{"title": "a", "detail": 3}]', '"phases"[0] "detail" must be a string'),
        ('[{"title": "a", "steps": 3, "done": 1}]', '"phases"[0] has unknown keys done, steps'),
    ],
)
def test_phases(host, phases, message):
    failure = meta_failure(host, f'meta = {{"name": "n", "description": "d", "phases": {phases}}}')
    assert message in failure.message


def test_meta_errors_come_before_the_script_runs(host):
    host.fail('meta = {"name": 1, "description": "d"}\nlog("x")\nreturn 1\n')
    assert host.calls == []


def test_a_name_merely_containing_meta_is_not_meta(host):
    assert host.check("metadata = 1\nreturn 1\n") is None

"""The JSON fast paths on every leaf: a str prompt is encoded, and a text reply decoded, by the
C string codecs that json.dumps/json.loads reach, and must give exactly what those give."""

import json

import pytest
from fakehost import FakeHost, src

from flowbox_sdk import runner
from flowbox_sdk.jsonvalue import NotJson, from_json, to_json

TRICKY_STRINGS = [
    "",
    "plain",
    'quote " and backslash \\ and slash /',
    "controls \x00 \x01 \x08 \t \n \x0b \x0c \r \x1b \x1f and DEL \x7f",
    "line and paragraph separators \u2028 \u2029",
    "non-ASCII é 日本 and an emoji 😀",
    "lone surrogates \ud800 and \udfff",
    "\udc80",
    "\\u00e9 written out",
]


class Text(str):
    def __str__(self):
        return "not this"


@pytest.mark.parametrize("text", TRICKY_STRINGS + [Text("a str subclass \n")])
def test_str_is_encoded_as_json_dumps_encodes_it(text):
    assert to_json(text, "prompt") == json.dumps(text, ensure_ascii=False, allow_nan=False)


@pytest.mark.parametrize("text", TRICKY_STRINGS)
def test_agent_sends_a_str_prompt_as_json_dumps_encodes_it(host, text):
    host.agent = lambda request: "ok"
    assert host.run("return await agent(args['p'])\n", {"p": text}) == "ok"
    assert host.agent_requests[0].prompt == json.dumps(text, ensure_ascii=False)


@pytest.mark.parametrize(
    "payload",
    [json.dumps(text) for text in TRICKY_STRINGS]
    + [json.dumps(text, ensure_ascii=False) for text in TRICKY_STRINGS]
    + [
        r'"escapes \" \\ \/ \b \f \n \r \t"',
        r'"\u00e9\u65e5 and a pair \ud83d\ude00 and a lone \udc80"',
        '"a" ',  # trailing whitespace: not the fast path, still valid JSON
        '"a"\n',
        '{"k": "v"}',
        "[1, 2]",
        "3",
        "null",
    ],
)
def test_reply_is_decoded_as_json_loads_decodes_it(payload):
    assert from_json(payload) == json.loads(payload)


@pytest.mark.parametrize(
    "payload",
    ['"unterminated', '"a" x', '"a""b"', '"raw\ncontrol"', r'"bad \x escape"', r'"\ud83d\u"', '"'],
)
def test_malformed_reply_fails_as_json_loads_fails(payload):
    with pytest.raises(json.JSONDecodeError) as expected:
        json.loads(payload)
    with pytest.raises(json.JSONDecodeError) as raised:
        from_json(payload)
    assert (raised.value.msg, raised.value.pos) == (expected.value.msg, expected.value.pos)


def test_text_replies_reach_the_script_decoded(host):
    text = 'line\n"quoted" \\ é 😀 \ud800'
    host.agent = lambda request: text
    # (A lone surrogate cannot leave as the result: compare in the script.)
    assert host.run("return await agent('x') == args['text']\n", {"text": text}) is True


@pytest.mark.parametrize(
    "value, message",
    [
        ({"a": [1, "s", {"x": object()}], "b": float("nan")}, 'v["a"][2]["x"] is a value of type'),
        ([1, "s", None, True, (2, float("inf"))], "v[4][1] is infinity"),
        ({"é\n\"": [None, 1.5, -float("inf")]}, 'v["é\\n\\""][2] is -infinity'),
        ({"k": {3: 1}, "z": float("nan")}, 'v["k"] has the key 3 (int)'),
    ],
)
def test_the_first_bad_value_in_document_order_is_named(value, message):
    with pytest.raises(NotJson) as raised:
        to_json(value, "v")
    assert str(raised.value).startswith(message)


def test_values_are_written_as_json_dumps_writes_them():
    value = {"s": "é\n", "i": 1, "f": 1.5, "b": True, "n": None, "l": [1, (2,)], "d": {"k": []}}
    assert to_json(value, "v") == json.dumps(value, ensure_ascii=False, allow_nan=False)


# --- a script's own json -------------------------------------------------------------------

# What a script may change of `json` for its own use: the classes' attributes (guarded or not)
# and, unguarded, the modules' globals. The fixture puts every one back after the test.
_RECONFIGURABLE = [
    (json.JSONEncoder, ("item_separator", "key_separator", "encode", "iterencode", "default")),
    (json.JSONDecoder, ("decode", "raw_decode")),
    (json.encoder, ("encode_basestring", "encode_basestring_ascii", "c_make_encoder")),
    (json.decoder, ("scanstring", "JSONArray", "JSONObject")),
    (json.scanner, ("make_scanner", "c_make_scanner")),
]


@pytest.fixture
def json_restored(monkeypatch):
    for owner, names in _RECONFIGURABLE:
        for name in names:
            monkeypatch.setattr(owner, name, getattr(owner, name))


RECONFIGURE_CLASSES = """
import json
json.JSONEncoder.item_separator = " | "
json.JSONEncoder.key_separator = " = "
json.JSONEncoder.encode = lambda self, o: "not json"
json.JSONEncoder.iterencode = lambda self, o, _one_shot=False: iter(["not json"])
json.JSONEncoder.default = lambda self, o: "not json"
json.JSONDecoder.decode = lambda self, s, _w=None: "not decoded"
json.JSONDecoder.raw_decode = lambda self, s, idx=0: ("not decoded", len(s))
"""

RECONFIGURE_MODULES = """
import json.encoder, json.decoder, json.scanner
json.encoder.encode_basestring = lambda s: "not json"
json.encoder.encode_basestring_ascii = lambda s: "not json"
json.encoder.c_make_encoder = None
json.decoder.scanstring = lambda s, end, strict=True: ("not decoded", end)
json.decoder.JSONArray = lambda *a, **k: (["not decoded"], 0)
json.decoder.JSONObject = lambda *a, **k: ({"not": "decoded"}, 0)
json.scanner.make_scanner = json.scanner.c_make_scanner = None
"""

USE_THE_PRIMITIVES = """
assert json.dumps([1, 2]) != "[1, 2]"  # the script's own json is changed
reply = await agent({"task": ["a", "b"]}, schema={"type": "object"})
tool = await call_tool("echo", items=[1, 2], text="é")
return {"reply": reply, "tool": tool, "items": ["a", "b"], "n": 1.5}
"""


@pytest.mark.parametrize(
    "guard, reconfigure",
    [(True, RECONFIGURE_CLASSES), (False, RECONFIGURE_CLASSES + RECONFIGURE_MODULES)],
)
def test_a_script_reconfiguring_json_changes_nothing_the_sdk_sends_or_reads(
    json_restored, guard, reconfigure
):
    host = FakeHost(guard=guard)
    host.agent = lambda request: {"verdict": "ok", "scores": [1, 2]}
    result = runner.run(host, src(reconfigure + USE_THE_PRIMITIVES), "{}", host.settings)
    assert result == (
        '{"reply": {"verdict": "ok", "scores": [1, 2]}, '
        '"tool": {"tool": "echo", "arguments": {"items": [1, 2], "text": "é"}}, '
        '"items": ["a", "b"], "n": 1.5}'
    )
    [request] = host.agent_requests
    assert (request.prompt, request.schema) == ('{"task": ["a", "b"]}', '{"type": "object"}')
    assert [arguments for _, arguments, _ in host.named("start_tool")] == [
        '{"items": [1, 2], "text": "é"}'
    ]

"""Which constructs a plan's placeholder replies decide: loops whose trip count depends on a
reply, and branches on replies; and what is left alone."""

import json

from fakehost import AgentRequest, FakeHost, echo, src

from flowbox_sdk import runner
from flowbox_sdk.dependence import reply_dependence
from flowbox_sdk.script import parse


def notes(script: str, read_only: frozenset = frozenset()) -> list:
    return [
        (note.line, note.construct, note.loop_trip_count)
        for note in reply_dependence(parse(src(script)), read_only)
    ]


def branches(script: str) -> list:
    return [(note.line, note.branches) for note in reply_dependence(parse(src(script)))]


def test_a_loop_until_a_check_passes_depends_on_the_reply():
    script = """
        draft = await agent("draft")
        ok = False
        while not ok:
            verdict = await agent({"check": draft}, schema={"type": "boolean"})
            ok = verdict
        return draft
        """
    assert notes(script) == [(3, "while", True)]


def test_a_bounded_retry_that_breaks_on_a_reply_depends_on_it():
    script = """
        for attempt in range(3):
            result = await agent("try")
            if result["passed"]:
                break
        return result
        """
    assert notes(script) == [(1, "for", True), (3, "if", False)]


def test_a_loop_over_args_does_not_depend_on_replies():
    script = """
        out = []
        for item in args["items"]:
            out.append(await agent(item))
        if args.get("verbose"):
            log("done")
        return out
        """
    assert notes(script) == []


def test_iterating_a_reply_and_passing_it_on_taints_the_callee():
    script = """
        async def review(plan):
            steps = plan["steps"]
            return [await agent(s) for s in steps]

        plan = await agent("plan", schema={"type": "object"})
        results = await review(plan)
        for r in results:
            log(r)
        return "yes" if results else "no"
        """
    assert notes(script) == [
        (3, "comprehension", True),
        (7, "for", True),
        (9, "conditional expression", False),
    ]


def test_a_pipeline_stage_branches_on_the_previous_reply():
    script = """
        def revise(prev, item):
            if prev["ok"]:
                return prev
            return agent(item)

        return await pipeline(args["items"], lambda item: agent(item), revise)
        """
    assert notes(script) == [(2, "if", False)]


def test_a_break_inside_a_nested_loop_belongs_to_that_loop():
    script = """
        for item in args["items"]:
            for attempt in range(2):
                r = await agent(item)
                if r:
                    break
        return 1
        """
    assert notes(script) == [(2, "for", True), (4, "if", False)]


def test_a_helper_looping_over_its_own_parameter_does_not_take_a_module_reply_of_that_name():
    script = """
        async def review(items):
            return await parallel([lambda x=x: agent(x) for x in items])

        items = await agent("list some", schema={"type": "array", "items": {"type": "string"}})
        first = await review(args["files"])
        for item in items:
            log(item)
        return first
        """
    assert notes(script) == [(6, "for", True)]


def test_a_helper_called_with_args_and_with_a_reply_depends_on_it():
    script = """
        def count(items):
            n = 0
            for item in items:
                n += 1
            return n

        names = await agent("names", schema={"type": "array", "items": {"type": "string"}})
        return count(args["files"]) + count(names)
        """
    assert notes(script) == [(3, "for", True)]


def test_helpers_with_the_same_parameter_name_are_told_apart():
    script = """
        def shout(items):
            return [item.upper() for item in items]

        def whisper(items):
            return [item.lower() for item in items]

        words = await agent("words", schema={"type": "array", "items": {"type": "string"}})
        return shout(words) + whisper(args["words"])
        """
    assert notes(script) == [(2, "comprehension", True)]


def test_a_closure_reads_its_enclosing_function_s_reply():
    script = """
        async def gather(topic):
            ideas = await agent(topic, schema={"type": "array", "items": {"type": "string"}})
            def expand():
                return [lambda idea=idea: agent(idea) for idea in ideas]
            return await parallel(expand())

        ideas = args["ideas"]
        return await gather(args["topic"])
        """
    assert notes(script) == [(4, "comprehension", True)]


def test_global_and_nonlocal_keep_the_outer_name():
    script = """
        async def fetch():
            global drafts
            drafts = await agent("drafts", schema={"type": "array", "items": {"type": "string"}})

        async def collect():
            found = []
            async def more():
                nonlocal found
                found = await agent("more", schema={"type": "array", "items": {"type": "string"}})
            await more()
            return [len(item) for item in found]

        drafts = []
        await fetch()
        for draft in drafts:
            log(draft)
        return await collect()
        """
    assert notes(script) == [(11, "comprehension", True), (15, "for", True)]


def test_a_lambda_s_parameters_are_its_own():
    script = """
        item = await agent("one")
        sizes = lambda item: [len(part) for part in item]
        revised = await pipeline(
            args["items"], agent, lambda prev, item: prev if prev["ok"] else agent(item)
        )
        return sizes(args["items"]), revised
        """
    assert notes(script) == [(4, "conditional expression", False)]


def test_a_read_only_tool_s_listing_is_not_a_reply():
    script = """
        files = await call_tool("list_dir", path="docs")
        for f in files:
            await agent(f)
        notes = await call_tool("search", query="x")
        for n in notes:
            await agent(n)
        return 1
        """
    read_only = frozenset({"list_dir", "read_file"})
    assert notes(script, read_only) == [(5, "for", True)]
    # Without the tool marked read-only, its listing is a reply like any other.
    assert notes(script) == [(2, "for", True), (5, "for", True)]


def test_a_read_only_tool_called_on_a_reply_is_a_reply():
    script = """
        plan = await agent("which file?")
        text = await call_tool("read_file", path=plan)
        if text:
            await agent(text)
        return 1
        """
    assert notes(script, frozenset({"read_file"})) == [(3, "if", False)]


def test_a_local_named_call_tool_is_not_the_primitive():
    script = """
        async def main():
            call_tool = agent
            listing = await call_tool("list_dir")
            if listing:
                return 1
            return 0
        """
    assert notes(script, frozenset({"list_dir"})) == [(4, "if", False)]


def test_each_construct_names_the_lines_of_its_branches():
    script = """
        verdict = await agent("check", schema={"type": "object"})
        if not verdict["ok"]:
            fixed = await agent("fix")
        else:
            fixed = None
        while not verdict["ok"]:
            verdict = await agent("again")
        extra = [await agent(x) for x in verdict["todo"]]
        short = await agent("a") if verdict["short"] else await agent(
            "b")
        match verdict["kind"]:
            case "x":
                await agent("x")
            case _:
                pass
        return fixed
        """
    assert branches(script) == [
        (2, ((3, 3), (5, 5))),
        (6, ((7, 7),)),
        (8, ((8, 8),)),
        (9, ((9, 9), (9, 10))),
        (11, ((12, 13), (14, 15))),
    ]


def plan_run(script: str, agent) -> tuple:
    """Notes then runs `script` as a plan does, on one host whose leaves `agent` answers;
    returns the leaves' prompts and the placeholder paths reported, by prompt."""
    host = FakeHost()
    host.agent = agent
    runner.plan_notes(host, src(script))
    host.run(src(script))
    handles = {}
    for handle, request in host.requests.items():
        if isinstance(request, AgentRequest):
            handles[handle] = json.loads(request.prompt)
    marked = {handles[handle]: lines for handle, lines in host.named("placeholder_path")}
    return sorted(handles.values()), marked


def test_a_plan_s_run_marks_the_leaves_a_placeholder_led_into_a_retry():
    script = """
        async def fix(draft):
            return await agent("fix " + draft)

        draft = await agent("draft")
        verdict = await agent("check", schema={"type": "object"})
        if not verdict["echo"] == "check":
            draft = await fix(draft)
        if verdict["echo"] == "check":
            reviews = await parallel([lambda: agent("r1"), lambda: agent("r2")])
        return draft
        """
    prompts, marked = plan_run(script, echo)
    assert prompts == ["check", "draft", "r1", "r2"]
    # The echoed verdict took the second branch: its fan-out, awaited there, is marked.
    assert marked == {"r1": [8], "r2": [8]}

    prompts, marked = plan_run(script, lambda request: {"echo": "no"} if request.schema else "d")
    assert prompts == ["check", "draft", "fix d"]
    # A helper called from the branch starts its leaf there.
    assert marked == {"fix d": [6]}


def test_a_run_reports_no_placeholder_path_and_a_plan_s_notes_last_one_run():
    script = """
        verdict = await agent("check")
        while verdict != "echo: check":
            verdict = await agent("again")
        if verdict:
            await agent("more")
        return 1
        """
    host = FakeHost()
    host.run(src(script))
    assert host.named("placeholder_path") == []
    _, marked = plan_run(script, echo)
    assert marked == {"more": [4]}
    # The notes were the one plan's: the next run on the instance is a run again.
    host = FakeHost()
    runner.plan_notes(host, src(script))
    host.run(src(script))
    host.run(src(script))
    assert len(host.named("placeholder_path")) == 1

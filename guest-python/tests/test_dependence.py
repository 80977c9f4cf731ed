"""Which constructs a plan's placeholder replies decide: loops whose trip count depends on a
reply, and branches on replies; and what is left alone."""

from fakehost import src

from flowbox_sdk.dependence import reply_dependence
from flowbox_sdk.script import parse


def notes(script: str) -> list:
    return [
        (note["line"], note["construct"], note["loop_trip_count"])
        for note in reply_dependence(parse(src(script)))
    ]


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

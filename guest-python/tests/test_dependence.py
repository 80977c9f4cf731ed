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

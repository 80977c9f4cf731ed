meta = {
    "name": "weekly-report-summaries",
    "description": "Summarise each team's weekly report in reports/ in two lines",
    "phases": [{"title": "list"}, {"title": "summarise"}],
}


async def summarise(path):
    # The leaf reads its own file, with the same path call_tool takes.
    return await agent(f"Read {path} and summarise the team's week in two lines.",
                       tools=["read_file"], label=f"summary {path}")


async def main():
    phase("list")
    # list_dir lists one level; a preview runs it for real, so the plan counts these files.
    listing = await call_tool("list_dir", path="reports")
    paths = [f"reports/{e['name']}" for e in listing["entries"] if e["kind"] == "file"]
    phase("summarise")
    summaries = await parallel([lambda p=p: summarise(p) for p in paths])
    return {"reports": dict(zip(paths, summaries)),
            "failed": [p for p, s in zip(paths, summaries) if s is None]}

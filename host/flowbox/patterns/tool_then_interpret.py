# Exact facts from tools, judgement from a leaf; a tool failure is reported, not raised.
meta = {
    "name": "tool-then-interpret",
    "description": "Read a granted directory with call_tool, then let a leaf interpret its files",
    "phases": [{"title": "read", "detail": "list_dir, then read_file"}, {"title": "interpret"}],
}


async def main():
    folder = args.get("dir", "src")
    question = args.get("question", "What does this code do, and what looks unfinished?")
    max_files = args.get("max_files", 5)

    phase("read")
    try:
        listing = await call_tool("list_dir", path=folder)
    except ToolError as e:
        return {"dir": folder, "ok": False, "error": str(e)}
    files, errors = {}, {}
    for entry in [e for e in listing["entries"] if e["kind"] == "file"][:max_files]:
        path = f"{folder}/{entry['name']}"
        try:
            files[path] = (await call_tool("read_file", path=path))["content"]
        except ToolError as e:
            errors[path] = str(e)
    if not files:
        return {"dir": folder, "ok": False, "error": "no readable files", "errors": errors}

    phase("interpret")
    # The files are in the prompt already, so the leaf needs no tools of its own.
    answer = await agent({"question": question, "files": files}, label="interpret", tools=[])
    return {"dir": folder, "ok": True, "answer": answer, "read": list(files), "errors": errors}

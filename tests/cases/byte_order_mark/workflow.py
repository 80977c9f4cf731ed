meta = {"name": "bom", "description": "A script saved with a UTF-8 byte-order mark."}


async def main():
    return {"greeting": await agent("hello")}

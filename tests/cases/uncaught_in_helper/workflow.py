def parse(text):
    return int(text)


async def main():
    value = await agent("number please")
    return parse(value)

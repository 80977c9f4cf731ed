meta = {"name": "a" + "b", "description": "d"}

async def main():
    return 1

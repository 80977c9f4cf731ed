meta = {"name": "n"}

async def main():
    return 1

name = "dynamic"
meta = {"name": name, "description": "d"}

async def main():
    return 1

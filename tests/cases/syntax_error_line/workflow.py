meta = {"name": "x", "description": "y"}

async def main():
    x = [1, 2
    return x

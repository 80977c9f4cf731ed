import json, re, math, itertools, functools, collections, statistics, textwrap, string
from datetime import datetime, timedelta

words = re.findall(r"\w+", "the quick brown the fox")
counts = collections.Counter(words)
return {
    "top": counts.most_common(1)[0],
    "mean": statistics.mean([1, 2, 3, 4]),
    "sqrt": math.sqrt(16),
    "pairs": list(itertools.combinations("abc", 2)),
    "json": json.loads(json.dumps({"a": [1]})),
    "wrapped": textwrap.wrap("aaa bbb ccc", 4),
    "letters": string.ascii_lowercase[:3],
    "later": (datetime(2024, 1, 1) + timedelta(days=1)).isoformat(),
    "sum": functools.reduce(lambda a, b: a + b, [1, 2, 3]),
}

//! The guest SDK's tree walks, which the guard and a plan's analysis rely on, see every node
//! that Python's own `ast.walk` sees but the expression contexts, in the guest's own Python
//! (where the node classes' `_field_types` say which fields hold nodes; the SDK's native
//! tests run on a Python that has none).

use flowbox::RunRequest;
use flowbox_tests::runtime;
use serde_json::json;

/// Every kind of statement, expression and pattern the guest's Python parses.
const EVERY_CONSTRUCT: &str = r#"
import os.path as p, sys
from collections import deque as d
type Pair[T] = tuple[T, T]

@decorator(1)
class C[T](Base, metaclass=M, **extra):
    x: int = 1
    def method[U: int](self, a, /, b: int = 2, *args, c, d=3, **kwargs) -> U:
        global g
        def inner():
            nonlocal a
            a += 1
        return lambda y, *, z=1: (yield y)

async def main(items):
    async with open_a() as a, open_b() as (b, c):
        async for i in aiter():
            await thing(i)
    result = [x async for x in gen() if x if not x]
    result = {k: v for k, v in pairs}, {s for s in items}, (g for g in items)
    try:
        raise ValueError("v") from None
    except (ValueError, TypeError) as error:
        del error
    else:
        assert items, "message"
    finally:
        yield from items
    try:
        pass
    except* OSError as group:
        raise
    while (n := len(items)) > 0 and not done or maybe:
        items = items[1:n:2], items[::-1], items[...]
        break
    else:
        continue_ = -n ** 2 // 3 @ m % 4 << 1 >> 2 | 3 & 4 ^ 5
    for first, *rest in items:
        print(f"{first!r:>{width}} {rest=}", t"{first} and {rest:>3}", sep="")
    match command:
        case [1, 2, *others] if others:
            pass
        case {"k": 1, **rest}:
            pass
        case Point(x=0, y=0) | Point(1, 2):
            pass
        case None | True | "s" | -1 | 1 + 2j:
            pass
        case (x, _) as pair:
            pass
        case str() | bytes():
            pass
    with open_c():
        value = a if b else c
        value = not a < b <= c != d is e is not f in g not in h
        value = {**mapping, "k": [*items, 1.5, b"bytes", None]}
        obj.attr.deeper[key] = call(*args, key=value, **kwargs)
    return await parallel([lambda i=i: agent(f"item {i}") for i in range(3)])
"#;

#[tokio::test]
async fn the_sdks_walks_see_every_node_python_does_but_the_contexts() {
    let rt = runtime();
    let script = r#"
import ast
from flowbox_sdk import script

tree = ast.parse(args["source"])
theirs = [node for node in ast.walk(tree) if not isinstance(node, ast.expr_context)]
children_agree = all(
    script.child_nodes(node)
    == [child for child in ast.iter_child_nodes(node) if not isinstance(child, ast.expr_context)]
    for node in theirs
)
return {
    "walk": [id(node) for node in script.walk(tree)] == [id(node) for node in theirs],
    "children": children_agree,
    "nodes": len(theirs),
    "kinds": len({type(node) for node in theirs}),
}
"#;
    let outcome = rt
        .run_request(
            RunRequest::new(script)
                .guard(false)
                .args(json!({"source": EVERY_CONSTRUCT})),
        )
        .await;
    let result = outcome.result.expect("an unguarded run compares the walks");
    assert_eq!(result["walk"], json!(true), "{result}");
    assert_eq!(result["children"], json!(true), "{result}");
    // The source is not trivially small: most node classes appear in it.
    assert!(result["nodes"].as_u64().unwrap() > 300, "{result}");
    assert!(result["kinds"].as_u64().unwrap() > 80, "{result}");
}

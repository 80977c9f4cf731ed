//! A guest loaded apart ([`Guest`]) and shared by several runtimes: each runtime keeps its own
//! backend, limits and warm pool, and its runs come out as they do on a runtime that loaded
//! its own guest, to the unit of fuel.

use flowbox::backends::FakeBackend;
use flowbox::{Guest, Limits, RunError, RunRequest, Runtime};
use flowbox_tests::{root, runtime};

fn on(guest: &Guest, limits: Limits, warm_pool: usize) -> Runtime {
    Runtime::builder()
        .backend(FakeBackend::new())
        .limits(limits)
        .warm_pool(warm_pool)
        .guest(guest.clone())
        .build()
        .expect("a runtime on a loaded guest builds")
}

#[tokio::test]
async fn runtimes_sharing_a_guest_run_as_one_that_loaded_its_own() {
    let guest = Guest::load_cached_in(root().join("target").join("flowbox-cache"))
        .expect("the guest loads");
    let roomy = on(&guest, Limits::default(), 0);
    let pooled = on(&guest, Limits::default(), 1);
    let tight = on(&guest, Limits::default().with_fuel(100_000), 0);
    // One leaf at a time: the batches a `parallel`'s replies arrive in, and so its fuel,
    // depend on timing in a live run (a replay takes the journaled batches).
    let script = "import random\nfirst = await agent('a')\nsecond = await agent('b')\n\
                  return [first != second, random.random() < 1, sum(range(100))]";

    // The same thread id everywhere: it seeds the run's randomness, whose work, and so fuel,
    // varies by a few units with the seed.
    let request = || RunRequest::new(script).thread_id("on-one-guest");
    let own = runtime().run_request(request()).await;
    let (a, b, c) = tokio::join!(
        roomy.run_request(request()),
        pooled.run_request(request()),
        tight.run_request(request()),
    );
    let expected = own.result.expect("the script runs");
    for shared in [&a, &b] {
        assert_eq!(shared.result.as_ref().unwrap(), &expected);
        assert_eq!(shared.summary.fuel_used, own.summary.fuel_used);
    }
    // The third runtime's own limit holds on the same guest.
    let error = c.result.unwrap_err();
    assert!(matches!(error, RunError::OutOfFuel { .. }), "{error:?}");
    // And the guest outlives a runtime dropped before the others.
    drop(roomy);
    let again = pooled.run_request(request()).await;
    assert_eq!(again.result.unwrap(), expected);
    assert_eq!(again.summary.fuel_used, own.summary.fuel_used);
    drop(tight);
}

//! The guest's virtual clocks through the real guest: they move only by readings and by
//! waiting (`time.sleep`, or a WASI poll with a timeout), never block for real, and never run
//! backwards, even past the last instant Python can tell.

use std::time::Duration;

use flowbox::{Limits, RunRequest};
use flowbox_tests::{result_of, runtime};

#[tokio::test]
async fn virtual_time_stops_at_its_end_and_never_runs_backwards() {
    let rt = runtime();
    // 7e9 s and then 1.16e10 s more: past 2**64 nanoseconds, where the clock used to wrap.
    let script = "import time\nreadings = []\nfor seconds in [0, 7e9, 1.16e10, 1]:\n    time.sleep(seconds)\n    readings.append([time.monotonic(), time.time()])\nreturn readings\n";
    let readings = result_of(&rt, script).await;
    let readings: Vec<(f64, f64)> = readings
        .as_array()
        .unwrap()
        .iter()
        .map(|pair| (pair[0].as_f64().unwrap(), pair[1].as_f64().unwrap()))
        .collect();
    for pair in readings.windows(2) {
        assert!(
            pair[1].0 >= pair[0].0 && pair[1].1 >= pair[0].1,
            "{readings:?}"
        );
    }
    assert!(readings[1].0 >= 7e9, "{readings:?}");
    // The wall clock stops at 2**63 - 1 ns after the epoch (in 2262), and so does the rest.
    let end = i64::MAX as f64 / 1e9;
    assert_eq!(readings[2].1, end, "{readings:?}");
    assert_eq!(readings[3], readings[2]);
}

#[tokio::test]
async fn a_wasi_poll_with_a_timeout_waits_in_virtual_time() {
    let rt = runtime();
    // Unguarded, a script reaches WASI's poll itself. A real six-second wait would pass the
    // run's three-second deadline.
    let script = "import select, time\nt0 = time.monotonic()\nselect.select([], [], [], 6)\nt1 = time.monotonic()\nselect.select([], [], [], 0)\nt2 = time.monotonic()\ntime.sleep(0.5)\nreturn [t1 - t0, t2 - t1, time.monotonic() - t2]\n";
    let limits = Limits::default().with_timeout(Duration::from_secs(3));
    let outcome = rt
        .run_request(RunRequest::new(script).guard(false).limits(limits))
        .await;
    let waited = outcome.result.expect("the run ends before its deadline");
    let seconds = |index: usize| waited[index].as_f64().unwrap();
    assert!((6.0..6.001).contains(&seconds(0)), "{waited}");
    assert!(seconds(1) < 0.001, "{waited}");
    assert!((0.5..0.501).contains(&seconds(2)), "{waited}");
    // The same run, the same readings.
    let again = rt.run_request(RunRequest::new(script).guard(false)).await;
    assert_eq!(again.result.unwrap(), waited);
}

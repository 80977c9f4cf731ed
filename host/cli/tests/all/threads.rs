//! `flowbox threads`: the list of a journal's threads, and what it does with a damaged one.

use crate::support::{flowbox, write_file};

/// One thread whose row is damaged does not hide the others: `threads` lists them, names the
/// damaged one and what is wrong with it (never a wrapped-around count), and exits 1.
#[test]
fn threads_lists_what_reads_and_names_a_damaged_thread() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("journal.db");
    let db = db.to_str().unwrap();
    let leaf = write_file(&dir, "leaf.py", "return await agent('x')\n");
    for thread in ["good", "bad"] {
        let output = flowbox(&["run", &leaf, "--thread", thread, "--db", db]);
        assert_eq!(output.status.code(), Some(0));
    }
    let sql = |statement: &str| {
        rusqlite::Connection::open(db)
            .unwrap()
            .execute_batch(statement)
            .unwrap();
    };
    for (damage, named) in [
        (
            "UPDATE runs SET status = 'paused' WHERE thread_id = 'bad'",
            "unknown run status \"paused\"",
        ),
        (
            "UPDATE runs SET status = (SELECT status FROM runs WHERE thread_id = 'good')
                WHERE thread_id = 'bad';
             UPDATE entries SET output_tokens = -5 WHERE thread_id = 'bad'",
            "an entry's token count is -5",
        ),
    ] {
        sql(damage);
        for json in [false, true] {
            let mut args = vec!["threads", "--db", db];
            if json {
                args.push("--json");
            }
            let output = flowbox(&args);
            assert_eq!(output.status.code(), Some(1), "{damage}");
            let stdout = String::from_utf8_lossy(&output.stdout);
            assert!(stdout.contains("good"), "{stdout}");
            assert!(!stdout.contains("bad"), "{stdout}");
            assert!(!stdout.contains("18446744073709551611"), "{stdout}");
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert!(stderr.contains("thread bad"), "{stderr}");
            assert!(stderr.contains(named), "{stderr}");
        }
    }
}

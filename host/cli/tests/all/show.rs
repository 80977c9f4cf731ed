//! `flowbox show THREAD`: a thread's record as text. (Its `--follow` is in `follow`; as JSON it is
//! checked wherever a test reads a thread back.)

use crate::support::{flowbox, notes_dir, write_file};

#[test]
fn show_names_the_tools_a_thread_called() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("journal.db");
    let notes = notes_dir(&dir);
    let workflow = write_file(
        &dir,
        "tool.py",
        "return (await call_tool('read_file', path='notes/todo.txt'))['content']\n",
    );
    let run = flowbox(&[
        "run",
        &workflow,
        "--allow-read",
        notes.to_str().unwrap(),
        "--thread",
        "with-tool",
        "--db",
        db.to_str().unwrap(),
    ]);
    assert_eq!(run.status.code(), Some(0));
    let text = String::from_utf8_lossy(
        &flowbox(&["show", "with-tool", "--db", db.to_str().unwrap()]).stdout,
    )
    .into_owned();
    assert!(
        text.contains(r#"tool read_file({"path":"notes/todo"#),
        "{text}"
    );
    assert!(text.contains("status   succeeded"), "{text}");
}

//! `flowbox guidance`: the guidance a root model gets, naming the profiles, templates, tools and
//! limits the flags configure.

use crate::support::{assert_exit, flowbox, write_file};

#[test]
fn guidance_names_the_profiles_templates_tools_and_limits_the_flags_configure() {
    let dir = tempfile::tempdir().unwrap();
    let docs = dir.path().join("docs");
    std::fs::create_dir(&docs).unwrap();
    let profiles = write_file(
        &dir,
        "profiles.json",
        r#"{"deep": {"model": "large-model", "description": "slow, for judgement"},
            "local": "llama3:8b", "fast": "replaced by the flag"}"#,
    );
    let types = write_file(
        &dir,
        "types.json",
        r#"{"critic": {"description": "finds the weak points of a draft",
                       "base_prompt": "You criticise.", "model": "deep", "tools": []}}"#,
    );
    let equipped = flowbox(&[
        "guidance",
        "--profiles",
        &profiles,
        "--profile",
        "fast=small-model:cheap, for sweeps",
        "--agent-types",
        &types,
        "--allow-read",
        &docs.to_string_lossy(),
        "--budget",
        "5000",
    ]);
    assert_exit(&equipped, 0);
    let text = String::from_utf8(equipped.stdout).unwrap();
    for part in [
        "- `deep`: slow, for judgement\n- `fast`: cheap, for sweeps\n- `local`: the model llama3:8b\n",
        "- `critic`: finds the weak points of a draft (profile `deep`; no tools)",
        "- `read_file(path: string)` [leaves, call_tool]: Read a UTF-8 text file. `path` starts \
         with a granted directory's name (docs)",
        "a budget of 5000 tokens",
        "## Patterns",
        "call_tool(\"read_file\"",
    ] {
        assert!(text.contains(part), "{part}\n---\n{text}");
    }

    let bare = flowbox(&["guidance", "--no-patterns"]);
    assert!(bare.status.success());
    let text = String::from_utf8(bare.stdout).unwrap();
    for part in [
        "Model profiles: none",
        "Leaf templates: none",
        "Host tools: none",
        "no token budget",
    ] {
        assert!(text.contains(part), "{part}");
    }
    assert!(!text.contains("## Patterns"));

    // A profiles file that is not one is refused up front.
    let broken = write_file(&dir, "broken.json", r#"{"fast": 5}"#);
    let output = flowbox(&["guidance", "--profiles", &broken]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("is not valid"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

//! `read_file` and `list_dir`: read-only access to directories the user granted.
//!
//! Access is capability-based (cap-std): each granted directory is opened once, and every path
//! is resolved *inside* that handle by the OS-level checks cap-std performs, so `..`, absolute
//! paths and symlinks cannot lead outside it. A granted directory is addressed by its own name:
//! with `--allow-read ./docs`, the file `docs/guide.md` is `read_file(path="docs/guide.md")`.
//! Both are read-only ([`Tool::read_only`]), so a plan calls them for real.

use std::io::Read;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use cap_std::ambient_authority;
use cap_std::fs::Dir;
use serde_json::{Value, json};

use crate::tool::ToolSpec;
use crate::tool::{Tool, ToolError, ToolSet};

/// Largest slice of a file `read_file` returns by default.
pub const DEFAULT_MAX_FILE_BYTES: u64 = 256 << 10;
/// Most entries `list_dir` returns.
pub const MAX_DIR_ENTRIES: usize = 1000;

/// The directories a user granted read access to, each under its own name.
#[derive(Debug, Clone, Default)]
pub struct ReadRoots {
    roots: Vec<(String, Arc<Dir>)>,
    max_file_bytes: u64,
}

impl ReadRoots {
    /// Opens every directory in `dirs`; a missing directory ([`ToolError::NotADirectory`]),
    /// or two with the same name ([`ToolError::DuplicateRoot`]), is an error.
    pub fn open(dirs: &[PathBuf]) -> Result<Self, ToolError> {
        let mut roots: Vec<(String, Arc<Dir>)> = Vec::new();
        for dir in dirs {
            let name = dir
                .canonicalize()
                .ok()
                .and_then(|path| path.file_name().map(|n| n.to_string_lossy().into_owned()))
                .ok_or_else(|| ToolError::NotADirectory {
                    path: dir.display().to_string(),
                })?;
            if roots.iter().any(|(existing, _)| *existing == name) {
                return Err(ToolError::DuplicateRoot { name });
            }
            let handle = Dir::open_ambient_dir(dir, ambient_authority()).map_err(|e| {
                ToolError::CannotGrant {
                    path: dir.display().to_string(),
                    message: e.to_string(),
                }
            })?;
            roots.push((name, Arc::new(handle)));
        }
        Ok(Self {
            roots,
            max_file_bytes: DEFAULT_MAX_FILE_BYTES,
        })
    }

    /// Caps how much of one file `read_file` returns.
    pub fn with_max_file_bytes(mut self, bytes: u64) -> Self {
        self.max_file_bytes = bytes;
        self
    }

    /// Whether nothing was granted.
    pub fn is_empty(&self) -> bool {
        self.roots.is_empty()
    }

    /// `read_file` and `list_dir` over these roots; no tools when nothing is granted, so a
    /// model is never offered tools that can only fail.
    pub fn tools(&self) -> ToolSet {
        let mut set = ToolSet::new();
        if self.is_empty() {
            return set;
        }
        for tool in [
            Arc::new(ReadFile(self.clone())) as Arc<dyn Tool>,
            Arc::new(ListDir(self.clone())),
        ] {
            set.insert(tool)
                .expect("the built-in tools' schemas are valid");
        }
        set
    }

    /// The granted root a path starts with, and the path inside it.
    fn resolve<'p>(&self, path: &'p str) -> Result<(&Dir, &'p Path), ToolError> {
        let path = Path::new(path);
        let mut components = path.components();
        let root = match components.next() {
            Some(Component::Normal(name)) => name.to_string_lossy(),
            _ => {
                return Err(ToolError::Failed(format!(
                    "paths start with a granted directory's name ({}); {:?} does not",
                    self.root_names(),
                    path.display().to_string()
                )));
            }
        };
        let dir = self
            .roots
            .iter()
            .find(|(name, _)| *name == root)
            .map(|(_, dir)| dir.as_ref())
            .ok_or_else(|| {
                ToolError::Failed(format!(
                    "{root:?} is not a granted directory; granted: {}",
                    self.root_names()
                ))
            })?;
        Ok((dir, components.as_path()))
    }

    /// A granted directory's name for the tools' examples.
    fn example_root(&self) -> &str {
        self.roots.first().map_or("docs", |(name, _)| name.as_str())
    }

    fn root_names(&self) -> String {
        let names: Vec<&str> = self.roots.iter().map(|(name, _)| name.as_str()).collect();
        if names.is_empty() {
            "none".into()
        } else {
            names.join(", ")
        }
    }
}

/// Runs blocking file-system work off the async threads.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, ToolError> + Send + 'static,
) -> Result<T, ToolError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| ToolError::Failed(format!("the file-system task failed: {e}")))?
}

fn io_error(path: &str, error: std::io::Error) -> ToolError {
    ToolError::Failed(format!("{path}: {error}"))
}

/// `read_file(path)`: a text file under a granted directory.
#[derive(Debug)]
struct ReadFile(ReadRoots);

#[async_trait::async_trait]
impl Tool for ReadFile {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "read_file".into(),
            description: format!(
                "Read a UTF-8 text file. `path` starts with a granted directory's name ({}), \
                 such as \"{}/notes.md\"; never an absolute path. Returns {{\"path\", \
                 \"content\" (at most the first {} bytes), \"bytes\" (the file's size), \
                 \"truncated\" (whether content is cut short)}}.",
                self.0.root_names(),
                self.0.example_root(),
                self.0.max_file_bytes
            ),
            parameters: json!({
                "type": "object",
                "properties": {"path": {"type": "string", "description": "e.g. docs/guide.md"}},
                "required": ["path"],
                "additionalProperties": false
            }),
        }
    }

    /// Reading changes nothing, so a plan reads what the run will.
    fn read_only(&self) -> bool {
        true
    }

    async fn call(&self, arguments: Value) -> Result<Value, ToolError> {
        let roots = self.0.clone();
        let path = arguments["path"].as_str().unwrap_or_default().to_owned();
        blocking(move || {
            let (dir, inside) = roots.resolve(&path)?;
            // Opening a FIFO or a device could block for ever or never end: only regular
            // files are read.
            let kind = dir.metadata(inside).map_err(|e| io_error(&path, e))?;
            if kind.is_dir() {
                return Err(ToolError::Failed(format!(
                    "{path} is a directory; list it with list_dir"
                )));
            }
            if !kind.is_file() {
                return Err(ToolError::NotARegularFile { path });
            }
            let file = dir.open(inside).map_err(|e| io_error(&path, e))?;
            let size = file.metadata().map_err(|e| io_error(&path, e))?.len();
            let mut bytes = Vec::new();
            file.take(roots.max_file_bytes)
                .read_to_end(&mut bytes)
                .map_err(|e| io_error(&path, e))?;
            let truncated = size > bytes.len() as u64;
            let content = match String::from_utf8(bytes) {
                Ok(text) => text,
                // A cut in the middle of a character is not a binary file.
                Err(error) if truncated && error.utf8_error().error_len().is_none() => {
                    let valid = error.utf8_error().valid_up_to();
                    String::from_utf8_lossy(&error.as_bytes()[..valid]).into_owned()
                }
                Err(_) => {
                    return Err(ToolError::Failed(format!(
                        "{path} is not a UTF-8 text file"
                    )));
                }
            };
            Ok(json!({"path": path, "content": content, "bytes": size, "truncated": truncated}))
        })
        .await
    }
}

/// `list_dir(path)`: the entries of a directory under a granted directory.
#[derive(Debug)]
struct ListDir(ReadRoots);

#[async_trait::async_trait]
impl Tool for ListDir {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "list_dir".into(),
            description: format!(
                "List a directory, one level (it does not recurse). `path` is \".\" for the granted directories ({}), or starts \
                 with one of their names, such as \"{}\". Returns {{\"path\", \"entries\": \
                 [{{\"name\", \"kind\" (\"file\", \"dir\", \"symlink\" or \"unknown\"), \"bytes\" (files \
                 only)}}], \"truncated\"}}: the first {MAX_DIR_ENTRIES} entries by name; an \
                 entry's path is path/name.",
                self.0.root_names(),
                self.0.example_root()
            ),
            parameters: json!({
                "type": "object",
                "properties": {"path": {"type": "string", "description": "e.g. \".\" or docs/api"}},
                "required": ["path"],
                "additionalProperties": false
            }),
        }
    }

    /// Reading changes nothing, so a plan reads what the run will.
    fn read_only(&self) -> bool {
        true
    }

    async fn call(&self, arguments: Value) -> Result<Value, ToolError> {
        let roots = self.0.clone();
        let path = arguments["path"].as_str().unwrap_or_default().to_owned();
        if matches!(path.as_str(), "" | "." | "./") {
            let entries: Vec<Value> = roots
                .roots
                .iter()
                .map(|(name, _)| json!({"name": name, "kind": "dir"}))
                .collect();
            return Ok(json!({"path": ".", "entries": entries, "truncated": false}));
        }
        blocking(move || {
            let (dir, inside) = roots.resolve(&path)?;
            let listing = if inside.as_os_str().is_empty() {
                dir.entries()
            } else {
                dir.read_dir(inside)
            }
            .map_err(|e| io_error(&path, e))?;
            // The first entries by name, so a large directory always shows the same ones.
            let mut listing = listing
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| io_error(&path, e))?;
            listing.sort_by_key(|entry| entry.file_name());
            let truncated = listing.len() > MAX_DIR_ENTRIES;
            listing.truncate(MAX_DIR_ENTRIES);
            let mut entries = Vec::with_capacity(listing.len());
            for entry in listing {
                let kind = match entry.file_type() {
                    Ok(t) if t.is_dir() => "dir",
                    Ok(t) if t.is_symlink() => "symlink",
                    Ok(_) => "file",
                    Err(_) => "unknown",
                };
                let mut item = json!({"name": entry.file_name().to_string_lossy(), "kind": kind});
                if kind == "file"
                    && let Ok(metadata) = entry.metadata()
                {
                    item["bytes"] = json!(metadata.len());
                }
                entries.push(item);
            }
            Ok(json!({"path": path, "entries": entries, "truncated": truncated}))
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A granted directory `docs` with a file, a subdirectory and escape hatches, next to a
    /// secret the tools must never reach.
    fn setup() -> (tempfile::TempDir, ToolSet) {
        let base = tempfile::tempdir().unwrap();
        let docs = base.path().join("docs");
        std::fs::create_dir_all(docs.join("api")).unwrap();
        std::fs::write(docs.join("guide.md"), "hello ü").unwrap();
        std::fs::write(docs.join("api/big.txt"), "x".repeat(100)).unwrap();
        std::fs::write(docs.join("blob.bin"), [0xff, 0xfe, 0x00]).unwrap();
        std::fs::write(base.path().join("secret.txt"), "SECRET").unwrap();
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink(base.path().join("secret.txt"), docs.join("link")).unwrap();
            std::os::unix::fs::symlink(base.path(), docs.join("up")).unwrap();
        }
        let tools = ReadRoots::open(&[docs])
            .unwrap()
            .with_max_file_bytes(40)
            .tools();
        (base, tools)
    }

    #[test]
    fn nothing_granted_means_no_tools() {
        let roots = ReadRoots::open(&[]).unwrap();
        assert!(roots.is_empty());
        assert!(roots.tools().is_empty());
    }

    #[test]
    fn both_tools_are_read_only() {
        let (_base, tools) = setup();
        assert_eq!(tools.read_only_names(), ["list_dir", "read_file"]);
    }

    /// A model (a leaf's, or a root model writing `call_tool` calls) learns the path rule and
    /// the shape of each result from the descriptions alone.
    #[test]
    fn the_descriptions_give_the_path_rule_and_the_result_shapes() {
        let (_base, tools) = setup();
        let specs = tools.specs();
        let described = |name: &str| {
            specs
                .iter()
                .find(|spec| spec.name == name)
                .map(|spec| spec.description.clone())
                .unwrap()
        };
        let read = described("read_file");
        for part in [
            "(docs)",
            "\"docs/notes.md\"",
            "never an absolute path",
            "\"content\" (at most the first 40 bytes)",
            "\"bytes\"",
            "\"truncated\"",
        ] {
            assert!(read.contains(part), "{part} in {read}");
        }
        let list = described("list_dir");
        for part in [
            "\".\"",
            "\"entries\": [{\"name\", \"kind\"",
            "\"bytes\" (files only)",
            "\"truncated\"",
            "path/name",
        ] {
            assert!(list.contains(part), "{part} in {list}");
        }
    }

    async fn read(tools: &ToolSet, path: &str) -> Result<Value, ToolError> {
        tools.call("read_file", json!({"path": path})).await
    }

    #[tokio::test]
    async fn reads_text_under_a_granted_directory() {
        let (_base, tools) = setup();
        let file = read(&tools, "docs/guide.md").await.unwrap();
        assert_eq!(file["content"], "hello ü");
        assert_eq!(file["truncated"], false);
        let big = read(&tools, "docs/api/big.txt").await.unwrap();
        assert_eq!(
            (big["bytes"].as_u64(), big["truncated"].as_bool()),
            (Some(100), Some(true))
        );
        assert_eq!(big["content"].as_str().unwrap().len(), 40);
        let err = read(&tools, "docs/blob.bin").await.unwrap_err();
        assert!(err.to_string().contains("not a UTF-8 text file"), "{err}");
    }

    #[tokio::test]
    async fn no_path_leads_outside_the_granted_directory() {
        let (base, tools) = setup();
        let secret = base.path().join("secret.txt");
        for path in [
            "docs/../secret.txt",
            "docs/api/../../secret.txt",
            "../secret.txt",
            secret.to_str().unwrap(),
            "/etc/passwd",
            "docs/link",
            "docs/up/secret.txt",
            "secret.txt",
        ] {
            let result = read(&tools, path).await;
            assert!(result.is_err(), "{path} was readable: {result:?}");
            assert!(!format!("{result:?}").contains("SECRET"));
        }
        let err = tools
            .call("list_dir", json!({"path": "docs/up"}))
            .await
            .unwrap_err();
        assert!(!err.to_string().contains("secret"), "{err}");
    }

    #[tokio::test]
    async fn lists_roots_and_directories() {
        let (_base, tools) = setup();
        let roots = tools.call("list_dir", json!({"path": "."})).await.unwrap();
        assert_eq!(roots["entries"], json!([{"name": "docs", "kind": "dir"}]));
        let docs = tools
            .call("list_dir", json!({"path": "docs"}))
            .await
            .unwrap();
        let names: Vec<&str> = docs["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["name"].as_str().unwrap())
            .collect();
        assert!(
            names.contains(&"guide.md") && names.contains(&"api"),
            "{names:?}"
        );
        let guide = docs["entries"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == "guide.md")
            .unwrap();
        assert_eq!(guide["bytes"], 8);
        let err = tools
            .call("list_dir", json!({"path": "other"}))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("granted: docs"), "{err}");
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn only_regular_files_are_read() {
        let (base, tools) = setup();
        let fifo = base.path().join("docs/pipe");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        // Opening a FIFO with no writer would block this test for ever.
        let err = read(&tools, "docs/pipe").await.unwrap_err();
        assert_eq!(
            err,
            ToolError::NotARegularFile {
                path: "docs/pipe".into()
            }
        );
        assert_eq!(err.to_string(), "docs/pipe is not a regular file");
        let err = read(&tools, "docs/api").await.unwrap_err();
        assert!(err.to_string().contains("is a directory"), "{err}");
    }

    #[tokio::test]
    async fn a_large_directory_lists_its_first_entries_by_name() {
        let base = tempfile::tempdir().unwrap();
        let many = base.path().join("many");
        std::fs::create_dir(&many).unwrap();
        // Created in reverse, so directory order is unlikely to be name order.
        for i in (0..MAX_DIR_ENTRIES + 5).rev() {
            std::fs::write(many.join(format!("f{i:05}")), "x").unwrap();
        }
        let tools = ReadRoots::open(&[many]).unwrap().tools();
        let listed = tools
            .call("list_dir", json!({"path": "many"}))
            .await
            .unwrap();
        assert_eq!(listed["truncated"], true);
        let entries = listed["entries"].as_array().unwrap();
        assert_eq!(entries.len(), MAX_DIR_ENTRIES);
        assert_eq!(entries[0]["name"], "f00000");
        assert_eq!(
            entries[MAX_DIR_ENTRIES - 1]["name"],
            format!("f{:05}", MAX_DIR_ENTRIES - 1)
        );
    }

    #[test]
    fn granting_checks_the_directories() {
        let base = tempfile::tempdir().unwrap();
        let err = ReadRoots::open(&[base.path().join("missing")]).unwrap_err();
        assert!(matches!(err, ToolError::NotADirectory { .. }), "{err}");
        assert!(err.to_string().contains("not a directory"), "{err}");
        std::fs::create_dir_all(base.path().join("a/x")).unwrap();
        std::fs::create_dir_all(base.path().join("b/x")).unwrap();
        let err = ReadRoots::open(&[base.path().join("a/x"), base.path().join("b/x")]).unwrap_err();
        assert_eq!(err, ToolError::DuplicateRoot { name: "x".into() });
        assert!(err.to_string().contains("both named \"x\""), "{err}");
    }
}

#!/usr/bin/env bash
# The library as a dependent project gets it: packages every library crate, checks each is
# within the registry's 10 MiB, builds projects *outside* this workspace against the unpacked
# packages (path dependency plus [patch], no link to this repository, no Python on PATH), and
# runs the crate documentation's example there, checking its output.
#
# The project shares this workspace's target directory, so the dependencies both use are
# compiled once (CARGO_TARGET_DIR overrides it).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$repo/target}"
cargo="${CARGO:-cargo}"
max_crate_bytes=$((10 << 20))

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

cd "$repo"
crates=(flowbox-store flowbox-backends flowbox flowbox-restate flowbox-door flowbox-mcp flowbox-web)
"$cargo" package --quiet "${crates[@]/#/-p}" --no-verify --allow-dirty
mkdir "$work/packages"
for crate in "${crates[@]}"; do
    file="$CARGO_TARGET_DIR/package/$crate-0.1.0.crate"
    bytes=$(stat -c %s "$file")
    echo "package $crate: $bytes bytes"
    if (( bytes > max_crate_bytes )); then
        echo "FAIL: $crate's package is $bytes bytes, over the registry's $max_crate_bytes" >&2
        exit 1
    fi
    tar -xzf "$file" -C "$work/packages"
done
# Fresh mtimes: cargo judges path dependencies by them, and an earlier run's build of the same
# relative paths in the shared target directory must not pass for this one.
find "$work/packages" -type f -exec touch {} +
if [[ ! -s "$work/packages/flowbox-0.1.0/guest/flowbox_guest.wasm.gz" ]]; then
    echo "FAIL: the flowbox package does not carry the guest component" >&2
    exit 1
fi

# A project outside the workspace depending on the packages in $2, with $3 as its main.rs.
build_app() {
    local app="$1" packages="$2"
    mkdir -p "$app/src"
    cat > "$app/Cargo.toml" <<TOML
[package]
name = "$(basename "$app")"
version = "0.1.0"
edition = "2024"
publish = false

[dependencies]
flowbox = { path = "$packages/flowbox-0.1.0" }
tokio = { version = "1", features = ["macros", "rt-multi-thread"] }
serde_json = "1"

# The other library crates as the registry would serve them: their packages.
[patch.crates-io]
flowbox-backends = { path = "$packages/flowbox-backends-0.1.0" }
flowbox-store = { path = "$packages/flowbox-store-0.1.0" }

# A workspace of its own, not a member of anything around it.
[workspace]
TOML
    cp "$3" "$app/src/main.rs"
    # The workspace's lock file as a starting point, so the project resolves the versions
    # already built in the shared target directory; cargo trims it to what the project uses.
    cp "$repo/Cargo.lock" "$app/Cargo.lock"
    # No Python tools within reach, no guest override: the package alone must be enough.
    local clean_path
    clean_path="$(printf '%s' "$PATH" | tr ':' '\n' | grep -v -e '/\.venv/' | paste -sd: -)"
    (cd "$app" && env -u FLOWBOX_GUEST_COMPONENT PATH="$clean_path" \
        "$cargo" build --release --offline --quiet)
}

# The crate documentation's example is the program.
start=$(date +%s)
build_app "$work/flowbox-embedder" "$work/packages" \
    "$work/packages/flowbox-0.1.0/examples/embed.rs"
echo "out-of-tree build: $(( $(date +%s) - start )) s"
output="$(env FLOWBOX_CACHE_DIR="$CARGO_TARGET_DIR/flowbox-cache" \
    "$CARGO_TARGET_DIR/release/flowbox-embedder")"
expected='{"files":["a.rs","b.rs"],"reviews":["[fake a.rs] Review a.rs","[fake b.rs] Review b.rs"]}'
if [[ "$(printf '%s\n' "$output" | head -n 1)" != "$expected" ]]; then
    printf 'FAIL: the example printed\n%s\nexpected first line\n%s\n' "$output" "$expected" >&2
    exit 1
fi
printf '%s\n' "$output"

# A contributor's fresh clone before `make guest`: the same packages without the component
# build, and building a runtime fails with the error that says what to do.
cp -r "$work/packages" "$work/packages-without-guest"
rm "$work/packages-without-guest/flowbox-0.1.0/guest/flowbox_guest.wasm.gz"
cat > "$work/no_guest.rs" <<'RUST'
use flowbox::backends::FakeBackend;
use flowbox::{Runtime, SetupError};

fn main() {
    match Runtime::builder().backend(FakeBackend::new()).build() {
        Err(error @ SetupError::GuestMissing) => println!("{error}"),
        other => panic!("expected GuestMissing, got {other:?}"),
    }
}
RUST
build_app "$work/flowbox-without-guest" "$work/packages-without-guest" "$work/no_guest.rs"
output="$("$CARGO_TARGET_DIR/release/flowbox-without-guest")"
if [[ "$output" != *"make guest"* ]]; then
    printf 'FAIL: a build without the guest said\n%s\n' "$output" >&2
    exit 1
fi
printf '%s\n' "$output"
echo "out-of-tree: 2 passed, 0 failed"

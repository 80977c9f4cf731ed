//! Embeds the Python guest component into the library, with its SHA-256, so a flowbox binary
//! runs anywhere without a separate file and its precompiled cache is keyed by exactly what it
//! embeds.
//!
//! The component ships gzip-compressed inside the crate (`guest/flowbox_guest.wasm.gz`: `make
//! guest` writes it into the repository's `components/`, which `guest` links to, see
//! `components/README.md`); it is decompressed into `OUT_DIR`. Without it the crate still
//! builds, with an empty guest that `RuntimeBuilder::build` refuses with a clear error, so
//! `cargo check`, `clippy` and `doc` work on a fresh clone.

use std::io::Read;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// Where `make guest` puts the component, relative to this crate.
const PACKAGED: &str = "guest/flowbox_guest.wasm.gz";

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets it"));
    println!("cargo:rerun-if-env-changed=FLOWBOX_GUEST_COMPONENT");
    let source = match std::env::var_os("FLOWBOX_GUEST_COMPONENT") {
        Some(path) => PathBuf::from(path),
        None => {
            // The folder too: a component appearing where there was none changes it.
            println!(
                "cargo:rerun-if-changed={}",
                manifest.join("guest").display()
            );
            manifest.join(PACKAGED)
        }
    };
    println!("cargo:rerun-if-changed={}", source.display());

    let wasm = match std::fs::read(&source) {
        Ok(bytes) => decompress(&source, bytes),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            println!(
                "cargo:warning=no flowbox guest component at {}: this build cannot run scripts \
                 until you build it with `make guest`",
                source.display()
            );
            Vec::new()
        }
        Err(error) => panic!(
            "cannot read the guest component {}: {error}",
            source.display()
        ),
    };
    let digest = Sha256::digest(&wasm);
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    std::fs::write(out.join("flowbox_guest.wasm"), &wasm).expect("writing to OUT_DIR");
    println!("cargo:rustc-env=FLOWBOX_GUEST_SHA256={hex}");
}

/// The component itself: `bytes` gunzipped when they are gzip, as they are.
fn decompress(source: &Path, bytes: Vec<u8>) -> Vec<u8> {
    if !bytes.starts_with(&[0x1f, 0x8b]) {
        return bytes;
    }
    let mut wasm = Vec::new();
    flate2::read::GzDecoder::new(bytes.as_slice())
        .read_to_end(&mut wasm)
        .unwrap_or_else(|e| {
            panic!(
                "the guest component {} is not valid gzip: {e}",
                source.display()
            )
        });
    wasm
}

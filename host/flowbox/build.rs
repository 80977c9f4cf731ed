//! Embeds the Python guest component (built by `make guest`) into the library, with its
//! SHA-256, so a flowbox binary runs anywhere without a separate file and its precompiled
//! cache is keyed by exactly what it embeds.

use std::path::PathBuf;

use sha2::{Digest, Sha256};

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let component = std::env::var_os("FLOWBOX_GUEST_COMPONENT")
        .map(PathBuf::from)
        .unwrap_or_else(|| manifest.join("../../components/flowbox_guest.wasm"));
    println!("cargo:rerun-if-env-changed=FLOWBOX_GUEST_COMPONENT");
    println!("cargo:rerun-if-changed={}", component.display());
    let bytes = std::fs::read(&component).unwrap_or_else(|e| {
        panic!(
            "the flowbox guest component is missing at {} ({e}); build it first with `make guest`",
            component.display()
        )
    });
    let digest = Sha256::digest(&bytes);
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    let path = component.canonicalize().expect("the component exists");
    println!("cargo:rustc-env=FLOWBOX_GUEST_PATH={}", path.display());
    println!("cargo:rustc-env=FLOWBOX_GUEST_SHA256={hex}");
}

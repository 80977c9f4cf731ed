//! Links the `flowbox` binary as a position-dependent executable on Linux: a position-
//! independent one has the dynamic loader apply ~1 MiB of relocations to the binary's own
//! pointers at every start (wasmtime's and the other crates' tables), a copy-on-write page
//! fault for each page of them, which is a tenth of a one-shot `flowbox run`. Without ASLR for
//! the binary's own code; its libraries, heap, stacks and the guest's memory still move.

fn main() {
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if os == "linux" {
        println!("cargo:rustc-link-arg-bin=flowbox=-no-pie");
    }
}

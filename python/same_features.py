"""Fails when maturin's build of the Python package would resolve a shared dependency with
other features than the workspace build does: cargo would then compile it (and everything
above it, wasmtime included) a second time. Run from the repository root by python/test.sh."""

import subprocess
import sys


def features(*selection: str) -> dict[str, set[str]]:
    tree = subprocess.run(
        [
            "cargo",
            "tree",
            "--locked",
            "--edges",
            "normal,build",
            "--prefix",
            "none",
            "--no-dedupe",
            "--format",
            "{p}|{f}",
            *selection,
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    found: dict[str, set[str]] = {}
    for line in tree.splitlines():
        package, _, names = line.partition("|")
        package = package.removesuffix(" (*)").split(" (/")[0].strip()
        found.setdefault(package, set()).update(name for name in names.split(",") if name)
    return found


workspace = features("--workspace")
python = features("--package", "flowbox-python")
differences = [
    f"  {package}: the workspace adds {sorted(workspace[package] - names)}"
    f"{f', the package adds {sorted(names - workspace[package])}' if names - workspace[package] else ''}"
    for package, names in sorted(python.items())
    if package in workspace and workspace[package] != names
]
if differences:
    print(
        "python/Cargo.toml: these dependencies resolve with other features than in the "
        "workspace build, so building the wheel would compile them again:",
        *differences,
        sep="\n",
        file=sys.stderr,
    )
    sys.exit(1)

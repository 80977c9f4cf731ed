//! The guest's libraries linked into one core module, so that wasmtime fills their function
//! table lazily.
//!
//! componentize-py links the guest from shared libraries, one core module each (libpython,
//! libc, its runtime, ...), and a first module that defines the memory, the function table and
//! the libraries' globals. Every library fills its part of that table with an element segment
//! at an offset read from an imported global. wasmtime fills a table lazily, an entry at a time
//! as a call first goes through it, only when the module that defines the table fills it at
//! constant offsets; every other segment it applies at every instantiation, making a function
//! reference for each entry. For the guest's ~5,700 entries that is three quarters of
//! instantiating it (see `docs/benchmarks.md`).
//!
//! So the first module and the libraries that share its table become one module: their
//! function types, each once, and their functions, globals and segments side by side, each
//! import one library made of another resolved to what it names, and each segment's offset the
//! constant its global holds since the snapshot. The instructions are the same, only
//! renumbered, so a run executes the same code on the same memory and table and uses the same
//! fuel, less what wasmtime charged for the work instantiating no longer does (about a unit per
//! table entry). The merged module stands where
//! the first module was instantiated; the libraries' own instances become empty ones, and the
//! component's aliases of their exports name the merged module's instead (an alias nothing uses
//! any more, one that fed a library's instantiation, names one export of its kind, so that the
//! merged module exports only what is used). What a library imported from the component is
//! imported by the merged module: from the shim module instantiated before it, as the
//! libraries' lowered functions already are; a canonical built-in (a resource drop, a lowered
//! function without options) is defined only after the first module is instantiated, so it is
//! reached through a new entry of the shim module's table, which the fix-up module fills at the
//! end with the rest.
//!
//! A component of any other shape, or anything this does not read, is left as it is.

mod component;
mod layout;
mod merged;
mod numbering;
mod resolve;
mod shims;
#[cfg(test)]
mod tests;

use component::{GrownShims, Replacements};
use layout::{CoreInstance, Layout};
use merged::Exports;
use numbering::Linking;
use resolve::{Merge, Source};
use shims::Shims;

/// `component` with its libraries linked into one core module (see the module's doc); None
/// for a component of another shape.
pub(crate) fn linked(component: &[u8]) -> Option<Vec<u8>> {
    let layout = Layout::read(component)?;
    let merge = Merge::plan(&layout, component)?;
    let linking = Linking::work_out(&merge)?;
    let exports = Exports::work_out(&layout, &merge, &linking)?;

    // The instances before the merged one it imports from, and the built-ins it reaches
    // through the shim module: their core functions, their types and the modules that
    // imported them.
    let mut arguments: Vec<u32> = Vec::new();
    let mut builtins = Vec::new();
    for (source, ty, module) in &linking.imports {
        match source {
            Source::External(instance, _) => arguments.push(*instance),
            Source::Builtin(function) => builtins.push((*function, *ty, *module)),
            Source::Internal(..) => return None,
        }
    }
    let shims = if builtins.is_empty() {
        None
    } else {
        // The one module instantiated before the merged one.
        let mut before = (0..merge.slot).filter(|&instance| {
            matches!(
                usize::try_from(instance)
                    .ok()
                    .and_then(|instance| layout.instances.get(instance)),
                Some(CoreInstance::Instantiate { .. })
            )
        });
        let (Some(shim), None) = (before.next(), before.next()) else {
            return None;
        };
        let shims = Shims::find(&layout, component, shim)?;
        arguments.push(shims.instance);
        Some(shims)
    };
    arguments.sort_unstable();
    arguments.dedup();

    let functions: Vec<u32> = builtins.iter().map(|&(function, ..)| function).collect();
    let merged = merged::module(&merge, &linking, &exports, shims.as_ref(), &functions)?;
    let shims = match &shims {
        Some(shims) => {
            let mut signatures = Vec::new();
            for &(_, ty, module) in &builtins {
                let types = &merge.infos[&module].types;
                signatures.push(types.get(usize::try_from(ty).ok()?)?.clone());
            }
            let (shim, fixup) = shims.extended(component, &layout, &signatures)?;
            Some(GrownShims {
                shims,
                shim,
                fixup,
                builtins: functions,
            })
        }
        None => None,
    };
    Replacements {
        layout: &layout,
        merge: &merge,
        exports: &exports,
        merged,
        arguments,
        shims,
    }
    .rewritten(component)
}

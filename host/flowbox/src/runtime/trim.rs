//! The guest component without the core exports nothing in it uses, made before compiling it.
//!
//! componentize-py links the guest from shared libraries (libpython, libc, its runtime, ...),
//! each a core module that exports every symbol it defines so that any other might import it.
//! Of the guest's ~4,200 core exports, ~2,400 are neither imported by another module nor
//! aliased by the component. Nothing can reach a core export but the component itself, so
//! those do nothing at run time; but wasmtime reads each export's name every time a process
//! loads the compiled guest, and takes each exported function for one the host may call: an
//! entry trampoline is compiled for it and every instance has room for a reference to it.
//! Dropping them makes the load ~18 % shorter (see `docs/benchmarks.md`).
//!
//! Only the export sections of the component's own core modules change; every other byte is
//! copied. A component of another shape than the guest's (a core module imported or aliased
//! from elsewhere, core modules or instances inside a nested component) is left as it is, as
//! is one that cannot be read: wasmtime then reports what is wrong with it.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::ops::Range;

use wasmparser::{
    BinaryReader, ComponentAlias, ComponentExternalKind, ComponentOuterAliasKind, ComponentTypeRef,
    Instance, Parser, Payload,
};

/// Changes whenever what this module makes of a component changes: it is part of the compiled
/// guest's cache key (see `cache`).
pub(crate) const VERSION: u32 = 1;

/// A component's and a core module's header: the magic number and the version.
const HEADER: usize = 8;
/// The id of a core module section in a component, and of the export section in a module.
const CORE_MODULE_SECTION: u8 = 1;
const EXPORT_SECTION: u8 = 7;

/// `component` without the exports of its core modules that nothing in it uses; as it is when
/// it has none, or a shape this does not handle.
pub(crate) fn without_unused_exports(component: &[u8]) -> Cow<'_, [u8]> {
    match used_exports(component).and_then(|used| rewrite(component, &used)) {
        Some(trimmed) => Cow::Owned(trimmed),
        None => Cow::Borrowed(component),
    }
}

/// The names of the exports something uses, by core module: those the component aliases from
/// an instance of the module, and those another module imports from one. None for a component
/// that cannot be read, or of a shape this does not handle.
fn used_exports(component: &[u8]) -> Option<Vec<HashSet<String>>> {
    // Each module's imports, by module index.
    let mut imports: Vec<Vec<(String, String)>> = Vec::new();
    // Each core instance's module and arguments (None: made from exports).
    let mut instances: Vec<Option<(u32, HashMap<String, u32>)>> = Vec::new();
    let mut aliased: Vec<(u32, String)> = Vec::new();
    // The modules and components the parser is inside: true for a module.
    let mut nesting: Vec<bool> = Vec::new();
    for payload in Parser::new(0).parse_all(component) {
        match payload.ok()? {
            Payload::ModuleSection { .. } => {
                if !nesting.is_empty() {
                    return None;
                }
                nesting.push(true);
                imports.push(Vec::new());
            }
            Payload::ComponentSection { .. } => nesting.push(false),
            Payload::End(_) => {
                nesting.pop();
            }
            Payload::ImportSection(reader) if nesting == [true] => {
                let module = imports.last_mut()?;
                for import in reader.into_imports() {
                    let import = import.ok()?;
                    module.push((import.module.to_owned(), import.name.to_owned()));
                }
            }
            Payload::InstanceSection(reader) => {
                if !nesting.is_empty() {
                    return None;
                }
                for instance in reader {
                    instances.push(match instance.ok()? {
                        Instance::Instantiate { module_index, args } => Some((
                            module_index,
                            args.iter()
                                .map(|arg| (arg.name.to_owned(), arg.index))
                                .collect(),
                        )),
                        Instance::FromExports(_) => None,
                    });
                }
            }
            Payload::ComponentAliasSection(reader) if nesting.is_empty() => {
                for alias in reader {
                    match alias.ok()? {
                        ComponentAlias::CoreInstanceExport {
                            instance_index,
                            name,
                            ..
                        } => aliased.push((instance_index, name.to_owned())),
                        // A module from elsewhere takes a module index this does not count.
                        ComponentAlias::Outer {
                            kind: ComponentOuterAliasKind::CoreModule,
                            ..
                        }
                        | ComponentAlias::InstanceExport {
                            kind: ComponentExternalKind::Module,
                            ..
                        } => return None,
                        _ => {}
                    }
                }
            }
            Payload::ComponentImportSection(reader) if nesting.is_empty() => {
                for import in reader {
                    if matches!(import.ok()?.ty, ComponentTypeRef::Module(_)) {
                        return None;
                    }
                }
            }
            _ => {}
        }
    }

    let mut used = vec![HashSet::new(); imports.len()];
    let module_of = |instance: u32| -> Option<usize> {
        let (module, _) = instances.get(usize::try_from(instance).ok()?)?.as_ref()?;
        usize::try_from(*module).ok()
    };
    for (instance, name) in aliased {
        if let Some(module) = module_of(instance) {
            used.get_mut(module)?.insert(name);
        }
    }
    for (module, args) in instances.iter().flatten() {
        for (from, name) in imports.get(usize::try_from(*module).ok()?)? {
            if let Some(exporter) = args.get(from).and_then(|&instance| module_of(instance)) {
                used.get_mut(exporter)?.insert(name.clone());
            }
        }
    }
    Some(used)
}

/// `component` with each core module's export section holding only the `used` exports; None
/// when it holds no others.
fn rewrite(component: &[u8], used: &[HashSet<String>]) -> Option<Vec<u8>> {
    let mut trimmed = component.get(..HEADER)?.to_vec();
    let mut modules = used.iter();
    let mut dropped = 0;
    for (id, range) in sections(component)? {
        let content = &component[range];
        if id == CORE_MODULE_SECTION {
            let (module, dropped_here) = trim_module(content, modules.next()?)?;
            dropped += dropped_here;
            push_section(&mut trimmed, id, &module);
        } else {
            push_section(&mut trimmed, id, content);
        }
    }
    (dropped > 0 && modules.next().is_none()).then_some(trimmed)
}

/// A core module with only the `used` exports, and how many it dropped.
fn trim_module(module: &[u8], used: &HashSet<String>) -> Option<(Vec<u8>, usize)> {
    let mut trimmed = module.get(..HEADER)?.to_vec();
    let mut dropped = 0;
    for (id, range) in sections(module)? {
        let content = &module[range.clone()];
        if id != EXPORT_SECTION {
            push_section(&mut trimmed, id, content);
            continue;
        }
        // Each export is copied as it was written, from where it starts to where the next does.
        let reader =
            wasmparser::ExportSectionReader::new(BinaryReader::new(content, range.start)).ok()?;
        let mut starts = Vec::new();
        let mut keep = Vec::new();
        for export in reader.into_iter_with_offsets() {
            let (offset, export) = export.ok()?;
            starts.push(offset - range.start);
            keep.push(used.contains(export.name));
        }
        starts.push(content.len());
        let mut exports = Vec::new();
        leb128(keep.iter().filter(|&&kept| kept).count(), &mut exports);
        for (n, kept) in keep.iter().enumerate() {
            if *kept {
                exports.extend_from_slice(&content[starts[n]..starts[n + 1]]);
            } else {
                dropped += 1;
            }
        }
        push_section(&mut trimmed, id, &exports);
    }
    Some((trimmed, dropped))
}

/// The id and the content of each section after the header.
fn sections(binary: &[u8]) -> Option<Vec<(u8, Range<usize>)>> {
    let mut reader = BinaryReader::new(binary.get(HEADER..)?, HEADER);
    let mut sections = Vec::new();
    while !reader.eof() {
        let id = reader.read_u8().ok()?;
        let size = usize::try_from(reader.read_var_u32().ok()?).ok()?;
        let start = reader.original_position();
        reader.read_bytes(size).ok()?;
        sections.push((id, start..start + size));
    }
    Some(sections)
}

fn push_section(binary: &mut Vec<u8>, id: u8, content: &[u8]) {
    binary.push(id);
    leb128(content.len(), binary);
    binary.extend_from_slice(content);
}

/// `value` as an unsigned LEB128 number.
fn leb128(mut value: usize, out: &mut Vec<u8>) {
    loop {
        let low = (value & 0x7f) as u8;
        value >>= 7;
        if value == 0 {
            out.push(low);
            return;
        }
        out.push(low | 0x80);
    }
}

#[cfg(test)]
mod tests {
    use wasmtime::component::{Component, Linker};
    use wasmtime::{Config, Engine, Store};

    use super::*;

    /// The export names of each of `component`'s core modules.
    fn exports(component: &[u8]) -> Vec<Vec<String>> {
        let mut modules = Vec::new();
        let mut depth = 0;
        for payload in Parser::new(0).parse_all(component) {
            match payload.unwrap() {
                Payload::ModuleSection { .. } => {
                    depth += 1;
                    modules.push(Vec::new());
                }
                Payload::ExportSection(reader) if depth > 0 => {
                    let names = reader.into_iter().map(|e| e.unwrap().name.to_owned());
                    modules.last_mut().unwrap().extend(names);
                }
                Payload::End(_) if depth > 0 => depth -= 1,
                _ => {}
            }
        }
        modules
    }

    /// Instantiates `component` and calls each of `functions`, which take nothing and return
    /// an s32.
    fn call(component: &[u8], functions: &[&str]) -> Vec<i32> {
        let engine = Engine::new(&Config::new()).unwrap();
        let component = Component::new(&engine, component).unwrap();
        let mut store = Store::new(&engine, ());
        let instance = Linker::new(&engine)
            .instantiate(&mut store, &component)
            .unwrap();
        functions
            .iter()
            .map(|name| {
                let function = instance
                    .get_typed_func::<(), (i32,)>(&mut store, *name)
                    .unwrap();
                function.call(&mut store, ()).unwrap().0
            })
            .collect()
    }

    /// Two modules, as componentize-py links them: `$libc` exports three functions and a
    /// memory; `$main` imports one of them, and the component lifts another.
    const LINKED: &str = r#"
        (component
          (core module $libc
            (func (export "imported") (result i32) i32.const 1)
            (func (export "lifted") (result i32) i32.const 2)
            (func (export "unused") (result i32) i32.const 3)
            (memory (export "unused-memory") 1))
          (core module $main
            (import "libc" "imported" (func $imported (result i32)))
            (func (export "run") (result i32) call $imported)
            (func (export "unused-too") (result i32) i32.const 4))
          (core instance $libc (instantiate $libc))
          (core instance $main (instantiate $main (with "libc" (instance $libc))))
          (func (export "run") (result s32) (canon lift (core func $main "run")))
          (func (export "lifted") (result s32) (canon lift (core func $libc "lifted"))))
    "#;

    #[test]
    fn the_exports_nothing_imports_or_aliases_are_dropped_and_the_rest_work_as_before() {
        let component = wat::parse_str(LINKED).unwrap();
        let trimmed = without_unused_exports(&component);
        assert!(matches!(trimmed, Cow::Owned(_)));
        assert_eq!(
            exports(&trimmed),
            [vec!["imported", "lifted"], vec!["run"]],
            "each module keeps what is used, in its order"
        );
        assert_eq!(call(&component, &["run", "lifted"]), [1, 2]);
        assert_eq!(call(&trimmed, &["run", "lifted"]), [1, 2]);
    }

    #[test]
    fn a_component_without_unused_exports_is_left_as_it_is() {
        let component = wat::parse_str(LINKED).unwrap();
        let trimmed = without_unused_exports(&component).into_owned();
        assert!(matches!(without_unused_exports(&trimmed), Cow::Borrowed(_)));
    }

    #[test]
    fn a_component_of_a_shape_it_does_not_handle_is_left_as_it_is() {
        let shapes = [
            // A core module from outside: it takes a module index.
            r#"(component
                 (import "m" (core module $m (export "f" (func))))
                 (core module $own (func (export "unused")))
                 (core instance (instantiate $m)))"#,
            // Core modules and instances inside a nested component.
            r#"(component
                 (component
                   (core module $m (func (export "unused")))
                   (core instance (instantiate $m))))"#,
        ];
        for shape in shapes {
            let component = wat::parse_str(shape).unwrap();
            assert!(
                matches!(without_unused_exports(&component), Cow::Borrowed(_)),
                "{shape}"
            );
        }
        for unreadable in [
            &b"not wasm"[..],
            &[],
            &wat::parse_str(LINKED).unwrap()[..40],
        ] {
            assert!(matches!(
                without_unused_exports(unreadable),
                Cow::Borrowed(_)
            ));
        }
    }

    #[test]
    fn the_guest_loses_exports_and_trimming_it_again_changes_nothing() {
        let guest = super::super::GUEST_COMPONENT;
        assert!(!guest.is_empty(), "build the guest first: make guest");
        let trimmed = without_unused_exports(guest);
        let count = |component: &[u8]| exports(component).iter().map(Vec::len).sum::<usize>();
        assert!(count(&trimmed) < count(guest));
        assert!(matches!(without_unused_exports(&trimmed), Cow::Borrowed(_)));
    }
}

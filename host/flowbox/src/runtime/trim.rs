//! The guest component without what nothing in it uses, made before compiling it.
//!
//! componentize-py links the guest from shared libraries (libpython, libc, its runtime, ...),
//! each a core module that exports every symbol it defines so that any other might import it.
//! Of the guest's ~4,200 core exports, ~2,400 are neither imported by another module nor
//! aliased by the component. Nothing can reach a core export but the component itself, so
//! those do nothing at run time; but wasmtime reads each export's name every time a process
//! loads the compiled guest, and takes each exported function for one the host may call: an
//! entry trampoline is compiled for it and every instance has room for a reference to it.
//!
//! One module (the linker's `init`) holds only code that ran before the snapshot: setting the
//! libraries' address globals, applying their relocations, running their initialisers.
//! Nothing can call it since, but it imports ~900 functions and globals for it, and so keeps
//! that many exports of the libraries in use. A module whose functions nothing can reach has
//! their bodies emptied and keeps only the imports it places into tables; the exports no
//! module imports any more then go with the others. Both make a load ~23 % shorter (see
//! `docs/benchmarks.md`).
//!
//! The modules' `name` sections go too, first: wasmtime reads a name for each of the ~13,400
//! functions every time it loads the compiled guest (~15 % of a load). A trap's backtrace and
//! a profile then show a function's number instead of its name. The number indexes the linked
//! module's functions: its imports, then each library's functions in the order the libraries
//! are instantiated; less the functions before its library's, it is the function's number in
//! that library's module of the uncompiled guest, whose `name` sections still hold the names.
//!
//! Then the libraries are linked into one module (`link`), the exports nothing uses go, the
//! body of each function nothing can reach any more becomes a trap (`reach`), keeping its
//! number, and the objects of the snapshot become immortal in the memory image (`immortal`).
//!
//! Besides the linking, only the core modules' import, element, code and export sections
//! change, and only in those ways, the data section's bytes only in the snapshot's objects'
//! counts, and their `name` sections go. A component of
//! another shape than the guest's (a core module imported or aliased from elsewhere, core
//! modules or instances inside a nested component) keeps every export, a module in a form
//! this does not read is left as it is, and so is anything that cannot be read: wasmtime then
//! reports what is wrong with it.

use std::borrow::Cow;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::ops::Range;

use super::binary::{
    CODE_SECTION, CORE_MODULE_SECTION, CUSTOM_SECTION, DATA_COUNT_SECTION, DATA_SECTION,
    ELEMENT_SECTION, EXPORT_SECTION, GLOBAL_SECTION, HEADER, IMPORT_SECTION, START_SECTION,
    TRAPPING_BODY, entry_ranges, leb128, push_section, sections,
};

use wasmparser::{
    BinaryReader, CodeSectionReader, ComponentAlias, ComponentExternalKind,
    ComponentOuterAliasKind, ComponentTypeRef, CustomSectionReader, Element, ElementItems,
    ElementKind, ElementSectionReader, ImportSectionReader, Imports, Instance, Operator, Parser,
    Payload, TypeRef,
};

/// Changes whenever what this module makes of a component changes: it is part of the compiled
/// guest's cache key (see `cache`).
pub(crate) const VERSION: u32 = 7;

/// `component` without its core modules' `name` sections, then without the code nothing can
/// call and the imports only that code used, then with its libraries linked into one module
/// (`link`), then without the exports of its core modules that nothing in it uses, then with
/// the body of each function nothing can reach a trap (`reach`), then with the snapshot's
/// objects immortal (`immortal`); as it is when it has none of them, or a shape this does not
/// handle.
pub(crate) fn trimmed(component: &[u8]) -> Cow<'_, [u8]> {
    trimmed_linking(component, true)
}

/// `trimmed`, with the libraries linked when `link`.
fn trimmed_linking(component: &[u8], link: bool) -> Cow<'_, [u8]> {
    if !Parser::is_component(component) {
        return Cow::Borrowed(component);
    }
    let mut component = Cow::Borrowed(component);
    for pass in [module_without_names, module_without_dead_code] {
        if let Some(rewritten) = modules_rewritten(&component, pass) {
            component = Cow::Owned(rewritten);
        }
    }
    if let Some(linked) = link.then(|| super::link::linked(&component)).flatten() {
        component = Cow::Owned(linked);
    }
    if let Some(trimmed) = used_exports(&component).and_then(|used| rewrite(&component, &used)) {
        component = Cow::Owned(trimmed);
    }
    for pass in [
        super::reach::unreached_bodies_trapping,
        super::immortal::snapshot_objects_immortal,
    ] {
        if let Some(rewritten) = modules_rewritten(&component, pass) {
            component = Cow::Owned(rewritten);
        }
    }
    component
}

/// `component` with each core module that `pass` rewrites rewritten, and the others as they
/// are; None when `pass` rewrites none.
pub(super) fn modules_rewritten(
    component: &[u8],
    mut pass: impl FnMut(&[u8]) -> Option<Vec<u8>>,
) -> Option<Vec<u8>> {
    let mut changed = false;
    let rewritten = with_modules(component, |module| {
        Some(match pass(module) {
            Some(rewritten) => {
                changed = true;
                Cow::Owned(rewritten)
            }
            None => Cow::Borrowed(module),
        })
    })?;
    changed.then_some(rewritten)
}

/// A core module without its `name` section; None for a module without one.
fn module_without_names(module: &[u8]) -> Option<Vec<u8>> {
    let mut unnamed = module.get(..HEADER)?.to_vec();
    let mut named = false;
    for (id, range) in sections(module)? {
        let content = &module[range.clone()];
        let reader = BinaryReader::new(content, range.start);
        if id == CUSTOM_SECTION && CustomSectionReader::new(reader).ok()?.name() == "name" {
            named = true;
        } else {
            push_section(&mut unnamed, id, content);
        }
    }
    named.then_some(unnamed)
}

/// A core module none of whose functions anything can reach, with each function's body a
/// trap and only the imports its element segments place into tables (and its memories,
/// tables and tags); None for any other module, or one with nothing to drop.
///
/// Nothing can reach the module's functions when it exports nothing, has no start function,
/// and places only imported functions into tables, by the plain form of element segment
/// (constant offsets, function indices): nothing else can make a reference to one. Modules
/// with globals or data of their own are left as they are.
fn module_without_dead_code(module: &[u8]) -> Option<Vec<u8>> {
    let sections = sections(module)?;
    let mut function_imports = 0;
    let mut global_imports = 0;
    // The function indices the element segments place.
    let mut placed = BTreeSet::new();
    for (id, range) in &sections {
        let reader = BinaryReader::new(&module[range.clone()], range.start);
        match *id {
            IMPORT_SECTION => {
                for group in ImportSectionReader::new(reader).ok()? {
                    let Imports::Single(_, import) = group.ok()? else {
                        return None;
                    };
                    match import.ty {
                        TypeRef::Func(_) => function_imports += 1,
                        TypeRef::Global(_) => global_imports += 1,
                        _ => {}
                    }
                }
            }
            ELEMENT_SECTION => {
                for element in ElementSectionReader::new(reader).ok()? {
                    let (_, functions) = plain_segment(element.ok()?)?;
                    placed.extend(functions);
                }
            }
            GLOBAL_SECTION | EXPORT_SECTION | START_SECTION | DATA_SECTION | DATA_COUNT_SECTION => {
                return None;
            }
            _ => {}
        }
    }
    if placed
        .last()
        .is_some_and(|&function| function >= function_imports)
        || (placed.len() == usize::try_from(function_imports).ok()? && global_imports == 0)
    {
        return None;
    }
    // The index of each placed function among the imports that stay.
    let renumbered: HashMap<u32, u32> = placed.iter().copied().zip(0..).collect();

    let mut trimmed = module.get(..HEADER)?.to_vec();
    for (id, range) in sections {
        let content = &module[range.clone()];
        let reader = BinaryReader::new(content, range.start);
        let mut rewritten = Vec::new();
        match id {
            IMPORT_SECTION => {
                let mut entries = Vec::new();
                let mut function = 0;
                for group in ImportSectionReader::new(reader)
                    .ok()?
                    .into_iter_with_offsets()
                {
                    let (offset, group) = group.ok()?;
                    let Imports::Single(_, import) = group else {
                        return None;
                    };
                    let kept = match import.ty {
                        TypeRef::Func(_) => {
                            function += 1;
                            placed.contains(&(function - 1))
                        }
                        TypeRef::Global(_) => false,
                        _ => true,
                    };
                    entries.push((offset - range.start, kept));
                }
                rewritten = kept_entries(content, &entries).0;
            }
            ELEMENT_SECTION => {
                let segments = ElementSectionReader::new(reader).ok()?;
                leb128(usize::try_from(segments.count()).ok()?, &mut rewritten);
                for element in segments {
                    let (offset, functions) = plain_segment(element.ok()?)?;
                    // Flags 0: active, in table 0, the offset, function indices.
                    rewritten.push(0);
                    rewritten.extend_from_slice(&module[offset]);
                    leb128(functions.len(), &mut rewritten);
                    for function in functions {
                        leb128(usize::try_from(renumbered[&function]).ok()?, &mut rewritten);
                    }
                }
            }
            CODE_SECTION => {
                let bodies = usize::try_from(CodeSectionReader::new(reader).ok()?.count()).ok()?;
                leb128(bodies, &mut rewritten);
                for _ in 0..bodies {
                    rewritten.extend_from_slice(&TRAPPING_BODY);
                }
            }
            _ => rewritten.extend_from_slice(content),
        }
        push_section(&mut trimmed, id, &rewritten);
    }
    Some(trimmed)
}

/// An element segment of the plain form — active in table 0 at a constant offset, listing
/// function indices — as where its offset expression is in the module and its functions;
/// None for any other.
fn plain_segment(element: Element<'_>) -> Option<(Range<usize>, Vec<u32>)> {
    let ElementKind::Active {
        table_index: None,
        offset_expr,
    } = element.kind
    else {
        return None;
    };
    let mut operators = offset_expr.get_operators_reader();
    if !matches!(operators.read().ok()?, Operator::I32Const { .. })
        || !matches!(operators.read().ok()?, Operator::End)
        || !operators.eof()
    {
        return None;
    }
    let ElementItems::Functions(functions) = element.items else {
        return None;
    };
    let functions = functions.into_iter().collect::<Result<_, _>>().ok()?;
    Some((offset_expr.get_binary_reader().range(), functions))
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
    let mut modules = used.iter();
    let mut dropped = 0;
    let trimmed = with_modules(component, |module| {
        let (trimmed, dropped_here) = trim_module(module, modules.next()?)?;
        dropped += dropped_here;
        Some(Cow::Owned(trimmed))
    })?;
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
        let reader =
            wasmparser::ExportSectionReader::new(BinaryReader::new(content, range.start)).ok()?;
        let mut entries = Vec::new();
        for export in reader.into_iter_with_offsets() {
            let (offset, export) = export.ok()?;
            entries.push((offset - range.start, used.contains(export.name)));
        }
        let (exports, dropped_here) = kept_entries(content, &entries);
        dropped += dropped_here;
        push_section(&mut trimmed, id, &exports);
    }
    Some((trimmed, dropped))
}

/// `component` with the content of each of its core module sections what `module` makes of
/// it; None where `module` gives None.
fn with_modules(
    component: &[u8],
    mut module: impl FnMut(&[u8]) -> Option<Cow<'_, [u8]>>,
) -> Option<Vec<u8>> {
    let mut rewritten = component.get(..HEADER)?.to_vec();
    for (id, range) in sections(component)? {
        let content = &component[range];
        if id == CORE_MODULE_SECTION {
            push_section(&mut rewritten, id, &module(content)?);
        } else {
            push_section(&mut rewritten, id, content);
        }
    }
    Some(rewritten)
}

/// The content of a section of `content`'s entries with only those that stay, each copied as
/// it was written (`entries`: where each starts in `content`, in order, and whether it stays);
/// and how many went.
fn kept_entries(content: &[u8], entries: &[(usize, bool)]) -> (Vec<u8>, usize) {
    let mut section = Vec::new();
    let kept = entries.iter().filter(|(_, kept)| *kept).count();
    leb128(kept, &mut section);
    let starts: Vec<usize> = entries.iter().map(|&(start, _)| start).collect();
    for (&(_, stays), range) in entries.iter().zip(entry_ranges(&starts, content.len())) {
        if stays {
            section.extend_from_slice(&content[range]);
        }
    }
    (section, entries.len() - kept)
}

#[cfg(test)]
mod tests {
    use super::super::calls::call;
    use super::*;

    /// The import names, the export names and the custom sections' names of each of
    /// `component`'s core modules.
    fn names(component: &[u8]) -> [Vec<Vec<String>>; 3] {
        let [mut imports, mut exports, mut customs] = [Vec::new(), Vec::new(), Vec::new()];
        let mut depth = 0;
        for payload in Parser::new(0).parse_all(component) {
            match payload.unwrap() {
                Payload::ModuleSection { .. } => {
                    depth += 1;
                    imports.push(Vec::new());
                    exports.push(Vec::new());
                    customs.push(Vec::new());
                }
                Payload::ImportSection(reader) if depth > 0 => {
                    let names = reader.into_imports().map(|i| i.unwrap().name.to_owned());
                    imports.last_mut().unwrap().extend(names);
                }
                Payload::ExportSection(reader) if depth > 0 => {
                    let names = reader.into_iter().map(|e| e.unwrap().name.to_owned());
                    exports.last_mut().unwrap().extend(names);
                }
                Payload::CustomSection(reader) if depth > 0 => {
                    customs.last_mut().unwrap().push(reader.name().to_owned());
                }
                Payload::End(_) if depth > 0 => depth -= 1,
                _ => {}
            }
        }
        [imports, exports, customs]
    }

    fn imports(component: &[u8]) -> Vec<Vec<String>> {
        let [imports, _, _] = names(component);
        imports
    }

    fn exports(component: &[u8]) -> Vec<Vec<String>> {
        let [_, exports, _] = names(component);
        exports
    }

    /// Whether any core module of `component` has a `name` section.
    fn named(component: &[u8]) -> bool {
        let [_, _, customs] = names(component);
        customs.iter().flatten().any(|name| name == "name")
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
        let trimmed = trimmed(&component);
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
    fn the_modules_lose_their_names_and_nothing_else() {
        // `$imported` names a function: `$main` has a `name` section.
        let component = wat::parse_str(LINKED).unwrap();
        assert!(named(&component));
        let unnamed = modules_rewritten(&component, module_without_names).unwrap();
        assert!(!named(&unnamed));
        assert_eq!(names(&unnamed)[..2], names(&component)[..2]);
        assert_eq!(call(&unnamed, &["run", "lifted"]), [1, 2]);
        // A component with no names to drop is left as it is.
        assert_eq!(modules_rewritten(&unnamed, module_without_names), None);
    }

    #[test]
    fn a_component_without_unused_exports_is_left_as_it_is() {
        let component = wat::parse_str(LINKED).unwrap();
        let trimmed = trimmed(&component).into_owned();
        assert!(matches!(super::trimmed(&trimmed), Cow::Borrowed(_)));
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
            // Only a module's name (`$own`'s) may go.
            assert_eq!(
                names(&trimmed(&component))[..2],
                names(&component)[..2],
                "{shape}"
            );
        }
        for unreadable in [
            &b"not wasm"[..],
            &[],
            &wat::parse_str(LINKED).unwrap()[..40],
        ] {
            assert!(matches!(trimmed(unreadable), Cow::Borrowed(_)));
        }
    }

    /// As componentize-py links: `$init` ran before the snapshot (it would set a global of
    /// `$lib`'s and call its initialiser) and only places `$lib`'s `placed` into the table,
    /// through which `$main` calls it.
    const INITIALISED: &str = r#"
        (component
          (core module $lib
            (global (export "address") (mut i32) (i32.const 0))
            (func (export "placed") (result i32) i32.const 5)
            (func (export "initialise"))
            (table (export "table") 2 funcref)
            (memory (export "memory") 1))
          (core module $init
            (import "lib" "address" (global $address (mut i32)))
            (import "lib" "initialise" (func $initialise))
            (import "lib" "placed" (func $placed (result i32)))
            (import "lib" "table" (table 2 funcref))
            (import "lib" "memory" (memory 1))
            (func $apply (global.set $address (i32.const 8)) (call $initialise))
            (elem (i32.const 1) func $placed))
          (core module $main
            (import "lib" "table" (table 2 funcref))
            (type $returns (func (result i32)))
            (func (export "run") (result i32) (call_indirect (type $returns) (i32.const 1))))
          (core instance $lib (instantiate $lib))
          (core instance (instantiate $init (with "lib" (instance $lib))))
          (core instance $main (instantiate $main (with "lib" (instance $lib))))
          (func (export "run") (result s32) (canon lift (core func $main "run"))))
    "#;

    #[test]
    fn a_module_nothing_can_call_keeps_only_what_it_places_and_the_exports_follow() {
        let component = wat::parse_str(INITIALISED).unwrap();
        let trimmed = trimmed_linking(&component, false);
        assert_eq!(
            imports(&trimmed),
            [vec![], vec!["placed", "table", "memory"], vec!["table"]]
        );
        assert_eq!(
            exports(&trimmed),
            [vec!["placed", "table", "memory"], vec![], vec!["run"]],
            "the global and the initialiser only the dead code imported go too"
        );
        // The placed function is renumbered in the element segment: a call through the
        // table still reaches it.
        assert_eq!(call(&component, &["run"]), [5]);
        assert_eq!(call(&trimmed, &["run"]), [5]);
    }

    #[test]
    fn a_module_whose_code_can_run_keeps_its_imports() {
        let reachable = [
            // Its function is the start function.
            INITIALISED.replace("(elem (i32.const 1)", "(start $apply) (elem (i32.const 1)"),
            // Its function is in the table.
            INITIALISED.replace("func $placed))", "func $placed $apply))"),
        ];
        for shape in reachable {
            let component = wat::parse_str(&shape).unwrap();
            let trimmed = trimmed_linking(&component, false);
            assert_eq!(imports(&trimmed)[1].len(), 5, "{shape}");
            assert!(exports(&trimmed)[0].contains(&"initialise".to_owned()));
        }
    }

    #[test]
    fn the_guest_loses_imports_and_exports_and_trimming_it_again_changes_nothing() {
        let guest = super::super::GUEST_COMPONENT;
        assert!(!guest.is_empty(), "build the guest first: make guest");
        let trimmed = trimmed(guest);
        let count = |names: Vec<Vec<String>>| names.iter().map(Vec::len).sum::<usize>();
        assert!(count(exports(&trimmed)) < count(exports(guest)));
        assert!(count(imports(&trimmed)) < count(imports(guest)));
        assert!(named(guest) && !named(&trimmed));
        assert!(matches!(super::trimmed(&trimmed), Cow::Borrowed(_)));
    }
}

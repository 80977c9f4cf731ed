use wasmparser::{ElementKind, Operator, Parser, Payload};

use super::super::calls::call;
use super::layout::{Kind, Layout, ModuleInfo};
use super::linked;

/// As componentize-py links the guest, in little: `$first` defines the memory, the table
/// and the libraries' globals, and reaches a lowered host function through the shim
/// module's table, which `$fixup` fills at the end; `$lib` places a function into the
/// table at the offset its global holds, and that function calls the host through a
/// canonical built-in (a lowered function without options).
const SHAPED: &str = r#"
    (component
      (import "host" (func $host (result s32)))
      (core module $shim
        (type $t (func (result i32)))
        (table (export "$imports") 1 1 funcref)
        (func (export "0") (type $t) (call_indirect (type $t) (i32.const 0))))
      (core module $fixup
        (import "" "$imports" (table 1 1 funcref))
        (import "" "0" (func $f (result i32)))
        (elem (i32.const 0) func $f))
      (core module $first
        (import "shim" "0" (func $host (result i32)))
        (memory (export "memory") 1)
        (table (export "table") 3 funcref)
        (global (export "lib:table_base") i32 (i32.const 1))
        (type $r (func (result i32)))
        (func (export "through-table") (result i32) (call_indirect (type $r) (i32.const 1)))
        (func (export "through-shim") (result i32) (call $host)))
      (core module $lib
        (import "env" "memory" (memory 1))
        (import "env" "table" (table 3 funcref))
        (import "env" "table_base" (global $base i32))
        (import "env" "host" (func $host (result i32)))
        (func $placed (result i32) (i32.add (call $host) (i32.const 40)))
        (func (export "lifted") (result i32) (i32.const 2))
        (elem (global.get $base) func $placed))
      (core instance $shim (instantiate $shim))
      (core instance $first (instantiate $first (with "shim" (instance $shim))))
      (core func $lowered (canon lower (func $host)))
      (core instance $env
        (export "memory" (memory $first "memory"))
        (export "table" (table $first "table"))
        (export "table_base" (global $first "lib:table_base"))
        (export "host" (func $lowered)))
      (core instance $lib (instantiate $lib (with "env" (instance $env))))
      (core instance $fix
        (export "$imports" (table $shim "$imports"))
        (export "0" (func $lowered)))
      (core instance (instantiate $fixup (with "" (instance $fix))))
      (func (export "through-table") (result s32)
        (canon lift (core func $first "through-table")))
      (func (export "through-shim") (result s32)
        (canon lift (core func $first "through-shim")))
      (func (export "lifted") (result s32) (canon lift (core func $lib "lifted"))))
"#;

/// Per core module: the tables it defines, the tables it imports, and the offsets of its
/// active element segments (true for a constant).
fn tables(component: &[u8]) -> Vec<(usize, usize, Vec<bool>)> {
    let layout = Layout::read(component).unwrap();
    layout
        .modules
        .iter()
        .map(|range| {
            let info = ModuleInfo::read(&component[range.clone()]).unwrap();
            let mut constant = Vec::new();
            for payload in Parser::new(0).parse_all(info.bytes) {
                if let Payload::ElementSection(reader) = payload.unwrap() {
                    for element in reader {
                        if let ElementKind::Active { offset_expr, .. } = element.unwrap().kind {
                            let first = offset_expr.get_operators_reader().read().unwrap();
                            constant.push(matches!(first, Operator::I32Const { .. }));
                        }
                    }
                }
            }
            (info.tables.len(), info.imports_of(Kind::Table), constant)
        })
        .collect()
}

/// How many types the component's core modules that define a memory define again, each a type
/// it defined before. (componentize-py's shim and fix-up modules define a type per entry.)
fn types_defined_again(component: &[u8]) -> usize {
    let layout = Layout::read(component).unwrap();
    let mut again = 0;
    for range in &layout.modules {
        let info = ModuleInfo::read(&component[range.clone()]).unwrap();
        if info.memories.is_empty() {
            continue;
        }
        let distinct: std::collections::HashSet<_> = info.types.iter().collect();
        again += info.types.len() - distinct.len();
    }
    again
}

const CALLED: [&str; 3] = ["through-table", "through-shim", "lifted"];

#[test]
fn the_libraries_become_one_module_that_fills_its_own_table_at_constant_offsets() {
    let component = wat::parse_str(SHAPED).unwrap();
    assert_eq!(call(&component, &CALLED), [42, 2, 2]);
    let linked = linked(&component).unwrap();
    // The shim's table grew an entry for the built-in, which the fix-up fills; `$first`
    // holds `$lib`'s segment at its global's value; `$lib` is empty.
    assert_eq!(
        tables(&linked),
        [
            (1, 0, vec![]),
            (0, 1, vec![true, true]),
            (1, 0, vec![true]),
            (0, 0, vec![])
        ]
    );
    assert_eq!(call(&linked, &CALLED), [42, 2, 2]);
    // `$first` and `$lib` both define `(func (result i32))`: the merged module, once.
    assert_eq!(types_defined_again(&linked), 0);
    // Linking again finds nothing to link.
    assert_eq!(super::linked(&linked), None);
}

#[test]
fn a_built_in_with_no_shim_to_reach_it_through_leaves_the_component_as_it_is() {
    let unshimmed = SHAPED
        .replace(r#"(import "shim" "0" (func $host (result i32)))"#, "")
        .replace(
            "(func (export \"through-shim\") (result i32) (call $host))",
            "",
        )
        .replace(
            r#"(core instance $first (instantiate $first (with "shim" (instance $shim))))"#,
            "(core instance $first (instantiate $first))",
        )
        .replace(
            r#"(func (export "through-shim") (result s32)
        (canon lift (core func $first "through-shim")))"#,
            "",
        );
    let component = wat::parse_str(&unshimmed).unwrap();
    // `$shim` is instantiated before `$first` still, but so is nothing else: the shim is
    // found, and the component links.
    assert!(linked(&component).is_some());
    // Without the shim module, the built-in cannot be reached: nothing is linked.
    let shimless = unshimmed
        .replace(r#"(core instance $shim (instantiate $shim))"#, "")
        .replace(
            r#"(core instance $fix
        (export "$imports" (table $shim "$imports"))
        (export "0" (func $lowered)))
      (core instance (instantiate $fixup (with "" (instance $fix))))"#,
            "",
        );
    let component = wat::parse_str(&shimless).unwrap();
    assert_eq!(linked(&component), None);
    assert_eq!(call(&component, &["through-table", "lifted"]), [42, 2]);
}

#[test]
fn the_guest_is_linked_into_one_module_that_fills_its_table_lazily() {
    let guest = super::super::GUEST_COMPONENT;
    assert!(!guest.is_empty(), "build the guest first: make guest");
    let linked = linked(guest).expect("the guest links");
    let tables = tables(&linked);
    // One module defines the libraries' table and fills all of it at constant offsets:
    // wasmtime fills such a table lazily. The only other table is the shim module's.
    let defining: Vec<_> = tables.iter().filter(|(defined, ..)| *defined > 0).collect();
    assert_eq!(defining.len(), 2, "{tables:?}");
    assert!(
        defining
            .iter()
            .all(|(_, _, constant)| constant.iter().all(|c| *c))
    );
    let importing: Vec<_> = tables
        .iter()
        .filter(|(_, imported, _)| *imported > 0)
        .collect();
    assert_eq!(
        importing.len(),
        1,
        "only the fix-up module imports a table: {tables:?}"
    );
    // The libraries define ~1,060 types between them, ~150 of them distinct: the merged
    // module defines each once.
    assert_eq!(types_defined_again(&linked), 0);
    assert_eq!(super::linked(&linked), None);
}

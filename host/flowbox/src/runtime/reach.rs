//! The functions of a core module that nothing can call, their bodies made traps.
//!
//! Once the libraries are linked into one module (`link`), every call from one library to
//! another is a direct call within it, and what can run is what its exports, its start
//! function and its element segments reach through the calls of the bodies they reach: a
//! `ref.func` must name a function an element segment declares, and a `call_indirect` goes
//! through a table only segments fill. In the guest, ~1,700 of the linked module's ~13,300
//! functions are reached by none of them (~0.7 MB of its ~6 MB of code): code of libpython
//! and libc that presumably only the interpreter's start-up called before the snapshot, or
//! that nothing calls at all. Their bodies become a trap, so wasmtime compiles them to nothing; each keeps
//! its place, so the functions keep their numbers (see `trim`).

use std::collections::HashSet;
use std::ops::Range;

use wasmparser::{
    BinaryReader, CodeSectionReader, ElementItems, ElementSectionReader, ExportSectionReader,
    ExternalKind, GlobalSectionReader, ImportSectionReader, Operator, OperatorsReader, TypeRef,
};

use super::binary::{
    CODE_SECTION, ELEMENT_SECTION, EXPORT_SECTION, GLOBAL_SECTION, HEADER, IMPORT_SECTION,
    START_SECTION, TRAPPING_BODY, leb128, push_section, sections,
};

/// `module` with the body of each function nothing can reach a trap; None when it has no such
/// function whose body is not a trap already, or is in a form this does not read.
pub(super) fn unreached_bodies_trapping(module: &[u8]) -> Option<Vec<u8>> {
    let sections = sections(module)?;
    let mut imported = 0u32;
    let mut roots: Vec<u32> = Vec::new();
    // Each defined function's body, and the functions it calls or refers to.
    let mut bodies: Vec<Range<usize>> = Vec::new();
    let mut callees: Vec<Vec<u32>> = Vec::new();
    for (id, range) in &sections {
        let reader = BinaryReader::new(&module[range.clone()], range.start);
        match *id {
            IMPORT_SECTION => {
                for import in ImportSectionReader::new(reader).ok()?.into_imports() {
                    if let TypeRef::Func(_) = import.ok()?.ty {
                        imported += 1;
                    }
                }
            }
            EXPORT_SECTION => {
                for export in ExportSectionReader::new(reader).ok()? {
                    let export = export.ok()?;
                    if export.kind == ExternalKind::Func {
                        roots.push(export.index);
                    }
                }
            }
            START_SECTION => roots.push(reader.clone().read_var_u32().ok()?),
            ELEMENT_SECTION => {
                for element in ElementSectionReader::new(reader).ok()? {
                    match element.ok()?.items {
                        ElementItems::Functions(functions) => {
                            for function in functions {
                                roots.push(function.ok()?);
                            }
                        }
                        ElementItems::Expressions(_, expressions) => {
                            for expression in expressions {
                                referred(expression.ok()?.get_operators_reader(), &mut roots)?;
                            }
                        }
                    }
                }
            }
            GLOBAL_SECTION => {
                for global in GlobalSectionReader::new(reader).ok()? {
                    referred(global.ok()?.init_expr.get_operators_reader(), &mut roots)?;
                }
            }
            CODE_SECTION => {
                for body in CodeSectionReader::new(reader).ok()? {
                    let body = body.ok()?;
                    let mut called = Vec::new();
                    referred(body.get_operators_reader().ok()?, &mut called)?;
                    bodies.push(body.range());
                    callees.push(called);
                }
            }
            _ => {}
        }
    }

    let mut reached: HashSet<u32> = HashSet::new();
    while let Some(function) = roots.pop() {
        if !reached.insert(function) {
            continue;
        }
        if let Some(defined) = function.checked_sub(imported) {
            roots.extend(callees.get(usize::try_from(defined).ok()?)?);
        }
    }

    let mut rewritten = module.get(..HEADER)?.to_vec();
    let mut trapped = 0;
    for (id, range) in sections {
        let content = &module[range.clone()];
        if id != CODE_SECTION {
            push_section(&mut rewritten, id, content);
            continue;
        }
        let mut code = Vec::new();
        leb128(bodies.len(), &mut code);
        for (defined, body) in (0u32..).zip(&bodies) {
            let bytes = &module[body.clone()];
            if reached.contains(&(imported + defined)) || bytes == &TRAPPING_BODY[1..] {
                leb128(bytes.len(), &mut code);
                code.extend_from_slice(bytes);
            } else {
                code.extend_from_slice(&TRAPPING_BODY);
                trapped += 1;
            }
        }
        push_section(&mut rewritten, id, &code);
    }
    (trapped > 0).then_some(rewritten)
}

/// Adds to `functions` each function `operators` call or refer to; None where they cannot be
/// read.
fn referred(operators: OperatorsReader<'_>, functions: &mut Vec<u32>) -> Option<()> {
    for operator in operators {
        match operator.ok()? {
            Operator::Call { function_index }
            | Operator::ReturnCall { function_index }
            | Operator::RefFunc { function_index } => functions.push(function_index),
            _ => {}
        }
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::super::calls::call;
    use super::super::trim::modules_rewritten;
    use super::*;

    /// A component whose module calls `$called` directly and `$placed` through its table, and
    /// never calls `$unreached`, which calls `$only_from_unreached`.
    const COMPONENT: &str = r#"
    (component
      (core module $m
        (type $t (func (result i32)))
        (table 1 funcref)
        (elem (i32.const 0) func $placed)
        (func $called (result i32) (i32.const 40))
        (func $placed (result i32) (i32.const 2))
        (func $unreached (result i32) (i32.add (call $only_from_unreached) (i32.const 1)))
        (func $only_from_unreached (result i32) (i32.const 7))
        (func (export "run") (result i32)
          (i32.add (call $called) (call_indirect (type $t) (i32.const 0)))))
      (core instance $i (instantiate $m))
      (func (export "run") (result s32) (canon lift (core func $i "run"))))
    "#;

    /// The bodies of the component's core module, as bytes.
    fn bodies(component: &[u8]) -> Vec<Vec<u8>> {
        wasmparser::Parser::new(0)
            .parse_all(component)
            .filter_map(|payload| match payload.unwrap() {
                wasmparser::Payload::CodeSectionEntry(body) => {
                    Some(component[body.range()].to_vec())
                }
                _ => None,
            })
            .collect()
    }

    #[test]
    fn the_functions_nothing_calls_trap_and_the_rest_run_as_before() {
        let component = wat::parse_str(COMPONENT).unwrap();
        assert_eq!(call(&component, &["run"]), [42]);
        let trimmed = modules_rewritten(&component, unreached_bodies_trapping)
            .expect("two functions nothing calls");
        let (before, after) = (bodies(&component), bodies(&trimmed));
        assert_eq!(before.len(), after.len(), "every function keeps its place");
        let trap = &TRAPPING_BODY[1..];
        // `$called`, `$placed` and the export are as they were; `$unreached` and what only it
        // calls trap.
        for kept in [0, 1, 4] {
            assert_eq!(after[kept], before[kept]);
        }
        for trapped in [2, 3] {
            assert_ne!(before[trapped], trap);
            assert_eq!(after[trapped], trap);
        }
        assert_eq!(call(&trimmed, &["run"]), [42]);
        // A second pass finds nothing more to do.
        assert_eq!(modules_rewritten(&trimmed, unreached_bodies_trapping), None);
    }

    #[test]
    fn the_guest_keeps_its_functions_and_those_nothing_calls_trap() {
        let guest = super::super::GUEST_COMPONENT;
        assert!(!guest.is_empty(), "build the guest first: make guest");
        let trimmed = super::super::trim::trimmed(guest);
        let trap = &TRAPPING_BODY[1..];
        let traps = bodies(&trimmed).iter().filter(|body| *body == trap).count();
        assert!(traps > 1_000, "{traps} functions trap");
    }
}

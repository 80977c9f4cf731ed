//! Where each item of the merged modules lands in the merged module, and the constants its
//! globals hold.

use std::collections::HashMap;

use wasm_encoder::ConstExpr;
use wasm_encoder::reencode::{Error as ReencodeError, Reencode};
use wasmparser::{FuncType, Operator, TypeRef};

use super::layout::Kind;
use super::resolve::{Merge, Source};

/// Each merged module's indices in the merged module.
#[derive(Default)]
pub(super) struct Numbering {
    pub(super) functions: Vec<u32>,
    pub(super) globals: Vec<u32>,
    pub(super) tables: Vec<u32>,
    pub(super) memories: Vec<u32>,
    pub(super) types: Vec<u32>,
    pub(super) elements: u32,
    pub(super) data: u32,
}

/// Renumbers a merged module's code and segments into the merged module.
pub(super) struct Renumber<'a>(pub(super) &'a Numbering);

fn mapped(indices: &[u32], index: u32) -> Result<u32, ReencodeError<()>> {
    usize::try_from(index)
        .ok()
        .and_then(|index| indices.get(index).copied())
        .ok_or(ReencodeError::UserError(()))
}

impl Reencode for Renumber<'_> {
    type Error = ();

    fn function_index(&mut self, func: u32) -> Result<u32, ReencodeError<()>> {
        mapped(&self.0.functions, func)
    }

    fn global_index(&mut self, global: u32) -> Result<u32, ReencodeError<()>> {
        mapped(&self.0.globals, global)
    }

    fn table_index(&mut self, table: u32) -> Result<u32, ReencodeError<()>> {
        mapped(&self.0.tables, table)
    }

    fn memory_index(&mut self, memory: u32) -> Result<u32, ReencodeError<()>> {
        mapped(&self.0.memories, memory)
    }

    fn type_index(&mut self, ty: u32) -> Result<u32, ReencodeError<()>> {
        mapped(&self.0.types, ty)
    }

    fn element_index(&mut self, element: u32) -> Result<u32, ReencodeError<()>> {
        Ok(self.0.elements + element)
    }

    fn data_index(&mut self, data: u32) -> Result<u32, ReencodeError<()>> {
        Ok(self.0.data + data)
    }

    fn tag_index(&mut self, _tag: u32) -> Result<u32, ReencodeError<()>> {
        Err(ReencodeError::UserError(()))
    }
}

/// A constant a global holds from instantiation on.
#[derive(Debug, Clone, Copy)]
pub(super) enum Value {
    I32(i32),
    I64(i64),
}

/// The merged module's imports and numbering.
pub(super) struct Linking {
    /// What the merged module imports: each source, its type in the module that imported it,
    /// and that module.
    pub(super) imports: Vec<(Source, u32, usize)>,
    import_index: HashMap<Source, u32>,
    /// Each merged module's first function and first global in the merged module.
    bases: HashMap<usize, (u32, u32)>,
    pub(super) numberings: HashMap<usize, Numbering>,
    /// Each merged module's globals' values, by the module and its index of the global.
    pub(super) values: HashMap<(usize, u32), Value>,
    /// How many globals the merged module defines.
    pub(super) globals: u32,
    /// The merged module's types: each function type of the merged modules once.
    pub(super) types: Vec<FuncType>,
}

impl Linking {
    pub(super) fn work_out(merge: &Merge) -> Option<Linking> {
        // Where each import of each merged module leads, and the merged module's own imports.
        let mut imports: Vec<(Source, u32, usize)> = Vec::new();
        let mut import_index: HashMap<Source, u32> = HashMap::new();
        let mut resolved: HashMap<usize, Vec<Source>> = HashMap::new();
        for &module in &merge.members {
            let info = &merge.infos[&module];
            let mut sources = Vec::new();
            for (import, (_, _, ty)) in info.imports.iter().enumerate() {
                let source = merge.resolve_import(module, import, 0)?;
                match (&source, ty) {
                    (Source::Internal(..), _) => {}
                    (Source::External(..) | Source::Builtin(_), TypeRef::Func(ty)) => {
                        if !import_index.contains_key(&source) {
                            import_index.insert(source.clone(), u32::try_from(imports.len()).ok()?);
                            imports.push((source.clone(), *ty, module));
                        }
                    }
                    // Only functions come from outside.
                    _ => return None,
                }
                sources.push(source);
            }
            resolved.insert(module, sources);
        }

        // Each merged module's numbering.
        let mut function_base = u32::try_from(imports.len()).ok()?;
        let mut global_base = 0u32;
        let mut element_base = 0u32;
        let mut data_base = 0u32;
        let mut bases: HashMap<usize, (u32, u32)> = HashMap::new();
        for &module in &merge.members {
            let info = &merge.infos[&module];
            bases.insert(module, (function_base, global_base));
            function_base += u32::try_from(info.defined(Kind::Func)).ok()?;
            global_base += u32::try_from(info.defined(Kind::Global)).ok()?;
        }
        let mut linking = Linking {
            imports,
            import_index,
            bases,
            numberings: HashMap::new(),
            values: HashMap::new(),
            globals: global_base,
            types: Vec::new(),
        };
        let mut type_index: HashMap<&FuncType, u32> = HashMap::new();
        for &module in &merge.members {
            let info = &merge.infos[&module];
            let sources = &resolved[&module];
            let mut numbering = Numbering {
                elements: element_base,
                data: data_base,
                ..Numbering::default()
            };
            for kind in [Kind::Func, Kind::Table, Kind::Memory, Kind::Global] {
                let mut indices = Vec::new();
                for &import in info.imported.get(&kind).map_or(&[][..], Vec::as_slice) {
                    indices.push(linking.index_of(merge, &sources[import])?);
                }
                for local in 0..info.defined(kind) {
                    let index = u32::try_from(info.imports_of(kind) + local).ok()?;
                    indices.push(linking.index_of(merge, &Source::Internal(module, kind, index))?);
                }
                match kind {
                    Kind::Func => numbering.functions = indices,
                    Kind::Table => numbering.tables = indices,
                    Kind::Memory => numbering.memories = indices,
                    Kind::Global => numbering.globals = indices,
                }
            }
            for ty in &info.types {
                let index = match type_index.get(ty) {
                    Some(&index) => index,
                    None => {
                        let index = u32::try_from(linking.types.len()).ok()?;
                        type_index.insert(ty, index);
                        linking.types.push(ty.clone());
                        index
                    }
                };
                numbering.types.push(index);
            }
            element_base += info.elements;
            data_base += info.data;
            linking.numberings.insert(module, numbering);
        }

        // The values of the globals, for the constant offsets and initialisers.
        let evaluate_all = |values: &mut HashMap<(usize, u32), Value>| -> Option<()> {
            // Globals refer only to globals before them or imported; a few passes settle them.
            for _ in 0..8 {
                let mut missing = false;
                for &module in &merge.members {
                    let info = &merge.infos[&module];
                    let imported = u32::try_from(info.imports_of(Kind::Global)).ok()?;
                    for (local, global) in info.globals.iter().enumerate() {
                        let index = imported + u32::try_from(local).ok()?;
                        if values.contains_key(&(module, index)) {
                            continue;
                        }
                        match evaluate(merge, module, &global.init_expr, values) {
                            Some(Some(value)) => {
                                values.insert((module, index), value);
                            }
                            Some(None) => missing = true,
                            None => {}
                        }
                    }
                }
                if !missing {
                    return Some(());
                }
            }
            None
        };
        evaluate_all(&mut linking.values)?;
        Some(linking)
    }

    /// Where `source` is in the merged module.
    pub(super) fn index_of(&self, merge: &Merge, source: &Source) -> Option<u32> {
        match source {
            Source::Internal(module, kind, index) => {
                let info = &merge.infos[module];
                let local = index.checked_sub(u32::try_from(info.imports_of(*kind)).ok()?)?;
                let (functions, globals) = self.bases[module];
                match kind {
                    Kind::Func => Some(functions + local),
                    Kind::Global => Some(globals + local),
                    // The first module's table and memory are the only ones.
                    Kind::Table | Kind::Memory => {
                        (*module == merge.first && local == 0).then_some(0)
                    }
                }
            }
            other => self.import_index.get(other).copied(),
        }
    }
}

/// `expr` of merged module `module` as the constant it evaluates to: Some(None) while a
/// global it reads is not known yet; None when it is not a constant this reads.
fn evaluate(
    merge: &Merge,
    module: usize,
    expr: &wasmparser::ConstExpr,
    values: &HashMap<(usize, u32), Value>,
) -> Option<Option<Value>> {
    let mut stack: Vec<Value> = Vec::new();
    for operator in expr.get_operators_reader() {
        let operator = operator.ok()?;
        match operator {
            Operator::I32Const { value } => stack.push(Value::I32(value)),
            Operator::I64Const { value } => stack.push(Value::I64(value)),
            Operator::GlobalGet { global_index } => {
                let Source::Internal(owner, Kind::Global, index) =
                    merge.resolve_index(module, Kind::Global, global_index, 0)?
                else {
                    return None;
                };
                match values.get(&(owner, index)) {
                    Some(value) => stack.push(*value),
                    None => return Some(None),
                }
            }
            Operator::I32Add | Operator::I32Sub | Operator::I32Mul => {
                let (Value::I32(b), Value::I32(a)) = (stack.pop()?, stack.pop()?) else {
                    return None;
                };
                stack.push(Value::I32(match operator {
                    Operator::I32Add => a.wrapping_add(b),
                    Operator::I32Sub => a.wrapping_sub(b),
                    _ => a.wrapping_mul(b),
                }));
            }
            Operator::End => {}
            _ => return None,
        }
    }
    match stack.as_slice() {
        [value] => Some(Some(*value)),
        _ => None,
    }
}

/// An offset expression as a constant.
pub(super) fn constant(
    merge: &Merge,
    module: usize,
    expr: &wasmparser::ConstExpr,
    values: &HashMap<(usize, u32), Value>,
) -> Option<ConstExpr> {
    match evaluate(merge, module, expr, values)?? {
        Value::I32(value) => Some(ConstExpr::i32_const(value)),
        Value::I64(value) => Some(ConstExpr::i64_const(value)),
    }
}

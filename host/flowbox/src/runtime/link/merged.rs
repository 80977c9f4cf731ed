//! The merged module: the merged modules' function types, each once, their functions, globals
//! and segments side by side, renumbered, and the exports the component still aliases.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};

use wasm_encoder::reencode::{Reencode, RoundtripReencoder};
use wasm_encoder::{
    CodeSection, ConstExpr, DataCountSection, DataSection, ElementSection, Elements, EntityType,
    ExportSection, FunctionSection, GlobalSection, ImportSection, MemorySection, Module,
    TableSection, TypeSection,
};
use wasmparser::{DataKind, ElementItems, ElementKind, Parser, Payload};

use super::layout::{CoreInstance, Kind, Layout, Origin};
use super::numbering::{Linking, Renumber, Value, constant};
use super::resolve::{Merge, Source};
use super::shims::Shims;

/// The exports of the merged module.
pub(super) struct Exports {
    /// The name each of the component's aliased items is exported under, by the component's
    /// index of the item.
    pub(super) aliases: HashMap<(Kind, u32), String>,
    /// Each export's item in the merged module.
    exported: BTreeMap<String, (Kind, u32)>,
}

impl Exports {
    pub(super) fn work_out(layout: &Layout, merge: &Merge, linking: &Linking) -> Option<Exports> {
        // What the component still uses once the merged modules' instances take no arguments:
        // the items its own definitions name, and those of the instances made of exports that
        // the other modules are instantiated with. The rest of its aliases of the merged
        // modules' exports lead nowhere; they name one export of their kind, so that the merged
        // module exports only what is used.
        let mut live = layout.used.clone();
        for instance in &layout.instances {
            let CoreInstance::Instantiate { module, args } = instance else {
                continue;
            };
            if merge.members.contains(&usize::try_from(*module).ok()?) {
                continue;
            }
            for (_, arg) in args {
                if let Some(CoreInstance::Exports(exports)) =
                    layout.instances.get(usize::try_from(*arg).ok()?)
                {
                    live.extend(exports.iter().map(|&(_, kind, index)| (kind, index)));
                }
            }
        }
        // The name the merged module exports each aliased item under, by the component's index
        // of the item.
        let mut exports = Exports {
            aliases: HashMap::new(),
            exported: BTreeMap::new(),
        };
        for (&kind, origins) in &layout.items {
            for (index, origin) in origins.iter().enumerate() {
                let Origin::Export { instance, name } = origin else {
                    continue;
                };
                let Some(&module) = merge.member_instances.get(instance) else {
                    continue;
                };
                let index = u32::try_from(index).ok()?;
                let (export, target) = if live.contains(&(kind, index)) {
                    let target =
                        linking.index_of(merge, &merge.resolve_export(module, name, kind, 0)?)?;
                    let export = if module == merge.first {
                        name.clone()
                    } else {
                        format!("{module}:{name}")
                    };
                    (export, target)
                } else if kind != Kind::Global || linking.globals > 0 {
                    (format!("unused {kind:?}"), 0)
                } else {
                    return None;
                };
                let entry = exports.exported.entry(export.clone());
                if *entry.or_insert((kind, target)) != (kind, target) {
                    return None;
                }
                exports.aliases.insert((kind, index), export);
            }
        }
        Some(exports)
    }
}

/// The merged module, its built-ins imported from `shims`: each from the entry its place in
/// `builtins` (their core functions) gives it.
pub(super) fn module(
    merge: &Merge,
    linking: &Linking,
    exports: &Exports,
    shims: Option<&Shims>,
    builtins: &[u32],
) -> Option<Vec<u8>> {
    // The merged module.
    let mut types = TypeSection::new();
    for ty in &linking.types {
        types
            .ty()
            .func_type(&RoundtripReencoder.func_type(ty.clone()).ok()?);
    }
    let mut import_section = ImportSection::new();
    let mut functions = FunctionSection::new();
    let mut tables = TableSection::new();
    let mut memories = MemorySection::new();
    let mut globals = GlobalSection::new();
    let mut elements = ElementSection::new();
    let mut code = CodeSection::new();
    let mut data = DataSection::new();
    for (source, ty, module) in &linking.imports {
        let ty = *linking.numberings[module]
            .types
            .get(usize::try_from(*ty).ok()?)?;
        let (instance, name) = match source {
            Source::External(instance, name) => (*instance, name.clone()),
            Source::Builtin(function) => {
                let shims = shims?;
                let slot = builtins.iter().position(|builtin| builtin == function)?;
                (shims.instance, (shims.size + slot).to_string())
            }
            Source::Internal(..) => return None,
        };
        import_section.import(&instance.to_string(), &name, EntityType::Function(ty));
    }
    for &module in &merge.members {
        let info = &merge.infos[&module];
        let numbering = &linking.numberings[&module];
        let mut renumber = Renumber(numbering);
        for payload in Parser::new(0).parse_all(info.bytes) {
            match payload.ok()? {
                Payload::CodeSectionEntry(body) => {
                    renumber.parse_function_body(&mut code, body).ok()?;
                }
                Payload::DataSection(reader) => {
                    for datum in reader {
                        let datum = datum.ok()?;
                        match datum.kind {
                            DataKind::Passive => {
                                data.passive(datum.data.iter().copied());
                            }
                            DataKind::Active {
                                memory_index,
                                offset_expr,
                            } => {
                                let memory = renumber.memory_index(memory_index).ok()?;
                                let offset =
                                    constant(merge, module, &offset_expr, &linking.values)?;
                                data.active(memory, &offset, datum.data.iter().copied());
                            }
                        }
                    }
                }
                Payload::ElementSection(reader) => {
                    for element in reader {
                        let element = element.ok()?;
                        let items = match element.items {
                            ElementItems::Functions(functions) => {
                                let mut mapped = Vec::new();
                                for function in functions {
                                    mapped.push(renumber.function_index(function.ok()?).ok()?);
                                }
                                Elements::Functions(Cow::Owned(mapped))
                            }
                            ElementItems::Expressions(ty, exprs) => {
                                let ty = renumber.ref_type(ty).ok()?;
                                let mut mapped = Vec::new();
                                for expr in exprs {
                                    mapped.push(renumber.const_expr(expr.ok()?).ok()?);
                                }
                                Elements::Expressions(ty, Cow::Owned(mapped))
                            }
                        };
                        match element.kind {
                            ElementKind::Active {
                                table_index,
                                offset_expr,
                            } => {
                                let table = renumber.table_index(table_index.unwrap_or(0)).ok()?;
                                let offset =
                                    constant(merge, module, &offset_expr, &linking.values)?;
                                elements.active((table != 0).then_some(table), &offset, items);
                            }
                            ElementKind::Passive => {
                                elements.passive(items);
                            }
                            ElementKind::Declared => {
                                elements.declared(items);
                            }
                        }
                    }
                }
                _ => {}
            }
        }
        for &ty in &info.functions {
            functions.function(*numbering.types.get(usize::try_from(ty).ok()?)?);
        }
        for table in &info.tables {
            tables.table(RoundtripReencoder.table_type(*table).ok()?);
        }
        for memory in &info.memories {
            memories.memory(RoundtripReencoder.memory_type(*memory).ok()?);
        }
        let imported = u32::try_from(info.imports_of(Kind::Global)).ok()?;
        for (local, global) in info.globals.iter().enumerate() {
            let index = imported + u32::try_from(local).ok()?;
            let init = match linking.values.get(&(module, index)) {
                Some(Value::I32(value)) => ConstExpr::i32_const(*value),
                Some(Value::I64(value)) => ConstExpr::i64_const(*value),
                None => return None,
            };
            globals.global(RoundtripReencoder.global_type(global.ty).ok()?, &init);
        }
    }
    let mut export_section = ExportSection::new();
    for (name, (kind, index)) in &exports.exported {
        export_section.export(name, kind.export_kind(), *index);
    }
    let mut merged = Module::new();
    merged
        .section(&types)
        .section(&import_section)
        .section(&functions)
        .section(&tables)
        .section(&memories)
        .section(&globals)
        .section(&export_section)
        .section(&elements)
        .section(&DataCountSection { count: data.len() })
        .section(&code)
        .section(&data);
    Some(merged.finish())
}

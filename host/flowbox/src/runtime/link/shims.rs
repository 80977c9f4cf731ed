//! The shim module's table, grown by an entry for each canonical built-in the merged module
//! imports: the merged module is instantiated before the built-ins are defined, so it reaches
//! them through the shim module, which the fix-up module fills at the end.

use std::borrow::Cow;

use wasm_encoder::reencode::{Reencode, RoundtripReencoder};
use wasm_encoder::{
    CodeSection, ConstExpr, ElementSection, Elements, EntityType, ExportKind, ExportSection,
    Function, FunctionSection, ImportSection, Instruction, Module, TableSection, TypeSection,
};
use wasmparser::{Parser, Payload, TypeRef};

use super::layout::{CoreInstance, Kind, Layout, ModuleInfo, Origin};

/// The shim module instantiated before the merged one, and the fix-up module that fills its
/// table once the lowered functions exist.
pub(super) struct Shims {
    /// The shim module's instance, and the module.
    pub(super) instance: u32,
    pub(super) module: usize,
    /// How many functions its table holds.
    pub(super) size: usize,
    /// The fix-up module, and the instance made of exports that it takes.
    pub(super) fixup_module: usize,
    pub(super) fixup_exports: u32,
}

impl Shims {
    pub(super) fn find(layout: &Layout, component: &[u8], instance: u32) -> Option<Shims> {
        let CoreInstance::Instantiate { module, args } =
            layout.instances.get(usize::try_from(instance).ok()?)?
        else {
            return None;
        };
        if !args.is_empty() {
            return None;
        }
        let module = usize::try_from(*module).ok()?;
        let info = ModuleInfo::read(component.get(layout.modules.get(module)?.clone())?)?;
        let [table] = info.tables[..] else {
            return None;
        };
        if table.maximum != Some(table.initial) || !info.imports.is_empty() {
            return None;
        }
        let size = usize::try_from(table.initial).ok()?;
        if info.functions.len() != size {
            return None;
        }
        let (table_name, _) = info
            .exports
            .iter()
            .find(|(_, (kind, _))| *kind == Kind::Table)?;
        // The instance made of exports that hands the shim's table on, and the module
        // instantiated with it.
        let (fixup_exports, _) = layout.instances.iter().enumerate().find(|(_, candidate)| {
            let CoreInstance::Exports(exports) = candidate else {
                return false;
            };
            exports.iter().any(|(_, kind, index)| {
                let origin = (*kind == Kind::Table)
                    .then(|| layout.origin(Kind::Table, *index))
                    .flatten();
                matches!(
                    origin,
                    Some(Origin::Export { instance: from, name })
                        if *from == instance && name == table_name
                )
            })
        })?;
        let fixup_exports = u32::try_from(fixup_exports).ok()?;
        let fixup_module = layout
            .instances
            .iter()
            .find_map(|candidate| match candidate {
                CoreInstance::Instantiate { module, args }
                    if args.len() == 1 && args[0].1 == fixup_exports =>
                {
                    Some(usize::try_from(*module).ok()?)
                }
                _ => None,
            })?;
        Some(Shims {
            instance,
            module,
            size,
            fixup_module,
            fixup_exports,
        })
    }

    /// The shim module with a function for each of `signatures` calling through a new entry
    /// of its table, and the fix-up module filling those entries from its new imports.
    pub(super) fn extended(
        &self,
        component: &[u8],
        layout: &Layout,
        signatures: &[wasmparser::FuncType],
    ) -> Option<(Vec<u8>, Vec<u8>)> {
        let shim = component.get(layout.modules.get(self.module)?.clone())?;
        let fixup = component.get(layout.modules.get(self.fixup_module)?.clone())?;
        let added = signatures.len();
        let size = u32::try_from(self.size + added).ok()?;

        // The shim module.
        let mut types = TypeSection::new();
        let mut functions = FunctionSection::new();
        let mut tables = TableSection::new();
        let mut exports = ExportSection::new();
        let mut code = CodeSection::new();
        let mut type_count = 0;
        for payload in Parser::new(0).parse_all(shim) {
            match payload.ok()? {
                Payload::TypeSection(reader) => {
                    type_count = reader.count();
                    RoundtripReencoder
                        .parse_type_section(&mut types, reader)
                        .ok()?;
                }
                Payload::FunctionSection(reader) => {
                    RoundtripReencoder
                        .parse_function_section(&mut functions, reader)
                        .ok()?;
                }
                Payload::TableSection(reader) => {
                    for table in reader {
                        let mut ty = table.ok()?.ty;
                        ty.initial = u64::from(size);
                        ty.maximum = Some(u64::from(size));
                        tables.table(RoundtripReencoder.table_type(ty).ok()?);
                    }
                }
                Payload::ExportSection(reader) => {
                    RoundtripReencoder
                        .parse_export_section(&mut exports, reader)
                        .ok()?;
                }
                Payload::CodeSectionEntry(body) => {
                    RoundtripReencoder
                        .parse_function_body(&mut code, body)
                        .ok()?;
                }
                Payload::ImportSection(_)
                | Payload::MemorySection(_)
                | Payload::GlobalSection(_)
                | Payload::ElementSection(_)
                | Payload::DataSection(_)
                | Payload::StartSection { .. } => return None,
                _ => {}
            }
        }
        let defined = u32::try_from(self.size).ok()?;
        for (slot, signature) in signatures.iter().enumerate() {
            let ty = type_count + u32::try_from(slot).ok()?;
            types
                .ty()
                .func_type(&RoundtripReencoder.func_type(signature.clone()).ok()?);
            functions.function(ty);
            let entry = defined + u32::try_from(slot).ok()?;
            exports.export(&entry.to_string(), ExportKind::Func, entry);
            let mut body = Function::new([]);
            for param in 0..signature.params().len() {
                body.instruction(&Instruction::LocalGet(u32::try_from(param).ok()?));
            }
            body.instruction(&Instruction::I32Const(i32::try_from(entry).ok()?));
            body.instruction(&Instruction::CallIndirect {
                type_index: ty,
                table_index: 0,
            });
            body.instruction(&Instruction::End);
            code.function(&body);
        }
        let mut module = Module::new();
        module
            .section(&types)
            .section(&functions)
            .section(&tables)
            .section(&exports)
            .section(&code);
        let shim = module.finish();

        // The fix-up module.
        let mut types = TypeSection::new();
        let mut imports = ImportSection::new();
        let mut elements = ElementSection::new();
        let mut type_count = 0;
        let mut function_imports = 0u32;
        let mut table_module = None;
        for payload in Parser::new(0).parse_all(fixup) {
            match payload.ok()? {
                Payload::TypeSection(reader) => {
                    type_count = reader.count();
                    RoundtripReencoder
                        .parse_type_section(&mut types, reader)
                        .ok()?;
                }
                Payload::ImportSection(reader) => {
                    for import in reader.into_imports() {
                        let import = import.ok()?;
                        let mut ty = import.ty;
                        match &mut ty {
                            TypeRef::Func(_) => function_imports += 1,
                            TypeRef::Table(table) => {
                                table_module = Some(import.module.to_owned());
                                table.initial = u64::from(size);
                                table.maximum = Some(u64::from(size));
                            }
                            _ => return None,
                        }
                        imports.import(
                            import.module,
                            import.name,
                            RoundtripReencoder.entity_type(ty).ok()?,
                        );
                    }
                }
                Payload::ElementSection(reader) => {
                    RoundtripReencoder
                        .parse_element_section(&mut elements, reader)
                        .ok()?;
                }
                Payload::FunctionSection(_)
                | Payload::GlobalSection(_)
                | Payload::MemorySection(_)
                | Payload::TableSection(_)
                | Payload::ExportSection(_)
                | Payload::DataSection(_)
                | Payload::StartSection { .. } => return None,
                _ => {}
            }
        }
        let table_module = table_module?;
        let mut placed = Vec::new();
        for (slot, signature) in signatures.iter().enumerate() {
            let ty = type_count + u32::try_from(slot).ok()?;
            types
                .ty()
                .func_type(&RoundtripReencoder.func_type(signature.clone()).ok()?);
            let entry = defined + u32::try_from(slot).ok()?;
            imports.import(&table_module, &entry.to_string(), EntityType::Function(ty));
            placed.push(function_imports + u32::try_from(slot).ok()?);
        }
        elements.active(
            None,
            &ConstExpr::i32_const(i32::try_from(defined).ok()?),
            Elements::Functions(Cow::Owned(placed)),
        );
        let mut module = Module::new();
        module.section(&types).section(&imports).section(&elements);
        Some((shim, module.finish()))
    }
}

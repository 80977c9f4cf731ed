//! The component as linking reads it: its core modules, its core instances and where each of
//! its core items comes from.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ops::Range;

use wasm_encoder::ExportKind;
use wasmparser::{
    CanonicalFunction, CanonicalOption, ComponentAlias, ComponentType, ExternalKind, Instance,
    Parser, Payload, TypeRef,
};

/// The kinds of core item the component wires between instances.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) enum Kind {
    Func,
    Table,
    Memory,
    Global,
}

impl Kind {
    pub(super) fn of_external(kind: ExternalKind) -> Option<Kind> {
        match kind {
            ExternalKind::Func => Some(Kind::Func),
            ExternalKind::Table => Some(Kind::Table),
            ExternalKind::Memory => Some(Kind::Memory),
            ExternalKind::Global => Some(Kind::Global),
            ExternalKind::Tag | ExternalKind::FuncExact => None,
        }
    }

    pub(super) fn of_import(ty: &TypeRef) -> Option<Kind> {
        match ty {
            TypeRef::Func(_) => Some(Kind::Func),
            TypeRef::Table(_) => Some(Kind::Table),
            TypeRef::Memory(_) => Some(Kind::Memory),
            TypeRef::Global(_) => Some(Kind::Global),
            TypeRef::Tag(_) | TypeRef::FuncExact(_) => None,
        }
    }

    pub(super) fn export_kind(self) -> ExportKind {
        match self {
            Kind::Func => ExportKind::Func,
            Kind::Table => ExportKind::Table,
            Kind::Memory => ExportKind::Memory,
            Kind::Global => ExportKind::Global,
        }
    }

    /// The byte a component's binary format writes for this core sort.
    pub(super) fn sort_byte(self) -> u8 {
        match self {
            Kind::Func => 0x00,
            Kind::Table => 0x01,
            Kind::Memory => 0x02,
            Kind::Global => 0x03,
        }
    }
}

/// Where one of the component's core items comes from.
#[derive(Debug, Clone)]
pub(super) enum Origin {
    /// An export of a core instance.
    Export { instance: u32, name: String },
    /// A canonical built-in (a lowered function, a resource drop, ...).
    Builtin,
}

/// One of the component's core instances.
#[derive(Debug, Clone)]
pub(super) enum CoreInstance {
    Instantiate {
        module: u32,
        args: Vec<(String, u32)>,
    },
    Exports(Vec<(String, Kind, u32)>),
}

/// What a core module imports and defines, as the merge needs it.
pub(super) struct ModuleInfo<'a> {
    pub(super) bytes: &'a [u8],
    pub(super) imports: Vec<(String, String, TypeRef)>,
    /// The imports of each kind, in order: indices into `imports`.
    pub(super) imported: BTreeMap<Kind, Vec<usize>>,
    /// The type of each function the module defines.
    pub(super) functions: Vec<u32>,
    pub(super) tables: Vec<wasmparser::TableType>,
    pub(super) memories: Vec<wasmparser::MemoryType>,
    pub(super) globals: Vec<wasmparser::Global<'a>>,
    pub(super) exports: HashMap<String, (Kind, u32)>,
    /// The module's types: function types alone (see [`function_type`]).
    pub(super) types: Vec<wasmparser::FuncType>,
    pub(super) elements: u32,
    pub(super) data: u32,
}

impl<'a> ModuleInfo<'a> {
    pub(super) fn read(bytes: &'a [u8]) -> Option<ModuleInfo<'a>> {
        let mut info = ModuleInfo {
            bytes,
            imports: Vec::new(),
            imported: BTreeMap::new(),
            functions: Vec::new(),
            tables: Vec::new(),
            memories: Vec::new(),
            globals: Vec::new(),
            exports: HashMap::new(),
            types: Vec::new(),
            elements: 0,
            data: 0,
        };
        for payload in Parser::new(0).parse_all(bytes) {
            match payload.ok()? {
                Payload::TypeSection(reader) => {
                    for group in reader {
                        info.types.push(function_type(group.ok()?)?);
                    }
                }
                Payload::ImportSection(reader) => {
                    for import in reader.into_imports() {
                        let import = import.ok()?;
                        let kind = Kind::of_import(&import.ty)?;
                        info.imported
                            .entry(kind)
                            .or_default()
                            .push(info.imports.len());
                        info.imports.push((
                            import.module.to_owned(),
                            import.name.to_owned(),
                            import.ty,
                        ));
                    }
                }
                Payload::FunctionSection(reader) => {
                    info.functions = reader.into_iter().collect::<Result<_, _>>().ok()?;
                }
                Payload::TableSection(reader) => {
                    for table in reader {
                        let table = table.ok()?;
                        // A table with an initialiser of its own is not the plain form.
                        if !matches!(table.init, wasmparser::TableInit::RefNull) {
                            return None;
                        }
                        info.tables.push(table.ty);
                    }
                }
                Payload::MemorySection(reader) => {
                    info.memories = reader.into_iter().collect::<Result<_, _>>().ok()?;
                }
                Payload::GlobalSection(reader) => {
                    info.globals = reader.into_iter().collect::<Result<_, _>>().ok()?;
                }
                Payload::ExportSection(reader) => {
                    for export in reader {
                        let export = export.ok()?;
                        let kind = Kind::of_external(export.kind)?;
                        info.exports
                            .insert(export.name.to_owned(), (kind, export.index));
                    }
                }
                Payload::ElementSection(reader) => info.elements = reader.count(),
                Payload::DataSection(reader) => info.data = reader.count(),
                Payload::TagSection(_) | Payload::StartSection { .. } => return None,
                _ => {}
            }
        }
        Some(info)
    }

    pub(super) fn imports_of(&self, kind: Kind) -> usize {
        self.imported.get(&kind).map_or(0, Vec::len)
    }

    pub(super) fn defined(&self, kind: Kind) -> usize {
        match kind {
            Kind::Func => self.functions.len(),
            Kind::Table => self.tables.len(),
            Kind::Memory => self.memories.len(),
            Kind::Global => self.globals.len(),
        }
    }
}

/// The function type a type group defines, when it is one function type alone, final, with no
/// supertype and no reference to another type: two such are the same type wherever they are
/// defined, so the merged module defines each once. `None` for any other group.
fn function_type(group: wasmparser::RecGroup) -> Option<wasmparser::FuncType> {
    if group.is_explicit_rec_group() {
        return None;
    }
    let mut types = group.into_types();
    let ty = types.next()?;
    let plain = ty.is_final && ty.supertype_idx.is_none() && !ty.composite_type.shared;
    let wasmparser::CompositeInnerType::Func(function) = ty.composite_type.inner else {
        return None;
    };
    let standalone = function
        .params()
        .iter()
        .chain(function.results())
        .all(|ty| match ty {
            wasmparser::ValType::Ref(reference) => !reference.is_concrete_type_ref(),
            _ => true,
        });
    (plain && standalone && types.next().is_none()).then_some(function)
}

/// The component as the merge reads it.
pub(super) struct Layout {
    pub(super) modules: Vec<Range<usize>>,
    pub(super) instances: Vec<CoreInstance>,
    /// How many core functions the component had defined as each instance was made.
    pub(super) functions_before: Vec<u32>,
    pub(super) items: BTreeMap<Kind, Vec<Origin>>,
    /// The core items the component's own definitions use (lifted functions, canonical
    /// options, resource destructors).
    pub(super) used: HashSet<(Kind, u32)>,
}

impl Layout {
    pub(super) fn read(component: &[u8]) -> Option<Layout> {
        let mut layout = Layout {
            modules: Vec::new(),
            instances: Vec::new(),
            functions_before: Vec::new(),
            items: BTreeMap::new(),
            used: HashSet::new(),
        };
        let mut depth = 0usize;
        for payload in Parser::new(0).parse_all(component) {
            let payload = payload.ok()?;
            match payload {
                Payload::ModuleSection {
                    unchecked_range, ..
                } => {
                    if depth == 0 {
                        layout.modules.push(unchecked_range);
                    }
                    depth += 1;
                    continue;
                }
                Payload::ComponentSection { .. } => {
                    depth += 1;
                    continue;
                }
                Payload::End(_) => {
                    depth = depth.saturating_sub(1);
                    continue;
                }
                _ => {}
            }
            if depth > 0 {
                continue;
            }
            match payload {
                Payload::InstanceSection(reader) => {
                    for instance in reader {
                        let functions = layout.items.get(&Kind::Func).map_or(0, Vec::len);
                        layout.functions_before.push(u32::try_from(functions).ok()?);
                        layout.instances.push(match instance.ok()? {
                            Instance::Instantiate { module_index, args } => {
                                CoreInstance::Instantiate {
                                    module: module_index,
                                    args: args
                                        .iter()
                                        .map(|arg| (arg.name.to_owned(), arg.index))
                                        .collect(),
                                }
                            }
                            Instance::FromExports(exports) => CoreInstance::Exports(
                                exports
                                    .iter()
                                    .map(|export| {
                                        Some((
                                            export.name.to_owned(),
                                            Kind::of_external(export.kind)?,
                                            export.index,
                                        ))
                                    })
                                    .collect::<Option<_>>()?,
                            ),
                        });
                    }
                }
                Payload::ComponentAliasSection(reader) => {
                    for alias in reader {
                        if let ComponentAlias::CoreInstanceExport {
                            kind,
                            instance_index,
                            name,
                        } = alias.ok()?
                        {
                            let Some(kind) = Kind::of_external(kind) else {
                                continue;
                            };
                            layout.items.entry(kind).or_default().push(Origin::Export {
                                instance: instance_index,
                                name: name.to_owned(),
                            });
                        }
                    }
                }
                Payload::ComponentCanonicalSection(reader) => {
                    for function in reader {
                        let function = function.ok()?;
                        if !matches!(function, CanonicalFunction::Lift { .. }) {
                            layout
                                .items
                                .entry(Kind::Func)
                                .or_default()
                                .push(Origin::Builtin);
                        }
                        let options = match function {
                            CanonicalFunction::Lift {
                                core_func_index,
                                options,
                                ..
                            } => {
                                layout.used.insert((Kind::Func, core_func_index));
                                options
                            }
                            CanonicalFunction::Lower { options, .. } => options,
                            CanonicalFunction::ResourceNew { .. }
                            | CanonicalFunction::ResourceDrop { .. }
                            | CanonicalFunction::ResourceRep { .. } => Box::default(),
                            // Any other may use core items this does not follow.
                            _ => return None,
                        };
                        for option in options.iter() {
                            match *option {
                                CanonicalOption::Memory(memory) => {
                                    layout.used.insert((Kind::Memory, memory));
                                }
                                CanonicalOption::Realloc(function)
                                | CanonicalOption::PostReturn(function)
                                | CanonicalOption::Callback(function) => {
                                    layout.used.insert((Kind::Func, function));
                                }
                                _ => {}
                            }
                        }
                    }
                }
                Payload::ComponentTypeSection(reader) => {
                    for ty in reader {
                        if let ComponentType::Resource {
                            dtor: Some(function),
                            ..
                        } = ty.ok()?
                        {
                            layout.used.insert((Kind::Func, function));
                        }
                    }
                }
                _ => {}
            }
        }
        Some(layout)
    }

    pub(super) fn origin(&self, kind: Kind, index: u32) -> Option<&Origin> {
        self.items.get(&kind)?.get(usize::try_from(index).ok()?)
    }
}

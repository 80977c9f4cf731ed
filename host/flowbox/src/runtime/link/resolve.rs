//! Which of the component's modules are merged, and what each of their imports names.

use std::collections::HashMap;

use super::layout::{CoreInstance, Kind, Layout, ModuleInfo, Origin};

/// What an import of one of the merged modules turns out to be.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) enum Source {
    /// An item one of the merged modules defines: its module and its index there.
    Internal(usize, Kind, u32),
    /// An export of an instance made before the merged module.
    External(u32, String),
    /// A canonical built-in, by its core function index in the component.
    Builtin(u32),
}

/// Which modules are merged, and where each of their imports leads.
pub(super) struct Merge<'a> {
    pub(super) layout: &'a Layout,
    /// The merged modules, by module index, in the order they are merged (the first module
    /// first).
    pub(super) members: Vec<usize>,
    pub(super) infos: HashMap<usize, ModuleInfo<'a>>,
    /// The instance of each merged module.
    pub(super) instance_of: HashMap<usize, u32>,
    /// The merged modules by their instances.
    pub(super) member_instances: HashMap<u32, usize>,
    /// The first module, which defines the memory and the table.
    pub(super) first: usize,
    /// The first module's instance: where the merged one is instantiated.
    pub(super) slot: u32,
}

impl<'a> Merge<'a> {
    /// The first module (the one instantiated first that defines a table and a memory) and
    /// the modules that join it; None when no module joins.
    pub(super) fn plan(layout: &'a Layout, component: &'a [u8]) -> Option<Merge<'a>> {
        let module_bytes = |module: usize| component.get(layout.modules.get(module)?.clone());
        // Each instantiated module's instance.
        let mut instance_of: HashMap<usize, u32> = HashMap::new();
        for (index, instance) in layout.instances.iter().enumerate() {
            if let CoreInstance::Instantiate { module, .. } = instance {
                let module = usize::try_from(*module).ok()?;
                if instance_of
                    .insert(module, u32::try_from(index).ok()?)
                    .is_some()
                {
                    // A module instantiated twice is not this shape.
                    return None;
                }
            }
        }
        let mut infos = HashMap::new();
        for module in 0..layout.modules.len() {
            if instance_of.contains_key(&module) {
                infos.insert(module, ModuleInfo::read(module_bytes(module)?)?);
            }
        }
        // The first module: the one instantiated first that defines a table and a memory.
        let (&first, &slot) = instance_of
            .iter()
            .filter(|(module, _)| {
                let info = &infos[module];
                info.tables.len() == 1 && info.memories.len() == 1
            })
            .min_by_key(|(_, instance)| **instance)?;
        let mut merge = Merge {
            layout,
            members: vec![first],
            infos: HashMap::new(),
            instance_of: HashMap::new(),
            member_instances: HashMap::new(),
            first,
            slot,
        };
        merge.instance_of.insert(first, slot);
        merge.infos.insert(first, infos.remove(&first)?);
        // A module joins when it imports the first module's table.
        let mut candidates: Vec<(usize, u32)> = instance_of
            .iter()
            .filter(|&(&module, _)| module != first)
            .map(|(&module, &instance)| (module, instance))
            .collect();
        candidates.sort_by_key(|&(_, instance)| instance);
        for (module, instance) in candidates {
            let info = infos.remove(&module)?;
            let tables = info.imported.get(&Kind::Table).cloned().unwrap_or_default();
            merge.infos.insert(module, info);
            merge.instance_of.insert(module, instance);
            // So does a module of functions alone, which imports nothing.
            let info = &merge.infos[&module];
            let standalone = info.imports.is_empty()
                && info.tables.is_empty()
                && info.memories.is_empty()
                && !info.functions.is_empty();
            let joins = standalone
                || !tables.is_empty()
                    && tables.iter().all(|&import| {
                        merge.resolve_import(module, import, 0)
                            == Some(Source::Internal(first, Kind::Table, 0))
                    });
            if joins {
                merge.members.push(module);
            } else {
                merge.infos.remove(&module);
                merge.instance_of.remove(&module);
            }
        }
        if merge.members.len() < 2 {
            return None;
        }
        merge.member_instances = merge
            .members
            .iter()
            .map(|&module| (merge.instance_of[&module], module))
            .collect();
        // A module outside the merge that takes a merged module's instance whole is not handled.
        for instance in &layout.instances {
            if let CoreInstance::Instantiate { module, args } = instance {
                let module = usize::try_from(*module).ok()?;
                if !merge.members.contains(&module)
                    && args
                        .iter()
                        .any(|(_, arg)| merge.member_instances.contains_key(arg))
                {
                    return None;
                }
            }
        }
        Some(merge)
    }

    fn member_of_instance(&self, instance: u32) -> Option<usize> {
        self.instance_of
            .iter()
            .find(|&(_, &at)| at == instance)
            .map(|(&module, _)| module)
    }

    /// Where import `import` of merged module `module` leads.
    pub(super) fn resolve_import(
        &self,
        module: usize,
        import: usize,
        depth: u32,
    ) -> Option<Source> {
        let info = &self.infos[&module];
        let (from, name, ty) = info.imports.get(import)?;
        let kind = Kind::of_import(ty)?;
        let instance = self.instance_of[&module];
        let CoreInstance::Instantiate { args, .. } =
            self.layout.instances.get(usize::try_from(instance).ok()?)?
        else {
            return None;
        };
        let (_, arg) = args.iter().find(|(arg, _)| arg == from)?;
        self.resolve_in_instance(*arg, name, kind, depth + 1)
    }

    /// Where export `name` of core instance `instance` leads.
    pub(super) fn resolve_in_instance(
        &self,
        instance: u32,
        name: &str,
        kind: Kind,
        depth: u32,
    ) -> Option<Source> {
        if depth > 16 {
            return None;
        }
        if let Some(module) = self.member_of_instance(instance) {
            return self.resolve_export(module, name, kind, depth);
        }
        match self.layout.instances.get(usize::try_from(instance).ok()?)? {
            CoreInstance::Instantiate { .. } if instance < self.slot => {
                Some(Source::External(instance, name.to_owned()))
            }
            CoreInstance::Instantiate { .. } => None,
            CoreInstance::Exports(exports) => {
                let &(_, exported, index) = exports.iter().find(|(n, _, _)| n == name)?;
                if exported != kind {
                    return None;
                }
                match self.layout.origin(kind, index)? {
                    Origin::Export { instance, name } => {
                        self.resolve_in_instance(*instance, name, kind, depth + 1)
                    }
                    Origin::Builtin if kind == Kind::Func => Some(Source::Builtin(index)),
                    Origin::Builtin => None,
                }
            }
        }
    }

    /// Where export `name` of merged module `module` leads.
    pub(super) fn resolve_export(
        &self,
        module: usize,
        name: &str,
        kind: Kind,
        depth: u32,
    ) -> Option<Source> {
        let info = &self.infos[&module];
        let &(exported, index) = info.exports.get(name)?;
        if exported != kind {
            return None;
        }
        self.resolve_index(module, kind, index, depth)
    }

    /// Where item `index` of `kind` in merged module `module` leads.
    pub(super) fn resolve_index(
        &self,
        module: usize,
        kind: Kind,
        index: u32,
        depth: u32,
    ) -> Option<Source> {
        let info = &self.infos[&module];
        let index = usize::try_from(index).ok()?;
        match info
            .imported
            .get(&kind)
            .and_then(|imports| imports.get(index))
        {
            Some(&import) => self.resolve_import(module, import, depth),
            None => Some(Source::Internal(module, kind, u32::try_from(index).ok()?)),
        }
    }
}

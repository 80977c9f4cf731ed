//! The component with the merged module in place of the first module, the merged modules'
//! instances empty, and every alias of their exports naming the merged module's instead.

use std::collections::HashMap;

use wasmparser::{
    BinaryReader, CanonicalFunction, ComponentAlias, ComponentAliasSectionReader,
    ComponentCanonicalSectionReader, InstanceSectionReader,
};

use super::super::binary::{
    ALIAS_SECTION, CANONICAL_SECTION, CORE_INSTANCE_SECTION, CORE_MODULE_SECTION, HEADER,
    entry_ranges, leb128, push_name, push_section, sections,
};
use super::layout::{CoreInstance, Kind, Layout};
use super::merged::Exports;
use super::resolve::Merge;
use super::shims::Shims;

/// A module with nothing in it: what a merged module's own module becomes.
const EMPTY_MODULE: [u8; 8] = [0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00];

/// What linking puts into the component.
pub(super) struct Replacements<'a> {
    pub(super) layout: &'a Layout,
    pub(super) merge: &'a Merge<'a>,
    pub(super) exports: &'a Exports,
    pub(super) merged: Vec<u8>,
    /// The instances the merged module is instantiated with, each under its index.
    pub(super) arguments: Vec<u32>,
    pub(super) shims: Option<GrownShims<'a>>,
}

/// The shim and fix-up modules grown for the built-ins.
pub(super) struct GrownShims<'a> {
    pub(super) shims: &'a Shims,
    pub(super) shim: Vec<u8>,
    pub(super) fixup: Vec<u8>,
    /// The built-ins' core functions, in the order of their new entries.
    pub(super) builtins: Vec<u32>,
}

impl Replacements<'_> {
    pub(super) fn rewritten(&self, component: &[u8]) -> Option<Vec<u8>> {
        let mut rewritten = component.get(..HEADER)?.to_vec();
        let mut module = 0usize;
        let mut instance = 0u32;
        // How many core items of each kind the component has defined so far.
        let mut defined: HashMap<Kind, u32> = HashMap::new();
        for (id, range) in sections(component)? {
            let content = &component[range.clone()];
            let start = range.start;
            let section = match id {
                CORE_MODULE_SECTION => {
                    module += 1;
                    self.module(module - 1).map(<[u8]>::to_vec)
                }
                CORE_INSTANCE_SECTION => Some(self.instances(content, start, &mut instance)?),
                ALIAS_SECTION => Some(self.aliases(content, start, &mut defined)?),
                CANONICAL_SECTION => {
                    // Every canonical function but a lift is a core function.
                    let reader = BinaryReader::new(content, start);
                    for function in ComponentCanonicalSectionReader::new(reader).ok()? {
                        if !matches!(function.ok()?, CanonicalFunction::Lift { .. }) {
                            *defined.entry(Kind::Func).or_insert(0) += 1;
                        }
                    }
                    None
                }
                _ => None,
            };
            push_section(&mut rewritten, id, section.as_deref().unwrap_or(content));
        }
        Some(rewritten)
    }

    /// What module `module` becomes; None when it stays as it is.
    fn module(&self, module: usize) -> Option<&[u8]> {
        if module == self.merge.first {
            return Some(&self.merged);
        }
        if self.merge.members.contains(&module) {
            return Some(&EMPTY_MODULE);
        }
        let grown = self.shims.as_ref()?;
        if module == grown.shims.module {
            Some(&grown.shim)
        } else if module == grown.shims.fixup_module {
            Some(&grown.fixup)
        } else {
            None
        }
    }

    /// A core instance section: the first module's instance the merged module's, the other
    /// merged modules' instances empty, and the fix-up module's exports with the built-ins.
    fn instances(&self, content: &[u8], start: usize, instance: &mut u32) -> Option<Vec<u8>> {
        let reader = InstanceSectionReader::new(BinaryReader::new(content, start)).ok()?;
        let mut entries = Vec::new();
        for entry in reader.into_iter_with_offsets() {
            let (offset, _) = entry.ok()?;
            entries.push(offset - start);
        }
        let mut section = Vec::new();
        leb128(entries.len(), &mut section);
        for range in entry_ranges(&entries, content.len()) {
            if *instance == self.merge.slot {
                // Instantiate, the module, its arguments.
                section.push(0x00);
                leb128(self.merge.first, &mut section);
                leb128(self.arguments.len(), &mut section);
                for &argument in &self.arguments {
                    push_name(&mut section, &argument.to_string());
                    section.push(0x12);
                    leb128(usize::try_from(argument).ok()?, &mut section);
                }
            } else if let Some(&member) = self.merge.member_instances.get(instance) {
                section.push(0x00);
                leb128(member, &mut section);
                leb128(0, &mut section);
            } else if let Some(grown) = self
                .shims
                .as_ref()
                .filter(|grown| grown.shims.fixup_exports == *instance)
            {
                self.fixup_exports(&mut section, grown, *instance)?;
            } else {
                section.extend_from_slice(&content[range]);
            }
            *instance += 1;
        }
        Some(section)
    }

    /// The instance the fix-up module takes, with an export for each built-in.
    fn fixup_exports(
        &self,
        section: &mut Vec<u8>,
        grown: &GrownShims,
        instance: u32,
    ) -> Option<()> {
        let builtins = &grown.builtins;
        let index = usize::try_from(instance).ok()?;
        let CoreInstance::Exports(exports) = &self.layout.instances[index] else {
            return None;
        };
        // From exports, the exports.
        section.push(0x01);
        leb128(exports.len() + builtins.len(), section);
        for (name, kind, index) in exports {
            push_name(section, name);
            section.push(kind.sort_byte());
            leb128(usize::try_from(*index).ok()?, section);
        }
        for (slot, &function) in builtins.iter().enumerate() {
            // The built-in must exist where the instance is made.
            if function >= self.layout.functions_before[index] {
                return None;
            }
            push_name(section, &(grown.shims.size + slot).to_string());
            section.push(Kind::Func.sort_byte());
            leb128(usize::try_from(function).ok()?, section);
        }
        Some(())
    }

    /// An alias section with each alias of a merged module's export naming the merged
    /// module's export instead.
    fn aliases(
        &self,
        content: &[u8],
        start: usize,
        defined: &mut HashMap<Kind, u32>,
    ) -> Option<Vec<u8>> {
        let reader = ComponentAliasSectionReader::new(BinaryReader::new(content, start)).ok()?;
        let mut starts = Vec::new();
        let mut entries = Vec::new();
        for entry in reader.into_iter_with_offsets() {
            let (offset, alias) = entry.ok()?;
            // The component's index of the core item the alias makes.
            let item = match alias {
                ComponentAlias::CoreInstanceExport { kind, .. } => {
                    Kind::of_external(kind).map(|kind| {
                        let count = defined.entry(kind).or_insert(0);
                        *count += 1;
                        (kind, *count - 1)
                    })
                }
                _ => None,
            };
            starts.push(offset - start);
            entries.push((alias, item));
        }
        let mut section = Vec::new();
        leb128(entries.len(), &mut section);
        for ((alias, item), range) in entries.iter().zip(entry_ranges(&starts, content.len())) {
            match (alias, item) {
                (
                    ComponentAlias::CoreInstanceExport { instance_index, .. },
                    Some((kind, index)),
                ) if self.merge.member_instances.contains_key(instance_index) => {
                    let export = self.exports.aliases.get(&(*kind, *index))?;
                    // A core sort, the sort, a core export of instance, its name.
                    section.push(0x00);
                    section.push(kind.sort_byte());
                    section.push(0x01);
                    leb128(usize::try_from(self.merge.slot).ok()?, &mut section);
                    push_name(&mut section, export);
                }
                _ => section.extend_from_slice(&content[range]),
            }
        }
        Some(section)
    }
}

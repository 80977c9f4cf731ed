//! A plan's projection: the same calls, recorded, and answered at once with placeholders
//! rather than called. A leaf gets a reply valid against its schema that spends its worst
//! case; a `call_tool` of a read-only tool runs for real (it changes nothing, and the plan sees
//! what the run will), any other gets a placeholder valid against the tool's declared result
//! schema (`null` when it declares none); a refusal (the cap, a budget) is counted where the
//! run would have refused it.

use std::time::Duration;

use flowbox_backends::{BackendError, FakeBackend, LeafEstimate, LeafReply, LeafRequest, Usage};
use serde_json::Value;

use super::events::leaf_started;
use super::{Calls, Finished};
use crate::events::Position;
use crate::plan::{LeafKind, ProjectedLeaf, Projection, worst_case};

/// Why a projected leaf was refused.
#[derive(Debug, Clone, Copy)]
pub(super) enum Refusal {
    /// The lifetime cap on leaves.
    Capped,
    /// The token or dollar budget.
    OverBudget,
}

impl Calls {
    /// What a projection saw (a plan's run), once it is over.
    pub(crate) fn take_projection(&mut self) -> Option<Projection> {
        self.projection.take()
    }

    /// Counts a refused leaf in the projection, if this run is one.
    pub(super) fn project_refusal(&mut self, refusal: Refusal) {
        if let Some(projection) = &mut self.projection {
            match refusal {
                Refusal::Capped => projection.capped += 1,
                Refusal::OverBudget => projection.over_budget += 1,
            }
        }
    }

    /// A new round of waiting: the leaves started from now on are in the next wave.
    pub(super) fn project_round(&mut self) {
        if let Some(projection) = &mut self.projection {
            projection.round += 1;
        }
    }

    /// Answers a projected leaf at once with a placeholder valid against its schema, spending
    /// its worst case, and records it.
    pub(super) fn project_leaf(
        &mut self,
        leaf: &LeafRequest,
        path: Vec<Position>,
        estimate: LeafEstimate,
    ) {
        let Some(projection) = &mut self.projection else {
            return;
        };
        self.events
            .emit(|| leaf_started(leaf, path, Duration::ZERO, Vec::new()));
        let result = FakeBackend::reply(leaf).map(|reply| LeafReply {
            value: reply.value,
            usage: worst_case(&estimate),
        });
        let kind = LeafKind::new(
            estimate.profile.clone(),
            leaf.schema.as_ref(),
            leaf.agent_type.clone(),
            leaf.label.as_deref(),
        );
        projection.leaves.push(ProjectedLeaf {
            phase: self.phase.clone(),
            estimate,
            kind,
            round: projection.round,
            handle: leaf.call_id,
            placeholder_path: Vec::new(),
        });
        self.finished.push_back(Finished {
            handle: leaf.call_id,
            result,
            duration: Duration::ZERO,
        });
    }

    /// Notes that the projected leaf `handle` started in branches of the reply-dependent
    /// constructs at `constructs` (their lines), which the placeholders led to. Outside a
    /// projection, or for a handle that is not a projected leaf, it does nothing.
    pub(crate) fn project_placeholder_path(&mut self, handle: u64, constructs: Vec<u32>) {
        let Some(projection) = &mut self.projection else {
            return;
        };
        // The leaf just started: the newest, or close to it.
        if let Some(leaf) = projection
            .leaves
            .iter_mut()
            .rev()
            .find(|l| l.handle == handle)
        {
            leaf.placeholder_path = constructs;
        }
    }

    /// Records a projected `call_tool` and, unless the tool is read-only, answers it at once
    /// with a placeholder valid against its declared result schema. Returns whether it
    /// answered: a read-only tool's call (or any call outside a projection) is left to run.
    pub(super) fn project_tool(&mut self, handle: u64, name: &str, arguments: &Value) -> bool {
        let Some(projection) = &mut self.projection else {
            return false;
        };
        projection.tools.insert(name.to_owned());
        projection.tool_calls += 1;
        if self.tools.is_read_only(name) {
            return false;
        }
        let result = self
            .tools
            .placeholder(name, arguments)
            .map(|value| LeafReply {
                value,
                usage: Usage::default(),
            })
            .map_err(BackendError::from);
        self.finished.push_back(Finished {
            handle,
            result,
            duration: Duration::ZERO,
        });
        true
    }
}

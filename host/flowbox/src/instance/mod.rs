//! A run's instance of the guest, from before it exists to after it is gone: the [`guest`] it
//! is made from, the per-run context its store holds ([`context`]), the warm pool of instances made ahead of demand
//! ([`pool`]), pre-faulting their memory ([`prefault`], with what recent runs touched in
//! [`fresh`], both learning a [`profile`]) and keeping its read faults to one page ([`fault_around`]), the count of runs in
//! flight that background work waits out ([`busy`]), and the retiring of finished runs' stores
//! ([`retire`]).

pub(crate) mod busy;
pub(crate) mod context;
pub(crate) mod fault_around;
pub(crate) mod fresh;
pub(crate) mod guest;
pub(crate) mod pool;
pub(crate) mod prefault;
pub(crate) mod profile;
pub(crate) mod retire;

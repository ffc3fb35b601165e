//! The service half of registration: this process's servers and clients (announced with cmd 5 / 6, withdrawn with
//! cmd 15 / 16) and the servers and clients other processes announce, kept with expiry.
//!
//! The [`Registrar`](super::Registrar) owns one [`ServiceRegistry`] and hands it the samples of those commands after
//! its own checks (acceptance, loopback, `[shoal_auth]`). Bounds, as for topics: at most `[shoal_limits]
//! remote_topics` remote servers and clients in all, `topics_per_process` of one process, and `registry_bytes` of
//! their strings and descriptors; what does not fit is refused and counted (`registry_full`). Matching is by name
//! only, so there are no match events: a change of the remote servers bumps [`ServiceRegistry::generation`], and
//! the I/O thread publishes the new table to the clients.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use crate::config::LimitsConfig;

use super::model::{EntityKey, LocalService, MethodInfo, RegistrationCounters, RemoteService, ServiceRole};

/// Bytes charged per entry on top of its strings (as the topic registry's `ENTRY_OVERHEAD`).
const ENTRY_OVERHEAD: usize = 1024;

/// What a remote server or client costs: its strings and its methods' type information.
fn charge(s: &RemoteService) -> usize {
    let method = |m: &MethodInfo| {
        std::mem::size_of::<MethodInfo>()
            + m.name.len()
            + [&m.request, &m.response]
                .iter()
                .map(|t| t.name.len() + t.encoding.len() + t.descriptor.len())
                .sum::<usize>()
    };
    ENTRY_OVERHEAD
        + s.key.host_name.len()
        + s.service_name.len()
        + s.process_name.len()
        + s.unit_name.len()
        + s.methods.iter().map(method).sum::<usize>()
}

#[derive(Debug)]
struct LocalEntry {
    service: LocalService,
    clock: i32,
}

#[derive(Debug)]
struct RemoteEntry {
    service: RemoteService,
    charge: usize,
}

/// This process's servers and clients and the remote ones (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct ServiceRegistry {
    locals: BTreeMap<u64, LocalEntry>,
    dirty: BTreeSet<u64>,
    remote: BTreeMap<(ServiceRole, EntityKey), RemoteEntry>,
    bytes: usize,
    generation: u64,
}

impl ServiceRegistry {
    /// Adds or replaces a local server or client; it is announced on the next flush.
    pub(crate) fn add_local(&mut self, s: LocalService) {
        let clock = self.locals.get(&s.id).map_or(0, |e| e.clock);
        self.dirty.insert(s.id);
        self.locals.insert(s.id, LocalEntry { service: s, clock });
    }

    /// Removes a local server or client; returns it (to be unregistered) if it was known.
    pub(crate) fn remove_local(&mut self, id: u64) -> Option<LocalService> {
        self.dirty.remove(&id);
        self.locals.remove(&id).map(|e| e.service)
    }

    /// Sets the call counts of a local entity's methods.
    pub(crate) fn set_calls(&mut self, id: u64, calls: &[(String, i64)]) {
        if let Some(e) = self.locals.get_mut(&id) {
            for m in &mut e.service.methods {
                if let Some((_, n)) = calls.iter().find(|(name, _)| *name == m.name) {
                    m.call_count = *n;
                }
            }
        }
    }

    /// Marks every local entity for the periodic refresh.
    pub(crate) fn refresh_all(&mut self) {
        self.dirty.extend(self.locals.keys().copied());
    }

    /// The local entities to announce now, each with its next registration clock.
    pub(crate) fn take_dirty(&mut self) -> Vec<(LocalService, i32)> {
        std::mem::take(&mut self.dirty)
            .into_iter()
            .filter_map(|id| {
                let e = self.locals.get_mut(&id)?;
                e.clock = e.clock.wrapping_add(1);
                Some((e.service.clone(), e.clock))
            })
            .collect()
    }

    /// Every local entity's id (for shutdown).
    pub(crate) fn local_ids(&self) -> Vec<u64> {
        self.locals.keys().copied().collect()
    }

    /// Whether an unauthenticated registration may change the entry of `role`/`key` (one that was authenticated
    /// is changed only by authenticated registration).
    pub(crate) fn entry_authenticated(&self, role: ServiceRole, key: &EntityKey) -> bool {
        self.remote.get(&(role, key.clone())).is_some_and(|e| e.service.authenticated)
    }

    /// Applies a received registration (already gated by the registrar).
    pub(crate) fn apply(&mut self, s: RemoteService, bounds: &LimitsConfig, counters: &mut RegistrationCounters) {
        let k = (s.role, s.key.clone());
        let charge = charge(&s);
        let held = self.remote.get(&k).map_or(0, |e| e.charge);
        if held == 0 {
            let first = EntityKey { host_name: s.key.host_name.clone(), pid: s.key.pid, entity_id: 0 };
            let last = EntityKey { entity_id: u64::MAX, ..first.clone() };
            let of_process = [ServiceRole::Server, ServiceRole::Client]
                .iter()
                .map(|r| self.remote.range((*r, first.clone())..=(*r, last.clone())).count())
                .sum::<usize>();
            if self.remote.len() >= bounds.remote_topics || of_process >= bounds.topics_per_process {
                counters.registry_full += 1;
                return;
            }
        }
        if self.bytes - held + charge > bounds.registry_bytes {
            counters.registry_full += 1;
            return;
        }
        let changed = self.remote.get(&k).is_none_or(|e| !same_announcement(&e.service, &s));
        self.bytes = self.bytes - held + charge;
        self.remote.insert(k, RemoteEntry { service: s, charge });
        counters.samples_applied += 1;
        if changed {
            self.generation += 1;
        }
    }

    /// Applies an unregistration.
    pub(crate) fn remove_remote(&mut self, role: ServiceRole, key: &EntityKey) -> bool {
        match self.remote.remove(&(role, key.clone())) {
            Some(e) => {
                self.bytes -= e.charge;
                self.generation += 1;
                true
            }
            None => false,
        }
    }

    /// Drops entries not refreshed within `timeout`; returns how many.
    pub(crate) fn expire(&mut self, now: Instant, timeout: Duration) -> u64 {
        let stale: Vec<(ServiceRole, EntityKey)> = self
            .remote
            .iter()
            .filter(|(_, e)| now.saturating_duration_since(e.service.last_seen) >= timeout)
            .map(|(k, _)| k.clone())
            .collect();
        for (role, key) in &stale {
            tracing::debug!(?key, ?role, "remote service entity expired");
            self.remove_remote(*role, key);
        }
        stale.len() as u64
    }

    /// The earliest time an entry expires.
    pub(crate) fn next_expiry(&self, timeout: Duration) -> Option<Instant> {
        self.remote.values().map(|e| e.service.last_seen + timeout).min()
    }

    /// Remote servers and clients (our own too when loopback is on).
    pub(crate) fn remote(&self) -> impl Iterator<Item = &RemoteService> {
        self.remote.values().map(|e| &e.service)
    }

    /// Local servers and clients as announced.
    pub(crate) fn locals(&self) -> impl Iterator<Item = &LocalService> {
        self.locals.values().map(|e| &e.service)
    }

    /// Bumped whenever the set of remote entries or what they announce for calling them (methods, port, source)
    /// changes; not by a mere refresh.
    pub(crate) fn generation(&self) -> u64 {
        self.generation
    }
}

/// Two announcements of one entity that a client would call alike (the registration clock and call counts differ
/// between refreshes).
fn same_announcement(a: &RemoteService, b: &RemoteService) -> bool {
    a.tcp_port == b.tcp_port
        && a.source == b.source
        && a.version == b.version
        && a.authenticated == b.authenticated
        && a.service_name == b.service_name
        && a.methods.len() == b.methods.len()
        && a.methods
            .iter()
            .zip(&b.methods)
            .all(|(x, y)| x.name == y.name && x.request == y.request && x.response == y.response)
}

/// The remote servers and clients as the I/O thread last published them, for the clients (which servers to call)
/// and the servers (which clients to admit, under `[shoal_auth]`) of the process: read without asking the I/O
/// thread, waited on by `wait_for_servers`.
#[derive(Debug, Default)]
pub struct ServerDirectory {
    table: std::sync::Mutex<(u64, std::sync::Arc<Vec<RemoteService>>)>,
    changed: std::sync::Condvar,
}

impl ServerDirectory {
    /// Replaces the table (called by the I/O thread when [`ServiceRegistry::generation`] moved).
    pub fn publish(&self, entries: Vec<RemoteService>) {
        let mut t = crate::sync::lock(&self.table);
        t.0 += 1;
        t.1 = std::sync::Arc::new(entries);
        drop(t);
        self.changed.notify_all();
    }

    /// The servers and clients now.
    pub fn entries(&self) -> std::sync::Arc<Vec<RemoteService>> {
        std::sync::Arc::clone(&crate::sync::lock(&self.table).1)
    }

    /// Waits until `ok` holds for the table or `deadline` passes; returns the last table seen and whether `ok` held.
    pub fn wait_until(
        &self,
        deadline: Instant,
        mut ok: impl FnMut(&[RemoteService]) -> bool,
    ) -> (std::sync::Arc<Vec<RemoteService>>, bool) {
        let mut t = crate::sync::lock(&self.table);
        loop {
            if ok(&t.1) {
                return (std::sync::Arc::clone(&t.1), true);
            }
            let now = Instant::now();
            if now >= deadline {
                return (std::sync::Arc::clone(&t.1), false);
            }
            t = match self.changed.wait_timeout(t, deadline - now) {
                Ok((g, _)) => g,
                Err(p) => p.into_inner().0,
            };
        }
    }
}

//! Which WebSocket connections are open, which plugin owns each, and what topics they
//! subscribe to; shared by the workers (whose plugins send and publish) and the I/O thread
//! (which opens and closes connections).
//!
//! Plugins are isolated from each other here:
//! - a connection belongs to the plugin that accepted its upgrade (by name, so across reloads).
//!   Any operation of another plugin on it answers `closed`, exactly as for a connection that
//!   is closed: there is no way to tell the two apart;
//! - topics are per plugin: `room:lobby` of one plugin is not `room:lobby` of another;
//! - ids are a keyed permutation of a counter under the process's node number: never reused
//!   by a running host (so an id kept after its connection closed can only ever reach
//!   nothing), not guessable from the ids a plugin has seen, and unique across the processes
//!   of a cluster (see [`crate::cluster`]), which a [`Roster`] tells of every connection.

use std::collections::{HashMap, HashSet};
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::message::{LOCAL_ID_BITS, WsId};

/// Hears of every connection opened and closed: how other processes learn where a
/// connection lives. It must not block.
pub(crate) trait Roster: Send + Sync + std::fmt::Debug {
    fn opened(&self, owner: &Arc<str>, ws: WsId);
    fn closed(&self, owner: &Arc<str>, ws: WsId);
}

/// Why a subscription was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SubscribeError {
    /// The connection is not open, or not this plugin's.
    Closed,
    /// The topic name, or the number of topics of this connection, is over the limit.
    TooLarge,
}

/// The shared table of open connections and topics.
#[derive(Debug)]
pub struct Hub {
    ids: IdSource,
    inner: Mutex<Inner>,
    roster: Option<Arc<dyn Roster>>,
}

#[derive(Debug, Default)]
struct Inner {
    open: HashMap<WsId, Open>,
    /// Subscribers by owning plugin, then topic.
    topics: HashMap<Arc<str>, HashMap<String, HashSet<WsId>>>,
}

#[derive(Debug)]
struct Open {
    owner: Arc<str>,
    /// The event loop (shard) that owns the socket: where its messages go.
    home: usize,
    topics: HashSet<String>,
}

impl Default for Hub {
    fn default() -> Self {
        Hub::new(0, None)
    }
}

impl Inner {
    /// Connection `ws`, if it is open and `owner`'s; `Closed` otherwise, whichever it is.
    fn own(&mut self, ws: WsId, owner: &str) -> Result<&mut Open, SubscribeError> {
        self.open
            .get_mut(&ws)
            .filter(|c| &*c.owner == owner)
            .ok_or(SubscribeError::Closed)
    }
}

impl Hub {
    /// The hub of node `node` (0 outside a cluster), telling `roster` of every connection.
    pub(crate) fn new(node: u32, roster: Option<Arc<dyn Roster>>) -> Self {
        Hub {
            ids: IdSource::new(node),
            inner: Mutex::default(),
            roster,
        }
    }

    /// The node number in this hub's ids.
    pub(crate) fn node(&self) -> u32 {
        self.ids.node
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A fresh id for a connection of plugin `owner` whose socket lives on event loop `home`,
    /// already marked open.
    pub(crate) fn open(&self, owner: &Arc<str>, home: usize) -> WsId {
        let ws = self.ids.next();
        self.lock().open.insert(
            ws,
            Open {
                owner: owner.clone(),
                home,
                topics: HashSet::new(),
            },
        );
        if let Some(roster) = &self.roster {
            roster.opened(owner, ws);
        }
        ws
    }

    /// The event loop of `ws`, if it is open and belongs to `owner`.
    pub(crate) fn home_for(&self, ws: WsId, owner: &str) -> Option<usize> {
        self.lock()
            .open
            .get(&ws)
            .filter(|c| &*c.owner == owner)
            .map(|c| c.home)
    }

    #[cfg(test)]
    /// Whether `ws` is open and belongs to `owner`.
    pub(crate) fn is_open_for(&self, ws: WsId, owner: &str) -> bool {
        self.home_for(ws, owner).is_some()
    }

    /// Open connections.
    pub(crate) fn open_count(&self) -> usize {
        self.lock().open.len()
    }

    /// Forgets a connection and its subscriptions.
    pub(crate) fn closed(&self, ws: WsId) {
        let mut inner = self.lock();
        let Some(conn) = inner.open.remove(&ws) else {
            return;
        };
        if let Some(roster) = &self.roster {
            roster.closed(&conn.owner, ws);
        }
        if let Some(topics) = inner.topics.get_mut(&conn.owner) {
            for topic in conn.topics {
                if let Some(subs) = topics.get_mut(&topic) {
                    subs.remove(&ws);
                    if subs.is_empty() {
                        topics.remove(&topic);
                    }
                }
            }
            if topics.is_empty() {
                inner.topics.remove(&conn.owner);
            }
        }
    }

    /// Subscribes `ws`, which must be `owner`'s, to `owner`'s `topic`, within `(longest
    /// topic, most topics per connection)`.
    pub(crate) fn subscribe(
        &self,
        owner: &str,
        ws: WsId,
        topic: &str,
        (max_topic_bytes, max_topics): (usize, usize),
    ) -> Result<(), SubscribeError> {
        if topic.len() > max_topic_bytes {
            return Err(SubscribeError::TooLarge);
        }
        let mut inner = self.lock();
        let conn = inner.own(ws, owner)?;
        if conn.topics.len() >= max_topics && !conn.topics.contains(topic) {
            return Err(SubscribeError::TooLarge);
        }
        conn.topics.insert(topic.to_owned());
        let owner = conn.owner.clone();
        inner
            .topics
            .entry(owner)
            .or_default()
            .entry(topic.to_owned())
            .or_default()
            .insert(ws);
        Ok(())
    }

    /// Unsubscribes `ws`, which must be `owner`'s, from `owner`'s `topic`.
    pub(crate) fn unsubscribe(
        &self,
        owner: &str,
        ws: WsId,
        topic: &str,
    ) -> Result<(), SubscribeError> {
        let mut inner = self.lock();
        let conn = inner.own(ws, owner)?;
        conn.topics.remove(topic);
        if let Some(topics) = inner.topics.get_mut(owner) {
            if let Some(subs) = topics.get_mut(topic) {
                subs.remove(&ws);
                if subs.is_empty() {
                    topics.remove(topic);
                }
            }
            if topics.is_empty() {
                inner.topics.remove(owner);
            }
        }
        Ok(())
    }

    /// The connections subscribed to `owner`'s `topic`, each with its event loop, ordered by
    /// loop then id (so each loop's share is one run).
    pub(crate) fn subscribers(&self, owner: &str, topic: &str) -> Vec<(usize, WsId)> {
        let inner = self.lock();
        let mut subs: Vec<(usize, WsId)> = inner
            .topics
            .get(owner)
            .and_then(|topics| topics.get(topic))
            .map(|s| {
                s.iter()
                    .filter_map(|ws| inner.open.get(ws).map(|c| (c.home, *ws)))
                    .collect()
            })
            .unwrap_or_default();
        subs.sort_unstable();
        subs
    }
}

/// Connection ids: the node number in the top bits, and below it a counter run through a
/// keyed permutation of the remaining 40 bits (a four-round Feistel network whose round
/// function is SipHash under a random per-process key). A permutation never repeats, and
/// without the key the next id cannot be told from the last ones; the node number keeps two
/// processes' ids apart without their sharing a key.
#[derive(Debug)]
struct IdSource {
    node: u32,
    counter: AtomicU64,
    key: std::collections::hash_map::RandomState,
}

/// Half of the permuted bits.
const HALF_BITS: u32 = LOCAL_ID_BITS / 2;
const HALF_MASK: u64 = (1 << HALF_BITS) - 1;

impl IdSource {
    fn new(node: u32) -> Self {
        IdSource {
            node,
            counter: AtomicU64::new(1),
            key: std::collections::hash_map::RandomState::new(),
        }
    }

    fn next(&self) -> WsId {
        loop {
            // 2^40 ids: at a million connections a second, twelve days before the counter
            // wraps and ids could repeat.
            let n = self.counter.fetch_add(1, Ordering::Relaxed) & ((1 << LOCAL_ID_BITS) - 1);
            let id = (u64::from(self.node) << LOCAL_ID_BITS) | self.permute(n);
            // 0 reads as "no connection" to too many programs.
            if id != 0 {
                return id;
            }
        }
    }

    fn permute(&self, n: u64) -> u64 {
        let (mut left, mut right) = (n >> HALF_BITS, n & HALF_MASK);
        for round in 0u32..4 {
            let f = self.key.hash_one((round, right)) & HALF_MASK;
            (left, right) = (right, left ^ f);
        }
        (left << HALF_BITS) | right
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAPS: (usize, usize) = (256, 64);

    fn owner(name: &str) -> Arc<str> {
        Arc::from(name)
    }

    #[test]
    fn ids_are_never_reused_and_closing_forgets_topics() {
        let hub = Hub::default();
        let p = owner("p");
        let a = hub.open(&p, 0);
        let b = hub.open(&p, 1);
        assert_ne!(a, b);
        hub.subscribe("p", a, "room", CAPS).unwrap();
        hub.subscribe("p", b, "room", CAPS).unwrap();
        // By loop first: each loop's subscribers are one run.
        assert_eq!(hub.subscribers("p", "room"), vec![(0, a), (1, b)]);
        assert_eq!(hub.home_for(b, "p"), Some(1));
        assert_eq!(hub.home_for(b, "q"), None);
        hub.closed(a);
        assert!(!hub.is_open_for(a, "p"));
        assert_eq!(hub.subscribers("p", "room"), vec![(1, b)]);
        assert_eq!(
            hub.subscribe("p", a, "room", CAPS),
            Err(SubscribeError::Closed)
        );
        hub.unsubscribe("p", b, "room").unwrap();
        assert!(hub.subscribers("p", "room").is_empty());
        assert_eq!(
            hub.subscribe("p", b, &"x".repeat(1000), CAPS),
            Err(SubscribeError::TooLarge)
        );
    }

    #[test]
    fn another_plugin_sees_a_connection_as_closed_and_topics_are_separate() {
        let hub = Hub::default();
        let (chat, evil) = (owner("chat"), owner("evil"));
        let victim = hub.open(&chat, 0);
        let own = hub.open(&evil, 0);
        hub.subscribe("chat", victim, "room:lobby", CAPS).unwrap();
        assert!(hub.is_open_for(victim, "chat"));
        assert!(!hub.is_open_for(victim, "evil"));
        assert_eq!(
            hub.subscribe("evil", victim, "x", CAPS),
            Err(SubscribeError::Closed)
        );
        assert_eq!(
            hub.unsubscribe("evil", victim, "room:lobby"),
            Err(SubscribeError::Closed)
        );
        assert!(hub.subscribers("evil", "room:lobby").is_empty());
        hub.subscribe("evil", own, "room:lobby", CAPS).unwrap();
        assert_eq!(hub.subscribers("chat", "room:lobby"), vec![(0, victim)]);
        assert_eq!(hub.subscribers("evil", "room:lobby"), vec![(0, own)]);
    }

    #[test]
    fn ids_are_distinct_and_not_a_sequence() {
        let ids = IdSource::new(0);
        let seen: Vec<u64> = (0..10_000).map(|_| ids.next()).collect();
        let distinct: HashSet<u64> = seen.iter().copied().collect();
        assert_eq!(distinct.len(), seen.len());
        let steps: HashSet<u64> = seen.windows(2).map(|w| w[1].wrapping_sub(w[0])).collect();
        assert!(steps.len() > 9_000, "ids follow a pattern");
        // Another host's key gives other ids.
        let other = IdSource::new(0);
        assert_ne!(other.permute(1), ids.permute(1));
    }

    #[test]
    fn ids_carry_their_node_and_two_nodes_never_share_one() {
        let (a, b) = (IdSource::new(1), IdSource::new(2));
        let from_a: HashSet<u64> = (0..10_000).map(|_| a.next()).collect();
        let from_b: HashSet<u64> = (0..10_000).map(|_| b.next()).collect();
        assert!(from_a.is_disjoint(&from_b));
        assert!(from_a.iter().all(|id| crate::message::node_of(*id) == 1));
        assert!(from_b.iter().all(|id| crate::message::node_of(*id) == 2));
        let largest = IdSource::new((1 << crate::message::NODE_BITS) - 1);
        assert_eq!(
            crate::message::node_of(largest.next()),
            (1 << crate::message::NODE_BITS) - 1
        );
    }

    #[test]
    fn the_roster_hears_of_every_open_and_close() {
        #[derive(Debug, Default)]
        struct Log(Mutex<Vec<(bool, WsId)>>);
        impl Roster for Log {
            fn opened(&self, _: &Arc<str>, ws: WsId) {
                self.0.lock().unwrap().push((true, ws));
            }
            fn closed(&self, _: &Arc<str>, ws: WsId) {
                self.0.lock().unwrap().push((false, ws));
            }
        }
        let log = Arc::new(Log::default());
        let hub = Hub::new(3, Some(log.clone()));
        let ws = hub.open(&owner("p"), 0);
        hub.closed(ws);
        hub.closed(ws);
        assert_eq!(*log.0.lock().unwrap(), vec![(true, ws), (false, ws)]);
    }
}

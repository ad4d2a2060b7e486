//! The bounded in-memory caches of the session store: [`Lru`] keeps at most a number of
//! entries, the least recently used going first (chat sessions); [`Fifo`] keeps at most a
//! number of entries and of bytes, the oldest going first (stored responses).

use std::collections::{BTreeMap, HashMap, VecDeque};

/// At most `capacity` entries by key; the least recently read or written is evicted first.
#[derive(Debug)]
pub(crate) struct Lru<V> {
    /// Each value with the tick of its last use.
    entries: HashMap<String, (V, u64)>,
    /// Keys by the tick of their last use, oldest first.
    order: BTreeMap<u64, String>,
    next: u64,
    capacity: usize,
}

impl<V> Lru<V> {
    /// An empty cache of at most `capacity` entries (at least one).
    pub(crate) fn new(capacity: usize) -> Self {
        Lru {
            entries: HashMap::new(),
            order: BTreeMap::new(),
            next: 0,
            capacity: capacity.max(1),
        }
    }

    /// The value of `key`, now the most recently used.
    pub(crate) fn get(&mut self, key: &str) -> Option<&mut V> {
        let (value, used) = self.entries.get_mut(key)?;
        if let Some(key) = self.order.remove(used) {
            *used = self.next;
            self.order.insert(self.next, key);
            self.next += 1;
        }
        Some(value)
    }

    /// Sets `key` to `value`, now the most recently used.
    pub(crate) fn insert(&mut self, key: String, value: V) {
        if let Some(kept) = self.get(&key) {
            *kept = value;
        } else {
            self.make_room();
            self.order.insert(self.next, key.clone());
            self.entries.insert(key, (value, self.next));
            self.next += 1;
        }
    }

    /// The value of `key`, made by `make` when there is none; now the most recently used.
    pub(crate) fn get_or_insert_with(&mut self, key: &str, make: impl FnOnce() -> V) -> &mut V {
        if !self.entries.contains_key(key) {
            self.make_room();
        }
        let now = self.next;
        self.next += 1;
        let (value, used) = self
            .entries
            .entry(key.to_string())
            .or_insert_with(|| (make(), now));
        // A new entry has no place in the order yet.
        self.order.remove(used);
        *used = now;
        self.order.insert(now, key.to_string());
        value
    }

    /// Evicts the least recently used until one more entry fits.
    fn make_room(&mut self) {
        while self.entries.len() >= self.capacity {
            let Some((_, oldest)) = self.order.pop_first() else {
                break;
            };
            self.entries.remove(&oldest);
        }
    }

    /// How many entries are kept.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }
}

/// At most `max_count` entries and `max_bytes` bytes of them (as their size was given); the
/// oldest is evicted first. An entry larger than `max_bytes` on its own is not kept (nor
/// does it push the others out).
#[derive(Debug)]
pub(crate) struct Fifo<V> {
    by_key: HashMap<String, (V, usize)>,
    /// Keys, oldest first.
    order: VecDeque<String>,
    bytes: usize,
    max_count: usize,
    max_bytes: usize,
}

impl<V> Fifo<V> {
    /// An empty cache of at most `max_count` entries and `max_bytes` bytes.
    pub(crate) fn new(max_count: usize, max_bytes: usize) -> Self {
        Fifo {
            by_key: HashMap::new(),
            order: VecDeque::new(),
            bytes: 0,
            max_count,
            max_bytes,
        }
    }

    /// Keeps `value` of `size` bytes under `key` (replacing one there, which keeps its
    /// place), then evicts the oldest until both limits hold.
    pub(crate) fn insert(&mut self, key: String, value: V, size: usize) {
        if size > self.max_bytes {
            if let Some((_, before)) = self.by_key.remove(&key) {
                self.bytes -= before;
                self.order.retain(|kept| *kept != key);
            }
            return;
        }
        match self.by_key.insert(key.clone(), (value, size)) {
            Some((_, before)) => self.bytes -= before,
            None => self.order.push_back(key),
        }
        self.bytes += size;
        while self.by_key.len() > self.max_count || self.bytes > self.max_bytes {
            let Some(oldest) = self.order.pop_front() else {
                break;
            };
            if let Some((_, size)) = self.by_key.remove(&oldest) {
                self.bytes -= size;
            }
        }
    }

    /// The value of `key`.
    pub(crate) fn get(&self, key: &str) -> Option<&V> {
        self.by_key.get(key).map(|(value, _)| value)
    }

    /// The bytes kept.
    #[cfg(test)]
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lru_evicts_the_least_recently_used_beyond_its_capacity() {
        let mut cache = Lru::new(2);
        cache.insert("a".into(), 1);
        cache.insert("b".into(), 2);
        // Reading `a` makes `b` the least recently used.
        assert_eq!(cache.get("a").copied(), Some(1));
        cache.insert("c".into(), 3);
        assert_eq!(cache.len(), 2);
        assert!(cache.get("b").is_none());
        assert_eq!(cache.get("a").copied(), Some(1));
        // Written in place, then `c` is the oldest.
        *cache.get_or_insert_with("a", || 0) += 10;
        cache.insert("d".into(), 4);
        assert!(cache.get("c").is_none());
        assert_eq!(cache.get("a").copied(), Some(11));
        assert_eq!(cache.get("d").copied(), Some(4));
        assert_eq!(cache.len(), 2);
    }

    #[test]
    fn the_fifo_keeps_its_bytes_under_the_budget_oldest_out_first() {
        let mut cache = Fifo::new(10, 100);
        cache.insert("a".into(), 'a', 40);
        cache.insert("b".into(), 'b', 40);
        cache.insert("c".into(), 'c', 40);
        assert!(cache.get("a").is_none());
        assert_eq!((cache.get("b"), cache.get("c")), (Some(&'b'), Some(&'c')));
        assert_eq!(cache.bytes(), 80);
        // Replaced: its old size no longer counts.
        cache.insert("b".into(), 'B', 10);
        assert_eq!(cache.bytes(), 50);
        // Larger than the whole budget: not kept, and the others stay.
        cache.insert("huge".into(), 'h', 101);
        assert_eq!(cache.bytes(), 50);
        assert!(cache.get("huge").is_none());
        assert_eq!(cache.get("c"), Some(&'c'));
        // The count bounds it too.
        let mut cache = Fifo::new(2, usize::MAX);
        for key in ["x", "y", "z"] {
            cache.insert(key.into(), (), 1);
        }
        assert!(cache.get("x").is_none() && cache.get("z").is_some());
    }
}

//! The receive queue with one share per sender and a per-sender rate limit (the mirror of Python's
//! `delta_fabric.transports.base.PacketQueue` and `TokenBuckets`; DF-ZEN-152, DF-ZEN-153).
//!
//! `sender` is who sent a packet as the transport sees it (the node id of the Zenoh delta key a
//! sample came on; 0 when the transport cannot tell). On overflow the oldest packet of the sender
//! holding the most queued packets (count bound) or bytes (byte bound) leaves, ties going to the
//! sender whose oldest packet is the oldest: a sender that holds less than another is never
//! evicted, so a flood from one sender evicts only its own packets once it holds more than any
//! member. With a single sender this is drop-oldest. [`PacketQueue::drain`] returns packets in
//! arrival order. Not thread-safe by itself (a transport wraps it in a mutex).

use std::collections::{HashMap, VecDeque};
use std::time::Instant;

/// Most token buckets kept (see [`TokenBuckets`]).
pub const MAX_BUCKETS: usize = 4096;

/// Per-sender token buckets (DF-ZEN-153): each sender may queue `rate` packets per second on
/// average and `burst` at once; `rate = 0` turns the limit off. At most [`MAX_BUCKETS`] buckets are
/// kept: a full bucket is the same as no bucket, so full ones are forgotten first, and while none
/// is full every further sender shares one overflow bucket.
#[derive(Debug, Clone)]
pub struct TokenBuckets {
    rate: f64,
    burst: f64,
    buckets: HashMap<Option<u64>, (f64, Instant)>,
}

impl TokenBuckets {
    /// Buckets of `rate` packets/s and `burst` packets (`rate` 0: no limit). Non-finite or negative
    /// values, or a burst below 1 with a rate, are refused.
    pub fn new(rate: f64, burst: f64) -> Result<Self, String> {
        if !(rate.is_finite() && rate >= 0.0) {
            return Err(format!("rate must be a finite number >= 0, got {rate}"));
        }
        if rate > 0.0 && !(burst.is_finite() && burst >= 1.0) {
            return Err(format!(
                "burst must be >= 1 when a rate is set, got {burst}"
            ));
        }
        Ok(TokenBuckets {
            rate,
            burst,
            buckets: HashMap::new(),
        })
    }

    /// One packet of `sender` at `now`: true when its bucket holds a token (taken).
    pub fn take(&mut self, sender: u64, now: Instant) -> bool {
        if self.rate <= 0.0 {
            return true;
        }
        let mut key = Some(sender);
        if !self.buckets.contains_key(&key) && self.buckets.len() >= MAX_BUCKETS {
            let (rate, burst) = (self.rate, self.burst);
            self.buckets.retain(|_, (tokens, t)| {
                *tokens + now.saturating_duration_since(*t).as_secs_f64() * rate < burst
            });
            if self.buckets.len() >= MAX_BUCKETS {
                key = None; // the shared overflow bucket
            }
        }
        let (tokens, t) = self.buckets.get(&key).copied().unwrap_or((self.burst, now));
        let tokens =
            (tokens + now.saturating_duration_since(t).as_secs_f64() * self.rate).min(self.burst);
        if tokens < 1.0 {
            self.buckets.insert(key, (tokens, now));
            return false;
        }
        self.buckets.insert(key, (tokens - 1.0, now));
        true
    }
}

/// What [`PacketQueue::push`] did with a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pushed {
    /// Queued (possibly after evicting others, counted in `dropped`).
    Queued,
    /// Refused by the sender's rate limit (counted in `rate_limited`).
    RateLimited,
}

/// Bounded receive queue with per-sender shares (see the module docs).
#[derive(Debug, Clone)]
pub struct PacketQueue {
    capacity: usize,
    max_bytes: u64,
    buckets: TokenBuckets,
    q: HashMap<u64, VecDeque<(u64, Vec<u8>)>>,
    sender_bytes: HashMap<u64, u64>,
    len: usize,
    bytes: u64,
    arrivals: u64,
    /// Packets (and bytes) pushed, rate-limited ones included.
    pub received: u64,
    pub received_bytes: u64,
    /// Packets (and bytes) evicted unprocessed (DF-ZEN-17).
    pub dropped: u64,
    pub dropped_bytes: u64,
    /// Packets refused by the rate limit (DF-ZEN-153).
    pub rate_limited: u64,
}

impl PacketQueue {
    /// A queue of at most `capacity` packets and `max_bytes` bytes (both at least 1) and the
    /// given per-sender rate limit.
    pub fn new(capacity: usize, max_bytes: usize, buckets: TokenBuckets) -> Self {
        PacketQueue {
            capacity: capacity.max(1),
            max_bytes: (max_bytes as u64).max(1),
            buckets,
            q: HashMap::new(),
            sender_bytes: HashMap::new(),
            len: 0,
            bytes: 0,
            arrivals: 0,
            received: 0,
            received_bytes: 0,
            dropped: 0,
            dropped_bytes: 0,
            rate_limited: 0,
        }
    }

    /// Packets queued now.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes queued now.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Whether a packet of `n` bytes would need an eviction to fit.
    pub fn full_for(&self, n: usize) -> bool {
        self.len > 0 && (self.len >= self.capacity || self.bytes + n as u64 > self.max_bytes)
    }

    /// Packets queued now per sender.
    pub fn queued_by_sender(&self) -> HashMap<u64, usize> {
        self.q.iter().map(|(s, d)| (*s, d.len())).collect()
    }

    fn evict(&mut self, by_bytes: bool) {
        let victim = self
            .q
            .iter()
            .map(|(s, d)| {
                let size = if by_bytes {
                    self.sender_bytes.get(s).copied().unwrap_or(0)
                } else {
                    d.len() as u64
                };
                let oldest = d.front().map_or(u64::MAX, |x| x.0);
                (size, std::cmp::Reverse(oldest), *s)
            })
            .max()
            .map(|x| x.2);
        let Some(victim) = victim else { return };
        self.remove_front(victim, true);
    }

    fn remove_front(&mut self, sender: u64, dropped: bool) -> Option<Vec<u8>> {
        let d = self.q.get_mut(&sender)?;
        let (_, pkt) = d.pop_front()?;
        let empty = d.is_empty();
        let n = pkt.len() as u64;
        if empty {
            self.q.remove(&sender);
            self.sender_bytes.remove(&sender);
        } else if let Some(b) = self.sender_bytes.get_mut(&sender) {
            *b -= n;
        }
        self.len -= 1;
        self.bytes -= n;
        if dropped {
            self.dropped += 1;
            self.dropped_bytes += n;
        }
        Some(pkt)
    }

    /// Queues `packet` of `sender` at `now` (evicting the largest senders' oldest packets when
    /// full), unless the sender's rate limit refuses it.
    pub fn push(&mut self, packet: Vec<u8>, sender: u64, now: Instant) -> Pushed {
        let n = packet.len() as u64;
        self.received += 1;
        self.received_bytes += n;
        if !self.buckets.take(sender, now) {
            self.rate_limited += 1;
            return Pushed::RateLimited;
        }
        while self.len > 0 && self.len >= self.capacity {
            self.evict(false);
        }
        while self.len > 0 && self.bytes + n > self.max_bytes {
            self.evict(true);
        }
        self.q
            .entry(sender)
            .or_default()
            .push_back((self.arrivals, packet));
        *self.sender_bytes.entry(sender).or_default() += n;
        self.arrivals += 1;
        self.len += 1;
        self.bytes += n;
        Pushed::Queued
    }

    /// Up to `max` queued packets in arrival order.
    pub fn drain(&mut self, max: usize) -> Vec<Vec<u8>> {
        if max >= self.len {
            let mut items: Vec<(u64, Vec<u8>)> = self.q.drain().flat_map(|(_, d)| d).collect();
            items.sort_unstable_by_key(|x| x.0);
            self.sender_bytes.clear();
            self.len = 0;
            self.bytes = 0;
            return items.into_iter().map(|x| x.1).collect();
        }
        let mut out = Vec::with_capacity(max);
        for _ in 0..max {
            let oldest = self
                .q
                .iter()
                .filter_map(|(s, d)| d.front().map(|x| (x.0, *s)))
                .min()
                .map(|x| x.1);
            match oldest.and_then(|s| self.remove_front(s, false)) {
                Some(p) => out.push(p),
                None => break,
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn q(cap: usize, bytes: usize) -> PacketQueue {
        PacketQueue::new(cap, bytes, TokenBuckets::new(0.0, 0.0).unwrap())
    }

    #[test]
    fn a_flood_evicts_only_its_own_packets() {
        // REQ: DF-ZEN-152
        let t = Instant::now();
        let mut pq = q(32, 1 << 20);
        let mut member_sent = 0;
        for i in 0..1000u32 {
            pq.push(vec![0xEE; 10], 99, t);
            if i % 100 == 0 {
                pq.push(i.to_le_bytes().to_vec(), 1, t);
                member_sent += 1;
            }
        }
        let by = pq.queued_by_sender();
        assert_eq!(by[&1], member_sent); // all 10 member packets are still queued
        assert_eq!(pq.len(), 32);
        assert_eq!(pq.dropped, 1000 - (32 - member_sent) as u64);
        // byte bound: a flood of big packets evicts its own, a small member packet stays
        let mut pq = q(1000, 1000);
        pq.push(vec![1; 10], 1, t);
        for _ in 0..50 {
            pq.push(vec![0; 300], 99, t);
        }
        assert_eq!(pq.queued_by_sender()[&1], 1);
        assert!(pq.bytes() <= 1000);
        let out = pq.drain(usize::MAX);
        assert_eq!(out[0], vec![1; 10]); // arrival order
    }

    #[test]
    fn single_sender_is_drop_oldest_and_drain_keeps_order() {
        // REQ: DF-ZEN-17
        let t = Instant::now();
        let mut pq = q(4, 1 << 20);
        for i in 0..20u8 {
            pq.push(vec![i], 0, t);
        }
        assert_eq!(pq.dropped, 16);
        assert_eq!(pq.drain(2), vec![vec![16], vec![17]]);
        let mut pq = q(100, 1 << 20);
        for i in 0..10u8 {
            pq.push(vec![i], u64::from(i % 3), t);
        }
        let got: Vec<u8> = pq
            .drain(4)
            .into_iter()
            .chain(pq.drain(100))
            .map(|p| p[0])
            .collect();
        assert_eq!(got, (0..10).collect::<Vec<u8>>());
    }

    #[test]
    fn rate_limit_per_sender() {
        // REQ: DF-ZEN-153
        let t = Instant::now();
        let mut pq = PacketQueue::new(1000, 1 << 20, TokenBuckets::new(10.0, 5.0).unwrap());
        let ok = (0..100)
            .filter(|_| pq.push(vec![0], 7, t) == Pushed::Queued)
            .count();
        assert_eq!(ok, 5); // the burst
        assert_eq!(pq.push(vec![0], 8, t), Pushed::Queued); // another sender has its own
        assert_eq!(
            pq.push(vec![0], 7, t + Duration::from_millis(100)),
            Pushed::Queued
        );
        assert_eq!(
            pq.push(vec![0], 7, t + Duration::from_millis(100)),
            Pushed::RateLimited
        );
        assert_eq!(pq.rate_limited, 96);
        assert!(TokenBuckets::new(f64::NAN, 1.0).is_err());
        assert!(TokenBuckets::new(1.0, 0.5).is_err());
        // bounded state: many senders share the overflow bucket once MAX_BUCKETS are non-full
        let mut b = TokenBuckets::new(1.0, 1.0).unwrap();
        for s in 0..(MAX_BUCKETS as u64 + 10) {
            b.take(s, t);
        }
        assert!(b.buckets.len() <= MAX_BUCKETS + 1);
    }
}

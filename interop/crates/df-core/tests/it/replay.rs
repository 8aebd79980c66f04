use df_core::replay::{Admission, ReceiverState, ReplayWindow};

#[test]
fn replay_window_rules() {
    // REQ: DF-RCV-3
    let mut w = ReplayWindow::new(8);
    assert_eq!(w.admit(5), Admission::Accepted);
    assert_eq!(w.admit(5), Admission::Duplicate);
    assert_eq!(w.admit(3), Admission::Accepted); // late arrival
    assert_eq!(w.admit(3), Admission::Duplicate);
    assert_eq!(w.admit(12), Admission::Accepted); // slide by 7
    assert_eq!(w.admit(5), Admission::Duplicate); // 12-8 < 5: still inside the window, seen
    assert_eq!(w.admit(6), Admission::Accepted); // inside, never seen
    assert_eq!(w.admit(4), Admission::TooOld); // 4 <= 12-8
    assert_eq!(w.admit(30), Admission::Accepted); // jump past W
    assert_eq!(w.admit(23), Admission::Accepted);
    assert_eq!(w.admit(22), Admission::TooOld);
    assert_eq!(w.seen(), vec![23, 30]);
}

#[test]
fn replay_window_matches_a_set_model() {
    // REQ: DF-RCV-3
    let mut rng = crate::Rng(3);
    for width in [1u64, 2, 7, 64, 65, 130] {
        let mut w = ReplayWindow::new(width);
        let mut seen = std::collections::BTreeSet::new();
        let mut h = 0u64;
        for _ in 0..3000 {
            let s = 1 + rng.below(400);
            let want = if s > h {
                Admission::Accepted
            } else if h >= width && s <= h - width {
                Admission::TooOld
            } else if seen.contains(&s) {
                Admission::Duplicate
            } else {
                Admission::Accepted
            };
            assert_eq!(w.admit(s), want, "W={width} H={h} s={s}");
            if want == Admission::Accepted {
                seen.insert(s);
                h = h.max(s);
            }
        }
    }
}

#[test]
fn incarnation_table() {
    // REQ: DF-RCV-4
    let mut st = ReceiverState::new(1, 16, 2, 10);
    assert_eq!(st.admit(1, 5, 1), Admission::OwnOrigin); // REQ: DF-RCV-2
    assert_eq!(st.admit(2, 10, 1), Admission::Accepted);
    assert_eq!(st.admit(2, 20, 1), Admission::Accepted);
    assert_eq!(st.admit(2, 5, 1), Admission::StaleIncarnation);
    assert_eq!(st.admit(2, 15, 1), Admission::Accepted); // evicts 10
    assert_eq!(st.incarnations(2), vec![15, 20]);
    assert_eq!(st.admit(2, 10, 2), Admission::StaleIncarnation);
    assert_eq!(st.admit(2, 20, 1), Admission::Duplicate);
    let mut small = ReceiverState::new(1, 16, 2, 1);
    assert_eq!(small.admit(2, 1, 1), Admission::Accepted);
    assert_eq!(small.admit(3, 1, 1), Admission::OriginLimit);
    assert_eq!(st.history(), vec![(2, 15, 1), (2, 20, 1)]);
}

#[test]
fn incarnations_ahead_of_the_clock_are_dropped_when_untracked() {
    // REQ: DF-RCV-175, DF-PAR-175
    const MINUTE: u64 = 60_000_000;
    let now = 1_795_953_600_000_000u64;
    let mut st = df_core::replay::ReceiverState::new(1, 64, 4, 16);
    st.set_max_incarnation_ahead(MINUTE);
    // no clock reading yet: the bound is not applied
    assert_eq!(st.now_us(), None);
    assert_eq!(st.check(2, u64::MAX, 1), Admission::Accepted);
    st.set_now_us(now);
    assert_eq!(st.check(2, u64::MAX, 1), Admission::FutureIncarnation);
    assert_eq!(st.check(2, now + MINUTE, 1), Admission::Accepted);
    assert_eq!(
        st.check(2, now + MINUTE + 1, 1),
        Admission::FutureIncarnation
    );
    // the own-origin and membership checks come first
    assert_eq!(st.check(1, u64::MAX, 1), Admission::OwnOrigin);
    // a dropped entry creates no state
    assert_eq!(st.admit(2, u64::MAX, 1), Admission::FutureIncarnation);
    assert!(st.incarnations(2).is_empty() && st.history().is_empty());
    // a tracked incarnation is not checked, even when the clock goes back
    assert_eq!(st.admit(2, now + MINUTE, 1), Admission::Accepted);
    st.set_now_us(now - 10 * MINUTE);
    assert_eq!(st.check(2, now + MINUTE, 2), Admission::Accepted);
    assert_eq!(Admission::FutureIncarnation.as_str(), "future_incarnation");
    // the config key (DF-PAR-175): range and JSON
    let c = df_core::SyncConfig::from_json(&serde_json::json!({"max_incarnation_ahead": MINUTE}))
        .unwrap();
    assert_eq!(c.max_incarnation_ahead, MINUTE);
    assert!(
        df_core::SyncConfig::from_json(
            &serde_json::json!({"max_incarnation_ahead": (1u64 << 40) + 1})
        )
        .is_err()
    );
    assert_eq!(
        df_core::SyncConfig::v1_0()
            .to_json()
            .get("max_incarnation_ahead"),
        None
    );
}

#[test]
fn acceptance_times_are_restored() {
    // REQ: DF-RCV-178 (driver protocol 5.5: the 4th member of an accepted history element)
    let now = 1_795_953_600_000_000u64;
    let mut st = ReceiverState::new(1, 64, 1, 16);
    st.set_incarnation_grace(10);
    assert_eq!(st.admit(2, 5, 1), Admission::Accepted);
    assert!(!st.set_accepted_at(2, 6, now)); // not tracked: nothing recorded
    assert!(!st.set_accepted_at(3, 5, now));
    assert!(st.set_accepted_at(2, 5, now - 9));
    assert_eq!(st.now_us(), None); // the clock is not set by it
    st.set_now_us(now);
    assert_eq!(st.check(2, 6, 1), Admission::LiveIncarnation);
    assert!(st.set_accepted_at(2, 5, now - 10));
    assert_eq!(st.check(2, 6, 1), Admission::Accepted);
    assert!(st.set_accepted_at(2, 5, u64::MAX)); // the clock went back
    assert_eq!(st.check(2, 6, 1), Admission::LiveIncarnation);
}

#[test]
fn a_live_incarnation_is_not_evicted() {
    // REQ: DF-RCV-178, DF-PAR-178
    let now = 1_795_953_600_000_000u64;
    let mut st = ReceiverState::new(1, 64, 2, 16);
    st.set_max_incarnation_ahead(60_000_000);
    st.set_incarnation_grace(10);
    assert_eq!(st.admit(2, 5, 1), Admission::Accepted); // no clock: no acceptance time
    assert_eq!(st.admit(2, 6, 1), Admission::Accepted);
    st.set_now_us(now);
    assert_eq!(st.admit(2, 7, 1), Admission::Accepted); // evicts 5: not live
    assert_eq!(st.incarnations(2), vec![6, 7]);
    assert_eq!(st.admit(2, 6, 2), Admission::Accepted); // 6 accepts at now
    assert_eq!(st.admit(2, 8, 1), Admission::LiveIncarnation);
    assert_eq!(st.incarnations(2), vec![6, 7]);
    st.set_now_us(now + 9);
    assert_eq!(st.check(2, 8, 1), Admission::LiveIncarnation);
    st.set_now_us(now - 1); // the clock went back: still live
    assert_eq!(st.check(2, 8, 1), Admission::LiveIncarnation);
    st.set_now_us(now + 10);
    assert_eq!(st.admit(2, 8, 1), Admission::Accepted);
    assert_eq!(st.incarnations(2), vec![7, 8]);
    assert_eq!(Admission::LiveIncarnation.as_str(), "live_incarnation");
    let c = df_core::SyncConfig::from_json(&serde_json::json!({"incarnation_grace": 5})).unwrap();
    assert_eq!(c.incarnation_grace, 5);
    assert!(
        df_core::SyncConfig::from_json(&serde_json::json!({"incarnation_grace": (1u64 << 40) + 1}))
            .is_err()
    );
}

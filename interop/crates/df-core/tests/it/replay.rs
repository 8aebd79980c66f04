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

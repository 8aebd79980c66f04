//! `FabricOptions::hold_residual` (spec section 5.11, DF-GEN-240..244): the unsent residual is held
//! in a buffer of the node's own, the working weights restart from the anchor after every
//! generation, the residual is folded back just before the next one, and incoming entries move the
//! anchor and the working weights, never the residual. The same arithmetic as the Python tests
//! (tests/test_hold_residual.py).

use df_core::{EngineError, Manifest, SyncConfig, TensorSpec};
use df_fabric::{
    Fabric, FabricError, FabricOptions, MemoryHub, MemoryTransport, StoreError, VecStore,
    WeightStore,
};

fn cfg(average_over: u32) -> SyncConfig {
    // k = ceil(8 * 0.25) = 2; generation only by sync_now (the interval is never reached)
    SyncConfig {
        ratio: 0.25,
        sync_interval: 1000,
        alpha: 1.0,
        average_over: Some(average_over),
        ..SyncConfig::v1_0()
    }
}

/// A store that names some tensors as running statistics (the optional seam call).
struct StatsStore {
    inner: VecStore,
    stats: Vec<String>,
}

impl WeightStore for StatsStore {
    fn manifest(&self) -> &Manifest {
        self.inner.manifest()
    }
    fn framework(&self) -> &str {
        "stats"
    }
    fn gather(&self) -> Result<Vec<f32>, StoreError> {
        self.inner.gather()
    }
    fn apply(&mut self, indices: &[u32], values: &[f32]) -> Result<(), StoreError> {
        self.inner.apply(indices, values)
    }
    fn load(&mut self, flat: &[f32]) -> Result<(), StoreError> {
        self.inner.load(flat)
    }
    fn running_stats(&self) -> Vec<String> {
        self.stats.clone()
    }
}

type Node = Fabric<VecStore, MemoryTransport>;

fn w_store() -> VecStore {
    let m = Manifest::new([TensorSpec::new("w", &[8])]).unwrap();
    VecStore::new(m, vec![0.0; 8]).unwrap()
}

fn node(hub: &MemoryHub, id: u64, average_over: u32, hold: bool) -> Node {
    let options = FabricOptions {
        incarnation: Some(1),
        hold_residual: hold,
        ..FabricOptions::v1_0()
    };
    let peers: Vec<u64> = [1u64, 2].into_iter().filter(|&p| p != id).collect();
    Fabric::with_options(
        w_store(),
        hub.join(id, &peers).unwrap(),
        cfg(average_over),
        options,
    )
    .unwrap()
}

fn anchor<W: WeightStore>(f: &Fabric<W, MemoryTransport>) -> Vec<f32> {
    f.engine().unwrap().anchor().to_vec()
}

// REQ: DF-GEN-240
// REQ: DF-GEN-241
// REQ: DF-GEN-242
// REQ: DF-GEN-243
#[test]
fn residual_is_held_aside_and_folded_back_with_incoming_entries_between() {
    let hub = MemoryHub::new();
    let mut a = node(&hub, 1, 1, true);
    let mut b = node(&hub, 2, 1, false);
    a.store_mut()
        .values_mut()
        .copy_from_slice(&[4.0, -3.0, 2.0, 1.0, 0.5, 0.0, 0.0, 0.0]);
    a.sync_now().unwrap(); // d = active; top 2: indices 0 and 1
    assert_eq!(anchor(&a), [4.0, -3.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]);
    assert_eq!(a.residual(), [0.0, 0.0, 2.0, 1.0, 0.5, 0.0, 0.0, 0.0]);
    assert_eq!(a.store().values(), anchor(&a).as_slice()); // working = anchor
    b.poll().unwrap();
    assert_eq!(
        b.store().values(),
        [4.0, -3.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    );
    // an incoming entry between two syncs moves A's anchor and working weights, not its residual
    b.store_mut().values_mut()[7] += 8.0;
    b.sync_now().unwrap();
    a.poll().unwrap();
    assert_eq!(anchor(&a), [4.0, -3.0, 0.0, 0.0, 0.0, 0.0, 0.0, 8.0]);
    assert_eq!(
        a.store().values(),
        [4.0, -3.0, 0.0, 0.0, 0.0, 0.0, 0.0, 8.0]
    );
    assert_eq!(a.residual(), [0.0, 0.0, 2.0, 1.0, 0.5, 0.0, 0.0, 0.0]);
    // more local training; the next generation folds the residual back first:
    // d = (working - anchor) + r = [0, 0, 2, 3, 0.5, -0.25, 0, 0]; top 2: indices 3 and 2
    a.store_mut().values_mut()[3] += 2.0;
    a.store_mut().values_mut()[5] -= 0.25;
    let before = a.counters().own_values_sent;
    a.sync_now().unwrap();
    assert_eq!(a.counters().own_values_sent - before, 2);
    assert_eq!(anchor(&a), [4.0, -3.0, 2.0, 3.0, 0.0, 0.0, 0.0, 8.0]);
    assert_eq!(a.residual(), [0.0, 0.0, 0.0, 0.0, 0.5, -0.25, 0.0, 0.0]);
    assert_eq!(a.store().values(), anchor(&a).as_slice());
    b.poll().unwrap();
    assert_eq!(anchor(&b), anchor(&a));
}

// REQ: DF-GEN-242
#[test]
fn averaging_drops_the_unsent_share_at_selected_indices() {
    let hub = MemoryHub::new();
    let mut a = node(&hub, 1, 2, true);
    let mut b = node(&hub, 2, 2, false);
    a.store_mut()
        .values_mut()
        .copy_from_slice(&[4.0, -3.0, 2.0, 1.0, 0.5, 0.0, 0.0, 0.0]);
    a.sync_now().unwrap(); // sends fl32(d / 2) at 0 and 1 (DF-GEN-70)
    assert_eq!(anchor(&a), [2.0, -1.5, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]);
    assert_eq!(a.residual(), [0.0, 0.0, 2.0, 1.0, 0.5, 0.0, 0.0, 0.0]);
    assert_eq!(a.store().values(), anchor(&a).as_slice());
    b.poll().unwrap();
    assert_eq!(anchor(&b), anchor(&a)); // B received [2, -1.5] at 0 and 1
}

// REQ: DF-GEN-244
#[test]
fn running_statistics_keep_their_residual_in_the_working_weights() {
    let hub = MemoryHub::new();
    let m = Manifest::new([
        TensorSpec::new("bn.running_var", &[4]),
        TensorSpec::new("w", &[4]),
    ])
    .unwrap();
    let store = StatsStore {
        inner: VecStore::new(m, vec![0.0; 8]).unwrap(),
        stats: vec!["bn.running_var".to_owned()],
    };
    let options = FabricOptions {
        incarnation: Some(1),
        hold_residual: true,
        ..FabricOptions::v1_0()
    };
    let mut a = Fabric::with_options(store, hub.join(1, &[]).unwrap(), cfg(1), options).unwrap();
    // canonical order: bn.running_var (0..3), w (4..7)
    a.store_mut()
        .inner
        .values_mut()
        .copy_from_slice(&[1.0, 0.5, 0.0, 0.0, 4.0, 0.25, 0.0, -3.0]);
    a.sync_now().unwrap(); // top 2: 4 (4) and 7 (-3)
    assert_eq!(anchor(&a), [0.0, 0.0, 0.0, 0.0, 4.0, 0.0, 0.0, -3.0]);
    assert_eq!(a.residual(), [0.0, 0.0, 0.0, 0.0, 0.0, 0.25, 0.0, 0.0]);
    // the running statistics' unsent values stay in the working weights, as without the option
    assert_eq!(
        a.store().inner.values(),
        [1.0, 0.5, 0.0, 0.0, 4.0, 0.0, 0.0, -3.0]
    );
    a.sync_now().unwrap(); // 1 and 0.5 (bn) are the largest now; 0.25 is folded back, held again
    assert_eq!(anchor(&a), [1.0, 0.5, 0.0, 0.0, 4.0, 0.0, 0.0, -3.0]);
    assert_eq!(a.residual(), [0.0, 0.0, 0.0, 0.0, 0.0, 0.25, 0.0, 0.0]);
    assert_eq!(a.store().inner.values(), anchor(&a).as_slice());
}

// REQ: DF-GEN-244
#[test]
fn a_store_naming_an_unknown_tensor_is_refused_at_start() {
    let hub = MemoryHub::new();
    let store = || StatsStore {
        inner: w_store(),
        stats: vec!["bn.running_var".to_owned()],
    };
    let options = FabricOptions {
        hold_residual: true,
        ..FabricOptions::v1_0()
    };
    let err = Fabric::with_options(store(), hub.join(1, &[]).unwrap(), cfg(1), options)
        .err()
        .unwrap();
    assert!(
        matches!(&err, FabricError::Store(StoreError::Backend(m)) if m.contains("running_stats")),
        "{err}"
    );
    // only read with the option
    Fabric::with_options(
        store(),
        hub.join(2, &[]).unwrap(),
        cfg(1),
        FabricOptions {
            hold_residual: false,
            ..FabricOptions::v1_0()
        },
    )
    .unwrap();
}

#[test]
fn option_off_keeps_the_residual_in_the_working_weights() {
    let hub = MemoryHub::new();
    let mut a = node(&hub, 1, 1, false);
    let w = [4.0, -3.0, 2.0, 1.0, 0.5, 0.0, 0.0, 0.0];
    a.store_mut().values_mut().copy_from_slice(&w);
    a.sync_now().unwrap();
    assert_eq!(a.residual(), [0.0; 8]);
    assert_eq!(a.store().values(), w); // DF-GEN-5
}

// REQ: DF-GEN-241
#[test]
fn a_non_finite_delta_leaves_the_residual_in_the_working_weights() {
    let hub = MemoryHub::new();
    let mut a = node(&hub, 1, 1, true);
    a.store_mut()
        .values_mut()
        .copy_from_slice(&[4.0, -3.0, 2.0, 0.0, 0.0, 0.0, 0.0, 0.0]);
    a.sync_now().unwrap();
    a.store_mut().values_mut()[6] = f32::INFINITY;
    let err = a.sync_now().err().unwrap();
    assert!(
        matches!(
            err,
            FabricError::Engine(EngineError::NonFinite { index: 6 })
        ),
        "{err}"
    );
    // the residual was folded back before the refused generation: nothing is lost or doubled
    assert_eq!(a.residual(), [0.0; 8]);
    assert_eq!(
        a.store().values(),
        [4.0, -3.0, 2.0, 0.0, 0.0, 0.0, f32::INFINITY, 0.0]
    );
    assert_eq!(anchor(&a), [4.0, -3.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]);
}

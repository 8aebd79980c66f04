//! Every conformance vector of `conformance/vectors` against `df_core`, in a test binary of its own:
//! the test command of the mutation campaign (`conformance/tools/mutation.py rust`, which runs
//! `cargo mutants -p df-core -- --test vectors`). A plain `cargo test` skips this target (the `it`
//! binary runs the same module).

#[path = "it/vectors.rs"]
mod vectors;

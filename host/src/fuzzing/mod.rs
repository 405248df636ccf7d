//! The fuzz targets' bodies, one module per target, each a `run(data)` that must never panic.
//!
//! `host/fuzz` (cargo-fuzz, nightly) wraps each in `fuzz_target!`; cargo-fuzz builds with
//! `--cfg fuzzing`, which makes this module public. In the host's own tests, the unit test
//! below runs every target on its committed seeds (`host/fuzz/seeds/TARGET/`), so a target
//! that no longer compiles, or a seed that now panics, fails `cargo test`.

pub mod chunked_body;
pub mod connection;
pub mod request_head;
pub mod ws_frame;
pub mod ws_inflate;

#[cfg(test)]
mod tests {
    use std::path::Path;

    /// A target's body.
    type Target = fn(&[u8]);

    /// Every target, by the name of its seeds directory.
    const TARGETS: [(&str, Target); 5] = [
        ("request_head", super::request_head::run),
        ("chunked_body", super::chunked_body::run),
        ("connection", super::connection::run),
        ("ws_frame", super::ws_frame::run),
        ("ws_inflate", super::ws_inflate::run),
    ];

    #[test]
    fn every_target_runs_its_committed_seeds() {
        let seeds = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds");
        for (target, run) in TARGETS {
            let dir = seeds.join(target);
            let mut ran = 0;
            for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{dir:?}: {e}")) {
                let path = entry.unwrap().path();
                run(&std::fs::read(&path).unwrap());
                ran += 1;
            }
            assert!(ran > 0, "no seeds in {dir:?}");
            // The empty input and a run of every byte value are inputs too.
            run(&[]);
            run(&(0..=255).collect::<Vec<u8>>());
        }
    }
}

//! See `ankh::fuzzing::connection`: the target's body lives in the host, where a unit test runs it
//! on the committed seeds.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ankh::fuzzing::connection::run(data));

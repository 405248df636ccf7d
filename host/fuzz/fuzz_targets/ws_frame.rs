//! See `ankh::fuzzing::ws_frame`: the target's body lives in the host, where a unit test runs it
//! on the committed seeds.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ankh::fuzzing::ws_frame::run(data));

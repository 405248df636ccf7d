//! permessage-deflate's inflate path on arbitrary bytes: a series of "compressed messages"
//! through the shared inflater, with and without a context window, under a message limit. It
//! never panics, never returns more than the limit, and whatever the compressor makes of the
//! same bytes inflates back to them exactly.

use crate::proto::ws_deflate::{Codec, InflateError, Window};
use bytes::Bytes;

const MAX: usize = 64 * 1024;

/// The target: never panics on any `data`.
pub fn run(data: &[u8]) {
    let Some((&knob, rest)) = data.split_first() else {
        return;
    };
    let bits = 8 + knob % 8;
    let takeover = knob & 0x80 != 0;
    let mut codec = Codec::default();
    let mut window = Window::new(bits);
    // 0xA5 separates messages: several in a row share (and grow) the window.
    for message in rest.split(|&b| b == 0xA5) {
        let window = takeover.then_some(&mut window);
        match codec.inflate(message, window, MAX) {
            Ok(out) => assert!(out.len() <= MAX),
            Err(InflateError::TooBig | InflateError::Corrupt) => {}
        }
    }
    assert_eq!(codec.counts.failures, 0, "the library panicked");
    let payload = Bytes::copy_from_slice(rest);
    if let Some(compressed) = codec.compress(&payload, bits) {
        assert!(compressed.len() < payload.len());
        let back = codec.inflate(&compressed, None, rest.len()).unwrap();
        assert_eq!(back, rest);
    }
    assert_eq!(codec.counts.failures, 0, "the library panicked");
}

//! What only the SDK's own unit tests need; plugin tests build requests with
//! [`crate::testing`].

use crate::wit;

/// The host's packed head of `r` (`host/src/runtime/engine/packed.rs`), written again from the
/// layout documented in the WIT.
pub(crate) fn encode_packed(r: &wit::Request) -> Vec<u8> {
    fn field(out: &mut Vec<u8>, bytes: &[u8]) {
        out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
        out.extend_from_slice(bytes);
    }
    let mut out = vec![match r.version {
        wit::HttpVersion::Http10 => 0,
        wit::HttpVersion::Http11 => 1,
    }];
    for text in [
        &r.id,
        &r.method,
        &r.path,
        &r.mount,
        &r.query,
        &r.remote_addr,
    ] {
        field(&mut out, text.as_bytes());
    }
    out.extend_from_slice(&(r.headers.len() as u32).to_le_bytes());
    for h in &r.headers {
        field(&mut out, h.name.as_bytes());
        field(&mut out, &h.value);
    }
    out
}

//! WebSocket frames, sans-IO (RFC 6455 §5): client bytes in, events out; events in, server
//! bytes out.
//!
//! [`FrameReader::read`] takes whatever input is buffered and returns the next event (a
//! complete data message, a Ping, a Pong, a Close) or says it needs more; it never needs a
//! whole frame at once, so any split of the stream reads the same. Every rule the server
//! enforces is here, each violation mapped to its close code (§7.4.1):
//! - 1002: an unmasked frame, RSV bits (RSV1 is allowed on the first frame of a data message
//!   once permessage-deflate is agreed, see [`FrameReader::with_compression`]), an unknown opcode, a fragmented or long control frame,
//!   a continuation without a start or a new message inside one, a 64-bit length with its top
//!   bit set, a malformed Close;
//! - 1009: a message (all its fragments) over the limit, refused as soon as a frame header
//!   says so, before its payload is buffered (a compressed message is held compressed, up to
//!   [`compressed_cap`]; its inflated size is checked while it is inflated, by the caller);
//! - 1007: invalid UTF-8 in a text message or a close reason, found as soon as the bad byte
//!   arrives, mid-frame, not at the end of the message.
//!
//! After a violation, or once the server has sent its Close, the reader can go on in
//! [`FrameReader::discard`] mode: it still follows the framing, skips data payloads without
//! buffering them (the rest of an oversized message included) and reports only the peer's
//! Close, so the closing handshake can complete.

use crate::message::WsMessage;

/// Opcodes (RFC 6455 §5.2).
pub(crate) mod opcode {
    pub(crate) const CONTINUATION: u8 = 0x0;
    pub(crate) const TEXT: u8 = 0x1;
    pub(crate) const BINARY: u8 = 0x2;
    pub(crate) const CLOSE: u8 = 0x8;
    pub(crate) const PING: u8 = 0x9;
    pub(crate) const PONG: u8 = 0xA;
}

/// Close codes the server sends (RFC 6455 §7.4.1).
pub(crate) mod close_code {
    /// The server is going away (draining).
    pub(crate) const GOING_AWAY: u16 = 1001;
    /// The peer broke the protocol.
    pub(crate) const PROTOCOL_ERROR: u16 = 1002;
    /// No status code was present (only ever reported, never sent).
    pub(crate) const NO_STATUS: u16 = 1005;
    /// The connection dropped without a Close (only ever reported, never sent).
    pub(crate) const ABNORMAL: u16 = 1006;
    /// A text message (or close reason) was not UTF-8.
    pub(crate) const INVALID_DATA: u16 = 1007;
    /// A policy was violated (the peer does not read what it is sent).
    pub(crate) const POLICY: u16 = 1008;
    /// A message was over the size limit.
    pub(crate) const TOO_BIG: u16 = 1009;
    /// The plugin failed while handling an event.
    pub(crate) const INTERNAL_ERROR: u16 = 1011;
}

/// Control frames carry at most this many payload bytes (RFC 6455 §5.5).
pub(crate) const MAX_CONTROL_PAYLOAD: usize = 125;

/// What a peer sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Event {
    /// A complete data message, fragments joined.
    Message(WsMessage),
    Ping(Vec<u8>),
    Pong,
    /// A Close, with its code and reason if it had them.
    Close(Option<(u16, String)>),
    /// A complete compressed data message (RSV1 set), fragments joined, still compressed:
    /// the caller inflates it, checks its size and, for text, its UTF-8.
    Deflated {
        text: bool,
        payload: Vec<u8>,
    },
}

/// How the peer broke the protocol; each maps to one close code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Violation {
    Protocol(&'static str),
    TooBig,
    InvalidUtf8,
    /// A compressed message that is not a valid deflate stream.
    BadCompression,
}

impl Violation {
    pub(crate) fn close_code(self) -> u16 {
        match self {
            Violation::Protocol(_) => close_code::PROTOCOL_ERROR,
            Violation::TooBig => close_code::TOO_BIG,
            Violation::InvalidUtf8 | Violation::BadCompression => close_code::INVALID_DATA,
        }
    }

    /// The reason sent in the Close frame.
    pub(crate) fn reason(self) -> &'static str {
        match self {
            Violation::Protocol(_) => "protocol error",
            Violation::TooBig => "message too big",
            Violation::InvalidUtf8 => "invalid UTF-8",
            Violation::BadCompression => "invalid compressed data",
        }
    }
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Violation::Protocol(why) => write!(f, "protocol error: {why}"),
            Violation::TooBig => f.write_str("message too big"),
            Violation::InvalidUtf8 => f.write_str("invalid UTF-8"),
            Violation::BadCompression => f.write_str("invalid compressed data"),
        }
    }
}

/// A frame header as read.
#[derive(Debug, Clone, Copy)]
struct Header {
    fin: bool,
    rsv: u8,
    opcode: u8,
    len: u64,
    /// The masking key; `None` for an unmasked frame (a violation from a client).
    mask: Option<[u8; 4]>,
}

/// Where the reader is.
#[derive(Debug, Clone, Copy)]
enum At {
    /// Expecting a frame header.
    Header,
    /// Inside the payload of `header`: `done` bytes of it read so far.
    Payload { header: Header, done: u64 },
}

/// A data message being assembled from its fragments.
#[derive(Debug)]
struct Assembly {
    text: bool,
    /// Compressed (RSV1 on its first frame): held as sent, validated once inflated.
    compressed: bool,
    bytes: Vec<u8>,
    /// Bytes of `bytes` already known to be valid UTF-8 (text only).
    validated: usize,
}

/// The reading side of one server connection.
#[derive(Debug)]
pub(crate) struct FrameReader {
    max_message: usize,
    /// permessage-deflate was agreed: RSV1 may mark a compressed message.
    compression: bool,
    at: At,
    message: Option<Assembly>,
    control: Vec<u8>,
    discard: bool,
    /// The framing itself was lost (a length that cannot be right): input is ignored.
    broken: bool,
    /// A Close frame arrived, valid or not: the peer will send nothing more.
    peer_closed: bool,
}

/// The result of one [`FrameReader::read`].
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Read {
    /// Input bytes used.
    pub used: usize,
    /// What they came to: an event, nothing yet (more input is needed), or a violation.
    pub outcome: Result<Option<Event>, Violation>,
}

impl FrameReader {
    /// A reader that refuses messages over `max_message` bytes.
    pub(crate) fn new(max_message: usize) -> Self {
        FrameReader {
            max_message,
            compression: false,
            at: At::Header,
            message: None,
            control: Vec::new(),
            discard: false,
            broken: false,
            peer_closed: false,
        }
    }

    /// A reader for a connection that agreed on permessage-deflate: RSV1 on the first frame
    /// of a data message marks it compressed, and it is reported as [`Event::Deflated`].
    pub(crate) fn with_compression(mut self, on: bool) -> Self {
        self.compression = on;
        self
    }

    /// Whether the peer sent a Close (a malformed one included): its side of the closing
    /// handshake is done.
    pub(crate) fn peer_closed(&self) -> bool {
        self.peer_closed
    }

    /// From now on, only follow the framing: data is skipped unbuffered, Pings and Pongs are
    /// dropped, and only a Close is reported.
    pub(crate) fn discard(&mut self) {
        self.discard = true;
        self.message = None;
    }

    /// Bytes held for a message in progress (for memory accounting).
    #[cfg(test)]
    pub(crate) fn buffered(&self) -> usize {
        self.message.as_ref().map_or(0, |m| m.bytes.capacity()) + self.control.capacity()
    }

    /// Reads from the start of `input` until an event, a violation, or the end of the input.
    pub(crate) fn read(&mut self, input: &[u8]) -> Read {
        if self.broken {
            return Read {
                used: input.len(),
                outcome: Ok(None),
            };
        }
        let mut used = 0;
        loop {
            let rest = &input[used..];
            match self.at {
                At::Header => {
                    let (header, len) = match parse_header(rest) {
                        Ok(Some(h)) => h,
                        Ok(None) => {
                            return Read {
                                used,
                                outcome: Ok(None),
                            };
                        }
                        Err(v) => {
                            self.broken = true;
                            self.discard();
                            return Read {
                                used: input.len(),
                                outcome: Err(v),
                            };
                        }
                    };
                    used += len;
                    let checked = if self.discard {
                        Ok(())
                    } else {
                        check_header(&header, self.compression)
                    };
                    if let Err(v) = checked.and_then(|()| self.begin(&header)) {
                        // The rest of this frame is skipped; what follows is read as frames.
                        self.discard();
                        self.at = At::Payload { header, done: 0 };
                        return Read {
                            used,
                            outcome: Err(v),
                        };
                    }
                    self.at = At::Payload { header, done: 0 };
                }
                At::Payload { header, done } => {
                    let left = header.len - done;
                    let take = rest.len().min(usize::try_from(left).unwrap_or(usize::MAX));
                    let chunk = &rest[..take];
                    used += take;
                    let done = done + take as u64;
                    self.at = At::Payload { header, done };
                    if let Err(v) = self.payload(&header, done - take as u64, chunk) {
                        self.discard();
                        return Read {
                            used,
                            outcome: Err(v),
                        };
                    }
                    if done < header.len {
                        return Read {
                            used,
                            outcome: Ok(None),
                        };
                    }
                    self.at = At::Header;
                    match self.end(&header) {
                        Ok(Some(event)) => {
                            return Read {
                                used,
                                outcome: Ok(Some(event)),
                            };
                        }
                        Ok(None) => {}
                        Err(v) => {
                            self.discard();
                            return Read {
                                used,
                                outcome: Err(v),
                            };
                        }
                    }
                }
            }
        }
    }

    /// Checks a header against the state of the message in progress.
    fn begin(&mut self, h: &Header) -> Result<(), Violation> {
        if h.opcode >= opcode::CLOSE {
            self.control.clear();
        }
        if self.discard {
            return Ok(());
        }
        match h.opcode {
            opcode::CLOSE | opcode::PING | opcode::PONG => {
                self.control.clear();
                Ok(())
            }
            opcode::CONTINUATION => {
                let Some(message) = &self.message else {
                    return Err(Violation::Protocol(
                        "a continuation with no message to continue",
                    ));
                };
                self.check_size(message.bytes.len(), h.len, message.compressed)
            }
            _ => {
                if self.message.is_some() {
                    return Err(Violation::Protocol("a new message inside a fragmented one"));
                }
                let compressed = h.rsv & RSV1 != 0;
                self.check_size(0, h.len, compressed)?;
                let cap = usize::try_from(h.len).unwrap_or(0).min(64 * 1024);
                self.message = Some(Assembly {
                    text: h.opcode == opcode::TEXT,
                    compressed,
                    bytes: Vec::with_capacity(cap),
                    validated: 0,
                });
                Ok(())
            }
        }
    }

    fn check_size(&self, have: usize, more: u64, compressed: bool) -> Result<(), Violation> {
        let total = (have as u64).saturating_add(more);
        let limit = if compressed {
            compressed_cap(self.max_message)
        } else {
            self.max_message
        };
        if total > limit as u64 {
            return Err(Violation::TooBig);
        }
        Ok(())
    }

    /// Takes `chunk`, the payload bytes of `h` from offset `offset`.
    fn payload(&mut self, h: &Header, offset: u64, chunk: &[u8]) -> Result<(), Violation> {
        let unmask = |out: &mut Vec<u8>| {
            let start = out.len();
            out.extend_from_slice(chunk);
            if let Some(mask) = h.mask {
                for (i, b) in out[start..].iter_mut().enumerate() {
                    *b ^= mask[((offset as usize) + i) % 4];
                }
            }
        };
        if h.opcode >= opcode::CLOSE {
            unmask(&mut self.control);
            return Ok(());
        }
        if self.discard {
            return Ok(());
        }
        let Some(message) = &mut self.message else {
            return Ok(());
        };
        unmask(&mut message.bytes);
        if message.text && !message.compressed {
            // Only what is new, and a sequence cut at the end of the input is not yet wrong.
            match std::str::from_utf8(&message.bytes[message.validated..]) {
                Ok(_) => message.validated = message.bytes.len(),
                Err(e) if e.error_len().is_none() => message.validated += e.valid_up_to(),
                Err(_) => return Err(Violation::InvalidUtf8),
            }
        }
        Ok(())
    }

    /// A frame is complete: what it came to.
    fn end(&mut self, h: &Header) -> Result<Option<Event>, Violation> {
        match h.opcode {
            opcode::CLOSE => {
                self.peer_closed = true;
                parse_close(&self.control).map(|c| Some(Event::Close(c)))
            }
            _ if self.discard => Ok(None),
            opcode::PING => Ok(Some(Event::Ping(std::mem::take(&mut self.control)))),
            opcode::PONG => Ok(Some(Event::Pong)),
            _ if !h.fin => Ok(None),
            _ => {
                let Some(message) = self.message.take() else {
                    return Ok(None);
                };
                if message.compressed {
                    return Ok(Some(Event::Deflated {
                        text: message.text,
                        payload: message.bytes,
                    }));
                }
                if message.text {
                    // Everything is validated but a sequence cut at the very end.
                    let text =
                        String::from_utf8(message.bytes).map_err(|_| Violation::InvalidUtf8)?;
                    Ok(Some(Event::Message(WsMessage::Text(text))))
                } else {
                    Ok(Some(Event::Message(WsMessage::Binary(message.bytes))))
                }
            }
        }
    }
}

/// A frame header, or `None` until all of it has arrived. Only a length that cannot be right
/// is an error here: it loses the framing. Everything else is [`check_header`]'s.
fn parse_header(input: &[u8]) -> Result<Option<(Header, usize)>, Violation> {
    let [b0, b1, ..] = *input else {
        return Ok(None);
    };
    let (len, at) = match b1 & 0x7f {
        126 => {
            let Some(b) = input.get(2..4) else {
                return Ok(None);
            };
            (u64::from(u16::from_be_bytes([b[0], b[1]])), 4)
        }
        127 => {
            let Some(b) = input.get(2..10) else {
                return Ok(None);
            };
            let len = u64::from_be_bytes(b.try_into().expect("8 bytes"));
            if len >> 63 != 0 {
                return Err(Violation::Protocol("a 64-bit length with its top bit set"));
            }
            (len, 10)
        }
        n => (u64::from(n), 2),
    };
    let (mask, at) = if b1 & 0x80 != 0 {
        let Some(mask) = input.get(at..at + 4) else {
            return Ok(None);
        };
        (Some(mask.try_into().expect("4 bytes")), at + 4)
    } else {
        (None, at)
    };
    let header = Header {
        fin: b0 & 0x80 != 0,
        rsv: b0 & 0x70,
        opcode: b0 & 0x0f,
        len,
        mask,
    };
    Ok(Some((header, at)))
}

/// RSV1: a compressed message, under permessage-deflate (RFC 7692 §6).
const RSV1: u8 = 0x40;

/// The most a compressed message may take on the wire before it is inflated: the message
/// limit plus what deflate adds to data that does not compress (5 bytes per 64 KiB stored
/// block) and a margin. Its inflated size is held to the limit itself.
pub(crate) fn compressed_cap(max_message: usize) -> usize {
    max_message.saturating_add(max_message / 64 + 1024)
}

/// The rules a client frame header must follow (RFC 6455 §5.1-§5.5, RFC 7692 §6.1).
fn check_header(h: &Header, compression: bool) -> Result<(), Violation> {
    let rsv1_allowed = compression && matches!(h.opcode, opcode::TEXT | opcode::BINARY);
    if h.rsv & !RSV1 != 0 || (h.rsv & RSV1 != 0 && !rsv1_allowed) {
        return Err(Violation::Protocol("reserved bits set"));
    }
    if !matches!(
        h.opcode,
        opcode::CONTINUATION
            | opcode::TEXT
            | opcode::BINARY
            | opcode::CLOSE
            | opcode::PING
            | opcode::PONG
    ) {
        return Err(Violation::Protocol("unknown opcode"));
    }
    if h.mask.is_none() {
        return Err(Violation::Protocol("an unmasked client frame"));
    }
    if h.opcode >= opcode::CLOSE && (!h.fin || h.len > MAX_CONTROL_PAYLOAD as u64) {
        return Err(Violation::Protocol(
            "a fragmented or oversized control frame",
        ));
    }
    Ok(())
}

/// A Close payload: empty, or a valid code and a UTF-8 reason (RFC 6455 §5.5.1, §7.4).
fn parse_close(payload: &[u8]) -> Result<Option<(u16, String)>, Violation> {
    match payload {
        [] => Ok(None),
        [_] => Err(Violation::Protocol("a Close payload of one byte")),
        [hi, lo, reason @ ..] => {
            let code = u16::from_be_bytes([*hi, *lo]);
            if !matches!(code, 1000..=1003 | 1007..=1014 | 3000..=4999) {
                return Err(Violation::Protocol("a Close with an invalid code"));
            }
            let reason = std::str::from_utf8(reason).map_err(|_| Violation::InvalidUtf8)?;
            Ok(Some((code, reason.to_owned())))
        }
    }
}

/// Appends one unmasked, final server frame.
pub(crate) fn write_frame(out: &mut Vec<u8>, opcode: u8, payload: &[u8]) {
    write_message(out, opcode, false, payload);
}

/// Appends one unmasked, final server frame; `compressed` sets RSV1 (a data message whose
/// payload is deflated, RFC 7692 §6).
pub(crate) fn write_message(out: &mut Vec<u8>, opcode: u8, compressed: bool, payload: &[u8]) {
    out.push(0x80 | if compressed { RSV1 } else { 0 } | opcode);
    match payload.len() {
        n if n < 126 => out.push(n as u8),
        n if n <= usize::from(u16::MAX) => {
            out.push(126);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            out.push(127);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    out.extend_from_slice(payload);
}

/// Appends a Close frame with `code` and `reason` (cut to fit a control frame, on a character
/// boundary).
pub(crate) fn write_close(out: &mut Vec<u8>, code: u16, reason: &str) {
    let mut end = reason.len().min(MAX_CONTROL_PAYLOAD - 2);
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    let mut payload = Vec::with_capacity(2 + end);
    payload.extend_from_slice(&code.to_be_bytes());
    payload.extend_from_slice(&reason.as_bytes()[..end]);
    write_frame(out, opcode::CLOSE, &payload);
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: [u8; 4] = [0x37, 0xfa, 0x21, 0x3d];

    fn client_frame(first: u8, payload: &[u8]) -> Vec<u8> {
        let mut out = vec![first];
        match payload.len() {
            n if n < 126 => out.push(0x80 | n as u8),
            n if n < 65536 => {
                out.push(0x80 | 126);
                out.extend_from_slice(&(n as u16).to_be_bytes());
            }
            n => {
                out.push(0x80 | 127);
                out.extend_from_slice(&(n as u64).to_be_bytes());
            }
        }
        out.extend_from_slice(&KEY);
        out.extend(payload.iter().enumerate().map(|(i, b)| b ^ KEY[i % 4]));
        out
    }

    /// Every event (or violation) `input` gives, fed `split` bytes at a time.
    fn events(
        reader: &mut FrameReader,
        input: &[u8],
        split: usize,
    ) -> Vec<Result<Event, Violation>> {
        let mut out = Vec::new();
        let mut buf = Vec::new();
        for piece in input.chunks(split.max(1)) {
            buf.extend_from_slice(piece);
            loop {
                let r = reader.read(&buf);
                buf.drain(..r.used);
                match r.outcome {
                    Ok(Some(e)) => out.push(Ok(e)),
                    Ok(None) => break,
                    Err(v) => out.push(Err(v)),
                }
            }
        }
        out
    }

    #[test]
    fn fragments_pings_and_close_in_any_split() {
        let mut input = client_frame(opcode::TEXT, "héllo ".as_bytes());
        input.extend(client_frame(0x80 | opcode::PING, b"p"));
        input.extend(client_frame(
            0x80 | opcode::CONTINUATION,
            "wörld".as_bytes(),
        ));
        input.extend(client_frame(0x80 | opcode::BINARY, &[1, 2, 3]));
        input.extend(client_frame(
            0x80 | opcode::CLOSE,
            &[0x03, 0xe8, b'o', b'k'],
        ));
        let expected = vec![
            Ok(Event::Ping(b"p".to_vec())),
            Ok(Event::Message(WsMessage::Text("héllo wörld".into()))),
            Ok(Event::Message(WsMessage::Binary(vec![1, 2, 3]))),
            Ok(Event::Close(Some((1000, "ok".into())))),
        ];
        for split in 1..=input.len() {
            let mut reader = FrameReader::new(1024);
            assert_eq!(
                events(&mut reader, &input, split),
                expected,
                "split {split}"
            );
        }
    }

    #[test]
    fn violations_and_their_codes() {
        let cases: Vec<(Vec<u8>, u16)> = vec![
            (vec![0x81, 0x01, b'a'], 1002),                  // unmasked
            (client_frame(0xC1, b"a"), 1002),                // RSV1
            (client_frame(0x83, b"a"), 1002),                // opcode 3
            (client_frame(0x09, b"a"), 1002),                // fragmented ping
            (client_frame(0x89, &[0; 126]), 1002),           // long ping
            (client_frame(0x80, b"a"), 1002),                // lone continuation
            (client_frame(0x88, &[0x03]), 1002),             // 1-byte close
            (client_frame(0x88, &[0x03, 0xed]), 1002),       // close 1005
            (client_frame(0x88, &[0x03, 0xe8, 0xff]), 1007), // reason not UTF-8
            (client_frame(0x81, &[b'a', 0xff, b'b']), 1007), // text not UTF-8
            (client_frame(0x82, &[0; 2000]), 1009),          // too big
        ];
        for (input, code) in cases {
            let mut reader = FrameReader::new(1024);
            let got = events(&mut reader, &input, input.len());
            assert!(
                matches!(got.first(), Some(Err(v)) if v.close_code() == code),
                "{input:02x?}: {got:?}"
            );
        }
        let mut long = vec![0x82, 0x80 | 127];
        long.extend_from_slice(&(1u64 << 63).to_be_bytes());
        long.extend_from_slice(&KEY);
        let mut reader = FrameReader::new(1024);
        let got = events(&mut reader, &long, long.len());
        assert_eq!(
            got,
            vec![Err(Violation::Protocol(
                "a 64-bit length with its top bit set"
            ))]
        );
        // The framing is lost: whatever follows is ignored, even a Close.
        let close = client_frame(0x88, &[0x03, 0xe8]);
        assert_eq!(events(&mut reader, &close, 1), vec![]);
    }

    #[test]
    fn after_a_violation_the_framing_is_followed_to_the_peers_close() {
        // An unmasked frame, then (once the server has sent its Close) the peer's Close.
        let mut input = vec![0x81, 0x03, b'a', b'b', b'c'];
        input.extend(client_frame(0x88, &[0x03, 0xe8]));
        let got = events(&mut FrameReader::new(1024), &input, 1);
        assert_eq!(
            got,
            vec![
                Err(Violation::Protocol("an unmasked client frame")),
                Ok(Event::Close(Some((1000, String::new()))))
            ]
        );
    }

    #[test]
    fn invalid_utf8_is_found_mid_frame() {
        // The bad byte is the second of a 100 KiB frame: reported before the rest arrives.
        let mut payload = vec![b'a'; 100 * 1024];
        payload[1] = 0xff;
        let frame = client_frame(0x81, &payload);
        let mut reader = FrameReader::new(1 << 20);
        let got = events(&mut reader, &frame[..20], 20);
        assert_eq!(got, vec![Err(Violation::InvalidUtf8)]);
        // A sequence cut between fragments is fine.
        let mut input = client_frame(0x01, &[0xe2, 0x82]);
        input.extend(client_frame(0x80, &[0xac]));
        let got = events(&mut FrameReader::new(1024), &input, 1);
        assert_eq!(got, vec![Ok(Event::Message(WsMessage::Text("€".into())))]);
    }

    #[test]
    fn an_oversized_message_is_skipped_unbuffered_up_to_the_peers_close() {
        let mut input = client_frame(0x82, &vec![7; 100_000]);
        input.extend(client_frame(0x81, b"dropped"));
        input.extend(client_frame(0x89, b"ignored"));
        input.extend(client_frame(0x88, &[0x03, 0xe8]));
        let mut reader = FrameReader::new(1000);
        let got = events(&mut reader, &input, 4096);
        assert_eq!(
            got,
            vec![
                Err(Violation::TooBig),
                Ok(Event::Close(Some((1000, String::new()))))
            ]
        );
        assert!(reader.buffered() < 1000, "{} bytes held", reader.buffered());
    }

    #[test]
    fn rsv1_marks_a_compressed_message_only_where_allowed() {
        // Fragmented: RSV1 on the first frame only, a Ping in between.
        let mut input = client_frame(0x40 | opcode::TEXT, &[1, 2, 3]);
        input.extend(client_frame(0x80 | opcode::PING, b""));
        input.extend(client_frame(0x80 | opcode::CONTINUATION, &[4, 5]));
        input.extend(client_frame(0x80 | opcode::BINARY, b"plain"));
        let expected = vec![
            Ok(Event::Ping(Vec::new())),
            Ok(Event::Deflated {
                text: true,
                payload: vec![1, 2, 3, 4, 5],
            }),
            Ok(Event::Message(WsMessage::Binary(b"plain".to_vec()))),
        ];
        for split in 1..=input.len() {
            let mut reader = FrameReader::new(1024).with_compression(true);
            assert_eq!(events(&mut reader, &input, split), expected, "{split}");
        }
        let protocol = |reader: FrameReader, input: &[u8]| {
            let mut reader = reader;
            let got = events(&mut reader, input, input.len());
            matches!(got.first(), Some(Err(v)) if v.close_code() == 1002)
        };
        let on = || FrameReader::new(1024).with_compression(true);
        // Not agreed; on a continuation; on a control frame; RSV2 and RSV3 stay reserved.
        assert!(protocol(FrameReader::new(1024), &client_frame(0xC1, b"a")));
        let mut cont = client_frame(0x40 | opcode::TEXT, b"a");
        cont.extend(client_frame(0xC0, b"b"));
        assert!(protocol(on(), &cont));
        assert!(protocol(on(), &client_frame(0xC9, b"")));
        assert!(protocol(on(), &client_frame(0xE1, b"a")));
        assert!(protocol(on(), &client_frame(0x91, b"a")));
        // Compressed text is not checked for UTF-8 before it is inflated.
        let got = events(&mut on(), &client_frame(0xC1, &[0xff]), 7);
        assert_eq!(
            got,
            vec![Ok(Event::Deflated {
                text: true,
                payload: vec![0xff]
            })]
        );
        // Its compressed size is held to the cap, before its payload is read.
        let big = client_frame(0xC2, &vec![0; compressed_cap(1024) + 1]);
        let got = events(&mut on(), &big[..16], 16);
        assert_eq!(got, vec![Err(Violation::TooBig)]);
    }

    #[test]
    fn server_frames_use_the_shortest_length_form() {
        for (n, marker, header) in [
            (125usize, 125u8, 2),
            (126, 126, 4),
            (65535, 126, 4),
            (65536, 127, 10),
        ] {
            let mut out = Vec::new();
            write_frame(&mut out, opcode::BINARY, &vec![0; n]);
            assert_eq!(out[0], 0x82);
            assert_eq!(out[1], marker);
            assert_eq!(out.len(), header + n);
        }
        let mut out = Vec::new();
        write_close(&mut out, 1000, &"é".repeat(100));
        assert!(out.len() <= 2 + 125);
        assert!(std::str::from_utf8(&out[4..]).is_ok());
    }
}

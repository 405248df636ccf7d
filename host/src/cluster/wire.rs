//! What processes say to each other through Redis: a plugin's publish on a topic, and a send
//! or close for one connection. Binary, length-prefixed, versioned by its first byte, so that
//! a message from another ankh version is recognised and skipped rather than misread.

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::message::{Outbound, WsId};

/// The first byte of every message: this layout.
const VERSION: u8 = 1;

const PUBLISH: u8 = b'P';
const SEND: u8 = b'S';
const CLOSE: u8 = b'C';

/// One message between processes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Envelope {
    /// The process that sent it (its node number).
    pub origin: u32,
    /// The plugin whose topic or connection it is about.
    pub plugin: String,
    pub body: Body,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Body {
    /// A message for every subscriber of `topic`.
    Publish { topic: String, message: Outbound },
    /// A message for one connection.
    Send { ws: WsId, message: Outbound },
    /// The closing handshake of one connection.
    Close { ws: WsId, code: u16, reason: String },
}

/// Why a message could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum WireError {
    #[error("a message of layout {0}, this ankh reads layout {VERSION} (a mixed-version cluster?)")]
    Version(u8),
    #[error("a malformed message ({0})")]
    Malformed(&'static str),
}

impl Envelope {
    pub(crate) fn encode(&self) -> Bytes {
        let mut out = BytesMut::with_capacity(32 + self.plugin.len() + self.payload_len());
        out.put_u8(VERSION);
        out.put_u32(self.origin);
        put_str(&mut out, &self.plugin);
        match &self.body {
            Body::Publish { topic, message } => {
                out.put_u8(PUBLISH);
                put_str(&mut out, topic);
                put_message(&mut out, message);
            }
            Body::Send { ws, message } => {
                out.put_u8(SEND);
                out.put_u64(*ws);
                put_message(&mut out, message);
            }
            Body::Close { ws, code, reason } => {
                out.put_u8(CLOSE);
                out.put_u64(*ws);
                out.put_u16(*code);
                put_str(&mut out, reason);
            }
        }
        out.freeze()
    }

    pub(crate) fn decode(mut input: Bytes) -> Result<Envelope, WireError> {
        let version = take_u8(&mut input)?;
        if version != VERSION {
            return Err(WireError::Version(version));
        }
        if input.remaining() < 4 {
            return Err(WireError::Malformed("short origin"));
        }
        let origin = input.get_u32();
        let plugin = take_str(&mut input)?;
        let body = match take_u8(&mut input)? {
            PUBLISH => Body::Publish {
                topic: take_str(&mut input)?,
                message: take_message(&mut input)?,
            },
            SEND => Body::Send {
                ws: take_u64(&mut input)?,
                message: take_message(&mut input)?,
            },
            CLOSE => {
                let ws = take_u64(&mut input)?;
                if input.remaining() < 2 {
                    return Err(WireError::Malformed("short close code"));
                }
                let code = input.get_u16();
                Body::Close {
                    ws,
                    code,
                    reason: take_str(&mut input)?,
                }
            }
            _ => return Err(WireError::Malformed("unknown kind")),
        };
        Ok(Envelope {
            origin,
            plugin,
            body,
        })
    }

    fn payload_len(&self) -> usize {
        match &self.body {
            Body::Publish { topic, message } => topic.len() + message.payload.len(),
            Body::Send { message, .. } => message.payload.len(),
            Body::Close { reason, .. } => reason.len(),
        }
    }
}

fn put_str(out: &mut BytesMut, s: &str) {
    out.put_u32(s.len() as u32);
    out.put_slice(s.as_bytes());
}

fn put_message(out: &mut BytesMut, message: &Outbound) {
    out.put_u8(u8::from(message.text));
    // The payload runs to the end: no copy of its length, and none of it to check.
    out.put_slice(&message.payload);
}

fn take_u8(input: &mut Bytes) -> Result<u8, WireError> {
    if input.has_remaining() {
        Ok(input.get_u8())
    } else {
        Err(WireError::Malformed("truncated"))
    }
}

fn take_u64(input: &mut Bytes) -> Result<u64, WireError> {
    if input.remaining() < 8 {
        return Err(WireError::Malformed("short connection id"));
    }
    Ok(input.get_u64())
}

fn take_str(input: &mut Bytes) -> Result<String, WireError> {
    if input.remaining() < 4 {
        return Err(WireError::Malformed("short length"));
    }
    let len = input.get_u32() as usize;
    if input.remaining() < len {
        return Err(WireError::Malformed("length past the end"));
    }
    String::from_utf8(input.split_to(len).to_vec()).map_err(|_| WireError::Malformed("not UTF-8"))
}

fn take_message(input: &mut Bytes) -> Result<Outbound, WireError> {
    let text = take_u8(input)? != 0;
    let payload = std::mem::take(input);
    if text && std::str::from_utf8(&payload).is_err() {
        return Err(WireError::Malformed("a text message that is not UTF-8"));
    }
    Ok(Outbound { text, payload })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(body: Body) {
        let envelope = Envelope {
            origin: 7,
            plugin: "chat".into(),
            body,
        };
        assert_eq!(Envelope::decode(envelope.encode()), Ok(envelope));
    }

    #[test]
    fn every_kind_reads_back_as_written() {
        round_trip(Body::Publish {
            topic: "room:lobby".into(),
            message: Outbound::text("héllo"),
        });
        round_trip(Body::Send {
            ws: u64::MAX - 3,
            message: Outbound::binary(vec![0, 1, 2, 255]),
        });
        round_trip(Body::Close {
            ws: 1 << 41,
            code: 4000,
            reason: "bye".into(),
        });
        round_trip(Body::Publish {
            topic: String::new(),
            message: Outbound::binary(Vec::new()),
        });
    }

    #[test]
    fn damaged_or_foreign_input_is_refused_not_misread() {
        let good = Envelope {
            origin: 1,
            plugin: "p".into(),
            body: Body::Send {
                ws: 5,
                message: Outbound::text("x"),
            },
        }
        .encode();
        for cut in 0..good.len() - 1 {
            assert!(Envelope::decode(good.slice(..cut)).is_err(), "cut at {cut}");
        }
        let mut other = good.to_vec();
        other[0] = 9;
        assert_eq!(Envelope::decode(other.into()), Err(WireError::Version(9)));
        let mut bad_text = good.to_vec();
        *bad_text.last_mut().unwrap() = 0xff;
        assert!(Envelope::decode(bad_text.into()).is_err());
    }
}

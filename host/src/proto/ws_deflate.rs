//! permessage-deflate's codec (RFC 7692 §7.2), sized for many connections.
//!
//! A [`Codec`] is shared by many connections: the I/O thread's compresses what every one of its
//! connections sends, and each worker's inflates the compressed messages it delivers (so
//! inflating never holds up the I/O thread).
//! - **Compressing.** The server always negotiates `server_no_context_takeover`, so each
//!   message is compressed on its own and a compressor holds nothing of a connection between
//!   messages: one compressor per window size (created on first use) serves every connection.
//!   The last message compressed at each window size is kept with its result, so a publish
//!   fanned out to thousands of subscribers is compressed once (the message's payload is
//!   shared, and recognised by identity).
//! - **Inflating.** One inflater per codec. A client that keeps its compression context across
//!   messages (the browsers' default) refers back into what it sent before; instead of keeping
//!   a whole inflater per connection (about 43 KiB with a 32 KiB window), the connection keeps
//!   only a [`Window`]: the last 2^bits bytes of what it sent, at most 32 KiB and usually far
//!   less, given to the inflater as its dictionary before each message (it travels with the
//!   message to the worker and back). A client that does not keep its context costs nothing
//!   between messages.
//!
//! Inflating stops as soon as the output would pass the message limit: a decompression bomb
//! costs at most the limit's worth of memory and work.

use std::panic::{AssertUnwindSafe, catch_unwind};

use bytes::Bytes;

pub use crate::message::DeflateWindow as Window;
use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};

/// What a sync flush ends with: removed from each compressed message, put back before
/// inflating (§7.2.1, §7.2.2).
const TAIL: [u8; 4] = [0x00, 0x00, 0xff, 0xff];

/// Messages shorter than this go out uncompressed: the frame would hardly shrink, and
/// compressing costs more than sending the bytes.
pub(crate) const MIN_COMPRESS_BYTES: usize = 64;

/// The compression level: zlib's fastest. JSON and text shrink 3-5× at it; higher levels gain
/// a few percent of size for several times the CPU.
const LEVEL: u32 = 1;

/// The smallest window a compressor can keep to: zlib cannot produce an 8-bit window, so a
/// client that asks for 8 gets its messages uncompressed (which any window allows).
const MIN_COMPRESSOR_BITS: u8 = 9;

const COMPRESSOR_SIZES: usize = 7; // 9..=15

/// Why a compressed message could not be inflated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InflateError {
    /// It inflates past the message limit.
    TooBig,
    /// It is not a valid deflate stream.
    Corrupt,
}

/// What a codec has done, for `/metrics`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    /// Messages compressed (a publish to many subscribers counts once).
    pub deflated: u64,
    /// Messages inflated: workers inflate, and the I/O thread's codec counts what they report.
    pub inflated: u64,
    /// Compressed frames sent (one compressed publish counts once per subscriber).
    pub compressed_frames: u64,
    /// Times the compression library panicked (a bug there), caught.
    pub failures: u64,
}

/// The shared compressors and inflater of one thread (an I/O thread's compresses, a
/// worker's inflates).
#[derive(Default)]
pub struct Codec {
    compressors: [Option<Compress>; COMPRESSOR_SIZES],
    /// The last message compressed at each window size, and its result.
    last: [Option<(Bytes, Option<Bytes>)>; COMPRESSOR_SIZES],
    inflater: Option<Decompress>,
    pub counts: Counts,
}

impl std::fmt::Debug for Codec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Codec")
            .field("counts", &self.counts)
            .finish_non_exhaustive()
    }
}

impl Codec {
    /// `payload` compressed for a connection whose server window is `bits`, without the
    /// trailing `00 00 ff ff`; `None` when it should go uncompressed (short, an 8-bit window,
    /// or it does not shrink).
    pub fn compress(&mut self, payload: &Bytes, bits: u8) -> Option<Bytes> {
        if payload.len() < MIN_COMPRESS_BYTES || bits < MIN_COMPRESSOR_BITS {
            return None;
        }
        let slot = usize::from(bits.min(15) - MIN_COMPRESSOR_BITS);
        if let Some((last, result)) = &self.last[slot]
            && last.as_ptr() == payload.as_ptr()
            && last.len() == payload.len()
        {
            // The same shared payload (a publish): the cached entry holds a reference, so
            // its memory cannot have been reused for other bytes.
            return result.clone();
        }
        let compressor = self.compressors[slot].get_or_insert_with(|| {
            Compress::new_with_window_bits(Compression::new(LEVEL), false, bits.min(15))
        });
        // A bug in the compressor must not take the I/O thread down: the message goes out
        // uncompressed and the compressor is replaced.
        let result = match catch_unwind(AssertUnwindSafe(|| deflate(compressor, payload))) {
            Ok(result) => result.map(Bytes::from),
            Err(_) => {
                self.compressors[slot] = None;
                self.counts.failures += 1;
                None
            }
        };
        if result.is_some() {
            self.counts.deflated += 1;
        }
        self.last[slot] = Some((payload.clone(), result.clone()));
        result
    }

    /// Inflates one compressed message (its payload as sent, without the tail). With a
    /// `window` (the client keeps its context), the message may refer to what the window
    /// holds, and what it inflates to is added to it. Stops with [`InflateError::TooBig`] as
    /// soon as the output passes `max` bytes.
    pub fn inflate(
        &mut self,
        input: &[u8],
        window: Option<&mut Window>,
        max: usize,
    ) -> Result<Vec<u8>, InflateError> {
        let inflater = self.inflater.get_or_insert_with(|| Decompress::new(false));
        let dictionary = window.as_ref().map_or(&[][..], |w| w.bytes());
        let run = catch_unwind(AssertUnwindSafe(|| {
            inflater.reset(false);
            if !dictionary.is_empty() {
                inflater
                    .set_dictionary(dictionary)
                    .map_err(|_| InflateError::Corrupt)?;
            }
            inflate(inflater, input, max)
        }));
        let out = match run {
            Ok(out) => out?,
            Err(_) => {
                // As for compressing: the connection fails, the server does not.
                self.inflater = None;
                self.counts.failures += 1;
                return Err(InflateError::Corrupt);
            }
        };
        if let Some(w) = window {
            w.push(&out);
        }
        Ok(out)
    }
}

/// Compresses `input` as one message with a fresh context. The flush always runs to its end,
/// even for data that does not shrink: zlib-rs 0.6.8's level-1 compressor panics when reset
/// after a sync flush left unfinished (reproduced with Autobahn's case 12.2.5 data).
fn deflate(compressor: &mut Compress, input: &[u8]) -> Option<Vec<u8>> {
    compressor.reset();
    let mut out = Vec::with_capacity(input.len() / 2 + 64);
    loop {
        let consumed = compressor.total_in() as usize;
        compressor
            .compress_vec(&input[consumed..], &mut out, FlushCompress::Sync)
            .ok()?;
        // Done once every byte went in and the flush did not fill the output.
        if compressor.total_in() as usize == input.len() && out.len() < out.capacity() {
            break;
        }
        out.reserve(out.capacity().max(256));
    }
    if !out.ends_with(&TAIL) {
        return None;
    }
    out.truncate(out.len() - TAIL.len());
    (out.len() < input.len()).then_some(out)
}

/// Inflates `input` plus the tail, never holding more than `max + 1` bytes of output.
fn inflate(inflater: &mut Decompress, input: &[u8], max: usize) -> Result<Vec<u8>, InflateError> {
    let limit = max.saturating_add(1);
    let mut out = Vec::with_capacity(input.len().saturating_mul(4).max(256).min(limit));
    for chunk in [input, &TAIL[..]] {
        let mut pos = 0;
        loop {
            if out.len() >= limit {
                return Err(InflateError::TooBig);
            }
            if out.len() == out.capacity() {
                let more = out.capacity().max(4096).min(limit - out.len());
                out.reserve_exact(more);
            }
            let (in_before, out_before) = (inflater.total_in(), out.len());
            let status = inflater
                .decompress_vec(&chunk[pos..], &mut out, FlushDecompress::Sync)
                .map_err(|_| InflateError::Corrupt)?;
            pos += (inflater.total_in() - in_before) as usize;
            if status == Status::StreamEnd {
                // A final block ended the stream: anything after it (our tail) means nothing.
                return if out.len() > max {
                    Err(InflateError::TooBig)
                } else {
                    Ok(out)
                };
            }
            let spare = out.len() < out.capacity();
            if pos == chunk.len() && spare {
                break;
            }
            let stuck = out.len() == out_before && inflater.total_in() == in_before;
            if stuck && spare {
                // Input left, room for output, and nothing moved: not a stream zlib can read.
                return Err(InflateError::Corrupt);
            }
        }
    }
    if out.len() > max {
        return Err(InflateError::TooBig);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json(n: usize) -> Bytes {
        let mut s = String::from("[");
        let mut i = 0;
        while s.len() < n {
            s.push_str(&format!(
                "{{\"id\":{i},\"name\":\"user{i}\",\"online\":true,\"room\":\"lobby\"}},"
            ));
            i += 1;
        }
        s.truncate(n);
        Bytes::from(s)
    }

    /// Inflates what a compressor made, with an inflater of exactly `bits` window: a reference
    /// farther back than the window fails.
    fn inflate_strict(data: &[u8], bits: u8) -> Vec<u8> {
        let mut z = Decompress::new_with_window_bits(false, bits);
        let mut input = data.to_vec();
        input.extend_from_slice(&TAIL);
        let mut out = Vec::with_capacity(1 << 20);
        z.decompress_vec(&input, &mut out, FlushDecompress::Sync)
            .unwrap();
        out
    }

    #[test]
    fn round_trips_at_every_window_and_shrinks_json() {
        let mut codec = Codec::default();
        let message = json(20_000);
        for bits in 9..=15 {
            let c = codec.compress(&message, bits).unwrap();
            assert!(c.len() * 3 < message.len(), "bits {bits}: {}", c.len());
            assert_eq!(inflate_strict(&c, bits), message, "bits {bits}");
            let back = codec.inflate(&c, None, 1 << 20).unwrap();
            assert_eq!(back, message);
        }
        assert_eq!(codec.counts.deflated, 7);
        // The same shared payload again: no new compression.
        let again = codec.compress(&message.clone(), 15).unwrap();
        assert_eq!(codec.counts.deflated, 7);
        assert_eq!(inflate_strict(&again, 15), message);
        // Equal bytes in another allocation are compressed anew.
        codec.compress(&Bytes::from(message.to_vec()), 15).unwrap();
        assert_eq!(codec.counts.deflated, 8);
    }

    #[test]
    fn short_incompressible_and_8_bit_messages_go_uncompressed() {
        let mut codec = Codec::default();
        assert_eq!(codec.compress(&Bytes::from_static(b"short"), 15), None);
        assert_eq!(codec.compress(&json(1000), 8), None);
        let mut noise = vec![0u8; 4096];
        let mut x: u32 = 12345;
        for b in &mut noise {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
            *b = (x >> 16) as u8;
        }
        assert_eq!(codec.compress(&Bytes::from(noise), 15), None);
        assert_eq!(codec.counts.deflated, 0);
    }

    #[test]
    fn context_takeover_refers_to_earlier_messages() {
        // A client compressor that keeps its context: the second message is mostly a
        // reference back into the first.
        let mut client = Compress::new(Compression::new(6), false);
        let first = json(3000);
        let mut c1 = Vec::with_capacity(8192);
        client
            .compress_vec(&first, &mut c1, FlushCompress::Sync)
            .unwrap();
        let mut c2 = Vec::with_capacity(8192);
        client
            .compress_vec(&first, &mut c2, FlushCompress::Sync)
            .unwrap();
        for c in [&mut c1, &mut c2] {
            assert!(c.ends_with(&TAIL));
            c.truncate(c.len() - 4);
        }
        assert!(c2.len() < 40, "{} bytes", c2.len());
        let mut codec = Codec::default();
        let mut window = Window::new(15);
        assert_eq!(
            codec.inflate(&c1, Some(&mut window), 1 << 20).unwrap(),
            first
        );
        assert_eq!(
            codec.inflate(&c2, Some(&mut window), 1 << 20).unwrap(),
            first
        );
        assert_eq!(window.held(), 6000);
        // Without the window, the reference cannot be resolved.
        assert!(codec.inflate(&c2, None, 1 << 20).is_err());
    }

    #[test]
    fn a_window_keeps_only_its_last_bytes() {
        let mut w = Window::new(8);
        w.push(&[1; 200]);
        w.push(&[2; 100]);
        assert_eq!(w.bytes().len(), 256);
        assert_eq!(&w.bytes()[..156], &[1u8; 156][..]);
        assert_eq!(&w.bytes()[156..], &[2u8; 100][..]);
        w.push(&[3; 1000]);
        assert_eq!(w.bytes(), &[3u8; 256][..]);
        assert!(w.held() <= 256);
    }

    #[test]
    fn a_bomb_stops_at_the_limit() {
        // 64 MiB of zeros compress to about 64 KiB.
        let mut z = Compress::new(Compression::best(), false);
        let zeros = vec![0u8; 64 << 20];
        let mut bomb = Vec::with_capacity(1 << 20);
        z.compress_vec(&zeros, &mut bomb, FlushCompress::Sync)
            .unwrap();
        bomb.truncate(bomb.len() - 4);
        let mut codec = Codec::default();
        assert_eq!(
            codec.inflate(&bomb, None, 1 << 20),
            Err(InflateError::TooBig)
        );
        // Exactly at the limit is fine.
        let mut z = Compress::new(Compression::fast(), false);
        let mut exact = Vec::with_capacity(1 << 16);
        z.compress_vec(&vec![7u8; 1 << 20], &mut exact, FlushCompress::Sync)
            .unwrap();
        exact.truncate(exact.len() - 4);
        assert_eq!(codec.inflate(&exact, None, 1 << 20).unwrap().len(), 1 << 20);
        assert_eq!(
            codec.inflate(&exact, None, (1 << 20) - 1),
            Err(InflateError::TooBig)
        );
        assert_eq!(
            codec.inflate(&[0xff, 0xff, 0xff], None, 100),
            Err(InflateError::Corrupt)
        );
        // An empty message is the empty stored block's tail alone.
        assert_eq!(codec.inflate(&[0x00], None, 100).unwrap(), b"");
    }

    #[test]
    fn incompressible_messages_in_a_row_keep_the_compressor_sound() {
        // zlib-rs 0.6.8 panicked here when a flush was abandoned half way and the compressor
        // reset: noise between text, at both window ends, many times over.
        let mut codec = Codec::default();
        let mut x: u32 = 7;
        for i in 0..2000 {
            let noisy = i % 3 != 0;
            let message: Vec<u8> = (0..4096)
                .map(|k| {
                    x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
                    if noisy {
                        (x >> 16) as u8
                    } else {
                        b"abcab"[k % 5]
                    }
                })
                .collect();
            let message = Bytes::from(message);
            for bits in [9, 15] {
                if let Some(c) = codec.compress(&message, bits) {
                    assert_eq!(inflate_strict(&c, bits), message);
                }
            }
        }
        assert_eq!(codec.counts.failures, 0);
    }

    #[test]
    fn a_final_block_ends_the_message() {
        // A client may end a message with BFINAL set (§7.2.3.4 allows it).
        let mut z = Compress::new(Compression::fast(), false);
        let text = json(500);
        let mut out = Vec::with_capacity(4096);
        z.compress_vec(&text, &mut out, FlushCompress::Finish)
            .unwrap();
        let mut codec = Codec::default();
        assert_eq!(codec.inflate(&out, None, 1 << 20).unwrap(), text);
    }
}

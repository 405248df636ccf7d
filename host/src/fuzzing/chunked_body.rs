//! The chunked body decoder on arbitrary bytes fed in arbitrary splits: never panics, never
//! consumes more than it is given, and every split decodes to the same body (or the same error)
//! as the whole input at once.

use crate::proto::body::BodyDecoder;

const MAX_BODY: u64 = 1 << 20;

fn decode(input: &[u8], splits: &[u8]) -> (Result<bool, u16>, Vec<u8>, usize) {
    let mut decoder = BodyDecoder::chunked(MAX_BODY);
    let mut body = Vec::new();
    let mut buffered: Vec<u8> = Vec::new();
    let mut fed = 0;
    let mut consumed_total = 0;
    let mut split = splits.iter().cycle();
    while fed < input.len() {
        let step = usize::from(*split.next().unwrap_or(&255)).max(1);
        let end = (fed + step).min(input.len());
        buffered.extend_from_slice(&input[fed..end]);
        fed = end;
        match decoder.decode(&buffered, &mut body) {
            Ok(p) => {
                assert!(p.consumed <= buffered.len());
                buffered.drain(..p.consumed);
                consumed_total += p.consumed;
                if p.done {
                    return (Ok(true), body, consumed_total);
                }
            }
            Err(e) => return (Err(e.status()), body, consumed_total),
        }
    }
    (Ok(false), body, consumed_total)
}

/// The target: never panics on any `data`.
pub fn run(data: &[u8]) {
    let (splits, input) = data.split_at(data.len().min(8));
    let whole = decode(input, &[255]);
    let split = decode(input, if splits.is_empty() { &[1] } else { splits });
    // A body completes with the same bytes however it arrives. Errors may be found at
    // different points (a long line is seen later when it arrives in pieces), but a body that
    // completes one way never fails the other.
    match (&whole.0, &split.0) {
        (Ok(true), Ok(true)) => {
            assert_eq!(whole.1, split.1);
            assert_eq!(whole.2, split.2);
        }
        (Ok(true), other) | (other, Ok(true)) => {
            panic!("one feeding completed, the other gave {other:?}")
        }
        _ => {}
    }
    assert!(whole.1.len() as u64 <= MAX_BODY);
}

//! Output buffers kept per thread and reused from one response to the next.
//!
//! A fetch response carries megabytes of record batches, written twice: the batches
//! (by the codec's record encoder) and the frame around them. A fresh buffer of that
//! size per response is fresh memory from the allocator every time, and the kernel
//! zeroing its pages on first touch (page faults) cost as much as encoding the
//! records. A buffer given back here is taken again by the next response on the same
//! thread; `BytesMut::reserve` then reuses its whole allocation once every `Bytes`
//! split off it earlier has been dropped (the previous response written), or
//! allocates anew if one is still alive.

use std::cell::RefCell;

use bytes::BytesMut;

/// Buffers above this capacity (bytes) are not kept: a thread keeps at most this much.
pub const MAX_KEPT: usize = 16 << 20;

thread_local! {
    static KEPT: RefCell<BytesMut> = RefCell::new(BytesMut::new());
}

/// An empty buffer with room for at least `len` bytes: this thread's kept one if it
/// has not been taken.
pub fn take(len: usize) -> BytesMut {
    let mut buf = KEPT.with(|k| k.take());
    buf.clear();
    buf.reserve(len);
    buf
}

/// Keeps `buf` (emptied) for this thread's next [`take`], unless it is bigger than
/// [`MAX_KEPT`].
pub fn give_back(mut buf: BytesMut) {
    if buf.capacity() <= MAX_KEPT {
        buf.clear();
        KEPT.with(|k| *k.borrow_mut() = buf);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A response written into a taken buffer, the rest given back.
    fn respond(len: usize) -> bytes::Bytes {
        let mut buf = take(len);
        buf.extend_from_slice(&vec![7u8; len]);
        let frame = buf.split().freeze();
        give_back(buf);
        frame
    }

    #[test]
    fn a_buffer_is_reused_once_the_response_split_off_it_is_dropped() {
        drop(respond(1 << 20));
        // A fresh buffer for one byte would hold far less.
        let buf = take(1);
        assert!(buf.capacity() >= 1 << 20, "{}", buf.capacity());
        give_back(buf);
        // While a response is alive its memory is not written over.
        let alive = respond(1 << 20);
        let mut next = take(1 << 20);
        next.extend_from_slice(&vec![1u8; 1 << 20]);
        assert!(alive.iter().all(|&b| b == 7));
    }

    #[test]
    fn big_buffers_are_not_kept() {
        give_back(BytesMut::with_capacity(MAX_KEPT + 1));
        assert_eq!(take(0).capacity(), 0);
        give_back(BytesMut::with_capacity(1000));
        assert!(take(0).capacity() >= 1000);
    }
}

//! Why a recording too long to read whole has no row (the long-recording
//! stage above the compute stage, which re-exports it as its `Error`),
//! apart from the decoder's and the reader's own reasons. It lives here so
//! that `compute::Reject` carries it without importing the room above.

/// Why a long recording has no row.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "file is {size} bytes, larger than io.max_file_bytes = {limit}, and cannot be \
         computed in pieces: {why}"
    )]
    NotStreamable { size: u64, limit: u64, why: String },
    #[error(
        "the part at {at_s} s gave {got} samples where the recording's length says {expected} \
         (the file changed, or its stated length is wrong)"
    )]
    PartLength {
        at_s: u64,
        got: usize,
        expected: usize,
    },
}

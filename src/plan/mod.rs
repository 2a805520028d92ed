//! The planning room for corpora stored as containers of recordings:
//! WebDataset tar shards (plain or gzipped), lhotse Shar, NeMo tarred audio
//! and Hugging Face parquet files, read in place.
//!
//! Its product is the item plan every manifest build already runs on
//! ([`crate::plan::manifest::Manifests`]): per item its split, the path
//! recorded as its `path`, the file the readers open, the byte extent they
//! read there ([`crate::reader::ReadRange`]), its metadata as one JSON
//! object and its 1-based position in its file (the `line` dataset). So a
//! tar member goes through the same io_uring reads, decoders, compute
//! stages and writer as a file of a tree, and nothing below this room
//! knows a tar or a parquet file exists.
//!
//! * [`pattern`]: brace ranges and globs, expanded by melforge itself;
//! * [`tar`]: a tar archive's members as byte extents, with the damage it
//!   can survive;
//! * [`webdataset`]: samples, their audio member told by content, their
//!   siblings as metadata;
//! * [`parquet`]: the audio column's bytes, decoded page by page by the
//!   Arrow crates, spilled to one file whose extents the readers read;
//! * [`shar`]: lhotse Shar folders, each cut's audio a member of the
//!   recording tar beside its CutSet shard;
//! * [`tarred`]: NeMo's tarred audio, a manifest's paths as members of
//!   its shards (the manifest planner, `source::manifest`, asks it through
//!   the `Members` trait, so `source` does not import this room);
//! * [`stored`]: the sets of files as the command line names them, and the
//!   plan of them.
//!
//! Nothing here imports the commands (`app`) or the stages after the
//! readers: the room sits beside `source`, below `app`.

pub mod container;
pub mod items;
pub mod manifest;
pub mod parquet;
pub mod pattern;
pub mod shar;
pub mod stored;
pub mod tar;
pub mod tarred;
pub mod tree;
pub mod webdataset;

pub use items::{Job, PathTable, Plan};
pub use stored::{Error, Kind, Options, Planned, Rejected, Set, plan, sets_of};

//! The planning room: every input `build` reads, turned into the one item
//! plan the stages run on, before anything is read for a row.
//!
//! The product is [`Plan`] ([`items`]): per item its split, label and
//! position ([`Job`]), the path recorded as its `path` ([`PathTable`]) and
//! the file the readers open; and for every input but a tree the
//! [`input::Items`] beside it: the byte extent the readers read there
//! ([`crate::reader::ReadRange`]), the segment the decoder cuts, the
//! metadata as one JSON object, and the line. So a manifest's segment, a
//! tar member and a parquet cell go through the same io_uring reads,
//! decoders, compute stages and writer as a file of a tree, and nothing
//! below this room knows a manifest, a tar or a parquet file exists.
//!
//! * [`extents`]: each item's segment and byte range, 24 bytes for a
//!   plain row; [`packed`]: the metadata, compressed in blocks (a planned
//!   manifest row costs about 60 bytes besides its path and metadata);
//! * [`input`]: what the command line names ([`input::Input`]), and the
//!   plan of each kind with its rejections, in a build's order;
//! * [`tree`]: the sorted walk of a directory, with the split/label rule;
//! * [`manifest`]: NeMo and lhotse manifests, line by line within bounds,
//!   and the spill, the prepare step that decodes a compressed recording
//!   once for its segments without a part ([`manifest::spill`]);
//! * [`container`]: where a segment lies in a recording: one trait that
//!   WAV, FLAC, the compressed streams and archive members answer;
//! * [`spool`]: the manifest lines left out, written to a file as they
//!   are found and read back in runs for `rejected.jsonl`;
//! * [`shard`]: `--shard K/N`, the share of lines or files a shard plans;
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
//!   its shards (the manifest planner asks it through the
//!   [`manifest::Members`] trait);
//! * [`stored`]: the sets of stored files as the command line names them,
//!   and the plan of them.
//!
//! Nothing here imports the commands (`app`), the pipeline, the writer or
//! `long`: what the room takes from below is the readers, the decoders'
//! headers, indexes and whole-stream decoder (for the spill), `config`,
//! `runtime` and the rejection type; the writer takes the plan's
//! vocabulary from here.

pub mod container;
pub mod extents;
pub mod input;
pub mod items;
pub mod manifest;
pub mod packed;
pub mod parquet;
pub mod pattern;
pub mod shar;
pub mod shard;
pub mod spool;
pub mod stored;
pub mod tar;
pub mod tarred;
pub mod tree;
pub mod webdataset;

pub use extents::Extents;
pub use items::{Job, PathTable, Plan};
pub use packed::PackedText;
pub use stored::{Error, Kind, Options, Planned, Rejected, Set, plan, sets_of};

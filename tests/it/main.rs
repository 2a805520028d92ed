//! Integration tests: one binary, one module per topic. `common` makes
//! temporary corpora and reads outputs back.
mod build;
mod cli;
mod cmvn;
mod common;
mod compact;
mod control;
mod crash;
mod cuda;
mod fuzz_replay;
mod golden;
mod house;
mod input;
mod interrupt;
mod lhotse;
mod long;
mod manifest;
mod manifest_hostile;
mod manifest_spill;
mod metrics;
mod powerloss;
mod progress;
mod serve;
mod shard;
mod shard_manifest;
mod stored;
mod uring;

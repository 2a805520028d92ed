//! The planning room: what turns a dataset on disk into recordings to build.

pub mod parquet;

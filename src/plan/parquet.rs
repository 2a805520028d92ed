//! TEMPORARY: replaced by the parquet branch.
use std::path::Path;
pub struct Options<'a> {
    pub audio_column: Option<&'a str>,
    pub max_spill_bytes: u64,
}
pub struct Row {
    pub row: u64,
    pub start: u64,
    pub len: u64,
    pub audio_path: Option<String>,
    pub meta: serde_json::Map<String, serde_json::Value>,
}
pub struct Rejection {
    pub rows: std::ops::Range<u64>,
    pub reason: String,
}
pub struct Spilled {
    pub rows: Vec<Row>,
    pub rejected: Vec<Rejection>,
    pub bytes_read: u64,
    pub bytes_written: u64,
}
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("parquet is not built yet")]
    NotYet,
}
pub fn spill(_file: &Path, _spill: &mut std::fs::File, _o: &Options) -> Result<Spilled, Error> {
    Err(Error::NotYet)
}

//! Stale heap references left past the end of `path` / `label_names` by a
//! killed writer must not free the strings of confirmed rows (`super::vlen`).
//! The crash state is made by hand: raw chunk bytes past the rows kept that
//! name the heap objects of confirmed rows, as a kill inside H5Fflush leaves
//! when the chunk reached the disk and the heap collection did not.

use hdf5::types::VarLenUnicode;
use hdf5::{Extent, SimpleExtents};

use super::tests::{row, spec, strings};
use super::*;
use crate::writer::direct::raw;
use crate::writer::h5::vlen_strings;

fn file_name(i: usize) -> String {
    format!("train/a/f{i:03}.wav")
}

/// The raw bytes of the chunk of 1-D `d` starting at `start`.
fn chunk_bytes(d: &Dataset, start: usize) -> Vec<u8> {
    let offset = [start as u64];
    let n = raw::chunk_bytes_at(d, &offset).unwrap().unwrap();
    let mut buf = vec![0u8; n];
    raw::read_chunk(d, &offset, &mut buf).unwrap();
    buf
}

#[test]
fn stale_references_past_the_confirmed_rows_do_not_free_confirmed_strings() {
    let dir = tempfile::tempdir().unwrap();
    let (mut a, _) = Appender::open(dir.path(), &spec(), &["a".to_string()], 0).unwrap();
    for i in 0..6 {
        a.append(&file_name(i), 0, &row(i)).unwrap();
    }
    a.close().unwrap();
    // The crash state: rows 6 and 7 (past the 6 kept, in chunk 4..8) name
    // the heap objects of confirmed rows 0 and 1.
    let p = dir.path().join("train.h5");
    {
        let f = File::open_rw(&p).unwrap();
        let d = f.dataset("path").unwrap();
        let first = chunk_bytes(&d, 0);
        let mut second = chunk_bytes(&d, 4);
        let elem = second.len() / 4;
        second[2 * elem..].copy_from_slice(&first[..2 * elem]);
        raw::write_chunk(&d, &[4], &second).unwrap();
        drop(d);
        f.close().unwrap();
    }
    let (mut a, report) = Appender::open(dir.path(), &spec(), &["a".to_string()], 6).unwrap();
    assert_eq!(report.rows_dropped, 0);
    for i in 6..9 {
        assert_eq!(a.append(&file_name(i), 0, &row(i)).unwrap(), i);
    }
    a.close().unwrap();
    let f = File::open(&p).unwrap();
    let want: Vec<String> = (0..9).map(file_name).collect();
    assert_eq!(strings(&f.dataset("path").unwrap()), want);
}

#[test]
fn a_stale_chunk_past_the_end_is_nulled_before_rows_are_written_into_it() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("v.h5");
    let f = File::create(&p).unwrap();
    let d = f
        .new_dataset::<VarLenUnicode>()
        .shape(SimpleExtents::from_vec(vec![Extent::resizable(0)]))
        .chunk(4)
        .create("path")
        .unwrap();
    let all: Vec<String> = (0..12).map(file_name).collect();
    d.resize(8).unwrap();
    d.write_slice(&vlen_strings("paths", &all[..8]).unwrap(), 0..8)
        .unwrap();
    // Chunk 8..12 exists already and names the objects of rows 2..6.
    d.resize(12).unwrap();
    let first = chunk_bytes(&d, 0);
    let second = chunk_bytes(&d, 4);
    let elem = first.len() / 4;
    let mut stale = first[2 * elem..].to_vec();
    stale.extend_from_slice(&second[..2 * elem]);
    raw::write_chunk(&d, &[8], &stale).unwrap();
    let mut refs = StaleRefs::new(&d, 8).unwrap();
    refs.grow(&d, 12).unwrap();
    d.write_slice(&vlen_strings("paths", &all[8..]).unwrap(), 8..12)
        .unwrap();
    assert_eq!(strings(&d), all);
}

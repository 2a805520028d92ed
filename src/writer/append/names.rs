//! The appender's label list: the growing string column `label_names`
//! (`writer::strings`) and the root attribute of the same name (module doc
//! of [`super`], "Label ids never change"), and how a reopened file's list
//! is reconciled with the sink's table.

use std::path::Path;

use hdf5::File;
use hdf5::types::VarLenUnicode;

use super::NAMES_CHUNK;
use crate::writer::Error;
use crate::writer::h5::write_label_names_attr;
use crate::writer::strings::{self, Column};

/// The column's name.
pub(super) const NAME: &str = "label_names";

/// Creates the `label_names` column holding `names`.
pub(super) fn create_names(file: &File, p: &Path, names: &[String]) -> Result<Column, Error> {
    Column::create(file, p, NAME, NAMES_CHUNK, names)
}

/// Opens the file's label list: the column (cut to its longest prefix of
/// whole names: the names past those its kept rows use may be torn by a
/// killed flush, and are rewritten anyway), the variable-length dataset of
/// an older serve file (converted), or the root attribute of a build file.
pub(super) fn open_names(file: &File, p: &Path) -> Result<(Column, Vec<String>), Error> {
    if strings::exists(file, NAME) {
        return Column::open_whole_prefix(file, p, NAME);
    }
    let names = if file.link_exists(NAME) {
        super::vlen::take_strings(file, p, NAME, usize::MAX)?
    } else {
        // A build file: the attribute is the list.
        use crate::writer::h5::Context;
        file.attr(NAME)
            .and_then(|a| a.read_raw::<VarLenUnicode>())
            .ctx(p, || "read attribute `label_names`".into())?
            .iter()
            .map(|n| n.as_str().to_string())
            .collect()
    };
    Ok((create_names(file, p, &names)?, names))
}

/// The list a reopened file takes: `table` when the file's names in use
/// (`names[..in_use]`) and `table` agree where both have entries (the longer
/// of the two then), or None when they conflict.
pub(super) fn adopt_table(
    names: &[String],
    in_use: usize,
    table: &[String],
) -> Option<Vec<String>> {
    let used = &names[..in_use.min(names.len())];
    let common = used.len().min(table.len());
    (used[..common] == table[..common]).then(|| {
        if table.len() >= used.len() {
            table.to_vec()
        } else {
            used.to_vec()
        }
    })
}

/// Makes the `label_names` column `names`, whose first `keep` entries it
/// already holds (the names in use; before SWMR starts): the entries after
/// them are cut, then the rest of `names` written.
pub(super) fn rewrite_names(
    col: &mut Column,
    p: &Path,
    names: &[String],
    keep: usize,
) -> Result<(), Error> {
    col.cut(p, keep)?;
    for n in &names[keep.min(names.len())..] {
        col.push(n);
    }
    col.write(p)
}

/// Makes the root attribute `label_names` hold `names`, rewriting it only
/// when it differs: the rewrite changes the root object header in place, and
/// a writer killed inside the flush that follows leaves that header torn
/// ("incorrect metadata checksum"), so an open that changes nothing must not
/// write it (a kill -9 test found such a file after a kill during an open).
pub(super) fn replace_names_attr(file: &File, names: &[String]) -> hdf5::Result<()> {
    if file.attr_names()?.iter().any(|n| n == "label_names") {
        let same = file
            .attr("label_names")
            .and_then(|a| a.read_raw::<VarLenUnicode>())
            .is_ok_and(|v| {
                v.iter()
                    .map(|n| n.as_str())
                    .eq(names.iter().map(String::as_str))
            });
        if same {
            return Ok(());
        }
        file.delete_attr("label_names")?;
    }
    write_label_names_attr(file, names)
}

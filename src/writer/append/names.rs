//! The appender's label list: the growing 1-D dataset `label_names` and the
//! root attribute of the same name (module doc of [`super`], "Label ids never
//! change"), and how a reopened file's list is reconciled with the sink's
//! table.

use hdf5::types::VarLenUnicode;
use hdf5::{Dataset, Extent, File, SimpleExtents};

use super::NAMES_CHUNK;
use super::vlen::{self, StaleRefs};
use crate::writer::h5::{vlen_strings, write_label_names_attr};

/// The resizable `label_names` dataset holding `names`.
pub(super) fn create_names_ds(file: &File, names: &[String]) -> hdf5::Result<Dataset> {
    let d = file
        .new_dataset::<VarLenUnicode>()
        .shape(SimpleExtents::from_vec(vec![Extent::resizable(
            names.len(),
        )]))
        .chunk(NAMES_CHUNK)
        .obj_track_times(false)
        .create("label_names")?;
    if !names.is_empty() {
        d.write_raw(&vlen_strings("label names", names)?)?;
    }
    Ok(d)
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

/// Makes the `label_names` dataset `names`, whose first `keep` entries it
/// already holds (the names in use; before SWMR starts). The entries after
/// them are nulled and cut first: a killed writer may have left them naming
/// heap objects that are not its own (see [`super::vlen`]).
pub(super) fn rewrite_names(
    d: &Dataset,
    refs: &mut StaleRefs,
    names: &[String],
    keep: usize,
) -> hdf5::Result<()> {
    vlen::clear_past(d, keep)?;
    d.resize(keep)?;
    *refs = StaleRefs::new(d, keep)?;
    refs.grow(d, names.len())?;
    d.resize(names.len())?;
    if names.len() > keep {
        d.write_slice(
            &vlen_strings("label names", &names[keep..])?,
            keep..names.len(),
        )?;
    }
    Ok(())
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

//! Root attributes of shard files, read into plain values so that shards can
//! be compared and the merged file gets the same attributes with the same
//! HDF5 types as a single-node build (int64, float64, the bool enum, UTF-8
//! variable-length strings, and `label_names` as a 1-D string array).

use std::fmt;

use hdf5::File;
use hdf5::types::{TypeDescriptor as T, VarLenUnicode};

/// One root attribute's value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Int(i64),
    Float(f64),
    Bool(bool),
    Str(String),
    StrList(Vec<String>),
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Int(v) => write!(f, "{v}"),
            Value::Float(v) => write!(f, "{v:?}"),
            Value::Bool(v) => write!(f, "{v}"),
            Value::Str(v) => write!(f, "{v:?}"),
            Value::StrList(v) => write!(f, "{v:?}"),
        }
    }
}

/// Every root attribute of `file`, sorted by name. An attribute of a type a
/// melforge build never writes is an error naming it.
pub fn read_all(file: &File) -> hdf5::Result<Vec<(String, Value)>> {
    let mut names = file.attr_names()?;
    names.sort();
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        let a = file.attr(&name)?;
        let desc = a.dtype()?.to_descriptor()?;
        let value = match (a.is_scalar(), &desc) {
            (true, T::Integer(_) | T::Unsigned(_)) => Value::Int(a.read_scalar::<i64>()?),
            (true, T::Float(_)) => Value::Float(a.read_scalar::<f64>()?),
            (true, T::Boolean) => Value::Bool(a.read_scalar::<bool>()?),
            (true, T::VarLenUnicode) => {
                Value::Str(a.read_scalar::<VarLenUnicode>()?.as_str().to_string())
            }
            (false, T::VarLenUnicode) if a.ndim() == 1 => Value::StrList(
                a.read_raw::<VarLenUnicode>()?
                    .into_iter()
                    .map(|s| s.as_str().to_string())
                    .collect(),
            ),
            _ => {
                return Err(hdf5::Error::from(format!(
                    "root attribute `{name}` has a type melforge does not write ({desc:?})"
                )));
            }
        };
        out.push((name, value));
    }
    Ok(out)
}

fn vlen(name: &str, s: &str) -> hdf5::Result<VarLenUnicode> {
    s.parse()
        .map_err(|e| hdf5::Error::from(format!("attribute `{name}`: {e}")))
}

/// Writes `attrs` as root attributes of `file`, with the writer's types.
pub fn write_all(file: &File, attrs: &[(String, Value)]) -> hdf5::Result<()> {
    for (name, value) in attrs {
        match value {
            Value::Int(v) => file
                .new_attr::<i64>()
                .create(name.as_str())?
                .write_scalar(v)?,
            Value::Float(v) => file
                .new_attr::<f64>()
                .create(name.as_str())?
                .write_scalar(v)?,
            Value::Bool(v) => file
                .new_attr::<bool>()
                .create(name.as_str())?
                .write_scalar(v)?,
            Value::Str(v) => file
                .new_attr::<VarLenUnicode>()
                .create(name.as_str())?
                .write_scalar(&vlen(name, v)?)?,
            Value::StrList(v) => {
                let v = v
                    .iter()
                    .map(|s| vlen(name, s))
                    .collect::<hdf5::Result<Vec<_>>>()?;
                file.new_attr_builder()
                    .with_data(v.as_slice())
                    .create(name.as_str())?;
            }
        }
    }
    Ok(())
}

/// The value of attribute `name`, if present.
pub fn get<'a>(attrs: &'a [(String, Value)], name: &str) -> Option<&'a Value> {
    attrs.iter().find(|(n, _)| n == name).map(|(_, v)| v)
}

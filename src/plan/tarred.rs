//! NeMo's tarred audio: a manifest whose `audio_filepath` names a member
//! of one of the tar shards `tarred_audio_filepaths` lists, and whose
//! `shard_id` says which (NeMo's `convert_to_tarred_audio_dataset.py`
//! writes both).
//!
//! [`Tarred::index`] indexes every shard once ([`super::tar`]: headers
//! only) and maps each member's name to its extent. A manifest line then
//! reads its member in place: [`Tarred::find`] looks in shard `shard_id`
//! first (the shards in the order the pattern expands, as NeMo numbers
//! them), then, when the line has no `shard_id` or its shard lacks the
//! member, in every shard by name, as NeMo's loader matches members to
//! lines by name. A name found in none is the line's rejection. A line's
//! `offset` and `duration` apply to the member's decode as to a file's.
//!
//! Damage in a shard (a bad checksum, a truncation) is reported once per
//! problem by [`Tarred::problems`]; the members that survive it are found
//! as usual.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::tar;

/// The members of NeMo's tar shards, by name.
#[derive(Debug, Default)]
pub struct Tarred {
    shards: Vec<PathBuf>,
    /// Per name: (shard, start, len), in shard order.
    by_name: HashMap<String, Vec<(u32, u64, u64)>>,
    /// Per shard: whether it could be indexed, and why not.
    unreadable: Vec<Option<String>>,
    problems: Vec<(PathBuf, tar::Problem)>,
    /// Bytes read to index the shards.
    pub bytes_read: u64,
}

/// Where a member is: the shard to open and the extent there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found<'a> {
    pub shard: &'a Path,
    pub start: u64,
    pub len: u64,
}

impl Tarred {
    /// Indexes `shards` (in NeMo's shard order). A shard that cannot be
    /// read is remembered, and named by the lines that look for it.
    pub fn index(shards: Vec<PathBuf>) -> Tarred {
        let mut t = Tarred::default();
        for (i, path) in shards.iter().enumerate() {
            match tar::index(path) {
                Ok(ix) => {
                    t.bytes_read += ix.bytes_read;
                    for m in ix.members {
                        // NeMo names members by file name; some writers
                        // keep a `./` in front.
                        let name = m.name.strip_prefix("./").unwrap_or(&m.name).to_string();
                        t.by_name
                            .entry(name)
                            .or_default()
                            .push((i as u32, m.start, m.len));
                    }
                    t.problems
                        .extend(ix.problems.into_iter().map(|p| (path.clone(), p)));
                    t.unreadable.push(None);
                }
                Err(e) => t.unreadable.push(Some(e.to_string())),
            }
        }
        t.shards = shards;
        t
    }

    /// The shards, in order.
    pub fn shards(&self) -> &[PathBuf] {
        &self.shards
    }

    /// Damage found in the shards, each with its shard.
    pub fn problems(&self) -> &[(PathBuf, tar::Problem)] {
        &self.problems
    }

    /// Where member `name` of shard `shard_id` is (module doc), or why it
    /// is nowhere.
    pub fn find(&self, name: &str, shard_id: Option<u64>) -> Result<Found<'_>, NotFound> {
        let name = name.strip_prefix("./").unwrap_or(name);
        let at = |&(s, start, len): &(u32, u64, u64)| Found {
            shard: &self.shards[s as usize],
            start,
            len,
        };
        let hits = self.by_name.get(name).map_or(&[][..], |v| v.as_slice());
        if let Some(id) = shard_id
            && let Some(hit) = hits.iter().find(|h| u64::from(h.0) == id)
        {
            return Ok(at(hit));
        }
        if let Some(hit) = hits.first() {
            return Ok(at(hit));
        }
        let name = name.to_string();
        let shards = self.shards.len();
        let Some(id) = shard_id.and_then(|id| usize::try_from(id).ok()) else {
            return Err(NotFound::Nowhere { name, shards });
        };
        Err(match self.unreadable.get(id) {
            None => NotFound::NoSuchShard { id, shards, name },
            Some(Some(why)) => NotFound::Unreadable {
                shard: self.shards[id].clone(),
                id,
                why: why.clone(),
                name,
            },
            Some(None) => NotFound::NotInShard {
                shard: self.shards[id].clone(),
                id,
                name,
            },
        })
    }
}

/// Why a manifest line's member is in no shard.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotFound {
    #[error(
        "`shard_id` {id} names no shard: tarred_audio_filepaths has {shards} (0 to {}), and no \
         shard holds a member `{name}`",
        shards.saturating_sub(1)
    )]
    NoSuchShard {
        id: usize,
        shards: usize,
        name: String,
    },
    #[error(
        "its shard {} (shard_id {id}) cannot be read ({why}), and no other shard holds a member \
         `{name}`",
        shard.display()
    )]
    Unreadable {
        shard: PathBuf,
        id: usize,
        why: String,
        name: String,
    },
    #[error(
        "shard {} (shard_id {id}) has no member `{name}`, and neither has any other shard; \
         expected `audio_filepath` to name a member of its shard",
        shard.display()
    )]
    NotInShard {
        shard: PathBuf,
        id: usize,
        name: String,
    },
    #[error("no shard of tarred_audio_filepaths ({shards} shards) has a member `{name}`")]
    Nowhere { name: String, shards: usize },
}

impl crate::plan::manifest::Members for Tarred {
    fn find_member(
        &self,
        name: &str,
        shard_id: Option<u64>,
    ) -> Result<crate::plan::manifest::Member, String> {
        self.find(name, shard_id)
            .map(|f| (f.shard.to_path_buf(), f.start, f.len))
            .map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shard(dir: &Path, name: &str, members: &[(&str, &[u8])]) -> PathBuf {
        let mut b = ::tar::Builder::new(Vec::new());
        for (n, data) in members {
            let mut h = ::tar::Header::new_gnu();
            h.set_size(data.len() as u64);
            h.set_mode(0o644);
            b.append_data(&mut h, n, *data).unwrap();
        }
        let p = dir.join(name);
        std::fs::write(&p, b.into_inner().unwrap()).unwrap();
        p
    }

    #[test]
    fn members_are_found_in_their_shard_then_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let a = shard(
            dir.path(),
            "audio_0.tar",
            &[("u1.wav", b"one"), ("u2.wav", b"two")],
        );
        let b = shard(
            dir.path(),
            "audio_1.tar",
            &[("./u3.wav", b"three"), ("u1.wav", b"1b")],
        );
        let t = Tarred::index(vec![a.clone(), b.clone(), dir.path().join("audio_2.tar")]);
        let bytes = |f: Found<'_>| {
            let all = std::fs::read(f.shard).unwrap();
            all[f.start as usize..(f.start + f.len) as usize].to_vec()
        };
        assert_eq!(bytes(t.find("u1.wav", Some(0)).unwrap()), b"one");
        assert_eq!(bytes(t.find("u1.wav", Some(1)).unwrap()), b"1b");
        assert_eq!(bytes(t.find("u3.wav", Some(1)).unwrap()), b"three");
        // A wrong shard_id still finds the member by name, as NeMo does.
        assert_eq!(bytes(t.find("u2.wav", Some(1)).unwrap()), b"two");
        assert_eq!(bytes(t.find("u2.wav", None).unwrap()), b"two");
        let e = t.find("u9.wav", Some(0)).unwrap_err().to_string();
        assert!(e.contains("has no member `u9.wav`"), "{e}");
        let e = t.find("u9.wav", Some(2)).unwrap_err().to_string();
        assert!(e.contains("cannot be read"), "{e}");
        let e = t.find("u9.wav", Some(7)).unwrap_err().to_string();
        assert!(e.contains("names no shard"), "{e}");
        let e = t.find("u9.wav", None).unwrap_err().to_string();
        assert!(
            e.contains("no shard of tarred_audio_filepaths (3 shards)"),
            "{e}"
        );
    }
}

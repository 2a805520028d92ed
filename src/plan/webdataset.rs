//! WebDataset shards: each sample's audio member is a row, its siblings
//! its metadata.
//!
//! A sample is a run of consecutive members with the same key, the key
//! being a member's path up to the first dot of its file name
//! (`spk1/utt7.flac` and `spk1/utt7.json` → `spk1/utt7`), as WebDataset's
//! own reader groups them. Of a sample's members exactly one must be
//! audio, told by its first bytes (RIFF/RF64 WAVE, FLAC, MP3, Ogg Vorbis or
//! Opus, MP4), whatever its extension; it is read as an extent of the
//! shard. Its siblings become the row's metadata ([`sample_meta`]).
//!
//! What is wrong with a sample is a [`Refused`] naming the shard, the key
//! and its members: no audio member, or two. Damage to the archive itself
//! (a bad checksum, a truncation) comes from [`super::tar::index`].

use std::fs::File;
use std::os::unix::fs::FileExt;

use serde_json::{Map, Value};

use super::tar::{Index, Member};
use crate::decode::{compressed, flac};

/// A sibling larger than this is not read into the metadata.
pub const MAX_SIBLING_BYTES: u64 = 64 << 10;

/// One sample of a shard: its key and its members (indices into the
/// index's members).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sample {
    pub key: String,
    pub members: Vec<usize>,
}

/// The samples of `ix`, in archive order.
pub fn samples(ix: &Index) -> Vec<Sample> {
    let mut out: Vec<Sample> = Vec::new();
    for (i, m) in ix.members.iter().enumerate() {
        let (key, _) = key_ext(&m.name);
        match out.last_mut() {
            Some(s) if s.key == key => s.members.push(i),
            _ => out.push(Sample {
                key: key.to_string(),
                members: vec![i],
            }),
        }
    }
    out
}

/// A member's key and extension: the path up to the first dot of its file
/// name, and the rest (empty when there is no dot).
pub fn key_ext(name: &str) -> (&str, &str) {
    let base = name.rfind('/').map_or(0, |i| i + 1);
    match name[base..].find('.') {
        Some(i) => (&name[..base + i], &name[base + i + 1..]),
        None => (name, ""),
    }
}

/// The container whose first bytes `head` are, when it is one melforge
/// decodes.
pub fn audio_kind(head: &[u8]) -> Option<&'static str> {
    if let Some(codec) = compressed::sniff(head) {
        return Some(codec.name());
    }
    match head.first_chunk::<4>()? {
        m if m == flac::MAGIC => Some("flac"),
        b"RIFF" | b"RF64" | b"BW64" if head.get(8..12) == Some(b"WAVE") => Some("wav"),
        _ => None,
    }
}

/// Why a sample is not a row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refused {
    pub key: String,
    pub reason: String,
}

/// The audio member of `s`, or why it has none to build.
pub fn audio_of(ix: &Index, s: &Sample) -> Result<usize, Refused> {
    let audio: Vec<usize> = s
        .members
        .iter()
        .copied()
        .filter(|&i| audio_kind(&ix.members[i].head).is_some())
        .collect();
    let names = |list: &[usize]| {
        list.iter()
            .map(|&i| ix.members[i].name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    match audio.as_slice() {
        [one] => Ok(*one),
        [] => Err(Refused {
            key: s.key.clone(),
            reason: format!(
                "sample `{}` has no audio member (members: {}); expected one member in a \
                 container melforge decodes (WAV, FLAC, MP3, Ogg Vorbis or Opus, M4A), told by \
                 its content",
                s.key,
                names(&s.members)
            ),
        }),
        many => Err(Refused {
            key: s.key.clone(),
            reason: format!(
                "sample `{}` has {} audio members ({}); expected one, so none is built",
                s.key,
                many.len(),
                names(many)
            ),
        }),
    }
}

/// The metadata of sample `s` whose audio is member `audio`: `shard` (the
/// shard's file name) and `key`, then each sibling by its extension as
/// WebDataset's decoders name them: `json` parsed (kept as text when it is
/// not JSON), `cls` as an integer when it is one, any other sibling of at
/// most [`MAX_SIBLING_BYTES`] that is UTF-8 as a string (`txt`, `id`, …).
/// Larger or binary siblings are left out. The bytes read are added to
/// `read`.
pub fn sample_meta(
    file: &File,
    shard: &str,
    ix: &Index,
    s: &Sample,
    audio: usize,
    read: &mut u64,
) -> Map<String, Value> {
    let mut meta = Map::new();
    meta.insert("shard".into(), Value::String(shard.to_string()));
    meta.insert("key".into(), Value::String(s.key.clone()));
    for &i in &s.members {
        let m: &Member = &ix.members[i];
        let (_, ext) = key_ext(&m.name);
        if i == audio || ext.is_empty() || m.len > MAX_SIBLING_BYTES || meta.contains_key(ext) {
            continue;
        }
        // A small sibling came whole with its header.
        let buf = if m.head.len() as u64 == m.len {
            m.head.clone()
        } else {
            let mut buf = vec![0u8; m.len as usize];
            if file.read_exact_at(&mut buf, m.start).is_err() {
                continue;
            }
            *read += m.len;
            buf
        };
        let Ok(text) = String::from_utf8(buf) else {
            continue;
        };
        let value = match ext {
            "json" => serde_json::from_str(&text).unwrap_or(Value::String(text)),
            "cls" | "cls2" | "index" => match text.trim().parse::<i64>() {
                Ok(n) => Value::from(n),
                Err(_) => Value::String(text),
            },
            _ => Value::String(text),
        };
        meta.insert(ext.to_string(), value);
    }
    meta
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_end_at_the_first_dot_of_the_file_name() {
        assert_eq!(key_ext("a/b.c/utt7.seg.flac"), ("a/b.c/utt7", "seg.flac"));
        assert_eq!(key_ext("utt7.json"), ("utt7", "json"));
        assert_eq!(key_ext("README"), ("README", ""));
    }

    #[test]
    fn audio_is_told_by_content() {
        assert_eq!(audio_kind(b"fLaC\0\0\0\x22"), Some("flac"));
        assert_eq!(audio_kind(b"RIFF\x24\0\0\0WAVEfmt "), Some("wav"));
        assert_eq!(audio_kind(b"RIFF\x24\0\0\0AVI LIST"), None);
        assert_eq!(audio_kind(b"{\"text\": \"hi\"}"), None);
        assert_eq!(audio_kind(b"ID3\x04\0\0\0\0\0\0"), Some("mp3"));
        assert_eq!(audio_kind(b""), None);
    }

    fn member(name: &str, head: &[u8]) -> Member {
        Member {
            name: name.into(),
            header_at: 0,
            start: 0,
            len: head.len() as u64,
            head: head.to_vec(),
        }
    }

    #[test]
    fn samples_group_consecutive_keys_and_need_one_audio_member() {
        let ix = Index {
            members: vec![
                member("a.flac", b"fLaC...."),
                member("a.json", b"{}"),
                member("b.json", b"{}"),
                member("b.txt", b"hello"),
                member("c.flac", b"fLaC...."),
                member("c.wav", b"RIFF....WAVE"),
            ],
            ..Index::default()
        };
        let s = samples(&ix);
        let keys: Vec<&str> = s.iter().map(|s| s.key.as_str()).collect();
        assert_eq!(keys, ["a", "b", "c"]);
        assert_eq!(audio_of(&ix, &s[0]), Ok(0));
        let none = audio_of(&ix, &s[1]).unwrap_err();
        assert!(
            none.reason
                .contains("no audio member (members: b.json, b.txt)"),
            "{}",
            none.reason
        );
        let two = audio_of(&ix, &s[2]).unwrap_err();
        assert!(
            two.reason.contains("2 audio members (c.flac, c.wav)"),
            "{}",
            two.reason
        );
    }
}

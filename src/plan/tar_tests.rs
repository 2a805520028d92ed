//! The tar index against archives the `tar` crate and Python's `tarfile`
//! layout write, whole and damaged.

use super::*;

/// An archive of `members` (name, bytes), as GNU tar lays it out (long
/// names as `L` entries).
fn archive(members: &[(&str, &[u8])]) -> Vec<u8> {
    let mut b = ::tar::Builder::new(Vec::new());
    for (name, data) in members {
        let mut h = ::tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_entry_type(::tar::EntryType::Regular);
        b.append_data(&mut h, name, *data).unwrap();
    }
    b.into_inner().unwrap()
}

fn index_of(bytes: &[u8]) -> Index {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("a.tar");
    std::fs::write(&p, bytes).unwrap();
    index(&p).unwrap()
}

fn data<'a>(bytes: &'a [u8], m: &Member) -> &'a [u8] {
    &bytes[m.start as usize..(m.start + m.len) as usize]
}

#[test]
fn every_member_is_its_exact_bytes() {
    let long = format!("{}/utt.flac", "d".repeat(150));
    let big = vec![7u8; 50_000];
    let members: Vec<(&str, &[u8])> = vec![
        ("a.flac", b"fLaC0123"),
        ("a.json", b"{\"x\": 1}"),
        (&long, &big),
        ("empty.txt", b""),
    ];
    let bytes = archive(&members);
    let ix = index_of(&bytes);
    assert!(ix.problems.is_empty(), "{:?}", ix.problems);
    let names: Vec<&str> = ix.members.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names, ["a.flac", "a.json", long.as_str(), "empty.txt"]);
    for (m, (_, want)) in ix.members.iter().zip(&members) {
        assert_eq!(data(&bytes, m), *want, "{}", m.name);
        assert_eq!(m.head, want[..want.len().min(SNIFF)], "{}", m.name);
    }
    // Headers and the first bytes only: not the 50,000-byte member's data.
    assert!(ix.bytes_read < 8 * PEEK as u64, "{}", ix.bytes_read);
    assert_eq!(ix.size, bytes.len() as u64);
}

#[test]
fn pax_paths_and_sizes_apply_to_the_next_member() {
    // A pax header as Python's tarfile writes it for a long UTF-8 name.
    let name = "speaker-é/ütterance-0001.wav";
    let record = |k: &str, v: &str| {
        let body = format!(" {k}={v}\n");
        let mut n = body.len() + 1;
        while format!("{n}{body}").len() != n {
            n += 1;
        }
        format!("{n}{body}")
    };
    let pax = record("path", name);
    let mut b = ::tar::Builder::new(Vec::new());
    let mut h = ::tar::Header::new_ustar();
    h.set_size(pax.len() as u64);
    h.set_entry_type(::tar::EntryType::XHeader);
    b.append_data(&mut h, "././@PaxHeader", pax.as_bytes())
        .unwrap();
    let mut h = ::tar::Header::new_ustar();
    h.set_size(4);
    h.set_entry_type(::tar::EntryType::Regular);
    b.append_data(&mut h, "short.wav", &b"RIFF"[..]).unwrap();
    let bytes = b.into_inner().unwrap();
    let ix = index_of(&bytes);
    assert!(ix.problems.is_empty(), "{:?}", ix.problems);
    assert_eq!(ix.members.len(), 1);
    assert_eq!(ix.members[0].name, name);
    assert_eq!(data(&bytes, &ix.members[0]), b"RIFF");
}

#[test]
fn a_damaged_header_loses_only_its_member() {
    let members: Vec<(&str, &[u8])> = vec![
        ("k1.flac", b"one"),
        ("k2.flac", b"two"),
        ("k3.flac", b"three"),
    ];
    let mut bytes = archive(&members);
    let ix = index_of(&bytes);
    let at = ix.members[1].header_at as usize;
    bytes[at + 3] ^= 0x20; // a letter of k2's name
    let ix = index_of(&bytes);
    let names: Vec<&str> = ix.members.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names, ["k1.flac", "k3.flac"]);
    assert_eq!(data(&bytes, &ix.members[1]), b"three");
    assert_eq!(ix.problems.len(), 1, "{:?}", ix.problems);
    let p = &ix.problems[0];
    assert_eq!(p.at, at as u64);
    assert!(p.reason.contains("checksum"), "{}", p.reason);
    assert!(p.reason.contains("skipped"), "{}", p.reason);
}

#[test]
fn a_truncated_archive_keeps_the_members_before_the_cut() {
    let big = vec![1u8; 3000];
    let members: Vec<(&str, &[u8])> = vec![("k1.wav", b"RIFFxxxx"), ("k2.wav", &big)];
    let bytes = archive(&members);
    let full = index_of(&bytes);
    let cut = (full.members[1].start + 1000) as usize;
    let ix = index_of(&bytes[..cut]);
    assert_eq!(ix.members.len(), 1);
    assert_eq!(ix.members[0].name, "k1.wav");
    assert_eq!(ix.problems.len(), 1);
    let p = &ix.problems[0];
    assert_eq!(p.member.as_deref(), Some("k2.wav"));
    assert!(p.reason.contains("truncated"), "{}", p.reason);
    assert!(p.reason.contains("3000 bytes"), "{}", p.reason);
    // Cut inside a header.
    let ix = index_of(&bytes[..full.members[1].header_at as usize + 100]);
    assert_eq!(ix.members.len(), 1);
    assert!(
        ix.problems[0].reason.contains("into a header"),
        "{:?}",
        ix.problems
    );
}

#[test]
fn a_damaged_last_header_ends_the_walk_with_a_reason() {
    let members: Vec<(&str, &[u8])> = vec![("k1.wav", b"a"), ("k2.wav", b"b")];
    let mut bytes = archive(&members);
    let at = index_of(&bytes).members[1].header_at as usize;
    bytes[at + 150] = b'x'; // the checksum field itself
    // Nothing valid after it: the zero blocks at the end are not headers.
    let ix = index_of(&bytes);
    assert_eq!(ix.members.len(), 1);
    assert_eq!(ix.problems.len(), 1);
    assert!(
        ix.problems[0].reason.contains("no valid header follows"),
        "{:?}",
        ix.problems
    );
}

#[test]
fn not_an_archive_and_empty_files() {
    let ix = index_of(b"");
    assert!(ix.members.is_empty() && ix.problems.is_empty());
    let ix = index_of(&[b'x'; 700]);
    assert!(ix.members.is_empty());
    assert_eq!(ix.problems.len(), 1, "{:?}", ix.problems);
}

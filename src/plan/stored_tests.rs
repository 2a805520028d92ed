//! The stored-corpus planner on WebDataset shards written here: whole,
//! gzipped, damaged, and in a shard's share.

use std::io::Write as _;

use super::*;

/// A sample: its key and its members, (extension, bytes).
type Sample<'a> = (&'a str, Vec<(&'a str, Vec<u8>)>);

/// A shard of `samples`, as WebDataset's TarWriter lays it out.
fn shard(path: &Path, samples: &[Sample<'_>]) {
    let mut b = ::tar::Builder::new(Vec::new());
    for (key, members) in samples {
        for (ext, data) in members {
            let mut h = ::tar::Header::new_gnu();
            h.set_size(data.len() as u64);
            h.set_mode(0o644);
            b.append_data(&mut h, format!("{key}.{ext}"), data.as_slice())
                .unwrap();
        }
    }
    std::fs::write(path, b.into_inner().unwrap()).unwrap();
}

fn flac(n: u8) -> Vec<u8> {
    let mut v = b"fLaC".to_vec();
    v.extend(std::iter::repeat_n(n, 20_000));
    v
}

fn sample(key: &str, n: u8) -> Sample<'_> {
    (
        key,
        vec![
            ("flac", flac(n)),
            ("json", format!("{{\"n\": {n}}}").into_bytes()),
            ("txt", b"hello".to_vec()),
            ("cls", b"3\n".to_vec()),
        ],
    )
}

fn spill(dir: &Path) -> SpillDir {
    SpillDir::new(dir.join(".spill"), 1 << 30)
}

#[test]
fn patterns_name_their_splits() {
    let dir = tempfile::tempdir().unwrap();
    for i in 0..3 {
        shard(&dir.path().join(format!("train-{i:06}.tar")), &[]);
    }
    let pat = PathBuf::from(format!(
        "{}/train-{{000000..000002}}.tar",
        dir.path().display()
    ));
    let sets = sets_of(std::slice::from_ref(&pat), None).unwrap().unwrap();
    assert_eq!(sets.len(), 1);
    assert_eq!(sets[0].split, "train");
    assert_eq!(sets[0].kind, Kind::WebDataset);
    assert_eq!(sets[0].files.len(), 3);
    let named = sets_of(std::slice::from_ref(&pat), Some("dev"))
        .unwrap()
        .unwrap();
    assert_eq!(named[0].split, "dev");
    // A tree and a manifest are not stored corpora.
    assert!(
        sets_of(&[dir.path().to_path_buf()], None)
            .unwrap()
            .is_none()
    );
    let m = dir.path().join("train.jsonl");
    std::fs::write(&m, "{}\n").unwrap();
    assert!(sets_of(std::slice::from_ref(&m), None).unwrap().is_none());
    // Mixed, two splits of one name, --split with two inputs.
    let e = sets_of(&[pat.clone(), m.clone()], None).unwrap_err();
    assert!(matches!(e, Error::Mixed { .. }), "{e}");
    let e = sets_of(&[pat.clone(), pat.clone()], None).unwrap_err();
    assert!(matches!(e, Error::SameSplit { .. }), "{e}");
    let e = sets_of(&[pat.clone(), pat.clone()], Some("x")).unwrap_err();
    assert!(matches!(e, Error::SplitWithMany { n: 2 }), "{e}");
    let e = sets_of(&[PathBuf::from("rejected-{0..1}.tar")], None).unwrap_err();
    assert!(matches!(e, Error::RejectedSplit { .. }), "{e}");
}

#[test]
fn each_sample_is_a_row_with_its_siblings_as_metadata() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("train-000000.tar");
    shard(&p, &[sample("a", 1), sample("b", 2)]);
    let sets = sets_of(std::slice::from_ref(&p), None).unwrap().unwrap();
    let out = plan(&sets, Options::default());
    assert!(out.rejected.is_empty(), "{:?}", out.rejected);
    let m = &out.m;
    assert_eq!(m.plan.jobs.len(), 2);
    assert_eq!(m.plan.paths.get(0), "train-000000.tar/a.flac");
    let bytes = std::fs::read(&p).unwrap();
    for (i, want) in [flac(1), flac(2)].iter().enumerate() {
        let r = m.extents.range(i).unwrap();
        assert!(r.prefix.is_empty());
        assert_eq!(
            &bytes[r.start as usize..(r.start + r.len) as usize],
            want.as_slice()
        );
        assert_eq!(m.plan.targets[&(i as u32)], p);
        assert_eq!(m.lines[i] as usize, i + 1);
    }
    let meta: Value = serde_json::from_str(&m.meta.get(1)).unwrap();
    assert_eq!(
        meta,
        serde_json::json!({"shard": "train-000000.tar", "key": "b", "json": {"n": 2},
                           "txt": "hello", "cls": 3})
    );
    // Headers and siblings only: far less than the shard.
    assert!(
        m.header_bytes < bytes.len() as u64 / 2,
        "{}",
        m.header_bytes
    );
}

#[test]
fn bad_samples_and_damage_are_rejected_and_the_rest_builds() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("train-000000.tar");
    let no_audio = ("c", vec![("json", b"{}".to_vec()), ("txt", b"t".to_vec())]);
    let two = (
        "d",
        vec![("flac", flac(4)), ("wav", b"RIFF\0\0\0\0WAVEfmt ".to_vec())],
    );
    shard(
        &p,
        &[
            sample("a", 1),
            no_audio,
            two,
            sample("e", 5),
            sample("f", 6),
        ],
    );
    // Damage e's first header, and cut the shard inside f's audio.
    let ix = tar::index(&p).unwrap();
    let e_at = ix
        .members
        .iter()
        .find(|m| m.name == "e.flac")
        .unwrap()
        .header_at;
    let f = ix.members.iter().find(|m| m.name == "f.flac").unwrap();
    let mut bytes = std::fs::read(&p).unwrap();
    bytes.truncate((f.start + 100) as usize);
    bytes[e_at as usize + 101] ^= 1; // e's mode field: the name stays
    std::fs::write(&p, &bytes).unwrap();
    let sets = sets_of(std::slice::from_ref(&p), None).unwrap().unwrap();
    let out = plan(&sets, Options::default());
    let rows: Vec<&str> = (0..out.m.plan.jobs.len())
        .map(|i| out.m.plan.paths.get(i as u32))
        .collect();
    assert_eq!(rows, ["train-000000.tar/a.flac"]);
    let why: Vec<(&str, RejectKind, &str)> = out
        .rejected
        .iter()
        .map(|r| (r.path.as_str(), r.kind, r.reason.as_str()))
        .collect();
    assert_eq!(why.len(), 5, "{why:#?}");
    let has = |path: &str, kind: RejectKind, text: &str| {
        assert!(
            why.iter()
                .any(|(p, k, r)| *p == path && *k == kind && r.contains(text)),
            "no {kind} rejection of {path} saying {text:?} in {why:#?}"
        );
    };
    has("train-000000.tar/e.flac", RejectKind::Malformed, "checksum");
    has(
        "train-000000.tar/f.flac",
        RejectKind::Malformed,
        "truncated",
    );
    has(
        "train-000000.tar/c",
        RejectKind::BadSample,
        "no audio member",
    );
    has(
        "train-000000.tar/d",
        RejectKind::BadSample,
        "2 audio members (d.flac, d.wav)",
    );
    // e's siblings survive the damaged audio header: a sample without audio.
    has(
        "train-000000.tar/e",
        RejectKind::BadSample,
        "no audio member (members: e.json",
    );
}

#[test]
fn a_gzipped_shard_is_spilled_and_read_in_place_there() {
    let dir = tempfile::tempdir().unwrap();
    let plain = dir.path().join("plain.tar");
    shard(&plain, &[sample("a", 1), sample("b", 2)]);
    let gz = dir.path().join("train-000000.tar.gz");
    let mut enc = flate2::write::GzEncoder::new(
        std::fs::File::create(&gz).unwrap(),
        flate2::Compression::fast(),
    );
    enc.write_all(&std::fs::read(&plain).unwrap()).unwrap();
    enc.finish().unwrap();
    let sets = sets_of(std::slice::from_ref(&gz), None).unwrap().unwrap();
    assert_eq!(sets[0].split, "train");
    // Without a spill folder: one rejection, nothing planned.
    let out = plan(&sets, Options::default());
    assert_eq!(out.m.plan.jobs.len(), 0);
    assert_eq!(out.rejected[0].kind, RejectKind::Unsupported);
    let spill = spill(dir.path());
    let o = Options {
        spill: Some(&spill),
        ..Options::default()
    };
    let out = plan(&sets, o);
    assert!(out.rejected.is_empty(), "{:?}", out.rejected);
    assert_eq!(out.m.plan.jobs.len(), 2);
    assert_eq!(out.m.plan.paths.get(1), "train-000000.tar.gz/b.flac");
    let open = &out.m.plan.targets[&1];
    assert!(open.starts_with(spill.path()));
    let r = out.m.extents.range(1).unwrap();
    let bytes = std::fs::read(open).unwrap();
    assert_eq!(
        &bytes[r.start as usize..(r.start + r.len) as usize],
        flac(2).as_slice()
    );
    // A gzip stream cut short keeps the members before the cut.
    let all = std::fs::read(&gz).unwrap();
    std::fs::write(&gz, &all[..all.len() - 40]).unwrap();
    let out = plan(&sets, o);
    assert!(
        out.rejected
            .iter()
            .any(|r| r.reason.contains("gzip stream breaks off")),
        "{:?}",
        out.rejected
    );
}

#[test]
fn a_share_takes_whole_files() {
    let dir = tempfile::tempdir().unwrap();
    for i in 0..4u8 {
        let p = dir.path().join(format!("train-{i:06}.tar"));
        shard(
            &p,
            &[sample(&format!("k{i}a"), i), sample(&format!("k{i}b"), i)],
        );
    }
    let pat = PathBuf::from(format!(
        "{}/train-{{000000..000003}}.tar",
        dir.path().display()
    ));
    let sets = sets_of(&[pat], None).unwrap().unwrap();
    let share = |n: usize| (n / 2)..n;
    let o = Options {
        share: Some(&share),
        ..Options::default()
    };
    let out = plan(&sets, o);
    assert_eq!(out.files, 2);
    let rows: Vec<&str> = (0..out.m.plan.jobs.len())
        .map(|i| out.m.plan.paths.get(i as u32))
        .collect();
    assert_eq!(
        rows,
        [
            "train-000002.tar/k2a.flac",
            "train-000002.tar/k2b.flac",
            "train-000003.tar/k3a.flac",
            "train-000003.tar/k3b.flac"
        ]
    );
    assert_eq!(out.m.plan.splits, ["train"]);
    let seqs: Vec<u32> = out.m.plan.jobs.iter().map(|j| j.seq).collect();
    assert_eq!(seqs, [0, 1, 2, 3]);
}

#[test]
fn an_unreadable_shard_is_one_rejection() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("train-000000.tar");
    shard(&good, &[sample("a", 1)]);
    let pat = PathBuf::from(format!(
        "{}/train-{{000000..000001}}.tar",
        dir.path().display()
    ));
    let sets = sets_of(&[pat], None).unwrap().unwrap();
    let out = plan(&sets, Options::default());
    assert_eq!(out.m.plan.jobs.len(), 1);
    assert_eq!(out.rejected.len(), 1);
    assert_eq!(out.rejected[0].path, "train-000001.tar");
    assert_eq!(out.rejected[0].kind, RejectKind::Unreadable);
}

/// A Shar folder as lhotse's SharWriter lays it out: the cuts (start 0, a
/// `shar` placeholder source) and, per cut, `<id>.flac` then `<id>.json`.
#[test]
fn a_shar_folder_builds_each_cut_from_its_member() {
    let dir = tempfile::tempdir().unwrap();
    let shar = dir.path().join("dev-clean");
    std::fs::create_dir(&shar).unwrap();
    let cut = |id: &str, rec: bool| {
        let recording = if rec {
            format!(
                ", \"recording\": {{\"id\": \"{id}-rec\", \"sources\": [{{\"type\": \"shar\", \
                 \"channels\": [0], \"source\": \"\"}}], \"sampling_rate\": 16000, \
                 \"num_samples\": 16000, \"duration\": 1.0, \"channel_ids\": [0]}}"
            )
        } else {
            String::new()
        };
        format!(
            "{{\"id\": \"{id}\", \"start\": 0, \"duration\": 1.0, \"channel\": 0, \
             \"supervisions\": [{{\"id\": \"s\", \"recording_id\": \"{id}-rec\", \"start\": 0, \
             \"duration\": 1.0, \"text\": \"words of {id}\", \"speaker\": \"spk\"}}]{recording}, \
             \"type\": \"MonoCut\"}}\n"
        )
    };
    let lines = [
        cut("1089-0001.a", true),
        cut("1089-0002", true),
        cut("1089-0003", false),
    ]
    .concat()
        + &cut("1089-0004", true);
    let mut gz = flate2::write::GzEncoder::new(
        std::fs::File::create(shar.join("cuts.000000.jsonl.gz")).unwrap(),
        flate2::Compression::fast(),
    );
    gz.write_all(lines.as_bytes()).unwrap();
    gz.finish().unwrap();
    shard(
        &shar.join("recording.000000.tar"),
        &[
            (
                "1089-0001.a",
                vec![("flac", flac(1)), ("json", b"{}".to_vec())],
            ),
            (
                "1089-0002",
                vec![("flac", flac(2)), ("json", b"{}".to_vec())],
            ),
            ("1089-0003", vec![("nodata", Vec::new())]),
        ],
    );
    let sets = sets_of(std::slice::from_ref(&shar), None).unwrap().unwrap();
    assert_eq!(sets[0].kind, Kind::Shar);
    assert_eq!(sets[0].split, "dev-clean");
    let out = plan(&sets, Options::default());
    let m = &out.m;
    assert_eq!(m.plan.jobs.len(), 2);
    assert_eq!(m.plan.paths.get(0), "recording.000000.tar/1089-0001.a.flac");
    assert_eq!(&*m.lines, &[1, 2]);
    let meta: Value = serde_json::from_str(&m.meta.get(1)).unwrap();
    assert_eq!(meta["id"], "1089-0002");
    assert_eq!(meta["text"], "words of 1089-0002");
    assert_eq!(meta["shard"], "recording.000000.tar");
    let bytes = std::fs::read(shar.join("recording.000000.tar")).unwrap();
    let r = m.extents.range(1).unwrap();
    assert_eq!(
        &bytes[r.start as usize..(r.start + r.len) as usize],
        flac(2).as_slice()
    );
    let why: Vec<(&str, &str)> = out
        .rejected
        .iter()
        .map(|r| (r.path.as_str(), r.reason.as_str()))
        .collect();
    assert_eq!(why.len(), 2, "{why:?}");
    assert!(why[0].0 == "recording.000000.tar/1089-0003" && why[0].1.contains("no recording"));
    assert!(why[1].0 == "recording.000000.tar/1089-0004" && why[1].1.contains("line 4"));
}

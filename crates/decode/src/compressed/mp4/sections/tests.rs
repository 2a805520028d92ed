//! The section reading on access units written bit by bit here (the
//! ffmpeg-encoded ones are in `part_tests`), and on hostile bytes.

use proptest::prelude::*;

use super::{Verdict, mono_unit};

/// Writes bits most significant first.
#[derive(Default)]
struct W {
    bytes: Vec<u8>,
    bits: usize,
}

impl W {
    fn put(&mut self, v: u32, n: u32) -> &mut Self {
        for i in (0..n).rev() {
            if self.bits.is_multiple_of(8) {
                self.bytes.push(0);
            }
            let bit = ((v >> i) & 1) as u8;
            let last = self.bytes.len() - 1;
            self.bytes[last] |= bit << (7 - self.bits % 8);
            self.bits += 1;
        }
        self
    }

    /// A section: its codebook and length (escaped in `bits`-bit steps).
    fn section(&mut self, cb: u32, mut len: u32, bits: u32) -> &mut Self {
        self.put(cb, 4);
        let esc = (1 << bits) - 1;
        while len >= esc {
            self.put(esc, bits);
            len -= esc;
        }
        self.put(len, bits)
    }

    /// An SCE's start with one long window of `max_sfb` bands.
    fn long_sce(&mut self, max_sfb: u32) -> &mut Self {
        self.put(0, 3).put(5, 4).put(100, 8); // ID_SCE, tag, global_gain
        self.put(0, 1).put(0, 2).put(1, 1); // reserved, ONLY_LONG, shape
        self.put(max_sfb, 6).put(0, 1) // no predictor data
    }

    /// An SCE's start with eight short windows in the groups `grouping` says.
    fn short_sce(&mut self, max_sfb: u32, grouping: u32) -> &mut Self {
        self.put(0, 3).put(0, 4).put(90, 8);
        self.put(0, 1).put(2, 2).put(0, 1);
        self.put(max_sfb, 4).put(grouping, 7)
    }

    /// What follows the sections in a real unit (scale factors, spectrum…).
    fn rest(&mut self) -> Vec<u8> {
        self.put(0x5A5A, 16);
        self.bytes.clone()
    }
}

#[test]
fn long_window_sections_without_noise_are_clean() {
    // 49 bands: 10 + 5 + 34 (one escaped length step, 31 + 3).
    let au = W::default()
        .long_sce(49)
        .section(1, 10, 5)
        .section(0, 5, 5)
        .section(11, 34, 5)
        .rest();
    assert_eq!(mono_unit(&au), Verdict::Clean);
    // The same with the middle section coded as noise, or reserved.
    for cb in [13, 12] {
        let au = W::default()
            .long_sce(49)
            .section(1, 10, 5)
            .section(cb, 5, 5)
            .section(11, 34, 5)
            .rest();
        assert_eq!(mono_unit(&au), Verdict::Unproven, "codebook {cb}");
    }
    // A length of exactly 31 is an escape and a 0 step.
    let au = W::default()
        .long_sce(31)
        .section(2, 31, 5)
        .section(13, 0, 5)
        .rest();
    assert_eq!(mono_unit(&au), Verdict::Clean, "sections stop at max_sfb");
    // No bands at all: no sections.
    let au = W::default().long_sce(0).put(13, 4).rest();
    assert_eq!(mono_unit(&au), Verdict::Clean);
}

#[test]
fn short_windows_read_the_sections_of_every_group() {
    // Grouping 1011011: three groups (a new one per 0 bit).
    let groups = |last: u32| {
        W::default()
            .short_sce(14, 0b101_1011)
            .section(1, 14, 3)
            .section(2, 7, 3)
            .section(0, 7, 3)
            .section(4, 3, 3)
            .section(last, 11, 3)
            .rest()
    };
    assert_eq!(mono_unit(&groups(5)), Verdict::Clean);
    assert_eq!(mono_unit(&groups(13)), Verdict::Unproven);
    // Eight groups, noise in the last only: all eight are read.
    let mut w = W::default();
    w.short_sce(4, 0);
    for g in 0..8 {
        w.section(if g == 7 { 13 } else { 3 }, 4, 3);
    }
    assert_eq!(mono_unit(&w.rest()), Verdict::Unproven);
}

#[test]
fn fill_and_data_elements_before_the_channel_are_skipped() {
    let mut w = W::default();
    w.put(6, 3).put(15, 4).put(20, 8); // FIL of 15 + 20 - 1 = 34 bytes
    for _ in 0..34 {
        w.put(13 << 4 | 13, 8);
    }
    w.put(4, 3).put(1, 4).put(1, 1).put(255, 8).put(2, 8); // DSE, aligned, 257 bytes
    w.bits = w.bytes.len() * 8;
    for _ in 0..257 {
        w.put(0xD0, 8);
    }
    w.long_sce(20).section(1, 20, 5);
    let au = w.rest();
    assert_eq!(mono_unit(&au), Verdict::Clean);
    // Every cut before the end of the sections asks for more bytes.
    let sections_end = au.len() - 2;
    for cut in 0..sections_end {
        assert_eq!(mono_unit(&au[..cut]), Verdict::Short, "cut at {cut}");
    }
}

#[test]
fn other_elements_and_odd_syntax_are_unproven() {
    // A channel pair, a coupling channel, an LFE, a program config, the
    // end before any channel.
    for id in [1, 2, 3, 5, 7] {
        let au = W::default().put(id, 3).put(0, 29).rest();
        assert_eq!(mono_unit(&au), Verdict::Unproven, "element {id}");
    }
    // Predictor data in a long window.
    let mut w = W::default();
    w.put(0, 3)
        .put(0, 4)
        .put(100, 8)
        .put(0, 1)
        .put(0, 2)
        .put(0, 1);
    w.put(40, 6).put(1, 1).section(1, 40, 5);
    assert_eq!(mono_unit(&w.rest()), Verdict::Unproven);
    // A section past max_sfb, and an endless run of escapes.
    let au = W::default().long_sce(20).section(1, 21, 5).rest();
    assert_eq!(mono_unit(&au), Verdict::Unproven);
    let mut w = W::default();
    w.long_sce(63).put(1, 4);
    for _ in 0..100 {
        w.put(31, 5);
    }
    assert_eq!(mono_unit(&w.rest()), Verdict::Unproven);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Any bytes give a verdict, never a panic; an SCE header followed by
    /// garbage too (the sections then run on random bits).
    #[test]
    fn hostile_units_never_panic(
        bytes in proptest::collection::vec(any::<u8>(), 0..400),
        sce in any::<bool>(),
    ) {
        let au = if sce {
            let mut w = W::default();
            w.long_sce(49);
            let mut au = w.bytes.clone();
            au.extend_from_slice(&bytes);
            au
        } else {
            bytes
        };
        let v = mono_unit(&au);
        // A longer unit never turns a verdict back into "short".
        if v != Verdict::Short {
            let mut more = au.clone();
            more.extend_from_slice(&[0xFF; 64]);
            prop_assert_eq!(mono_unit(&more), v);
        }
    }
}

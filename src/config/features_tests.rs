//! `[features]`: defaults, keys per recipe, and errors that name the key.

use crate::config::{Config, Recipe};
use crate::dsp::ParamValue;
use crate::dsp::kaldi::{KaldiOptions, KaldiWindow};

#[test]
fn absent_section_is_librosa() {
    let c = Config::parse("", "t").unwrap();
    assert_eq!(c.features.recipe, Recipe::Librosa);
    assert_eq!(c.features.sample_rate(), None);
}

#[test]
fn kaldi_keys_take_torchaudios_names_and_defaults() {
    let text = "[features]\nrecipe = \"kaldi-fbank\"\nnum_mel_bins = 80\nwindow_type = \"hamming\"\nsample_scale = 32768.0\n";
    let c = Config::parse(text, "t").unwrap();
    let want = KaldiOptions {
        num_mel_bins: 80,
        window_type: KaldiWindow::Hamming,
        sample_scale: 32768.0,
        ..Default::default()
    };
    assert_eq!(c.features.recipe, Recipe::KaldiFbank(want));
    assert_eq!(c.features.sample_rate(), Some(16000));
    let p = c.features.params();
    assert_eq!(
        p[0],
        ("features.recipe".into(), ParamValue::Text("kaldi-fbank"))
    );
    assert!(p.contains(&("features.num_mel_bins".into(), ParamValue::Int(80))));
    assert!(p.contains(&("features.use_power".into(), ParamValue::Bool(true))));
    assert!(!p.iter().any(|(k, _)| k == "features.num_ceps"));
    assert_eq!(p.len(), 1 + 16 + 2 + 1);
}

#[test]
fn whisper_takes_n_mels_only() {
    let c = Config::parse("[features]\nrecipe = \"whisper\"\nn_mels = 128\n", "t").unwrap();
    assert_eq!(c.features.recipe, Recipe::Whisper { n_mels: 128 });
    assert_eq!(c.features.sample_rate(), Some(16000));
    let e = Config::parse("[features]\nrecipe = \"whisper\"\nn_mels = 64\n", "f.toml").unwrap_err();
    assert!(
        e.to_string()
            .starts_with("f.toml:3: invalid value for `features.n_mels`"),
        "{e}"
    );
    let e = Config::parse(
        "[features]\nrecipe = \"whisper\"\nnum_mel_bins = 80\n",
        "f.toml",
    )
    .unwrap_err();
    assert!(
        e.to_string().contains("features.num_mel_bins") && e.to_string().contains("whisper"),
        "{e}"
    );
}

#[test]
fn a_key_of_the_other_kaldi_recipe_is_named() {
    let e = Config::parse(
        "[features]\nrecipe = \"kaldi-fbank\"\nnum_ceps = 20\n",
        "f.toml",
    )
    .unwrap_err();
    assert!(
        e.to_string()
            .starts_with("f.toml:3: invalid value for `features.num_ceps`"),
        "{e}"
    );
    let e = Config::parse(
        "[features]\nrecipe = \"kaldi-mfcc\"\nuse_power = false\n",
        "f.toml",
    )
    .unwrap_err();
    assert!(e.to_string().contains("features.use_power"), "{e}");
    // Without a recipe, a Kaldi key is an error too (it would be ignored).
    let e = Config::parse("[features]\nnum_mel_bins = 80\n", "f.toml").unwrap_err();
    assert!(e.to_string().contains("\"librosa\""), "{e}");
}

#[test]
fn bad_values_name_the_key_and_line() {
    let cases = [
        ("high_freq = 9000.0", "features.high_freq"),
        ("window_type = \"kaiser\"", "features.window_type"),
        ("sample_frequency = 16000.5", "features.sample_frequency"),
        ("frame_shift = 0.0", "features.frame_shift"),
    ];
    for (line, key) in cases {
        let text = format!("[features]\nrecipe = \"kaldi-mfcc\"\n{line}\n");
        let e = Config::parse(&text, "f.toml").unwrap_err();
        assert!(
            e.to_string()
                .starts_with(&format!("f.toml:3: invalid value for `{key}`")),
            "{e}"
        );
    }
    let e = Config::parse("[features]\nrecipe = \"htk\"\n", "f.toml").unwrap_err();
    assert!(e.to_string().contains("\"kaldi-fbank\""), "{e}");
    let e = Config::parse(
        "[features]\nrecipe = \"kaldi-fbank\"\nnum_mel_bin = 80\n",
        "f.toml",
    )
    .unwrap_err();
    assert!(e.to_string().contains("num_mel_bin"), "{e}");
}

#[test]
fn mel_keys_are_rejected_under_another_recipe() {
    let e = Config::parse(
        "[mel]\nn_mels = 64\n[features]\nrecipe = \"whisper\"\n",
        "f.toml",
    )
    .unwrap_err();
    assert!(e.to_string().contains("[mel]"), "{e}");
    assert!(
        Config::parse(
            "[mel]\nn_mels = 64\n[features]\nrecipe = \"librosa\"\n",
            "t"
        )
        .is_ok()
    );
}

/// `lhotse-fbank` is `kaldi-fbank` with lhotse's `FbankConfig` defaults
/// (lhotse/features/kaldi/extractors.py), recorded as kaldi-fbank; its keys
/// still change them.
#[test]
fn lhotse_fbank_is_kaldi_fbank_with_lhotses_defaults() {
    let c = Config::parse("[features]\nrecipe = \"lhotse-fbank\"\n", "t").unwrap();
    let Recipe::KaldiFbank(o) = &c.features.recipe else {
        panic!("{:?}", c.features.recipe)
    };
    assert_eq!(
        (o.num_mel_bins, o.snip_edges, o.high_freq, o.energy_floor),
        (80, false, -400.0, 1e-10)
    );
    assert_eq!((o.dither, o.low_freq, o.frame_shift), (0.0, 20.0, 10.0));
    assert_eq!(
        c.features.params()[0],
        ("features.recipe".into(), ParamValue::Text("kaldi-fbank"))
    );
    let c = Config::parse(
        "[features]\nrecipe = \"lhotse-fbank\"\nnum_mel_bins = 40\n",
        "t",
    )
    .unwrap();
    assert!(
        matches!(&c.features.recipe, Recipe::KaldiFbank(o) if o.num_mel_bins == 40 && !o.snip_edges)
    );
    let e = Config::parse(
        "[features]\nrecipe = \"lhotse-fbank\"\nnum_ceps = 13\n",
        "f.toml",
    )
    .unwrap_err();
    assert!(
        e.to_string()
            .contains("not a parameter of recipe \"lhotse-fbank\""),
        "{e}"
    );
}

/// `output.lhotse` needs a recipe lhotse counts frames for: Kaldi without
/// `snip_edges`; the command line's `--recipe`/`--lhotse` go through the
/// same checks.
#[test]
fn lhotse_output_needs_kaldi_without_snip_edges() {
    use crate::config::Overrides;
    let e = Config::parse("[output]\nlhotse = true\n", "f.toml").unwrap_err();
    assert!(
        e.to_string()
            .starts_with("f.toml:2: invalid value for `output.lhotse`")
            && e.to_string().contains("recipe \"librosa\""),
        "{e}"
    );
    let text = "[features]\nrecipe = \"kaldi-fbank\"\n\n[output]\nlhotse = true\n";
    let e = Config::parse(text, "f.toml").unwrap_err();
    assert!(e.to_string().contains("snip_edges"), "{e}");
    let text =
        "[features]\nrecipe = \"kaldi-mfcc\"\nsnip_edges = false\n\n[output]\nlhotse = true\n";
    assert!(Config::parse(text, "f.toml").unwrap().output.lhotse);
    let over = Overrides {
        recipe: Some("lhotse-fbank".into()),
        lhotse: true,
        ..Overrides::default()
    };
    let c = Config::load_with(None, &over).unwrap();
    assert!(c.output.lhotse);
    assert!(matches!(&c.features.recipe, Recipe::KaldiFbank(o) if o.num_mel_bins == 80));
    let over = Overrides {
        recipe: Some("whisper".into()),
        lhotse: true,
        ..Overrides::default()
    };
    let e = Config::load_with(None, &over).unwrap_err();
    assert!(e.to_string().contains("recipe \"whisper\""), "{e}");
    let over = Overrides {
        recipe: Some("lhotse".into()),
        lhotse: false,
        ..Overrides::default()
    };
    let e = Config::load_with(None, &over).unwrap_err();
    assert!(e.to_string().contains("\"lhotse-fbank\""), "{e}");
}

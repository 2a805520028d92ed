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

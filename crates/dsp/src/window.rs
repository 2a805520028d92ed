//! Analysis windows exactly as librosa.stft builds them: `scipy.signal.get_window(
//! name, win_length, fftbins=True)` (periodic: the symmetric window of length
//! `win_length + 1` with its last point dropped), then `librosa.util.pad_center`
//! to `n_fft` (zeros split `lpad = (n_fft - win_length) / 2` left, the rest right).
//!
//! scipy evaluates the generalised cosine window in float64 as
//! `w = Σ_k a[k]·cos(k·fac)`, `fac = linspace(-π, π, M + 1)`, accumulating left to
//! right from zero; librosa keeps the float64 window and multiplies the float32
//! samples by it in float64, so the plan keeps it in f64 too.

use super::filterbank::linspace;
use super::spec::{Spec, Window};

/// Generalised-cosine coefficients scipy uses for each window.
fn coefficients(window: Window) -> Option<&'static [f64]> {
    match window {
        Window::Hann => Some(&[0.5, 0.5]),
        Window::Hamming => Some(&[0.54, 1.0 - 0.54]),
        Window::Blackman => Some(&[0.42, 0.50, 0.08]),
        Window::Boxcar => None,
    }
}

/// The periodic window of length `m` (scipy `get_window(name, m, fftbins=True)`).
pub fn periodic_window(window: Window, m: usize) -> Vec<f64> {
    if m <= 1 {
        return vec![1.0; m];
    }
    let Some(a) = coefficients(window) else {
        return vec![1.0; m];
    };
    let fac = linspace(-std::f64::consts::PI, std::f64::consts::PI, m + 1);
    fac[..m]
        .iter()
        .map(|&x| {
            // scipy: w = zeros; w += a[k] * cos(k * fac) for k = 0, 1, ...
            let mut w = 0.0;
            for (k, &ak) in a.iter().enumerate() {
                w += ak * (k as f64 * x).cos();
            }
            w
        })
        .collect()
}

/// The window as the STFT applies it: length `n_fft`, float64, centred-padded.
pub fn window_f64(spec: &Spec) -> Vec<f64> {
    let w = periodic_window(spec.window, spec.win_length);
    let lpad = (spec.n_fft - spec.win_length) / 2;
    let mut out = vec![0.0; spec.n_fft];
    out[lpad..lpad + w.len()].copy_from_slice(&w);
    out
}

/// [`window_f64`] rounded to f32 (length `n_fft`), for tests and other backends.
pub fn window(spec: &Spec) -> Vec<f32> {
    window_f64(spec).into_iter().map(|w| w as f32).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values printed by scipy 1.17 / librosa 0.11 (`get_window(..., fftbins=True)`).
    #[test]
    fn windows_equal_scipy_values() {
        let hann8 = [
            0.0,
            0.14644660940672627,
            0.5,
            0.8535533905932737,
            1.0,
            0.8535533905932737,
            0.5,
            0.14644660940672627,
        ];
        let got = periodic_window(Window::Hann, 8);
        for (g, w) in got.iter().zip(hann8) {
            assert!((g - w).abs() <= 2e-16, "{got:?}");
        }
        let hamming5 = [
            0.08000000000000007,
            0.3978521825875243,
            0.9121478174124759,
            0.9121478174124759,
            0.3978521825875243,
        ];
        let got = periodic_window(Window::Hamming, 5);
        for (g, w) in got.iter().zip(hamming5) {
            assert!((g - w).abs() <= 2e-16, "{got:?}");
        }
        let blackman6 = [
            -1.3877787807814457e-17,
            0.1299999999999999,
            0.6299999999999999,
            0.9999999999999999,
            0.6300000000000002,
            0.1300000000000002,
        ];
        let got = periodic_window(Window::Blackman, 6);
        for (g, w) in got.iter().zip(blackman6) {
            assert!((g - w).abs() <= 2e-16, "{got:?}");
        }
        assert_eq!(periodic_window(Window::Boxcar, 3), vec![1.0; 3]);
        assert_eq!(periodic_window(Window::Hann, 1), vec![1.0]);
    }

    #[test]
    fn short_window_is_centred_in_n_fft() {
        // librosa.util.pad_center(get_window('hann', 5), size=8)
        let spec = Spec {
            n_fft: 8,
            win_length: 5,
            hop_length: 4,
            ..Spec::default()
        };
        let want = [
            0.0,
            0.0,
            0.34549150281252633,
            0.9045084971874737,
            0.9045084971874737,
            0.34549150281252633,
            0.0,
            0.0,
        ];
        let got = window_f64(&spec);
        assert_eq!(got.len(), 8);
        for (g, w) in got.iter().zip(want) {
            assert!((g - w).abs() <= 2e-16, "{got:?}");
        }
        assert_eq!(window(&spec).len(), 8);
    }
}

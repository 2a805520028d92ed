//! One row as a PNG: time across (seconds on the axis), bins up (bin 0 at
//! the bottom), values through a viridis-like colour map scaled to the
//! row's own finite range. The `png` crate encodes; the axes (ticks and
//! numbers in a 3×5 pixel font, drawn at twice that size) are drawn here, so
//! no system fonts are needed.
//!
//! Geometry ([`size`]): each frame is `x_scale` pixels wide and each bin
//! `y_scale` high, chosen so that short rows and few bins still give a
//! picture of a useful size, inside fixed margins for the axes.

use std::io::BufWriter;
use std::path::Path;

pub(super) const LEFT: u32 = 44;
const RIGHT: u32 = 10;
pub(super) const TOP: u32 = 16;
const BOTTOM: u32 = 24;
/// Pixels per font pixel.
const FONT: u32 = 2;

/// (x_scale, y_scale): pixels per frame and per bin.
pub fn scales(frames: usize, bins: usize) -> (u32, u32) {
    let x = (400 / frames.max(1)).clamp(1, 8) as u32;
    let y = (256 / bins.max(1)).clamp(1, 8) as u32;
    (x, y)
}

/// The picture's (width, height) for a row of `frames` × `bins`.
pub fn size(frames: usize, bins: usize) -> (u32, u32) {
    let (xs, ys) = scales(frames, bins);
    (
        LEFT + RIGHT + xs * frames as u32,
        TOP + BOTTOM + ys * bins as u32,
    )
}

/// Writes `values` ((frames, bins), frame-major) as a PNG at `out`;
/// `step_s` seconds between frames. Returns (width, height).
pub fn write_png(
    values: &[f32],
    frames: usize,
    bins: usize,
    step_s: f64,
    out: &Path,
) -> std::io::Result<(u32, u32)> {
    let (w, h) = size(frames, bins);
    let mut img = Canvas {
        w,
        h,
        rgb: vec![255; (w * h * 3) as usize],
    };
    img.heatmap(values, frames, bins);
    img.axes(frames, bins, step_s);
    let file = BufWriter::new(std::fs::File::create(out)?);
    let mut enc = png::Encoder::new(file, w, h);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    let mut writer = enc.write_header().map_err(std::io::Error::other)?;
    writer
        .write_image_data(&img.rgb)
        .map_err(std::io::Error::other)?;
    writer.finish().map_err(std::io::Error::other)?;
    Ok((w, h))
}

struct Canvas {
    w: u32,
    h: u32,
    rgb: Vec<u8>,
}

impl Canvas {
    fn set(&mut self, x: u32, y: u32, c: [u8; 3]) {
        if x < self.w && y < self.h {
            let i = ((y * self.w + x) * 3) as usize;
            self.rgb[i..i + 3].copy_from_slice(&c);
        }
    }

    fn heatmap(&mut self, values: &[f32], frames: usize, bins: usize) {
        let (xs, ys) = scales(frames, bins);
        let finite = values.iter().copied().filter(|v| v.is_finite());
        let (lo, hi) = finite.fold((f32::INFINITY, f32::NEG_INFINITY), |(a, b), v| {
            (a.min(v), b.max(v))
        });
        let span = if hi > lo { hi - lo } else { 1.0 };
        for t in 0..frames {
            for b in 0..bins {
                let v = values[t * bins + b];
                let c = if v.is_finite() {
                    colour((v - lo) / span)
                } else {
                    [255, 0, 255]
                };
                let (x0, y0) = (LEFT + t as u32 * xs, TOP + (bins - 1 - b) as u32 * ys);
                for dy in 0..ys {
                    for dx in 0..xs {
                        self.set(x0 + dx, y0 + dy, c);
                    }
                }
            }
        }
    }

    fn axes(&mut self, frames: usize, bins: usize, step_s: f64) {
        let (xs, ys) = scales(frames, bins);
        let (x_end, y_end) = (LEFT + xs * frames as u32, TOP + ys * bins as u32);
        let black = [0, 0, 0];
        for x in LEFT - 1..=x_end {
            self.set(x, y_end, black);
        }
        for y in TOP..=y_end {
            self.set(LEFT - 1, y, black);
        }
        // Seconds: a tick every 1, 2 or 5 × 10^k seconds, about 6 of them.
        let seconds = frames as f64 * step_s;
        let tick_s = nice(seconds / 6.0);
        let mut k = 0u32;
        while (k as f64) * tick_s <= seconds + 1e-9 && tick_s > 0.0 {
            let x = LEFT + ((k as f64 * tick_s / step_s) * xs as f64).round() as u32;
            for dy in 1..4 {
                self.set(x, y_end + dy, black);
            }
            self.text(x.saturating_sub(4), y_end + 6, &number(k as f64 * tick_s));
            k += 1;
        }
        // Bins: every 1, 2 or 5 × 10^k bins.
        let tick_b = nice(bins as f64 / 5.0).max(1.0) as usize;
        for b in (0..bins).step_by(tick_b) {
            let y = TOP + (bins - b) as u32 * ys - ys.div_ceil(2);
            for dx in 2..5 {
                self.set(LEFT - dx, y, black);
            }
            let label = b.to_string();
            let width = label.len() as u32 * 4 * FONT;
            self.text(
                LEFT.saturating_sub(6 + width),
                y.saturating_sub(2 * FONT),
                &label,
            );
        }
        self.text(2, 2, "bin");
        self.text(x_end.saturating_sub(8), 2, "s");
    }

    /// Draws `s` with its top-left corner at (x, y).
    fn text(&mut self, x: u32, y: u32, s: &str) {
        for (i, ch) in s.chars().enumerate() {
            let rows = glyph(ch);
            for (r, bits) in rows.iter().enumerate() {
                for c in 0..3u32 {
                    if bits & (0b100 >> c) != 0 {
                        for d in 0..FONT * FONT {
                            let px = x + (i as u32 * 4 + c) * FONT + d % FONT;
                            let py = y + r as u32 * FONT + d / FONT;
                            self.set(px, py, [0, 0, 0]);
                        }
                    }
                }
            }
        }
    }
}

/// 1, 2 or 5 × 10^k nearest above `x`.
fn nice(x: f64) -> f64 {
    if x <= 0.0 || !x.is_finite() {
        return 1.0;
    }
    let p = 10f64.powf(x.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * p)
        .find(|v| *v >= x)
        .unwrap_or(10.0 * p)
}

/// A tick label: integers plain, else up to two decimals.
fn number(v: f64) -> String {
    let s = format!("{v:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// Rows of a 3×5 glyph, bit 2 leftmost.
fn glyph(c: char) -> [u8; 5] {
    match c {
        '0' => [7, 5, 5, 5, 7],
        '1' => [2, 6, 2, 2, 7],
        '2' => [7, 1, 7, 4, 7],
        '3' => [7, 1, 7, 1, 7],
        '4' => [5, 5, 7, 1, 1],
        '5' => [7, 4, 7, 1, 7],
        '6' => [7, 4, 7, 5, 7],
        '7' => [7, 1, 1, 1, 1],
        '8' => [7, 5, 7, 5, 7],
        '9' => [7, 5, 7, 1, 7],
        '.' => [0, 0, 0, 0, 2],
        's' => [0, 3, 6, 1, 6],
        'b' => [4, 4, 7, 5, 7],
        'i' => [2, 0, 2, 2, 2],
        'n' => [0, 6, 5, 5, 5],
        _ => [0; 5],
    }
}

/// Viridis through five of its colours, linearly between them; `t` in [0, 1].
fn colour(t: f32) -> [u8; 3] {
    const STOPS: [[f32; 3]; 5] = [
        [68.0, 1.0, 84.0],
        [59.0, 82.0, 139.0],
        [33.0, 145.0, 140.0],
        [94.0, 201.0, 98.0],
        [253.0, 231.0, 37.0],
    ];
    let t = t.clamp(0.0, 1.0) * 4.0;
    let k = (t.floor() as usize).min(3);
    let f = t - k as f32;
    let mut c = [0u8; 3];
    for (i, v) in c.iter_mut().enumerate() {
        *v = (STOPS[k][i] + (STOPS[k + 1][i] - STOPS[k][i]) * f).round() as u8;
    }
    c
}

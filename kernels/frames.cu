// melforge GPU kernels for the variable-length recipes: Kaldi fbank and MFCC
// (crates/dsp/src/kaldi/plan.rs) and Whisper's log-mel (crates/dsp/src/whisper.rs). See
// kernels/README.md for the signatures, the launch order and the numerics.
//
// One launch handles a batch of utterances of different lengths: their samples
// lie back to back in one f32 buffer, and FrUtt[u] says where utterance u's
// samples start and which output rows (frames) are its own. Rows of all the
// utterances are numbered 0 .. n_rows in utterance order; a thread finds the
// utterance of its row by binary search over FrUtt.row.
//
// Same rules as mel.cu: no header (NVRTC needs no include path), nothing the host
// shim does not emulate (__shared__, __syncthreads, atomics, warp intrinsics),
// every kernel 1-D and grid-stride, and explicit _rn intrinsics wherever the CPU
// code's rounding must be reproduced (Rust never contracts a*b + c). This file is
// its own NVRTC program and its own host translation unit
// (kernels/host_launch_frames.cpp), so its helpers carry the fr_ prefix.

// One utterance of a batch (= recipe_tables::FrUtt, #[repr(C)], 16 bytes).
struct FrUtt {
    long long sample;  // index of its first sample in `samples`
    int n_samples;     // its samples (Whisper: already cut at 30 s)
    int row;           // its first output row; its rows end at the next one's
};

// f32::EPSILON: Kaldi's floor on energies before the log.
#define FR_FLT_EPSILON 1.1920928955078125e-07f
// Whisper: 30 s at 16 kHz, 400-point frames every 160 samples, 200 reflected
// samples of padding at each end, 3000 output frames.
#define WM_N_SAMPLES 480000
#define WM_N_FFT 400
#define WM_HOP 160
#define WM_PAD 200
#define WM_N_FRAMES 3000

__device__ __forceinline__ long long fr_first_index() {
    return (long long)blockIdx.x * blockDim.x + threadIdx.x;
}

__device__ __forceinline__ long long fr_stride() {
    return (long long)blockDim.x * gridDim.x;
}

// The utterance that owns row `row`: the last u with utts[u].row <= row (an
// utterance with no rows shares its start with the next one, which owns it).
__device__ __forceinline__ int fr_utt_of_row(const FrUtt* utts, int n_utts, long long row) {
    int lo = 0;
    int hi = n_utts - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if ((long long)utts[mid].row <= row) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    return lo;
}

// Rows of utterance u: utts has n_utts + 1 entries, the last one's row = n_rows.
__device__ __forceinline__ int fr_rows_of(const FrUtt* utts, int u) {
    return utts[u + 1].row - utts[u].row;
}

// ln(max(Σ x², ε)) over n values, summed left to right as the CPU's iterator sum
// (which starts from -0.0).
__device__ __forceinline__ float kf_log_energy(const float* x, int n) {
    float sum = -0.0f;
    for (int i = 0; i < n; ++i) {
        sum = __fadd_rn(sum, __fmul_rn(x[i], x[i]));
    }
    return logf(fmaxf(sum, FR_FLT_EPSILON));
}

// Sample index (inside the utterance) of frame f's k-th sample: snip_edges, or
// Kaldi's centred frames with reflection at both ends (n >= 1).
__device__ __forceinline__ long long kf_sample_index(int f, int k, int n, int window_size,
                                                     int window_shift, int snip_edges) {
    if (snip_edges) {
        return (long long)f * window_shift + k;
    }
    long long s = (long long)f * window_shift + window_shift / 2 - window_size / 2 + k;
    while (s < 0 || s >= n) {
        s = s < 0 ? -s - 1 : 2 * (long long)n - 1 - s;
    }
    return s;
}

// Kaldi: samples -> FFT input f32 [n_rows][padded] and the log energy f32
// [n_rows], one thread per frame (the mean, the energy and the pre-emphasis are
// sequential in the CPU code and are reproduced in its order): extract × scale,
// − mean, raw energy, pre-emphasis, window, windowed energy, floor, zero pad.
// dither must be 0 (the host wrappers refuse anything else).
extern "C" __global__ void kf_frame(const float* __restrict__ samples,
                                    const FrUtt* __restrict__ utts, int n_utts, int n_rows,
                                    int window_size, int window_shift, int padded,
                                    int snip_edges, float sample_scale, int remove_dc_offset,
                                    float preemph, int raw_energy, float log_energy_floor,
                                    const float* __restrict__ window,
                                    float* __restrict__ frames, float* __restrict__ energy) {
    for (long long row = fr_first_index(); row < n_rows; row += fr_stride()) {
        int u = fr_utt_of_row(utts, n_utts, row);
        FrUtt utt = utts[u];
        int f = (int)(row - utt.row);
        const float* in = samples + utt.sample;
        float* x = frames + row * padded;
        for (int k = 0; k < window_size; ++k) {
            long long s = kf_sample_index(f, k, utt.n_samples, window_size, window_shift,
                                          snip_edges);
            x[k] = __fmul_rn(in[s], sample_scale);
        }
        for (int k = window_size; k < padded; ++k) {
            x[k] = 0.0f;
        }
        if (remove_dc_offset) {
            float sum = -0.0f;
            for (int k = 0; k < window_size; ++k) {
                sum = __fadd_rn(sum, x[k]);
            }
            float mean = __fdiv_rn(sum, (float)window_size);
            for (int k = 0; k < window_size; ++k) {
                x[k] = __fadd_rn(x[k], -mean);
            }
        }
        float e = raw_energy ? kf_log_energy(x, window_size) : 0.0f;
        if (preemph != 0.0f) {
            for (int k = window_size - 1; k >= 1; --k) {
                x[k] = __fadd_rn(x[k], -__fmul_rn(preemph, x[k - 1]));
            }
            x[0] = __fadd_rn(x[0], -__fmul_rn(preemph, x[0]));
        }
        for (int k = 0; k < window_size; ++k) {
            x[k] = __fmul_rn(x[k], window[k]);
        }
        if (!raw_energy) {
            e = kf_log_energy(x, window_size);
        }
        // log_energy_floor = -inf when energy_floor is 0 (no floor).
        energy[row] = fmaxf(e, log_energy_floor);
    }
}

// Kaldi: spectrum (interleaved re, im f32 [n_rows][n_bins], the R2C output) ->
// mel energies, |X|² (or |X| when use_power = 0) of the bins below Nyquist, the
// band's weights summed left to right, ln(max(·, ε)) when use_log. Written to
// out[row · out_stride + out_col + m]; when energy_col >= 0 the thread of band 0
// also writes energy[row] to out[row · out_stride + energy_col] (fbank's energy
// column). total = n_rows · n_mels.
extern "C" __global__ void kf_power_mel_log(const float* __restrict__ spectrum, int n_rows,
                                            int n_bins, int n_mels,
                                            const int* __restrict__ band_first,
                                            const int* __restrict__ band_len,
                                            const int* __restrict__ band_offset,
                                            const float* __restrict__ band_weights,
                                            int use_power, int use_log,
                                            const float* __restrict__ energy, int energy_col,
                                            int out_stride, int out_col,
                                            float* __restrict__ out) {
    long long total = (long long)n_rows * n_mels;
    for (long long i = fr_first_index(); i < total; i += fr_stride()) {
        int m = (int)(i % n_mels);
        long long row = i / n_mels;
        const float* x = spectrum + row * n_bins * 2;
        const float* w = band_weights + band_offset[m];
        int first = band_first[m];
        float mel = -0.0f;
        for (int c = 0; c < band_len[m]; ++c) {
            const float* bin = x + 2 * (first + c);
            float p = __fadd_rn(__fmul_rn(bin[0], bin[0]), __fmul_rn(bin[1], bin[1]));
            if (!use_power) {
                p = sqrtf(p);
            }
            mel = __fadd_rn(mel, __fmul_rn(p, w[c]));
        }
        if (use_log) {
            mel = logf(fmaxf(mel, FR_FLT_EPSILON));
        }
        float* o = out + row * out_stride;
        o[out_col + m] = mel;
        if (m == 0 && energy_col >= 0) {
            o[energy_col] = energy[row];
        }
    }
}

// Kaldi MFCC: log mel f32 [n_rows][n_mels] -> cepstra f32 [n_rows][num_ceps]:
// row k of `dct` (num_ceps × n_mels, lifter applied) times the mel row, summed
// left to right; C0 := energy[row] when use_energy. total = n_rows · num_ceps.
extern "C" __global__ void kf_dct(const float* __restrict__ mel, int n_rows, int n_mels,
                                  int num_ceps, const float* __restrict__ dct,
                                  int use_energy, const float* __restrict__ energy,
                                  float* __restrict__ out) {
    long long total = (long long)n_rows * num_ceps;
    for (long long i = fr_first_index(); i < total; i += fr_stride()) {
        int k = (int)(i % num_ceps);
        long long row = i / num_ceps;
        const float* x = mel + row * n_mels;
        const float* d = dct + (long long)k * n_mels;
        float c = -0.0f;
        for (int j = 0; j < n_mels; ++j) {
            c = __fadd_rn(c, __fmul_rn(d[j], x[j]));
        }
        if (k == 0 && use_energy) {
            c = energy[row];
        }
        out[i] = c;
    }
}

// Whisper: samples -> windowed frames f64 [n_rows][400] (the D2Z input). Frame t
// of an utterance of n samples reads sample 160t + k of the extractor's signal:
// the audio zero-padded to 30 s, reflected by 200 at both ends. total = n_rows ·
// 400.
extern "C" __global__ void wm_frame(const float* __restrict__ samples,
                                    const FrUtt* __restrict__ utts, int n_utts, int n_rows,
                                    const double* __restrict__ window,
                                    double* __restrict__ frames) {
    long long total = (long long)n_rows * WM_N_FFT;
    for (long long i = fr_first_index(); i < total; i += fr_stride()) {
        int k = (int)(i % WM_N_FFT);
        long long row = i / WM_N_FFT;
        FrUtt utt = utts[fr_utt_of_row(utts, n_utts, row)];
        long long p = (row - utt.row) * WM_HOP + k;
        long long j;
        if (p < WM_PAD) {
            j = WM_PAD - p;
        } else if (p - WM_PAD < WM_N_SAMPLES) {
            j = p - WM_PAD;
        } else {
            j = 2 * (long long)(WM_N_SAMPLES - 1) - (p - WM_PAD);
        }
        float s = j < utt.n_samples ? samples[utt.sample + j] : 0.0f;
        frames[i] = __dmul_rn((double)s, window[k]);
    }
}

// Whisper: spectrum (interleaved re, im f64 [n_rows][201]) -> log-mel f32
// [n_rows][n_mels]: each bin rounded to complex64 then squared in f64 (the
// extractor's dtypes), the slaney band's f64 weights summed left to right,
// log10(max(1e-10, ·)) rounded to f32. total = n_rows · n_mels.
extern "C" __global__ void wm_power_mel_log(const double* __restrict__ spectrum, int n_rows,
                                            int n_bins, int n_mels,
                                            const int* __restrict__ band_first,
                                            const int* __restrict__ band_len,
                                            const int* __restrict__ band_offset,
                                            const double* __restrict__ band_weights,
                                            float* __restrict__ out) {
    long long total = (long long)n_rows * n_mels;
    for (long long i = fr_first_index(); i < total; i += fr_stride()) {
        int m = (int)(i % n_mels);
        long long row = i / n_mels;
        const double* x = spectrum + row * n_bins * 2;
        const double* w = band_weights + band_offset[m];
        int first = band_first[m];
        double mel = -0.0;
        for (int c = 0; c < band_len[m]; ++c) {
            const double* bin = x + 2 * (first + c);
            double re = (double)(float)bin[0];
            double im = (double)(float)bin[1];
            double p = __dadd_rn(__dmul_rn(re, re), __dmul_rn(im, im));
            mel = __dadd_rn(mel, __dmul_rn(p, w[c]));
        }
        out[i] = (float)log10(fmax(mel, 1e-10));
    }
}

// Whisper: partial maxima of each utterance's log-mel values, partial f32
// [n_utts][parts] (values row-major [n_rows][n_mels]; -inf for an utterance
// without rows). Two passes (this, then wm_max) instead of a shared-memory
// reduction, as mel.cu's mf_clip_max_part: max is exact in any order.
extern "C" __global__ void wm_max_part(const float* __restrict__ values,
                                       const FrUtt* __restrict__ utts, int n_utts, int n_mels,
                                       int parts, float* __restrict__ partial) {
    long long total = (long long)n_utts * parts;
    for (long long i = fr_first_index(); i < total; i += fr_stride()) {
        int u = (int)(i / parts);
        int p = (int)(i % parts);
        const float* v = values + (long long)utts[u].row * n_mels;
        long long n = (long long)fr_rows_of(utts, u) * n_mels;
        float m = -__int_as_float(0x7f800000);  // -inf
        for (long long k = p; k < n; k += parts) {
            m = fmaxf(m, v[k]);
        }
        partial[i] = m;
    }
}

// Whisper: per utterance, M = max of its partial maxima, and of log10(1e-10)
// (`floor_log`, every bin of the all-zero frames) when it has fewer than 3000
// frames; clamp[u] = M − 8 and pad[u] = (max(floor_log, clamp) + 4) / 4, the
// value of every frame past the stored ones. total = n_utts.
extern "C" __global__ void wm_max(const float* __restrict__ partial,
                                  const FrUtt* __restrict__ utts, int n_utts, int parts,
                                  float floor_log, float* __restrict__ clamp,
                                  float* __restrict__ pad) {
    for (long long u = fr_first_index(); u < n_utts; u += fr_stride()) {
        const float* v = partial + u * parts;
        float m = -__int_as_float(0x7f800000);  // -inf
        for (int k = 0; k < parts; ++k) {
            m = fmaxf(m, v[k]);
        }
        if (fr_rows_of(utts, (int)u) < WM_N_FRAMES) {
            m = fmaxf(m, floor_log);
        }
        float c = __fadd_rn(m, -8.0f);
        clamp[u] = c;
        pad[u] = __fdiv_rn(__fadd_rn(fmaxf(floor_log, c), 4.0f), 4.0f);
    }
}

// Whisper: values = (max(values, clamp[utterance]) + 4) / 4 in place.
// total = n_rows · n_mels.
extern "C" __global__ void wm_clamp_scale(float* __restrict__ values,
                                          const FrUtt* __restrict__ utts, int n_utts,
                                          int n_rows, int n_mels,
                                          const float* __restrict__ clamp) {
    long long total = (long long)n_rows * n_mels;
    for (long long i = fr_first_index(); i < total; i += fr_stride()) {
        int u = fr_utt_of_row(utts, n_utts, i / n_mels);
        values[i] = __fdiv_rn(__fadd_rn(fmaxf(values[i], clamp[u]), 4.0f), 4.0f);
    }
}

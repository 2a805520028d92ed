// melforge GPU kernels: WAV bytes -> log-mel rows, equal to the CPU backend
// (src/mel/plan.rs, src/wav/mod.rs). See kernels/README.md for the signatures,
// the launch order and the numerics.
//
// One source, two compilers: NVRTC on the device (no header is included, so no
// include path is needed), g++ on the host through kernels/host_launch.cpp, which
// includes kernels/shim/host_cuda.h first (it defines MF_HOST_SHIM). Keep this
// file free of host-only constructs and of anything the shim does not emulate
// (__shared__, __syncthreads, atomics, warp intrinsics).
//
// Every kernel is 1-D and grid-stride: any grid and block size is correct.
// Arithmetic whose rounding matters uses the _rn intrinsics so that no compiler
// contracts a*b+c into an FMA: the Rust code never contracts, and we round as it
// does.

#ifndef MF_HOST_SHIM
// float -> IEEE binary16 bits, round to nearest even (no cuda_fp16.h needed).
__device__ __forceinline__ unsigned short mf_f32_to_f16_bits(float x) {
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(x));
    return h;
}
#endif

// Sample formats (= tables::FORMAT_*).
#define MF_U8 1
#define MF_I16 2
#define MF_I24 3
#define MF_I32 4
#define MF_F32 5
#define MF_F64 6

// One file of a batch (= tables::MfFile, #[repr(C)], 16 bytes).
struct MfFile {
    unsigned long long data;  // byte offset of the first sample in `bytes`
    unsigned int frames;      // sample frames in the data chunk
    unsigned short channels;  // >= 1
    unsigned short format;    // MF_U8 .. MF_F64
};

// 10 / ln(10).
#define MF_DB_PER_NEPER 4.342944819032518
#define MF_LN_2 0.6931471805599453
#define MF_SQRT_2 1.4142135623730951
// f32::MIN_POSITIVE (smallest normal float).
#define MF_FLT_MIN_NORMAL 1.17549435082228750797e-38f

__device__ __forceinline__ long long mf_first_index() {
    return (long long)blockIdx.x * blockDim.x + threadIdx.x;
}

__device__ __forceinline__ long long mf_stride() {
    return (long long)blockDim.x * gridDim.x;
}

__device__ __forceinline__ unsigned int mf_le32(const unsigned char* p) {
    return (unsigned int)p[0] | ((unsigned int)p[1] << 8) | ((unsigned int)p[2] << 16) |
           ((unsigned int)p[3] << 24);
}

// One channel's sample at p, scaled as wav::decode_mono_into does.
__device__ __forceinline__ float mf_sample(const unsigned char* p, int format) {
    switch (format) {
        case MF_U8:
            // (v - 128) * 2^-7; both steps exact.
            return __fmul_rn((float)p[0] - 128.0f, 0.0078125f);
        case MF_I16: {
            short v = (short)(unsigned short)((unsigned int)p[0] | ((unsigned int)p[1] << 8));
            return __fmul_rn((float)v, 3.0517578125e-05f);  // 2^-15
        }
        case MF_I24: {
            // The 24-bit value in the top bytes of an i32 is v * 2^8; * 2^-31 = v / 2^23.
            int v = (int)(((unsigned int)p[0] << 8) | ((unsigned int)p[1] << 16) |
                          ((unsigned int)p[2] << 24));
            return __fmul_rn((float)v, 4.656612873077393e-10f);  // 2^-31
        }
        case MF_I32:
            return __fmul_rn((float)(int)mf_le32(p), 4.656612873077393e-10f);
        case MF_F32:
            return __int_as_float((int)mf_le32(p));
        case MF_F64: {
            unsigned long long bits =
                (unsigned long long)mf_le32(p) | ((unsigned long long)mf_le32(p + 4) << 32);
            return (float)__longlong_as_double((long long)bits);
        }
        default:
            return 0.0f;
    }
}

__device__ __forceinline__ int mf_bytes_per_sample(int format) {
    switch (format) {
        case MF_U8: return 1;
        case MF_I16: return 2;
        case MF_I24: return 3;
        case MF_I32:
        case MF_F32: return 4;
        case MF_F64: return 8;
        default: return 0;
    }
}

// bytes -> clips f32 [n_files][clip_samples]: mean of the channels (f32 sum from
// channel 0, then / channels), zeros past the end of the data.
extern "C" __global__ void mf_decode(const unsigned char* __restrict__ bytes,
                                     const MfFile* __restrict__ files, int n_files,
                                     int clip_samples, float* __restrict__ clips) {
    long long total = (long long)n_files * clip_samples;
    for (long long i = mf_first_index(); i < total; i += mf_stride()) {
        int b = (int)(i / clip_samples);
        int t = (int)(i % clip_samples);
        MfFile f = files[b];
        int width = mf_bytes_per_sample(f.format);
        float v = 0.0f;
        if ((unsigned int)t < f.frames && width > 0 && f.channels > 0) {
            const unsigned char* p =
                bytes + f.data + (unsigned long long)t * f.channels * (unsigned int)width;
            float sum = mf_sample(p, f.format);
            for (int c = 1; c < f.channels; ++c) {
                sum = __fadd_rn(sum, mf_sample(p + c * width, f.format));
            }
            v = f.channels == 1 ? sum : __fdiv_rn(sum, (float)f.channels);
        }
        clips[i] = v;
    }
}

// clips -> windowed frames f64 [n_files][n_distinct][n_fft] (the D2Z input).
extern "C" __global__ void mf_frame(const float* __restrict__ clips, int n_files,
                                    int clip_samples, int n_distinct, int n_fft,
                                    const int* __restrict__ frame_start,
                                    const int* __restrict__ frame_pattern,
                                    const int* __restrict__ patterns,
                                    const double* __restrict__ window,
                                    double* __restrict__ frames) {
    long long total = (long long)n_files * n_distinct * n_fft;
    for (long long i = mf_first_index(); i < total; i += mf_stride()) {
        int j = (int)(i % n_fft);
        long long row = i / n_fft;
        int d = (int)(row % n_distinct);
        int b = (int)(row / n_distinct);
        int pattern = frame_pattern[d];
        int k = pattern < 0 ? j : patterns[(long long)pattern * n_fft + j];
        double v = 0.0;
        if (k >= 0) {
            float s = clips[(long long)b * clip_samples + frame_start[d] + k];
            v = __dmul_rn(window[j], (double)s);
        }
        frames[i] = v;
    }
}

// |X|^power of one bin, rounded to f32 as mel::Plan::power_spectrum.
__device__ __forceinline__ float mf_power(const double* x, double power) {
    double re = x[0];
    double im = x[1];
    double sq = __dadd_rn(__dmul_rn(re, re), __dmul_rn(im, im));
    if (power == 2.0) {
        return (float)sq;
    }
    if (power == 1.0) {
        return (float)sqrt(sq);
    }
    float mag = (float)sqrt(sq);
    return (float)pow((double)mag, power);
}

// ln(x) for a positive, finite, normal float: mel::plan::ln_normal_f32, operation
// for operation.
__device__ __forceinline__ double mf_ln_normal(float x) {
    unsigned int bits = __float_as_uint(x);
    int e = (int)((bits >> 23) & 0xffu) - 127;
    double m = (double)__int_as_float((int)((bits & 0x007fffffu) | 0x3f800000u));
    int big = m > MF_SQRT_2;
    if (big) {
        m = __dmul_rn(m, 0.5);
    }
    double ed = (double)(e + big);
    double s = __ddiv_rn(__dadd_rn(m, -1.0), __dadd_rn(m, 1.0));
    double s2 = __dmul_rn(s, s);
    double series = __dadd_rn(2.0 / 9.0, __dmul_rn(s2, 2.0 / 11.0));
    series = __dadd_rn(2.0 / 7.0, __dmul_rn(s2, series));
    series = __dadd_rn(2.0 / 5.0, __dmul_rn(s2, series));
    series = __dadd_rn(2.0 / 3.0, __dmul_rn(s2, series));
    series = __dadd_rn(2.0, __dmul_rn(s2, series));
    return __dadd_rn(__dmul_rn(ed, MF_LN_2), __dmul_rn(s, series));
}

// spectrum (interleaved re, im f64 [n_rows][n_bins]) -> dB f32 [n_rows][n_mels].
extern "C" __global__ void mf_power_mel_db(const double* __restrict__ spectrum, int n_rows,
                                           int n_bins, int n_mels,
                                           const int* __restrict__ band_first,
                                           const int* __restrict__ band_len,
                                           const int* __restrict__ band_offset,
                                           const float* __restrict__ band_weights,
                                           double power, float amin, double ref_db,
                                           float* __restrict__ db) {
    long long total = (long long)n_rows * n_mels;
    for (long long i = mf_first_index(); i < total; i += mf_stride()) {
        int m = (int)(i % n_mels);
        long long row = i / n_mels;
        const double* x = spectrum + row * n_bins * 2;
        const float* w = band_weights + band_offset[m];
        int first = band_first[m];
        int len = band_len[m];
        // 8 partial sums, as SparseFilterbank::apply.
        float acc[8];
        for (int j = 0; j < 8; ++j) {
            acc[j] = 0.0f;
        }
        for (int c = 0; c < len; c += 8) {
            for (int j = 0; j < 8; ++j) {
                int k = first + c + j;
                float p = k < n_bins ? mf_power(x + 2 * k, power) : 0.0f;
                acc[j] = __fadd_rn(acc[j], __fmul_rn(w[c + j], p));
            }
        }
        float mel = acc[0];
        for (int j = 1; j < 8; ++j) {
            mel = __fadd_rn(mel, acc[j]);
        }
        float v = fmaxf(mel, amin);
        double ln = amin >= MF_FLT_MIN_NORMAL ? mf_ln_normal(v) : log((double)v);
        float d = (float)__dmul_rn(ln, MF_DB_PER_NEPER);
        if (ref_db != 0.0) {
            d = (float)__dadd_rn((double)d, -ref_db);
        }
        db[i] = d;
    }
}

// Partial maxima of each file's dB values, in parallel: partial f32
// [n_files][parts], partial[b][p] = max of db[b][p], db[b][p + parts], … .
// mf_clip_max over `partial` (per_file = parts) then gives each file's maximum.
// Two passes instead of a shared-memory block reduction, so the host shim (no
// __shared__, no barriers) runs the same source; max is exact, so any
// reduction order gives the same value as one thread per file.
extern "C" __global__ void mf_clip_max_part(const float* __restrict__ db, int n_files,
                                            int per_file, int parts,
                                            float* __restrict__ partial) {
    long long total = (long long)n_files * parts;
    for (long long i = mf_first_index(); i < total; i += mf_stride()) {
        long long b = i / parts;
        int p = (int)(i % parts);
        const float* v = db + b * per_file;
        float m = -__int_as_float(0x7f800000);  // -inf
        for (int k = p; k < per_file; k += parts) {
            m = fmaxf(m, v[k]);
        }
        partial[i] = m;
    }
}

// Maximum of each file's values: clip_max f32 [n_files]. One thread per file
// over `per_file` values (the `parts` partial maxima of mf_clip_max_part).
extern "C" __global__ void mf_clip_max(const float* __restrict__ db, int n_files, int per_file,
                                       float* __restrict__ clip_max) {
    for (long long b = mf_first_index(); b < n_files; b += mf_stride()) {
        const float* v = db + b * per_file;
        float m = -__int_as_float(0x7f800000);  // -inf
        for (int k = 0; k < per_file; ++k) {
            m = fmaxf(m, v[k]);
        }
        clip_max[b] = m;
    }
}

// db = max(db, clip_max[file] - top_db), in place.
extern "C" __global__ void mf_top_db(float* __restrict__ db, int n_files, int per_file,
                                     const float* __restrict__ clip_max, float top_db) {
    long long total = (long long)n_files * per_file;
    for (long long i = mf_first_index(); i < total; i += mf_stride()) {
        float floor_db = __fadd_rn(clip_max[i / per_file], -top_db);
        db[i] = fmaxf(db[i], floor_db);
    }
}

// Distinct frames -> output rows f32 [n_files][row_len], each row
// [n_segments][n_mels][n_frames]; column[seg * n_frames + f] names the distinct
// frame of output column (seg, f).
extern "C" __global__ void mf_scatter(const float* __restrict__ db, int n_files, int n_distinct,
                                      int n_mels, int n_frames, int n_segments,
                                      const int* __restrict__ column, float* __restrict__ out) {
    long long per_seg = (long long)n_mels * n_frames;
    long long row_len = per_seg * n_segments;
    long long total = row_len * n_files;
    for (long long i = mf_first_index(); i < total; i += mf_stride()) {
        long long b = i / row_len;
        long long r = i % row_len;
        long long seg = r / per_seg;
        int m = (int)((r % per_seg) / n_frames);
        int f = (int)(r % n_frames);
        int d = column[seg * n_frames + f];
        out[i] = db[(b * n_distinct + d) * n_mels + m];
    }
}

// f32 -> IEEE binary16 bits, round to nearest even.
extern "C" __global__ void mf_to_f16(const float* __restrict__ in, long long n,
                                     unsigned short* __restrict__ out) {
    for (long long i = mf_first_index(); i < n; i += mf_stride()) {
        out[i] = mf_f32_to_f16_bits(in[i]);
    }
}

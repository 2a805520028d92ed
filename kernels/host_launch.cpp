// Host build of kernels/mel.cu: the shim first, then the real kernel source, then
// one `extern "C" void host_<kernel>(dim3 grid, dim3 block, params...)` per kernel
// (src/compute/cuda/testing/host.rs declares and calls them). Compiled by build.rs.
#include "shim/host_cuda.h"

#include "mel.cu"

// MF_HOST_KERNEL(name, (typed params), (argument names)) defines host_<name>.
#define MF_UNPAREN(...) __VA_ARGS__
#define MF_HOST_KERNEL(name, params, args)                               \
    extern "C" void host_##name(dim3 grid, dim3 block, MF_UNPAREN params) { \
        mf_host_launch(grid, block, name, MF_UNPAREN args);              \
    }

MF_HOST_KERNEL(mf_decode,
               (const unsigned char* bytes, const MfFile* files, int n_files, int clip_samples,
                float* clips),
               (bytes, files, n_files, clip_samples, clips))

MF_HOST_KERNEL(mf_frame,
               (const float* clips, int n_files, int clip_samples, int n_distinct, int n_fft,
                const int* frame_start, const int* frame_pattern, const int* patterns,
                const double* window, double* frames),
               (clips, n_files, clip_samples, n_distinct, n_fft, frame_start, frame_pattern,
                patterns, window, frames))

MF_HOST_KERNEL(mf_power_mel_db,
               (const double* spectrum, int n_rows, int n_bins, int n_mels,
                const int* band_first, const int* band_len, const int* band_offset,
                const float* band_weights, double power, float amin, double ref_db, float* db),
               (spectrum, n_rows, n_bins, n_mels, band_first, band_len, band_offset,
                band_weights, power, amin, ref_db, db))

MF_HOST_KERNEL(mf_clip_max_part,
               (const float* db, int n_files, int per_file, int parts, float* partial),
               (db, n_files, per_file, parts, partial))

MF_HOST_KERNEL(mf_clip_max, (const float* db, int n_files, int per_file, float* clip_max),
               (db, n_files, per_file, clip_max))

MF_HOST_KERNEL(mf_top_db,
               (float* db, int n_files, int per_file, const float* clip_max, float top_db),
               (db, n_files, per_file, clip_max, top_db))

MF_HOST_KERNEL(mf_scatter,
               (const float* db, int n_files, int n_distinct, int n_mels, int n_frames,
                int n_segments, const int* column, float* out),
               (db, n_files, n_distinct, n_mels, n_frames, n_segments, column, out))

MF_HOST_KERNEL(mf_to_f16, (const float* in, long long n, unsigned short* out), (in, n, out))

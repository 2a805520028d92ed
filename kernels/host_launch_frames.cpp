// Host build of kernels/frames.cu (the Kaldi and Whisper kernels): the shim first,
// then the kernel source, then one `extern "C" void host_<kernel>(dim3 grid, dim3
// block, params...)` per kernel (src/compute/cuda/testing/host_recipes.rs declares
// and calls them). Its own translation unit, as frames.cu is its own NVRTC
// program. Compiled by build.rs.
#include "shim/host_cuda.h"

#include "frames.cu"

// FR_HOST_KERNEL(name, (typed params), (argument names)) defines host_<name>.
#define FR_UNPAREN(...) __VA_ARGS__
#define FR_HOST_KERNEL(name, params, args)                               \
    extern "C" void host_##name(dim3 grid, dim3 block, FR_UNPAREN params) { \
        mf_host_launch(grid, block, name, FR_UNPAREN args);              \
    }

FR_HOST_KERNEL(kf_frame,
               (const float* samples, const FrUtt* utts, int n_utts, int n_rows, int window_size,
                int window_shift, int padded, int snip_edges, float sample_scale,
                int remove_dc_offset, float preemph, int raw_energy, float log_energy_floor,
                const float* window, float* frames, float* energy),
               (samples, utts, n_utts, n_rows, window_size, window_shift, padded, snip_edges,
                sample_scale, remove_dc_offset, preemph, raw_energy, log_energy_floor, window,
                frames, energy))

FR_HOST_KERNEL(kf_power_mel_log,
               (const float* spectrum, int n_rows, int n_bins, int n_mels, const int* band_first,
                const int* band_len, const int* band_offset, const float* band_weights,
                int use_power, int use_log, const float* energy, int energy_col, int out_stride,
                int out_col, float* out),
               (spectrum, n_rows, n_bins, n_mels, band_first, band_len, band_offset, band_weights,
                use_power, use_log, energy, energy_col, out_stride, out_col, out))

FR_HOST_KERNEL(kf_dct,
               (const float* mel, int n_rows, int n_mels, int num_ceps, const float* dct,
                int use_energy, const float* energy, float* out),
               (mel, n_rows, n_mels, num_ceps, dct, use_energy, energy, out))

FR_HOST_KERNEL(wm_frame,
               (const float* samples, const FrUtt* utts, int n_utts, int n_rows,
                const double* window, double* frames),
               (samples, utts, n_utts, n_rows, window, frames))

FR_HOST_KERNEL(wm_power_mel_log,
               (const double* spectrum, int n_rows, int n_bins, int n_mels, const int* band_first,
                const int* band_len, const int* band_offset, const double* band_weights,
                float* out),
               (spectrum, n_rows, n_bins, n_mels, band_first, band_len, band_offset, band_weights,
                out))

FR_HOST_KERNEL(wm_max_part,
               (const float* values, const FrUtt* utts, int n_utts, int n_mels, int parts,
                float* partial),
               (values, utts, n_utts, n_mels, parts, partial))

FR_HOST_KERNEL(wm_max,
               (const float* partial, const FrUtt* utts, int n_utts, int parts, float floor_log,
                float* clamp, float* pad),
               (partial, utts, n_utts, parts, floor_log, clamp, pad))

FR_HOST_KERNEL(wm_clamp_scale,
               (float* values, const FrUtt* utts, int n_utts, int n_rows, int n_mels,
                const float* clamp),
               (values, utts, n_utts, n_rows, n_mels, clamp))

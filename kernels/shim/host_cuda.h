// Host emulation of the CUDA subset kernels/mel.cu uses, so g++ compiles the real
// kernel source for the CPU (kernels/host_launch.cpp includes this, then mel.cu).
//
// Supported: __global__/__device__/__host__/__forceinline__/__restrict__; dim3,
// uint3 and thread-local threadIdx/blockIdx/blockDim/gridDim; the _rn rounding
// intrinsics (plain IEEE operations here: the host build uses
// -ffp-contract=off, so nothing is fused); bit casts; <cmath> math;
// mf_f32_to_f16_bits (software round-to-nearest-even); mf_host_launch, which runs
// a kernel for every block and thread of a grid, sequentially on the caller's
// thread.
//
// Not supported: __shared__, __syncthreads, warp intrinsics, atomics. A sequential
// launch cannot emulate a barrier; a kernel that needs one must not be added
// without extending this shim.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#define MF_HOST_SHIM 1

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __restrict__ __restrict

struct uint3 {
    unsigned int x, y, z;
};

struct dim3 {
    unsigned int x, y, z;
};

// The launch geometry seen by the kernel body; thread-local so tests may launch
// from several threads at once.
static thread_local uint3 threadIdx;
static thread_local uint3 blockIdx;
static thread_local dim3 blockDim;
static thread_local dim3 gridDim;

using std::fmaxf;
using std::log;
using std::pow;
using std::sqrt;

inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __ddiv_rn(double a, double b) { return a / b; }

inline float __int_as_float(int v) {
    float f;
    std::memcpy(&f, &v, sizeof f);
    return f;
}

inline unsigned int __float_as_uint(float f) {
    unsigned int v;
    std::memcpy(&v, &f, sizeof v);
    return v;
}

inline double __longlong_as_double(long long v) {
    double d;
    std::memcpy(&d, &v, sizeof d);
    return d;
}

// float -> IEEE binary16 bits, round to nearest even (what cvt.rn.f16.f32 does):
// overflow to infinity, gradual underflow to subnormals, NaN stays NaN (quiet).
inline unsigned short mf_f32_to_f16_bits(float x) {
    uint32_t f = __float_as_uint(x);
    uint32_t sign = (f >> 16) & 0x8000u;
    uint32_t exp = (f >> 23) & 0xffu;
    uint32_t man = f & 0x7fffffu;
    if (exp == 0xffu) {
        // Infinity, or NaN with the top payload bits kept and the quiet bit set.
        return (unsigned short)(sign | 0x7c00u | (man ? (0x0200u | (man >> 13)) : 0u));
    }
    int e = (int)exp - 127 + 15;  // biased half exponent
    if (e >= 0x1f) {
        return (unsigned short)(sign | 0x7c00u);
    }
    if (e <= 0) {
        // Subnormal half (or zero): value = man_full * 2^(exp-150); the half ulp is
        // 2^-24, so shift the 24-bit significand right by (1 - e) + 13.
        if (e < -10) {
            return (unsigned short)sign;  // below half the smallest subnormal
        }
        uint32_t full = man | 0x800000u;
        int shift = 14 - e;
        uint32_t q = full >> shift;
        uint32_t rem = full & ((1u << shift) - 1u);
        uint32_t halfway = 1u << (shift - 1);
        if (rem > halfway || (rem == halfway && (q & 1u))) {
            q += 1;  // may carry into the smallest normal: still correct bits
        }
        return (unsigned short)(sign | q);
    }
    uint32_t q = ((uint32_t)e << 10) | (man >> 13);
    uint32_t rem = man & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (q & 1u))) {
        q += 1;  // a carry into the exponent rounds up to the next binade or to inf
    }
    return (unsigned short)(sign | q);
}

// Runs `kernel(args...)` once per thread of `grid` x `block`, blocks and threads in
// order. Kernels must not depend on other threads (no shared memory, barriers).
template <typename... P, typename... A>
inline void mf_host_launch(dim3 grid, dim3 block, void (*kernel)(P...), A... args) {
    gridDim = grid;
    blockDim = block;
    for (unsigned int bz = 0; bz < grid.z; ++bz)
        for (unsigned int by = 0; by < grid.y; ++by)
            for (unsigned int bx = 0; bx < grid.x; ++bx)
                for (unsigned int tz = 0; tz < block.z; ++tz)
                    for (unsigned int ty = 0; ty < block.y; ++ty)
                        for (unsigned int tx = 0; tx < block.x; ++tx) {
                            blockIdx = uint3{bx, by, bz};
                            threadIdx = uint3{tx, ty, tz};
                            kernel(args...);
                        }
}

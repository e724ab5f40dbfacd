/* mxu_int.h — internals shared by mxu.c, mxu_ref.c and the AVX2 and AVX-512 code (not for
 * callers outside accel/).
 *
 * Packed layouts used by the fast kernel:
 *   A panel (MR rows of op(X) x kc): element (i, k) at a[i * ais + k * aks]; "row panels"
 *     [MR][kc] (ais = kc, aks = 1) when op(X) rows are contiguous (no transpose), "k-major"
 *     [kc][MR] (ais = 1, aks = MR) when X is transposed. Rows past mr are zero.
 *   B panel (kc x NR columns of op(W)): [kc][NR], columns past nr zero.
 * K is never padded (see mxu.c). */
#ifndef TF_MXU_INT_H
#define TF_MXU_INT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "accel/mxu.h"

/* Register block of the microkernels: MR rows of op(X) by NR columns of op(W). */
#define TF_MXU_MR 6
#define TF_MXU_NR 16

/* Microkernel flags: the kc block starts at k = 0 (C is +0 before its first tile and is not
 * read), or ends at k = K (NaN results are written as 0x7FC00000). */
enum { TF_MXU_FIRST = 1, TF_MXU_LAST = 2, TF_MXU_SOFT_FTZ = 4 /* portable kernel: flush */ };

/* Flush-to-zero in software, as MXCSR.FTZ does to a result: a subnormal becomes a zero of its
 * sign. The portable kernel, the reference and the all-reduce apply it to every fma and add
 * result in TPU mode, so builds without an MXCSR (non-x86) flush the same way. (One edge
 * differs in principle: x86 detects tininess after rounding, so an exact result within
 * 2^-150 below 2^-126 that gradual rounding carries up to 2^-126 is kept by both, but one in
 * (2^-126 - 2^-150, 2^-126 - 2^-151] is flushed by the hardware and not by this; bf16 inputs
 * make such sums need long chains of tiny products.) */
static inline float tf_mxu_ftz(float v)
{
	uint32_t u;
	memcpy(&u, &v, sizeof u);
	if ((u & 0x7f800000u) == 0)
		u &= 0x80000000u;
	memcpy(&v, &u, sizeof v);
	return v;
}

/* Microkernel: for the mr x nc block of C (leading dimension ldc), C += each K-tile's sum, over
 * kc values of k starting on a tile boundary, tiles R long. One A panel against the B panels
 * b, b + NR * kc, ... (ceil(nc / NR) of them), one register block at a time. */
void tf_mxu_ukernel_avx2(size_t kc, size_t R, const float *a, size_t ais, size_t aks,
                         const float *b, float *c, size_t ldc, size_t mr, size_t nc, int flags);
/* Packing with bf16 rounding (AVX2). X/W point at op(X)[0,0] / op(W)[0,0] of the part; avail
 * is how many floats of each stored row of X can be read from X's column (ldx minus the part's
 * offset), which lets the transposed packing read whole vectors safely. When maxbits is not
 * NULL it receives an upper bound of the packed magnitudes as float bits (|x| <= that float;
 * 0x7f800000 or more when an Inf or NaN was packed). */
void tf_mxu_pack_a_avx2(int trans, const float *X, size_t ldx, size_t avail, size_t i0, size_t mr,
                        size_t p0, size_t kc, int ftz, float *a, uint32_t *maxbits);
void tf_mxu_pack_b_avx2(int trans, const float *W, size_t ldw, size_t j0, size_t nr, size_t p0,
                        size_t kc, int ftz, float *b, uint32_t *maxbits);
/* The packing relies on the MXCSR of tf_mxu_csr_enter(ftz) (DAZ flushes subnormal inputs). */

/* Narrow outputs (0 < N < TF_MXU_NR, K * N <= TF_MXU_NARROW_MAX_KN) on AVX2: the whole M x N
 * result vectorised over 16 rows at a time (mxu_avx2.c). abuf holds 16 * K + 8 floats,
 * bbuf K * N + 8. Runs under tf_mxu_csr_enter. */
#define TF_MXU_NARROW_MAX_KN 65536
void tf_mxu_narrow_avx2(int trans_x, int trans_w, size_t M, size_t K, size_t N, const float *X,
                        size_t ldx, const float *W, size_t ldw, float *C, size_t ldc, size_t R,
                        int ftz, float *abuf, float *bbuf);

/* The AVX-512 path (mxu_avx512.c): TPU mode (ftz) and an even K-tile length R only. Inputs are
 * packed as bf16 pairs in 32-bit words and multiplied with VDPBF16PS; A panels have
 * TF_MXU_ZMR rows, B panels tf_mxu_avx512_pw(N) columns. Runs under tf_mxu_csr_enter(1). */
#define TF_MXU_ZMR 8
/* 1 when VDPBF16PS and the bf16 conversion give the contract's bits on this CPU (a few
 * known answers; call under tf_mxu_csr_enter(1) on a CPU with AVX512-BF16). */
int tf_mxu_avx512_probe(void);
size_t tf_mxu_avx512_kc(size_t R); /* K block: a multiple of R, about 256 */
size_t tf_mxu_avx512_pw(size_t N); /* B panel width: 16 when N <= 16, else 32 */
/* A whole op(W) packed once (for tf_mxu_wpack): words needed, and the packing, which returns
 * the largest packed magnitude as float bits (for tf_mxu_may_overflow). */
size_t tf_mxu_avx512_packed_words(size_t K, size_t N, size_t R);
uint32_t tf_mxu_avx512_pack_w(int trans_w, size_t K, size_t N, const float *W, size_t ldw,
                              size_t R, uint32_t *out);
/* Scratch sizes in words for tf_mxu_avx512_run on an M x K . K x N part. */
size_t tf_mxu_avx512_abuf_words(size_t M, size_t K, size_t N, size_t R);
size_t tf_mxu_avx512_bbuf_words(size_t K, size_t N, size_t R);
/* C = op(X) . op(W) for one part. With `packed` (from tf_mxu_avx512_pack_w for packed_n
 * columns, which returned packed_max; the part uses its first N), W, ldw, trans_w and bbuf are
 * not used. */
void tf_mxu_avx512_run(int trans_x, int trans_w, size_t M, size_t K, size_t N, const float *X,
                       size_t ldx, const float *W, size_t ldw, float *C, size_t ldc, size_t R,
                       const uint32_t *packed, size_t packed_n, uint32_t packed_max,
                       uint32_t *abuf, uint32_t *bbuf);

/* Fewest multiply-adds per thread before tf_mxu_gemm uses another thread (tests set 0). */
extern size_t tf_mxu_min_macs_per_thread;

/* Parts of multi-threaded GEMMs run by pool workers since start (tests check that each part
 * runs exactly once). */
extern _Atomic uint64_t tf_mxu_worker_parts;

/* The MXCSR word the contract asks for (round to nearest, exceptions masked, FTZ+DAZ iff ftz),
 * entered and left around a computation. enter returns the previous word. */
unsigned tf_mxu_csr_enter(int ftz);
void tf_mxu_csr_leave(unsigned saved);

/* Writes every NaN of the M x N block as 0x7FC00000. */
void tf_mxu_canon_nan(size_t M, size_t N, float *C, size_t ldc);

/* The normalised configuration (defaults filled in). */
void tf_mxu_cfg_norm(const struct tf_mxu_cfg *in, struct tf_mxu_cfg *out);

/* Fills stats from the model (folds, macs, mapping efficiency) and `cycles`. */
void tf_mxu_stats_fill(const struct tf_mxu_cfg *cfg, size_t M, size_t K, size_t N, uint64_t cycles,
                       struct tf_mxu_stats *stats);

/* Whether K products of magnitudes up to the floats with bits amax and bmax, summed, could
 * reach Inf (or are Inf or NaN already). When they cannot, no output is NaN and the kernels
 * skip writing NaNs canonically (rounding grows a sum by at most (1 + 2^-24)^K, so
 * K * max|x| * max|w| <= 2^120 keeps every partial sum finite). */
static inline int tf_mxu_may_overflow(uint32_t amax, uint32_t bmax, size_t K)
{
	if (amax >= 0x7f800000u || bmax >= 0x7f800000u)
		return 1;
	float a, b;
	memcpy(&a, &amax, sizeof a);
	memcpy(&b, &bmax, sizeof b);
	return (double)a * (double)b * (double)K > 0x1p120;
}

/* tf_bf16_round inlined for packing loops. */
static inline float tf_mxu_rnd(float f, int ftz)
{
	uint32_t u;
	memcpy(&u, &f, sizeof u);
	if ((u & 0x7fffffffu) > 0x7f800000u) {
		u = 0x7fc00000u;
	} else {
		if (ftz && (u & 0x7f800000u) == 0)
			u &= 0x80000000u;
		u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
	}
	memcpy(&f, &u, sizeof f);
	return f;
}

#endif

/* mxu_avx2.c — the AVX2/FMA parts of the fast MXU path: the 6x16 microkernel, the packing
 * routines that round to bf16 eight values at a time, and the narrow-output path (N < 16,
 * vectorised over M; see its section below).
 *
 * Microkernel: twelve ymm registers hold the running tile sums s for 6 rows x 16 columns (8
 * for the 4-row variant). For
 * each k of a K-tile it broadcasts x[m,k] for the 6 rows and does s = fma(x, w[k, n..n+15], s):
 * lanes are different outputs and k advances one step at a time, so each lane performs exactly
 * the contract's fmaf chain. At the end of the tile C += s, one add per output, in tile order.
 * Edge blocks (mr < 6 or nr < 16) compute the full block from zero-padded panels and store
 * only the valid rows and lanes. The first tile of a GEMM writes C = 0 + s without reading C;
 * the last one writes NaNs canonically (mxu.h rule 5), so C needs no other pass; mxu.c drops
 * that flag when the packing's magnitude bounds show no output can be NaN. */
#include <immintrin.h>

#include <string.h>
#include "accel/mxu_int.h"

#define MR TF_MXU_MR
#define NR TF_MXU_NR

/* Lane masks: mask_tab + 8 - n gives n leading all-ones lanes (n = 0..8). */
static const int mask_tab[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};

static inline __m256i lead_mask(size_t n)
{
	return _mm256_loadu_si256((const __m256i *)(mask_tab + 8 - (n > 8 ? 8 : n)));
}

/* One k step for ROWS (4 or 6) rows: two W vectors, ROWS broadcasts, 2*ROWS fmas. With
 * ROWS a compile-time constant the unused rows vanish. */
#define STEP(pa, pb)                                                                               \
	do {                                                                                       \
		__m256 b0 = _mm256_loadu_ps(pb);                                                   \
		__m256 b1 = _mm256_loadu_ps((pb) + 8);                                             \
		__m256 x;                                                                          \
		x = _mm256_broadcast_ss((pa));                                                     \
		s00 = _mm256_fmadd_ps(x, b0, s00);                                                 \
		s01 = _mm256_fmadd_ps(x, b1, s01);                                                 \
		x = _mm256_broadcast_ss((pa) + ais);                                               \
		s10 = _mm256_fmadd_ps(x, b0, s10);                                                 \
		s11 = _mm256_fmadd_ps(x, b1, s11);                                                 \
		x = _mm256_broadcast_ss((pa) + 2 * ais);                                           \
		s20 = _mm256_fmadd_ps(x, b0, s20);                                                 \
		s21 = _mm256_fmadd_ps(x, b1, s21);                                                 \
		x = _mm256_broadcast_ss((pa) + 3 * ais);                                           \
		s30 = _mm256_fmadd_ps(x, b0, s30);                                                 \
		s31 = _mm256_fmadd_ps(x, b1, s31);                                                 \
		if (ROWS > 4) {                                                                    \
			x = _mm256_broadcast_ss((pa) + 4 * ais);                                   \
			s40 = _mm256_fmadd_ps(x, b0, s40);                                         \
			s41 = _mm256_fmadd_ps(x, b1, s41);                                         \
			x = _mm256_broadcast_ss((pa) + 5 * ais);                                   \
			s50 = _mm256_fmadd_ps(x, b0, s50);                                         \
			s51 = _mm256_fmadd_ps(x, b1, s51);                                         \
		}                                                                                  \
	} while (0)

/* n (< 8) floats between memory and a vector, in 4-, 2- and 1-float pieces: never touches
 * memory past n, and avoids vmaskmovps (slow on AMD cores) and memcpy calls. */
static inline __m256 load_part(const float *p, size_t n)
{
	__m128 lo = _mm_setzero_ps(), hi = _mm_setzero_ps(), t = _mm_setzero_ps();
	size_t i = 0;
	if (n >= 4) {
		lo = _mm_loadu_ps(p);
		i = 4;
	}
	if ((n - i) & 2) {
		t = _mm_castsi128_ps(_mm_loadu_si64(p + i));
		if (n & 1)
			t = _mm_movelh_ps(t, _mm_load_ss(p + i + 2));
	} else if ((n - i) & 1) {
		t = _mm_load_ss(p + i);
	}
	if (i)
		hi = t;
	else
		lo = t;
	return _mm256_set_m128(hi, lo);
}

static inline void store_part(float *p, __m256 v, size_t n)
{
	__m128 x = _mm256_castps256_ps128(v);
	if (n >= 4) {
		_mm_storeu_ps(p, x);
		x = _mm256_extractf128_ps(v, 1);
		p += 4;
		n -= 4;
	}
	if (n & 2) {
		_mm_storeu_si64(p, _mm_castps_si128(x));
		x = _mm_movehl_ps(x, x);
		p += 2;
	}
	if (n & 1)
		_mm_store_ss(p, x);
}

/* Row of C += (lo, hi) for the first nr columns. first: C is taken as +0 (acc starts at +0,
 * so C = 0 + s, not s: -0 becomes +0 as the contract says) and not read. last: NaN lanes
 * are written as the canonical quiet NaN. */
static inline __attribute__((always_inline)) void update_row(float *row, __m256 lo, __m256 hi,
                                                             size_t nr, int first, int last)
{
	if (first) {
		lo = _mm256_add_ps(_mm256_setzero_ps(), lo);
		hi = _mm256_add_ps(_mm256_setzero_ps(), hi);
	} else if (nr == NR) {
		lo = _mm256_add_ps(_mm256_loadu_ps(row), lo);
		hi = _mm256_add_ps(_mm256_loadu_ps(row + 8), hi);
	} else if (nr >= 8) {
		lo = _mm256_add_ps(_mm256_loadu_ps(row), lo);
		hi = _mm256_add_ps(load_part(row + 8, nr - 8), hi);
	} else {
		lo = _mm256_add_ps(load_part(row, nr), lo);
	}
	if (last) {
		const __m256 qnan = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fc00000));
		lo = _mm256_blendv_ps(lo, qnan, _mm256_cmp_ps(lo, lo, _CMP_UNORD_Q));
		hi = _mm256_blendv_ps(hi, qnan, _mm256_cmp_ps(hi, hi, _CMP_UNORD_Q));
	}
	if (nr == NR) {
		_mm256_storeu_ps(row, lo);
		_mm256_storeu_ps(row + 8, hi);
	} else if (nr >= 8) {
		_mm256_storeu_ps(row, lo);
		store_part(row + 8, hi, nr - 8);
	} else {
		store_part(row, lo, nr);
	}
}

static inline __attribute__((always_inline)) void
kernel(const int ROWS, size_t kc, size_t R, const float *a, const size_t ais, const size_t aks,
       const float *b, float *c, size_t ldc, size_t mr, size_t nr, int flags)
{
	for (size_t t0 = 0; t0 < kc; t0 += R) {
		size_t len = kc - t0 < R ? kc - t0 : R;
		int first = t0 == 0 && (flags & TF_MXU_FIRST);
		int last = t0 + len == kc && (flags & TF_MXU_LAST);
		__m256 s00 = _mm256_setzero_ps(), s01 = _mm256_setzero_ps();
		__m256 s10 = _mm256_setzero_ps(), s11 = _mm256_setzero_ps();
		__m256 s20 = _mm256_setzero_ps(), s21 = _mm256_setzero_ps();
		__m256 s30 = _mm256_setzero_ps(), s31 = _mm256_setzero_ps();
		__m256 s40 = _mm256_setzero_ps(), s41 = _mm256_setzero_ps();
		__m256 s50 = _mm256_setzero_ps(), s51 = _mm256_setzero_ps();
		const float *pa = a + t0 * aks;
		const float *pb = b + t0 * NR;
		for (size_t k = 0; k < len; k++) {
			STEP(pa, pb);
			pa += aks;
			pb += NR;
		}
		update_row(c, s00, s01, nr, first, last);
		if (mr > 1)
			update_row(c + ldc, s10, s11, nr, first, last);
		if (mr > 2)
			update_row(c + 2 * ldc, s20, s21, nr, first, last);
		if (mr > 3)
			update_row(c + 3 * ldc, s30, s31, nr, first, last);
		if (ROWS > 4 && mr > 4)
			update_row(c + 4 * ldc, s40, s41, nr, first, last);
		if (ROWS > 4 && mr > 5)
			update_row(c + 5 * ldc, s50, s51, nr, first, last);
	}
}

/* The column panels of B side by side (panel j at b + j * NR * kc) against one A panel. */
static inline __attribute__((always_inline)) void
kernel_row(const int ROWS, size_t kc, size_t R, const float *a, const size_t ais, const size_t aks,
           const float *b, float *c, size_t ldc, size_t mr, size_t nc, int flags)
{
	for (size_t jr = 0; jr < nc; jr += NR)
		kernel(ROWS, kc, R, a, ais, aks, b + jr * kc, c + jr, ldc, mr,
		       nc - jr < NR ? nc - jr : NR, flags);
}

void tf_mxu_ukernel_avx2(size_t kc, size_t R, const float *a, size_t ais, size_t aks,
                         const float *b, float *c, size_t ldc, size_t mr, size_t nc, int flags)
{
	/* A 4-row block does 8 fmas per k, enough to keep both FMA pipes busy, so panels of 4
	 * rows (chosen by mxu.c to avoid 2-row remainders) run at full speed. */
	if (aks == 1) { /* row panels */
		if (mr <= 4)
			kernel_row(4, kc, R, a, ais, 1, b, c, ldc, mr, nc, flags);
		else
			kernel_row(6, kc, R, a, ais, 1, b, c, ldc, mr, nc, flags);
	} else { /* k-major panels */
		if (mr <= 4)
			kernel_row(4, kc, R, a, 1, MR, b, c, ldc, mr, nc, flags);
		else
			kernel_row(6, kc, R, a, 1, MR, b, c, ldc, mr, nc, flags);
	}
}

/* fp32 -> bf16 -> fp32 for 8 floats, as tf_bf16_round8, in 8 vector operations instead of
 * 13, relying on the MXCSR the packing runs under (tf_mxu_csr_enter(ftz), mxu_int.h):
 *   - ftz: with DAZ set, an add treats a subnormal input as a zero of the same sign, and
 *     x + (-0) is x for every other x (+0 + -0 = +0, -0 + -0 = -0): the flush costs one add;
 *   - round to nearest even on the bits, keeping the top 16 (one and instead of two shifts);
 *   - a NaN input is written as the quiet NaN 0x7FC00000 (the integer add could carry a NaN
 *     into Inf or -0).
 * The -0 is passed through an empty asm so the compiler cannot fold x + -0 into x (it does not
 * model DAZ). */
static inline __attribute__((always_inline)) __m256 pack_round8(__m256 v, int ftz)
{
	if (ftz) {
		__m256 nz = _mm256_castsi256_ps(_mm256_set1_epi32((int)0x80000000u));
		__asm__("" : "+x"(nz));
		v = _mm256_add_ps(v, nz);
	}
	__m256i u = _mm256_castps_si256(v);
	__m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
	__m256i r = _mm256_add_epi32(_mm256_add_epi32(u, lsb), _mm256_set1_epi32(0x7fff));
	r = _mm256_and_si256(r, _mm256_set1_epi32((int)0xffff0000u));
	return _mm256_blendv_ps(_mm256_castsi256_ps(r),
	                        _mm256_castsi256_ps(_mm256_set1_epi32(0x7fc00000)),
	                        _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
}

/* pack_round8, also keeping in *mx the largest magnitude packed (as bits: for finite values
 * the integer order of |x|'s bits is the order of |x|; NaN and Inf compare above them all). */
static inline __attribute__((always_inline)) __m256 rnd_max(__m256 v, int ftz, __m256i *mx)
{
	__m256 r = pack_round8(v, ftz);
	*mx = _mm256_max_epu32(
	    *mx, _mm256_and_si256(_mm256_castps_si256(r), _mm256_set1_epi32(0x7fffffff)));
	return r;
}

/* The largest of the 8 lanes. */
static inline uint32_t hmax_epu32(__m256i v)
{
	__m128i m = _mm_max_epu32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
	m = _mm_max_epu32(m, _mm_shuffle_epi32(m, 0x4e));
	m = _mm_max_epu32(m, _mm_shuffle_epi32(m, 0xb1));
	return (uint32_t)_mm_cvtsi128_si32(m);
}

/* dst[0..n) = round(src[0..n)). A last partial vector is read with a masked load and stored
 * whole: up to 7 floats after dst[n) are overwritten with zeros (callers fill their buffers in
 * ascending order, so that is the next row's slot, written after, or slack at the end). */
static inline __attribute__((always_inline)) void round_copy(const float *src, float *dst, size_t n,
                                                             int ftz, __m256i *mx)
{
	size_t i = 0;
	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(dst + i, rnd_max(_mm256_loadu_ps(src + i), ftz, mx));
	if (i < n)
		_mm256_storeu_ps(dst + i,
		                 rnd_max(_mm256_maskload_ps(src + i, lead_mask(n - i)), ftz, mx));
}

void tf_mxu_pack_a_avx2(int trans, const float *X, size_t ldx, size_t avail, size_t i0, size_t mr,
                        size_t p0, size_t kc, int ftz, float *a, uint32_t *maxbits)
{
	__m256i mx = _mm256_setzero_si256();
	if (!trans) {
		/* row panels [MR][kc] */
		for (size_t i = 0; i < MR; i++) {
			if (i < mr)
				round_copy(X + (i0 + i) * ldx + p0, a + i * kc, kc, ftz, &mx);
			else
				memset(a + i * kc, 0, kc * sizeof(float));
		}
		if (maxbits)
			*maxbits = hmax_epu32(mx);
		return;
	}
	/* k-major [kc][MR]: op(X)[i0 + i, p0 + k] = X[(p0 + k) * ldx + i0 + i], contiguous in i.
	 * Each k stores 8 lanes; lanes 6 and 7 spill into the next k's slot, which that k then
	 * overwrites (the buffer has 8 floats of slack after the last panel): a plain store is
	 * much cheaper than vmaskmovps on AMD cores. */
	__m256i lm = lead_mask(mr);
	int whole = mr == MR && i0 + 8 <= avail; /* 8 lanes readable without leaving the row */
	for (size_t k = 0; k < kc; k++) {
		const float *src = X + (p0 + k) * ldx + i0;
		__m256 v = whole ? _mm256_loadu_ps(src)
		                 : _mm256_maskload_ps(src, lm); /* lanes past mr read as 0 */
		_mm256_storeu_ps(a + k * MR, rnd_max(v, ftz, &mx));
	}
	if (maxbits)
		*maxbits = hmax_epu32(mx);
}

/* 8x8 transpose of rows r[0..7] in place. */
static inline void transpose8(__m256 r[8])
{
	__m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
	__m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
	__m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
	__m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
	__m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xee);
	__m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xee);
	__m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xee);
	__m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xee);
	r[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
	r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
	r[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
	r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
	r[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
	r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
	r[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
	r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

void tf_mxu_pack_b_avx2(int trans, const float *W, size_t ldw, size_t j0, size_t nr, size_t p0,
                        size_t kc, int ftz, float *b, uint32_t *maxbits)
{
	__m256i mx = _mm256_setzero_si256();
	if (!trans) {
		__m256i m0 = lead_mask(nr), m1 = lead_mask(nr > 8 ? nr - 8 : 0);
		for (size_t k = 0; k < kc; k++) {
			const float *src = W + (p0 + k) * ldw + j0;
			__m256 lo, hi;
			if (nr == NR) {
				lo = _mm256_loadu_ps(src);
				hi = _mm256_loadu_ps(src + 8);
			} else {
				lo = _mm256_maskload_ps(src, m0);
				hi = _mm256_maskload_ps(src + 8, m1);
			}
			_mm256_storeu_ps(b + k * NR, rnd_max(lo, ftz, &mx));
			_mm256_storeu_ps(b + k * NR + 8, rnd_max(hi, ftz, &mx));
		}
		if (maxbits)
			*maxbits = hmax_epu32(mx);
		return;
	}
	/* op(W)[p0 + k, j0 + j] = W[(j0 + j) * ldw + p0 + k]: 8x8 transposes; a short last
	 * block of k (kc not a multiple of 8, e.g. K = 10) and columns past nr are read in
	 * pieces and zero-filled, so every store is a whole vector. */
	for (size_t h = 0; h < NR; h += 8) {
		const float *src = W + (j0 + h) * ldw + p0;
		size_t k = 0;
		if (h + 8 <= nr) {
			for (; k + 8 <= kc; k += 8) {
				__m256 r[8];
#pragma GCC unroll 8
				for (size_t j = 0; j < 8; j++)
					r[j] = _mm256_loadu_ps(src + j * ldw + k);
				transpose8(r);
#pragma GCC unroll 8
				for (size_t kk = 0; kk < 8; kk++)
					_mm256_storeu_ps(b + (k + kk) * NR + h,
					                 rnd_max(r[kk], ftz, &mx));
			}
		}
		/* the rest: masked loads (lanes past kc and rows past nr read as 0); only the kn
		 * rows of k that exist are rounded and stored */
		for (; k < kc; k += 8) {
			size_t kn = kc - k < 8 ? kc - k : 8;
			__m256i lm = lead_mask(kn);
			__m256 r[8];
#pragma GCC unroll 8
			for (size_t j = 0; j < 8; j++)
				r[j] = h + j < nr ? _mm256_maskload_ps(src + j * ldw + k, lm)
				                  : _mm256_setzero_ps();
			transpose8(r);
			float *d = b + k * NR + h;
#pragma GCC unroll 8
			for (size_t kk = 0; kk < 8; kk++) /* unrolled: r stays in registers */
				if (kk < kn)
					_mm256_storeu_ps(d + kk * NR, rnd_max(r[kk], ftz, &mx));
		}
	}
	if (maxbits)
		*maxbits = hmax_epu32(mx);
}

/* ---- Narrow outputs (N < 16): vectorised over M ----
 *
 * With few columns a 16-lane block over N leaves lanes idle (N = 10 uses 10 of 16). Here the
 * lanes are rows instead: op(X) is packed k-major in panels of 16 rows ([K][16],
 * bf16-rounded), op(W) is packed [K][N], and for each k the kernel loads the two row vectors,
 * broadcasts w[k, n] and does s_n = fma(x[m..m+15, k], w[k, n], s_n) for a group of up to 6
 * columns (12 accumulators). Each lane is still one output performing the contract's chain:
 * s = +0, fma for k ascending within the K-tile, then acc = acc + s (acc starts at +0, so the
 * first tile gives 0 + s and a tile sum of -0 becomes +0). Tile sums of earlier tiles wait in
 * a small array; the final values are transposed back to rows of C 8 x 8 at a time and NaNs
 * written canonically. */
#define NP 16 /* rows per narrow panel */

/* A panel: rows i0 .. i0+mr-1 (mr <= NP) of op(X), all K, as [K][NP] rounded; rows past mr
 * are zero. trans: op(X)[m, k] = X[k * ldx + m], so a row of the panel is contiguous in X. */
static void narrow_pack_a(int trans, const float *X, size_t ldx, size_t i0, size_t mr, size_t K,
                          int ftz, float *a)
{
	if (trans) {
		size_t m0 = mr < 8 ? mr : 8, m1 = mr > 8 ? mr - 8 : 0;
		for (size_t k = 0; k < K; k++) {
			const float *src = X + k * ldx + i0;
			__m256 v0 = m0 == 8 ? _mm256_loadu_ps(src) : load_part(src, m0);
			__m256 v1 = m1 == 8 ? _mm256_loadu_ps(src + 8)
			            : m1    ? load_part(src + 8, m1)
			                    : _mm256_setzero_ps();
			_mm256_storeu_ps(a + k * NP, pack_round8(v0, ftz));
			_mm256_storeu_ps(a + k * NP + 8, pack_round8(v1, ftz));
		}
		return;
	}
	for (size_t h = 0; h < NP; h += 8) {
		const float *src = X + (i0 + h) * ldx;
		size_t k0 = 0;
		if (h + 8 <= mr) { /* whole 8 x 8 blocks: everything in registers */
			for (; k0 + 8 <= K; k0 += 8) {
				__m256 r[8];
#pragma GCC unroll 8
				for (size_t i = 0; i < 8; i++)
					r[i] = _mm256_loadu_ps(src + i * ldx + k0);
				transpose8(r);
#pragma GCC unroll 8
				for (size_t kk = 0; kk < 8; kk++)
					_mm256_storeu_ps(a + (k0 + kk) * NP + h,
					                 pack_round8(r[kk], ftz));
			}
		}
		for (; k0 < K; k0 += 8) {
			size_t kn = K - k0 < 8 ? K - k0 : 8;
			__m256 r[8];
			for (size_t i = 0; i < 8; i++)
				r[i] = h + i >= mr ? _mm256_setzero_ps()
				       : kn == 8   ? _mm256_loadu_ps(src + i * ldx + k0)
				                   : load_part(src + i * ldx + k0, kn);
			transpose8(r);
			for (size_t kk = 0; kk < kn; kk++)
				_mm256_storeu_ps(a + (k0 + kk) * NP + h, pack_round8(r[kk], ftz));
		}
	}
}

/* B: op(W) as [K][N] rounded. tmp holds K floats (one stored row of a transposed W). */
static void narrow_pack_b(int trans, const float *W, size_t ldw, size_t K, size_t N, int ftz,
                          float *b, float *tmp)
{
	__m256i mx = _mm256_setzero_si256(); /* not needed here */
	if (!trans) {
		for (size_t k = 0; k < K; k++)
			round_copy(W + k * ldw, b + k * N, N, ftz, &mx);
		return;
	}
	for (size_t n = 0; n < N; n++) {
		round_copy(W + n * ldw, tmp, K, ftz, &mx);
		for (size_t k = 0; k < K; k++)
			b[k * N + n] = tmp[k];
	}
}

/* Writes 8 rows (v[j] = column j for those rows, NCOL of them) to c, mr of them valid. */
static inline __attribute__((always_inline)) void narrow_store(const int NCOL, const __m256 *v,
                                                               float *c, size_t ldc, size_t mr)
{
	const __m256 qnan = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fc00000));
	__m256 r[8];
#pragma GCC unroll 8
	for (int j = 0; j < 8; j++)
		r[j] = j < NCOL ? v[j] : _mm256_setzero_ps();
	transpose8(r);
	for (size_t i = 0; i < mr && i < 8; i++) {
		__m256 x = _mm256_blendv_ps(r[i], qnan, _mm256_cmp_ps(r[i], r[i], _CMP_UNORD_Q));
		store_part(c + i * ldc, x, (size_t)NCOL);
	}
}

/* One NP-row panel times NCOL (<= 6) columns of B (leading dimension ldb), all K, written to
 * c (mr valid rows). */
static inline __attribute__((always_inline)) void narrow_block(const int NCOL, size_t K, size_t R,
                                                               const float *a, const float *b,
                                                               size_t ldb, float *c, size_t ldc,
                                                               size_t mr)
{
	float accm[2 * 6 * 8] __attribute__((aligned(32)));
	__m256 s0[6], s1[6];
#pragma GCC unroll 6
	for (int n = 0; n < 6; n++) /* columns past NCOL stay zero (transposed, not stored) */
		s0[n] = s1[n] = _mm256_setzero_ps();
	for (size_t t0 = 0; t0 < K; t0 += R) {
		size_t len = K - t0 < R ? K - t0 : R;
#pragma GCC unroll 6
		for (int n = 0; n < NCOL; n++)
			s0[n] = s1[n] = _mm256_setzero_ps();
		const float *pa = a + t0 * NP, *pb = b + t0 * ldb;
		for (size_t k = 0; k < len; k++) {
			__m256 x0 = _mm256_loadu_ps(pa), x1 = _mm256_loadu_ps(pa + 8);
#pragma GCC unroll 6
			for (int n = 0; n < NCOL; n++) {
				__m256 w = _mm256_broadcast_ss(pb + n);
				s0[n] = _mm256_fmadd_ps(x0, w, s0[n]);
				s1[n] = _mm256_fmadd_ps(x1, w, s1[n]);
			}
			pa += NP;
			pb += ldb;
		}
		/* acc = acc + s; acc is +0 before the first tile */
#pragma GCC unroll 6
		for (int n = 0; n < NCOL; n++) {
			__m256 z = _mm256_setzero_ps();
			__m256 a0 = t0 == 0 ? z : _mm256_load_ps(accm + 8 * n);
			__m256 a1 = t0 == 0 ? z : _mm256_load_ps(accm + 48 + 8 * n);
			s0[n] = _mm256_add_ps(a0, s0[n]);
			s1[n] = _mm256_add_ps(a1, s1[n]);
		}
		if (t0 + len < K) {
#pragma GCC unroll 6
			for (int n = 0; n < NCOL; n++) {
				_mm256_store_ps(accm + 8 * n, s0[n]);
				_mm256_store_ps(accm + 48 + 8 * n, s1[n]);
			}
		}
	}
	narrow_store(NCOL, s0, c, ldc, mr);
	if (mr > 8)
		narrow_store(NCOL, s1, c + 8 * ldc, ldc, mr - 8);
}

static void narrow_cols(size_t ncol, size_t K, size_t R, const float *a, const float *b, size_t ldb,
                        float *c, size_t ldc, size_t mr)
{
	switch (ncol) {
	case 1:
		narrow_block(1, K, R, a, b, ldb, c, ldc, mr);
		break;
	case 2:
		narrow_block(2, K, R, a, b, ldb, c, ldc, mr);
		break;
	case 3:
		narrow_block(3, K, R, a, b, ldb, c, ldc, mr);
		break;
	case 4:
		narrow_block(4, K, R, a, b, ldb, c, ldc, mr);
		break;
	case 5:
		narrow_block(5, K, R, a, b, ldb, c, ldc, mr);
		break;
	default:
		narrow_block(6, K, R, a, b, ldb, c, ldc, mr);
		break;
	}
}

void tf_mxu_narrow_avx2(int trans_x, int trans_w, size_t M, size_t K, size_t N, const float *X,
                        size_t ldx, const float *W, size_t ldw, float *C, size_t ldc, size_t R,
                        int ftz, float *abuf, float *bbuf)
{
	narrow_pack_b(trans_w, W, ldw, K, N, ftz, bbuf, abuf);
	/* the fewest groups of at most 6 columns, as even as possible (10 = 5 + 5) */
	size_t groups = (N + 5) / 6, g = (N + groups - 1) / groups;
	for (size_t i0 = 0; i0 < M; i0 += NP) {
		size_t mr = M - i0 < NP ? M - i0 : NP;
		narrow_pack_a(trans_x, X, ldx, i0, mr, K, ftz, abuf);
		for (size_t j0 = 0; j0 < N; j0 += g)
			narrow_cols(N - j0 < g ? N - j0 : g, K, R, abuf, bbuf + j0, N,
			            C + i0 * ldc + j0, ldc, mr);
	}
}

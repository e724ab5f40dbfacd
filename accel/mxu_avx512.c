/* mxu_avx512.c — the AVX-512 path of the fast MXU kernel, for TPU mode (ftz) with an even
 * K-tile length R: packing into bf16 pairs, the VDPBF16PS microkernel, and the blocked loop
 * over one part of C. mxu.c sends other cases (ftz off, odd R) to the AVX2 path.
 *
 * Why VDPBF16PS gives the contract's bits: for each 32-bit lane it does
 *     d = d + a.hi * b.hi;  d = d + a.lo * b.lo
 * as two fused multiply-adds in that order, each rounded to nearest even, with denormal inputs
 * read as zero and denormal results flushed (its own FTZ/DAZ, whatever MXCSR says). In TPU mode
 * that is exactly two steps of the contract's chain s = fmaf(x[k], w[k], s) under FTZ+DAZ,
 * when the pair holds k in the high half and k + 1 in the low half (mxu.h rule 3; the products
 * of bf16 values are exact). Inputs are rounded with VCVTNE2PS2BF16, which rounds to nearest
 * even and flushes denormal inputs to signed zero: for every non-NaN float it gives the bits
 * of tf_bf16_round(x, 1) (checked over all 2^32 inputs when this path was written); a NaN
 * stays a NaN, and NaN outputs are written canonically anyway. Both facts are also checked at
 * run time before the path is chosen (tf_mxu_avx512_probe) and by tests/test_mxu.c.
 *
 * Pairs never straddle a K-tile (R even, tiles start at even k). A K-tile of odd length (only
 * the last one, when K is odd) ends in a lone k whose partner is a pad: +0 in the A pair and
 * -0 in the B pair, so the pad product is -0 and s + (-0) == s for every s (including +0, -0,
 * NaN): the pad never changes a bit, unlike a 0 x 0 pad, which would turn s = -0 into +0.
 *
 * Layouts (32-bit words, each a bf16 pair, np = ceil(kc / 2) pairs for a kc block):
 *   A panel, ZMR rows: [ZMR][np] ("row panel", op(X) rows contiguous in X) or [np][ZMR]
 *     ("k-major", X transposed); rows past mr are zero.
 *   B panel, pw columns (16 or 32): [np][pw]; columns past nr are zero.
 *   A packed op(W) (tf_mxu_avx512_pack_w): for each kc block in order, every B panel of N.
 * The microkernel keeps ZMR x pw/16 vectors of tile sums; at the end of each K-tile C += s,
 * as the AVX2 kernel does (first tile: C = 0 + s; last: NaNs written as 0x7FC00000). */
#include <immintrin.h>

#include <math.h>
#include <string.h>

#include "accel/mxu_int.h"

#define ZMR TF_MXU_ZMR
#define MC 144   /* rows of op(X) packed at once (18 panels) */
#define NC 4096  /* columns of op(W) packed at once (a multiple of 32) */
#define SMALL_B 4096 /* words of packed B run against each A panel in one call (16 KB) */

/* Word index for pair_words: dword i = word i (first) << 16 | word 16 + i (second). */
static const short pair_idx[32] = {16, 0, 17, 1, 18, 2, 19, 3, 20, 4, 21, 5, 22, 6, 23, 7,
                                   24, 8, 25, 9, 26, 10, 27, 11, 28, 12, 29, 13, 30, 14, 31, 15};

/* 16 pairs (bf16(first[i]) << 16 | bf16(second[i])). */
static inline __m512i pair_words(__m512 first, __m512 second)
{
	__m512i w = (__m512i)_mm512_cvtne2ps_pbh(second, first); /* words: first, then second */
	return _mm512_permutexvar_epi16(_mm512_loadu_si512(pair_idx), w);
}

/* 32 consecutive floats v[0..31) as 16 pairs (v[2i] << 16 | v[2i+1]); n < 32 reads only n
 * floats (the rest as +0). */
static inline __m512i adjacent_pairs(const float *src, size_t n)
{
	__m512 lo, hi;
	if (n >= 32) {
		lo = _mm512_loadu_ps(src);
		hi = _mm512_loadu_ps(src + 16);
	} else {
		lo = _mm512_maskz_loadu_ps((__mmask16)(n >= 16 ? 0xffff : (1u << n) - 1), src);
		hi = _mm512_maskz_loadu_ps((__mmask16)(n <= 16 ? 0 : (1u << (n - 16)) - 1),
		                           src + 16);
	}
	__m512i w = (__m512i)_mm512_cvtne2ps_pbh(hi, lo); /* words in k order */
	return _mm512_rol_epi32(w, 16);
}

/* Running maximum of the magnitudes of 32 bf16 words (the sign bits cleared). */
static inline __m512i word_max(__m512i mx, __m512i w)
{
	return _mm512_max_epu16(mx, _mm512_and_si512(w, _mm512_set1_epi16(0x7fff)));
}

/* The largest bf16 magnitude in mx as float bits (a bf16 word is a float's high half). */
static inline uint32_t word_max_bits(__m512i mx)
{
	__m256i h = _mm256_max_epu16(_mm512_castsi512_si256(mx), _mm512_extracti64x4_epi64(mx, 1));
	__m128i q = _mm_max_epu16(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
	q = _mm_max_epu16(q, _mm_srli_si128(q, 8));
	q = _mm_max_epu16(q, _mm_srli_si128(q, 4));
	q = _mm_max_epu16(q, _mm_srli_si128(q, 2));
	return (uint32_t)(_mm_cvtsi128_si32(q) & 0xffff) << 16;
}

static inline __mmask16 lanes(size_t n)
{
	return (__mmask16)(n >= 16 ? 0xffff : (1u << n) - 1);
}

/* 16 x 16 transpose of 32-bit words in r[0..16). */
static inline __attribute__((always_inline)) void transpose16(__m512i r[16])
{
	__m512i t[16], u[16];
#pragma GCC unroll 8
	for (int i = 0; i < 16; i += 2) {
		t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
		t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
	}
#pragma GCC unroll 4
	for (int i = 0; i < 16; i += 4) {
		u[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
		u[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
		u[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
		u[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
	}
	/* u[4g + c] holds, in 128-bit lane L, rows 4g..4g+3 of column 4L + c */
#pragma GCC unroll 4
	for (int c = 0; c < 4; c++) {
		__m512i w1 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0x88);
		__m512i w2 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0xdd);
		__m512i w3 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0x88);
		__m512i w4 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0xdd);
		r[c] = _mm512_shuffle_i32x4(w1, w3, 0x88);
		r[8 + c] = _mm512_shuffle_i32x4(w1, w3, 0xdd);
		r[4 + c] = _mm512_shuffle_i32x4(w2, w4, 0x88);
		r[12 + c] = _mm512_shuffle_i32x4(w2, w4, 0xdd);
	}
}

/* One A panel: rows i0 .. i0+mr-1 of op(X), k in [p0, p0 + kc). *maxbits is raised to the
 * largest packed magnitude (as float bits). */
static void pack_a(int trans, const float *X, size_t ldx, size_t i0, size_t mr, size_t p0,
                   size_t kc, uint32_t *a, uint32_t *maxbits)
{
	size_t np = (kc + 1) / 2;
	__m512i mx = _mm512_setzero_si512();
	if (!trans) { /* row panel [ZMR][np]: a row's pairs are adjacent floats of X */
		for (size_t i = 0; i < ZMR; i++) {
			uint32_t *dst = a + i * np;
			if (i >= mr) {
				memset(dst, 0, np * sizeof *dst);
				continue;
			}
			const float *src = X + (i0 + i) * ldx + p0;
			for (size_t q = 0; q < np; q += 16) {
				size_t k = 2 * q, n = kc - k < 32 ? kc - k : 32;
				__m512i w = adjacent_pairs(src + k, n);
				mx = word_max(mx, w);
				_mm512_mask_storeu_epi32(dst + q, lanes(np - q), w);
			}
		}
	} else {
		/* k-major [np][ZMR]: op(X)[i0 + i, k] = X[k * ldx + i0 + i], contiguous in i */
		__mmask8 m = (__mmask8)((1u << mr) - 1);
		for (size_t q = 0; q < np; q++) {
			const float *r0 = X + (p0 + 2 * q) * ldx + i0;
			__m256 f = _mm256_maskz_loadu_ps(m, r0);
			__m256 s = 2 * q + 1 < kc ? _mm256_maskz_loadu_ps(m, r0 + ldx)
			                          : _mm256_setzero_ps();
			__m256i w = (__m256i)_mm256_cvtne2ps_pbh(s, f); /* words: f (8), then s (8) */
			mx = word_max(mx, _mm512_zextsi256_si512(w));
			__m256i fw = _mm256_cvtepu16_epi32(_mm256_castsi256_si128(w));
			__m256i sw = _mm256_cvtepu16_epi32(_mm256_extracti128_si256(w, 1));
			_mm256_storeu_si256((__m256i *)(a + q * ZMR),
			                    _mm256_or_si256(_mm256_slli_epi32(fw, 16), sw));
		}
	}
	uint32_t m = word_max_bits(mx);
	*maxbits = m > *maxbits ? m : *maxbits;
}

/* Pairs of adjacent floats of rows j0 .. j0+nr-1 of S (k in [p0, p0 + kc)) as the words of
 * a [np][pw] panel, 16 rows x 16 pairs at a time, transposed: word (q, j) = (S[j0 + j, p0 +
 * 2q] << 16 | S[j0 + j, p0 + 2q + 1]); rows past nr and the partner of a lone last k are +0.
 * *maxbits is raised to the largest packed magnitude (as float bits). */
static void pack_pairs_t(const float *S, size_t lds, size_t j0, size_t nr, size_t pw, size_t p0,
                         size_t kc, uint32_t *out, uint32_t *maxbits)
{
	size_t np = (kc + 1) / 2;
	__m512i mx = _mm512_setzero_si512();
	for (size_t h = 0; h < pw; h += 16) {
		for (size_t q = 0; q < np; q += 16) {
			size_t k = 2 * q, n = kc - k < 32 ? kc - k : 32;
			__m512i r[16];
#pragma GCC unroll 16
			for (size_t j = 0; j < 16; j++) {
				r[j] = h + j < nr ? adjacent_pairs(S + (j0 + h + j) * lds + p0 + k, n)
				                  : _mm512_setzero_si512();
				mx = word_max(mx, r[j]);
			}
			transpose16(r);
			size_t cnt = np - q < 16 ? np - q : 16;
			for (size_t t = 0; t < cnt; t++)
				_mm512_storeu_si512(out + (q + t) * pw + h, r[t]);
		}
	}
	uint32_t m = word_max_bits(mx);
	*maxbits = m > *maxbits ? m : *maxbits;
}

/* One B panel of width pw (16 or 32): columns j0 .. j0+nr-1 of op(W), k in [p0, p0 + kc).
 * *maxbits is raised to the largest packed magnitude (as float bits). */
static void pack_b(int trans, const float *W, size_t ldw, size_t j0, size_t nr, size_t pw,
                   size_t p0, size_t kc, uint32_t *b, uint32_t *maxbits)
{
	size_t np = (kc + 1) / 2;
	if (trans) {
		/* op(W)[k, j0 + j] = W[(j0 + j) * ldw + k]: a column's pairs are adjacent
		 * floats of W */
		pack_pairs_t(W, ldw, j0, nr, pw, p0, kc, b, maxbits);
		if (kc & 1) /* the lone last k: its partner is -0 */
			for (size_t h = 0; h < pw; h += 16)
				_mm512_storeu_si512(
				    b + (np - 1) * pw + h,
				    _mm512_or_si512(_mm512_loadu_si512(b + (np - 1) * pw + h),
				                    _mm512_set1_epi32(0x8000)));
		return;
	}
	/* rows 2q and 2q+1 of op(W) are rows of W */
	__m512i mx = _mm512_setzero_si512();
	const __m512 negz = _mm512_set1_ps(-0.0f); /* the B pad: its product with +0 is -0 */
	for (size_t h = 0; h < pw; h += 16) {
		size_t n = nr > h ? nr - h : 0;
		__mmask16 m = lanes(n);
		for (size_t q = 0; q < np; q++) {
			const float *r0 = W + (p0 + 2 * q) * ldw + j0 + h;
			__m512 f = n ? _mm512_maskz_loadu_ps(m, r0) : _mm512_setzero_ps();
			__m512 s = 2 * q + 1 >= kc ? negz
			           : n             ? _mm512_maskz_loadu_ps(m, r0 + ldw)
			                           : _mm512_setzero_ps();
			__m512i w = pair_words(f, s);
			mx = word_max(mx, w);
			_mm512_storeu_si512(b + q * pw + h, w);
		}
	}
	uint32_t mb = word_max_bits(mx);
	*maxbits = mb > *maxbits ? mb : *maxbits;
}

/* C row += s (first: C = 0 + s, C not read; last: NaN lanes written as 0x7FC00000). */
static inline __attribute__((always_inline)) void zupdate(float *row, __m512 s, __mmask16 m,
                                                          int first, int last)
{
	__m512 v = _mm512_add_ps(first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m, row), s);
	if (last)
		v = _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q),
		                       _mm512_castsi512_ps(_mm512_set1_epi32(0x7fc00000)));
	_mm512_mask_storeu_ps(row, m, v);
}

/* One A panel against one B panel of NV vectors (pw = 16 NV columns), kc k values from a
 * tile boundary; MR rows of the panel are computed (ZMR, or 1 for a single row: one
 * example's inference, where the other rows would be padding). */
static inline __attribute__((always_inline)) void
zkernel(const int NV, const int MR, size_t kc, size_t R, const uint32_t *a, const size_t ais,
        const size_t aks, const uint32_t *b, float *c, size_t ldc, size_t mr, size_t nr,
        int flags)
{
	const size_t pw = 16 * (size_t)NV;
	__mmask16 m0 = lanes(nr), m1 = lanes(nr > 16 ? nr - 16 : 0);
	for (size_t t0 = 0; t0 < kc; t0 += R) {
		size_t len = kc - t0 < R ? kc - t0 : R, np = (len + 1) / 2;
		int first = t0 == 0 && (flags & TF_MXU_FIRST);
		int last = t0 + len == kc && (flags & TF_MXU_LAST);
		__m512 s0[ZMR], s1[ZMR];
#pragma GCC unroll 8
		for (int i = 0; i < ZMR; i++)
			s0[i] = s1[i] = _mm512_setzero_ps();
		const uint32_t *pa = a + (t0 / 2) * aks, *pb = b + (t0 / 2) * pw;
		for (size_t q = 0; q < np; q++) {
			__m512bh b0 = (__m512bh)_mm512_loadu_si512(pb), b1 = b0;
			if (NV > 1)
				b1 = (__m512bh)_mm512_loadu_si512(pb + 16);
#pragma GCC unroll 8
			for (int i = 0; i < MR; i++) {
				__m512bh x = (__m512bh)_mm512_set1_epi32((int)pa[(size_t)i * ais]);
				s0[i] = _mm512_dpbf16_ps(s0[i], x, b0);
				if (NV > 1)
					s1[i] = _mm512_dpbf16_ps(s1[i], x, b1);
			}
			pa += aks;
			pb += pw;
		}
#pragma GCC unroll 8
		for (int i = 0; i < ZMR; i++) {
			if ((size_t)i >= mr)
				break;
			zupdate(c + (size_t)i * ldc, s0[i], m0, first, last);
			if (NV > 1 && m1)
				zupdate(c + (size_t)i * ldc + 16, s1[i], m1, first, last);
		}
	}
}

/* One A panel (k-major [np][ZMR] or a row panel [ZMR][np]) against the B panels of an
 * nc-column block (panel j at b + j * pw * np). */
static void kernel_row(size_t kc, size_t R, const uint32_t *a, int kmajor, const uint32_t *b,
                       size_t pw, float *c, size_t ldc, size_t mr, size_t nc, int flags)
{
	size_t np = (kc + 1) / 2, ais = np;
	for (size_t jr = 0; jr < nc; jr += pw) {
		size_t nr = nc - jr < pw ? nc - jr : pw;
		const uint32_t *bp = b + jr * np;
		if (mr == 1) { /* one row: a k-major panel and a row panel read alike */
			if (pw == 16)
				zkernel(1, 1, kc, R, a, 1, kmajor ? ZMR : 1, bp, c + jr, ldc, mr, nr,
				        flags);
			else
				zkernel(2, 1, kc, R, a, 1, kmajor ? ZMR : 1, bp, c + jr, ldc, mr, nr,
				        flags);
		} else if (pw == 16) {
			if (kmajor)
				zkernel(1, ZMR, kc, R, a, 1, ZMR, bp, c + jr, ldc, mr, nr, flags);
			else
				zkernel(1, ZMR, kc, R, a, ais, 1, bp, c + jr, ldc, mr, nr, flags);
		} else {
			if (kmajor)
				zkernel(2, ZMR, kc, R, a, 1, ZMR, bp, c + jr, ldc, mr, nr, flags);
			else
				zkernel(2, ZMR, kc, R, a, ais, 1, bp, c + jr, ldc, mr, nr, flags);
		}
	}
}

/* ---- Narrow outputs (N <= NARROW_TX: a 10-class layer's forward pass and weight gradient) ----
 * A 16-column B panel would leave most lanes idle (10 of 16), so the lanes are 16 rows of C
 * instead: the vector operand is the pairs (k, k + 1) of 16 rows of op(X), and each column n
 * of op(W) is a broadcast pair from the packed B panel. With X transposed (dW = A^T . dZ),
 * op(X)[m, k] = X[k * ldx + m] is contiguous in m: rows k and k + 1 of X, converted on the fly,
 * are the pairs (no packing of X at all). Otherwise (Y = X . W) the 16 rows are packed first,
 * transposed, into a [np][16] panel of all of K (pack_pairs_t). NCOL tile sums and NCOL
 * running sums stay in registers; the result is transposed 16 x 16 and written as rows of C.
 * Each lane still runs the contract's chain. */
#define NARROW_TX 12

/* 16 rows (mr of them real) of C from op(X)'s rows read from X (X transposed) or, with PACKED,
 * from the panel apk. */
static inline __attribute__((always_inline)) void
narrow_rows(const int NCOL, const int PACKED, size_t K, size_t R, const float *X, size_t ldx,
            const uint32_t *apk, size_t mr, const uint32_t *b, float *c, size_t ldc)
{
	__m512 acc[16], s[NARROW_TX];
	__mmask16 m = lanes(mr);
#pragma GCC unroll 16
	for (int n = 0; n < 16; n++)
		acc[n] = _mm512_setzero_ps();
	for (size_t t0 = 0; t0 < K; t0 += R) {
		size_t end = K - t0 < R ? K : t0 + R;
#pragma GCC unroll 12
		for (int n = 0; n < NCOL; n++)
			s[n] = _mm512_setzero_ps();
		for (size_t k = t0; k < end; k += 2) {
			__m512bh x;
			if (PACKED) {
				x = (__m512bh)_mm512_loadu_si512(apk + (k / 2) * 16);
			} else {
				const float *r0 = X + k * ldx;
				__m512 f = _mm512_maskz_loadu_ps(m, r0);
				__m512 g = k + 1 < end ? _mm512_maskz_loadu_ps(m, r0 + ldx)
				                       : _mm512_setzero_ps(); /* the A pad: +0 */
				x = (__m512bh)pair_words(f, g);
			}
			const uint32_t *pb = b + (k / 2) * 16;
#pragma GCC unroll 12
			for (int n = 0; n < NCOL; n++)
				s[n] = _mm512_dpbf16_ps(s[n], x,
				                        (__m512bh)_mm512_set1_epi32((int)pb[n]));
		}
		/* acc = acc + s; acc is +0 before the first tile */
#pragma GCC unroll 12
		for (int n = 0; n < NCOL; n++)
			acc[n] = _mm512_add_ps(acc[n], s[n]);
	}
	const __m512 qnan = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fc00000));
	__m512i r[16];
#pragma GCC unroll 16
	for (int n = 0; n < 16; n++)
		r[n] = _mm512_castps_si512(
		    n < NCOL ? _mm512_mask_mov_ps(acc[n], _mm512_cmp_ps_mask(acc[n], acc[n], _CMP_UNORD_Q),
		                                  qnan)
		             : acc[n]);
	transpose16(r);
	for (size_t i = 0; i < mr; i++)
		_mm512_mask_storeu_ps(c + i * ldc, lanes((size_t)NCOL), _mm512_castsi512_ps(r[i]));
}

/* C = op(X) . op(W) for N <= NARROW_TX, op(W) in the 16-column panel b of all of K; abuf holds
 * (K + 1) / 2 * 16 words when X is not transposed. */
static void narrow(int trans_x, size_t M, size_t K, size_t N, const float *X, size_t ldx,
                   size_t R, const uint32_t *b, float *C, size_t ldc, uint32_t *abuf)
{
	for (size_t m0 = 0; m0 < M; m0 += 16) {
		size_t mr = M - m0 < 16 ? M - m0 : 16;
		const float *x = X + m0;
		float *c = C + m0 * ldc;
		if (!trans_x) {
			uint32_t unused = 0;
			pack_pairs_t(X, ldx, m0, mr, 16, 0, K, abuf, &unused);
		}
		switch (N * 2 + !trans_x) {
#define NARROW_CASE(n)                                                                             	case 2 * n:                                                                                		narrow_rows(n, 0, K, R, x, ldx, NULL, mr, b, c, ldc);                              		break;                                                                             	case 2 * n + 1:                                                                            		narrow_rows(n, 1, K, R, NULL, 0, abuf, mr, b, c, ldc);                             		break;
			NARROW_CASE(1)
			NARROW_CASE(2)
			NARROW_CASE(3)
			NARROW_CASE(4)
			NARROW_CASE(5)
			NARROW_CASE(6)
			NARROW_CASE(7)
			NARROW_CASE(8)
			NARROW_CASE(9)
			NARROW_CASE(10)
			NARROW_CASE(11)
			NARROW_CASE(12)
#undef NARROW_CASE
		default:
			break;
		}
	}
}

size_t tf_mxu_avx512_kc(size_t R)
{
	return R >= 256 ? R : R * (256 / R);
}

size_t tf_mxu_avx512_pw(size_t N)
{
	return N <= 16 ? 16 : 32;
}

size_t tf_mxu_avx512_packed_words(size_t K, size_t N, size_t R)
{
	size_t KC = tf_mxu_avx512_kc(R), pw = tf_mxu_avx512_pw(N);
	size_t cols = (N + pw - 1) / pw * pw, words = 0;
	for (size_t pc = 0; pc < K; pc += KC) {
		size_t kc = K - pc < KC ? K - pc : KC;
		words += (kc + 1) / 2 * cols;
	}
	return words;
}

uint32_t tf_mxu_avx512_pack_w(int trans_w, size_t K, size_t N, const float *W, size_t ldw,
                              size_t R, uint32_t *out)
{
	uint32_t maxbits = 0;
	size_t KC = tf_mxu_avx512_kc(R), pw = tf_mxu_avx512_pw(N);
	for (size_t pc = 0; pc < K; pc += KC) {
		size_t kc = K - pc < KC ? K - pc : KC, np = (kc + 1) / 2;
		for (size_t jr = 0; jr < N; jr += pw) {
			pack_b(trans_w, W, ldw, jr, N - jr < pw ? N - jr : pw, pw, pc, kc, out,
			       &maxbits);
			out += np * pw;
		}
	}
	return maxbits;
}

size_t tf_mxu_avx512_abuf_words(size_t M, size_t K, size_t N, size_t R)
{
	size_t KC = tf_mxu_avx512_kc(R), kc = K < KC ? K : KC, mc = M < MC ? M : MC;
	size_t words = (mc + ZMR - 1) / ZMR * ZMR * ((kc + 1) / 2);
	size_t narrow_words = (K + 1) / 2 * 16; /* narrow packs 16 rows of all of K */
	return N <= NARROW_TX && narrow_words > words ? narrow_words : words;
}

size_t tf_mxu_avx512_bbuf_words(size_t K, size_t N, size_t R)
{
	size_t KC = tf_mxu_avx512_kc(R), kc = K < KC ? K : KC, pw = tf_mxu_avx512_pw(N);
	size_t nc = N < NC ? N : NC;
	if (N <= NARROW_TX) /* narrow packs all of K at once */
		kc = K;
	return (nc + pw - 1) / pw * pw * ((kc + 1) / 2);
}

void tf_mxu_avx512_run(int trans_x, int trans_w, size_t M, size_t K, size_t N, const float *X,
                       size_t ldx, const float *W, size_t ldw, float *C, size_t ldc, size_t R,
                       const uint32_t *packed, size_t packed_n, uint32_t packed_max,
                       uint32_t *abuf, uint32_t *bbuf)
{
	const size_t KC = tf_mxu_avx512_kc(R);
	/* a packed op(W) is laid out for its own N (packed_n columns, of which this part
	 * uses the first N); otherwise B is packed here for this part's N */
	const size_t pw = tf_mxu_avx512_pw(packed ? packed_n : N);
	const size_t bcols = packed ? (packed_n + pw - 1) / pw * pw : 0;
	if (N <= NARROW_TX && pw == 16 && (trans_x || M >= 16)) {
		/* one 16-column panel: its kc blocks follow each other, and as KC is even the
		 * pairs run on across them, so the packed form is one panel of all of K */
		uint32_t unused = 0;
		if (!packed)
			pack_b(trans_w, W, ldw, 0, N, 16, 0, K, bbuf, &unused);
		narrow(trans_x, M, K, N, X, ldx, R, packed ? packed : bbuf, C, ldc, abuf);
		return;
	}
	for (size_t jc = 0; jc < N; jc += NC) {
		size_t nc = N - jc < NC ? N - jc : NC;
		const uint32_t *bk = packed;
		for (size_t pc = 0; pc < K; pc += KC) {
			size_t kc = K - pc < KC ? K - pc : KC, np = (kc + 1) / 2;
			const uint32_t *bb;
			uint32_t bmax = packed_max;
			if (packed) {
				bb = bk + jc * np;
				bk += np * bcols;
			} else {
				bmax = 0;
				for (size_t jr = 0; jr < nc; jr += pw)
					pack_b(trans_w, W, ldw, jc + jr, nc - jr < pw ? nc - jr : pw,
					       pw, pc, kc, bbuf + jr * np, &bmax);
				bb = bbuf;
			}
			for (size_t ic = 0; ic < M; ic += MC) {
				size_t mc = M - ic < MC ? M - ic : MC;
				uint32_t amax = 0;
				for (size_t ir = 0; ir < mc; ir += ZMR)
					pack_a(trans_x, X, ldx, ic + ir,
					       mc - ir < ZMR ? mc - ir : ZMR, pc, kc,
					       abuf + ir * np, &amax);
				/* With all of K in this block, the packed magnitudes bound every
				 * sum: when no output can be NaN the last tile skips writing NaNs
				 * canonically, a good part of the work of a short K. */
				int flags = (pc == 0 ? TF_MXU_FIRST : 0) |
				            (pc + kc == K && (kc < K || tf_mxu_may_overflow(amax, bmax, K))
				                 ? TF_MXU_LAST
				                 : 0);
				/* a small packed B stays in L1 while each A panel runs against all of
				 * it; a large one is walked one panel at a time against the A block */
				size_t jstep = nc * np <= SMALL_B ? nc : pw;
				for (size_t jr = 0; jr < nc; jr += jstep) {
					size_t n = nc - jr < jstep ? nc - jr : jstep;
					for (size_t ir = 0; ir < mc; ir += ZMR)
						kernel_row(kc, R, abuf + ir * np, trans_x,
						           bb + jr * np, pw,
						           C + (ic + ir) * ldc + jc + jr, ldc,
						           mc - ir < ZMR ? mc - ir : ZMR, n, flags);
				}
			}
		}
	}
}

int tf_mxu_avx512_probe(void)
{
	/* pairs whose two fused steps differ from one rounding, from a plain sum, and from the
	 * other order, plus an underflow that FTZ flushes, checked against fmaf under FTZ+DAZ
	 * (the caller's MXCSR is the contract's, tf_mxu_csr_enter(1)) */
	static const float xs[4][2] = {{16777216.0f, 1.0f}, {1.0f, 16777216.0f},
	                               {0x1p-63f, 3.0f}, {3.0f, -0.0f}};
	static const float ws[4][2] = {{1.0f, 1.0f}, {1.0f, -1.0f}, {0x1p-63f, -0.0f},
	                               {-5.0f, -0.0f}};
	static const float acc[4] = {1.0f, 1.0f, -0x1.8p-126f, 15.0f};
	for (int t = 0; t < 4; t++) {
		float want = fmaf(xs[t][1], ws[t][1], fmaf(xs[t][0], ws[t][0], acc[t]));
		__m512 a = _mm512_set1_ps(acc[t]);
		__m512i x = pair_words(_mm512_set1_ps(xs[t][0]), _mm512_set1_ps(xs[t][1]));
		__m512i w = pair_words(_mm512_set1_ps(ws[t][0]), _mm512_set1_ps(ws[t][1]));
		float got = _mm512_cvtss_f32(_mm512_dpbf16_ps(a, (__m512bh)x, (__m512bh)w));
		uint32_t g, h;
		memcpy(&g, &got, 4);
		memcpy(&h, &want, 4);
		if (g != h)
			return 0;
	}
	/* rounding: ties to even, a subnormal input flushed with its sign */
	static const uint32_t in[4] = {0x3f808000u, 0x3f818000u, 0x80000001u, 0x7f7fffffu};
	for (int t = 0; t < 4; t++) {
		float f;
		memcpy(&f, &in[t], 4);
		__m512i p = pair_words(_mm512_set1_ps(f), _mm512_set1_ps(f));
		uint32_t got = (uint32_t)_mm_cvtsi128_si32(_mm512_castsi512_si128(p));
		float r = tf_mxu_rnd(f, 1);
		uint32_t want;
		memcpy(&want, &r, 4);
		if (got != ((want & 0xffff0000u) | (want >> 16)))
			return 0;
	}
	return 1;
}

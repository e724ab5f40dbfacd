/* train_peer.c — the peer for bench/train.sh: the same MLP (784-256-128-10, ReLU, He init,
 * standardised inputs, batch 256, SGD momentum 0.9, lr 0.1, 1 warmup epoch then cosine) in
 * plain fp32 C with OpenBLAS cblas_sgemm, no emulation, no input pipeline. Prints one JSON
 * line {accuracy, seconds}. Runs only when bench/train.sh asks (TF_BENCH_PEER_EPOCHS set). */
#include "ml/rng.h"
#include "ml/source.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(void)
{
	const char *ep = getenv("TF_BENCH_PEER_EPOCHS");
	if (!ep) {
		printf("train_peer: the OpenBLAS peer of bench/train.sh (run there)\n");
		return 0;
	}
	int epochs = atoi(ep), B = 256, L = 3;
	int sz[4] = {784, 256, 128, 10};
	struct tf_rawset tr, te;
	char err[512];
	if (tf_fashion_load(NULL, 1, &tr, err, sizeof err) ||
	    tf_fashion_load(NULL, 0, &te, err, sizeof err)) {
		fprintf(stderr, "%s\n", err);
		return 1;
	}
	size_t n = tr.n, nt = te.n, D = 784;
	double s = 0, s2 = 0;
	for (size_t i = 0; i < n * D; i++) {
		s += tr.u8[i];
		s2 += (double)tr.u8[i] * tr.u8[i];
	}
	float mean = (float)(s / (double)(n * D));
	float inv = (float)(1.0 / sqrt(s2 / (double)(n * D) - (double)mean * mean));
	float *X = malloc(n * D * sizeof(float)), *XT = malloc(nt * D * sizeof(float));
	for (size_t i = 0; i < n * D; i++)
		X[i] = ((float)tr.u8[i] - mean) * inv;
	for (size_t i = 0; i < nt * D; i++)
		XT[i] = ((float)te.u8[i] - mean) * inv;
	float *W[3], *b[3], *vW[3], *vb[3], *gW[3], *gb[3], *A[4], *dA[4];
	uint64_t rs = 7;
	for (int l = 0; l < L; l++) {
		size_t k = (size_t)sz[l], m = (size_t)sz[l + 1];
		W[l] = malloc(k * m * 4);
		gW[l] = malloc(k * m * 4);
		vW[l] = calloc(k * m, 4);
		b[l] = calloc(m, 4);
		gb[l] = malloc(m * 4);
		vb[l] = calloc(m, 4);
		for (size_t i = 0; i < k * m; i++)
			W[l][i] = (float)(tf_rng_normal(&rs) * sqrt(2.0 / (double)k));
	}
	for (int l = 0; l <= L; l++) {
		A[l] = malloc((size_t)nt * (size_t)sz[l] * 4);
		dA[l] = malloc((size_t)B * (size_t)sz[l] * 4);
	}
	size_t *perm = malloc(n * sizeof *perm);
	for (size_t i = 0; i < n; i++)
		perm[i] = i;
	float *xb = malloc((size_t)B * D * 4);
	int *yb = malloc((size_t)B * sizeof(int));
	size_t spe = n / (size_t)B, total = spe * (size_t)epochs, step = 0;
	double t0 = now();
	for (int e = 0; e < epochs; e++) {
		for (size_t i = n; i > 1; i--) {
			size_t j = tf_rng_below(&rs, (uint32_t)i), t = perm[i - 1];
			perm[i - 1] = perm[j];
			perm[j] = t;
		}
		for (size_t it = 0; it < spe; it++, step++) {
			for (int r = 0; r < B; r++) {
				size_t id = perm[it * (size_t)B + (size_t)r];
				memcpy(xb + (size_t)r * D, X + id * D, D * 4);
				yb[r] = (int)tr.labels[id];
			}
			memcpy(A[0], xb, (size_t)B * D * 4);
			for (int l = 0; l < L; l++) {
				int k = sz[l], m = sz[l + 1];
				cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, B, m, k,
				            1.0f, A[l], k, W[l], m, 0.0f, A[l + 1], m);
				for (int r = 0; r < B; r++)
					for (int j = 0; j < m; j++) {
						float v = A[l + 1][r * m + j] + b[l][j];
						A[l + 1][r * m + j] = l + 1 < L && v < 0 ? 0 : v;
					}
			}
			for (int r = 0; r < B; r++) {
				float *z = A[L] + r * 10, mx = z[0], sum = 0;
				for (int j = 1; j < 10; j++)
					mx = z[j] > mx ? z[j] : mx;
				for (int j = 0; j < 10; j++)
					sum += expf(z[j] - mx);
				for (int j = 0; j < 10; j++)
					dA[L][r * 10 + j] =
					    (expf(z[j] - mx) / sum - (j == yb[r])) / (float)B;
			}
			for (int l = L - 1; l >= 0; l--) {
				int k = sz[l], m = sz[l + 1];
				cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, k, m, B, 1.0f,
				            A[l], k, dA[l + 1], m, 0.0f, gW[l], m);
				for (int j = 0; j < m; j++) {
					gb[l][j] = 0;
					for (int r = 0; r < B; r++)
						gb[l][j] += dA[l + 1][r * m + j];
				}
				if (l > 0) {
					cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, k,
					            m, 1.0f, dA[l + 1], m, W[l], m, 0.0f, dA[l], k);
					for (int i = 0; i < B * k; i++)
						if (A[l][i] <= 0)
							dA[l][i] = 0;
				}
			}
			double lr = step < spe ? 0.1 * (double)(step + 1) / (double)spe
			                       : 0.05 * (1 + cos(M_PI * (double)(step - spe) /
			                                         (double)(total - spe)));
			for (int l = 0; l < L; l++) {
				size_t k = (size_t)sz[l], m = (size_t)sz[l + 1];
				for (size_t i = 0; i < k * m; i++) {
					vW[l][i] = 0.9f * vW[l][i] + gW[l][i];
					W[l][i] -= (float)lr * vW[l][i];
				}
				for (size_t i = 0; i < m; i++) {
					vb[l][i] = 0.9f * vb[l][i] + gb[l][i];
					b[l][i] -= (float)lr * vb[l][i];
				}
			}
		}
	}
	double secs = now() - t0;
	/* test accuracy */
	memcpy(A[0], XT, nt * D * 4);
	for (int l = 0; l < L; l++) {
		int k = sz[l], m = sz[l + 1];
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)nt, m, k, 1.0f, A[l], k,
		            W[l], m, 0.0f, A[l + 1], m);
		for (size_t r = 0; r < nt; r++)
			for (int j = 0; j < m; j++) {
				float v = A[l + 1][r * (size_t)m + (size_t)j] + b[l][j];
				A[l + 1][r * (size_t)m + (size_t)j] = l + 1 < L && v < 0 ? 0 : v;
			}
	}
	size_t ok = 0;
	for (size_t r = 0; r < nt; r++) {
		int best = 0;
		for (int j = 1; j < 10; j++)
			if (A[L][r * 10 + (size_t)j] > A[L][r * 10 + (size_t)best])
				best = j;
		ok += best == te.labels[r];
	}
	printf("{\"accuracy\":%.4f,\"seconds\":%.2f,\"epochs\":%d}\n", (double)ok / (double)nt,
	       secs, epochs);
	return 0;
}

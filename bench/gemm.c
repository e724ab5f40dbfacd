/* bench/gemm.c — the fast MXU kernel against OpenBLAS cblas_sgemm in the same run: 1 and 2
 * threads, square 512/1024/2048 and the demo MLP's forward and backward shapes (batch 256,
 * 784-256-128-10), GFLOP/s and the ratio; then the cycle-level reference model's speed.
 *
 * The MXU kernel does more work than sgemm (it rounds every input to bf16 while packing and
 * keeps the systolic accumulation order); the ratio is what it costs to emulate the TPU's
 * numerics at CPU speed. Each figure is the best of 5 interleaved trials; before each 2-thread
 * trial the program sleeps 0.2 s so that OpenBLAS's spinning workers release the second core.
 * Usage: build/bench/gemm [--quick]  (--quick: fewer shapes, for a smoke run) */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "accel/mxu.h"
#include "common/common.h"

struct shape {
	const char *name;
	int tx, tw; /* MXU transposes; passed to sgemm too */
	size_t M, K, N;
};

static const struct shape shapes[] = {
	{ "square 512", 0, 0, 512, 512, 512 },
	{ "square 1024", 0, 0, 1024, 1024, 1024 },
	{ "square 2048", 0, 0, 2048, 2048, 2048 },
	{ "mlp fwd1 X.W1", 0, 0, 256, 784, 256 },
	{ "mlp fwd2 H1.W2", 0, 0, 256, 256, 128 },
	{ "mlp fwd3 H2.W3", 0, 0, 256, 128, 10 },
	{ "mlp dW1 X^T.dY1", 1, 0, 784, 256, 256 },
	{ "mlp dW2 H1^T.dY2", 1, 0, 256, 256, 128 },
	{ "mlp dW3 H2^T.dY3", 1, 0, 128, 256, 10 },
	{ "mlp dX2 dY2.W2^T", 0, 1, 256, 128, 256 },
	{ "mlp dX3 dY3.W3^T", 0, 1, 256, 10, 128 },
	/* one replica of a v4-8 slice: 8 TensorCores share the batch of 256 */
	{ "rep32 fwd1", 0, 0, 32, 784, 256 },
	{ "rep32 fwd2", 0, 0, 32, 256, 128 },
	{ "rep32 fwd3", 0, 0, 32, 128, 10 },
	{ "rep32 dW1", 1, 0, 784, 32, 256 },
	{ "rep32 dW2", 1, 0, 256, 32, 128 },
	{ "rep32 dW3", 1, 0, 128, 32, 10 },
	{ "rep32 dX2", 0, 1, 32, 128, 256 },
	{ "rep32 dX3", 0, 1, 32, 10, 128 },
};

struct ops {
	const struct shape *s;
	float *X, *W, *C;
	size_t ldx, ldw;
	struct tf_mxu_cfg cfg;
};

static void run_mxu(struct ops *o)
{
	const struct shape *s = o->s;
	tf_mxu_gemm(&o->cfg, s->tx, s->tw, s->M, s->K, s->N, o->X, o->ldx, o->W, o->ldw, o->C,
		    s->N, NULL);
}

static void run_blas(struct ops *o)
{
	const struct shape *s = o->s;
	cblas_sgemm(CblasRowMajor, s->tx ? CblasTrans : CblasNoTrans,
		    s->tw ? CblasTrans : CblasNoTrans, (int)s->M, (int)s->N, (int)s->K, 1.0f,
		    o->X, (int)o->ldx, o->W, (int)o->ldw, 0.0f, o->C, (int)s->N);
}

static double timed(void (*fn)(struct ops *), struct ops *o, int reps)
{
	double t0 = tf_now_monotonic();
	for (int i = 0; i < reps; i++)
		fn(o);
	return (tf_now_monotonic() - t0) / reps;
}

int main(int argc, char **argv)
{
	int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
	printf("MXU kernel: %s; OpenBLAS %s\n", tf_mxu_kernel_name(), openblas_get_config());
	printf("%-20s %3s %9s %9s %7s\n", "shape", "thr", "mxu GF/s", "blas GF/s", "ratio");
	double mlp_mxu[3] = { 0 }, mlp_blas[3] = { 0 }, rep_mxu[3] = { 0 }, rep_blas[3] = { 0 };
	for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
		const struct shape *s = &shapes[si];
		if (quick && s->M * s->K * s->N > 600 * 600 * 600)
			continue;
		struct ops o = { .s = s };
		size_t xr = s->tx ? s->K : s->M, xc = s->tx ? s->M : s->K;
		size_t wr = s->tw ? s->N : s->K, wc = s->tw ? s->K : s->N;
		o.ldx = xc;
		o.ldw = wc;
		o.X = tf_xmalloc(xr * xc * sizeof(float));
		o.W = tf_xmalloc(wr * wc * sizeof(float));
		o.C = tf_xmalloc(s->M * s->N * sizeof(float));
		srand(1);
		for (size_t i = 0; i < xr * xc; i++)
			o.X[i] = (float)rand() / RAND_MAX - 0.5f;
		for (size_t i = 0; i < wr * wc; i++)
			o.W[i] = (float)rand() / RAND_MAX - 0.5f;
		double flop = 2.0 * s->M * s->N * s->K;
		int maxthr = strncmp(s->name, "rep32", 5) == 0 ? 1 : 2;
		for (int thr = 1; thr <= maxthr; thr++) {
			tf_mxu_cfg_init(&o.cfg);
			o.cfg.threads = thr;
			openblas_set_num_threads(thr);
			run_mxu(&o);
			run_blas(&o);
			double est = timed(run_mxu, &o, 1);
			int reps = (int)(0.05 / (est > 1e-7 ? est : 1e-7)) + 1;
			if (reps > 2000)
				reps = 2000;
			double bm = 1e30, bb = 1e30;
			for (int trial = 0; trial < (quick ? 2 : 5); trial++) {
				/* OpenBLAS workers spin for a while after a call and would hold the
				 * second core during the MXU trial: let them go idle first. */
				if (thr > 1)
					nanosleep(&(struct timespec){ 0, 200 * 1000 * 1000 }, NULL);
				double tm = timed(run_mxu, &o, reps), tb = timed(run_blas, &o, reps);
				bm = tm < bm ? tm : bm;
				bb = tb < bb ? tb : bb;
			}
			printf("%-20s %3d %9.1f %9.1f %7.2f\n", s->name, thr, flop / bm / 1e9,
			       flop / bb / 1e9, bb / bm);
			if (strncmp(s->name, "mlp", 3) == 0) {
				mlp_mxu[thr] += bm;
				mlp_blas[thr] += bb;
			}
			if (strncmp(s->name, "rep32", 5) == 0) {
				rep_mxu[thr] += bm;
				rep_blas[thr] += bb;
			}
		}
		free(o.X);
		free(o.W);
		free(o.C);
	}
	for (int thr = 1; thr <= 2; thr++)
		printf("%-20s %3d %8.1fus %8.1fus %7.2f\n", "mlp step (sum)", thr, mlp_mxu[thr] * 1e6,
		       mlp_blas[thr] * 1e6, mlp_blas[thr] / mlp_mxu[thr]);
	printf("%-20s %3d %8.1fus %8.1fus %7.2f\n", "rep32 step (sum)", 1, rep_mxu[1] * 1e6,
	       rep_blas[1] * 1e6, rep_blas[1] / rep_mxu[1]);

	/* The cycle-level reference on the MLP's first layer (one 128x128 array). */
	size_t M = quick ? 64 : 256, K = 784, N = 256;
	float *X = tf_xmalloc(M * K * sizeof(float)), *W = tf_xmalloc(K * N * sizeof(float));
	float *C = tf_xmalloc(M * N * sizeof(float));
	for (size_t i = 0; i < M * K; i++)
		X[i] = (float)rand() / RAND_MAX;
	for (size_t i = 0; i < K * N; i++)
		W[i] = (float)rand() / RAND_MAX;
	struct tf_mxu_cfg cfg;
	struct tf_mxu_stats st;
	tf_mxu_cfg_init(&cfg);
	double t0 = tf_now_monotonic();
	tf_mxu_gemm_reference(&cfg, 0, 0, M, K, N, X, K, W, N, C, N, &st);
	double t = tf_now_monotonic() - t0;
	double pe_steps = (double)st.cycles * cfg.rows * cfg.cols;
	t0 = tf_now_monotonic();
	tf_mxu_gemm(&cfg, 0, 0, M, K, N, X, K, W, N, C, N, NULL);
	double tf = tf_now_monotonic() - t0;
	printf("reference model %zux%zux%zu on 128x128: %.3f s, %llu cycles simulated, "
	       "%.1f M PE-steps/s, %.3f GFLOP/s (fast kernel %.1f GFLOP/s, %.0fx)\n",
	       M, K, N, t, (unsigned long long)st.cycles, pe_steps / t / 1e6,
	       2.0 * M * K * N / t / 1e9, 2.0 * M * K * N / tf / 1e9, t / tf);
	free(X);
	free(W);
	free(C);
	return 0;
}

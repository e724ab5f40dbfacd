/* test_slice.c — the slice runtime: every replica runs once per tf_slice_run whatever the
 * thread count, the all-reduce is the documented ring order and gives the same bits for 1 and
 * 2 host threads, device time and HBM accounting. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "accel/mxu_int.h"
#include "accel/slice.h"

#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static struct tf_tpu_slice parse(const char *spec)
{
	struct tf_tpu_slice s;
	char err[256];
	if (tf_tpu_shape_parse(spec, &s, err, sizeof err)) /* also sub-mesh shapes */
		fail_msg("%s: %s", spec, err);
	return s;
}

struct count_ctx {
	int hits[64]; /* runs seen per replica */
};

static void count_fn(struct tf_slice_replica *r, void *arg)
{
	struct count_ctx *c = arg;
	c->hits[r->index]++; /* each replica owns its slot */
}

static void test_slice_every_replica_runs_once(void **state)
{
	(void)state;
	struct tf_tpu_slice s = parse("v4-32");
	for (int threads = 1; threads <= 2; threads++) {
		struct tf_slice_rt *rt;
		assert_int_equal(tf_slice_rt_new(&s, threads, 1, &rt), 0);
		assert_int_equal(tf_slice_rt_replicas(rt), 32);
		assert_true(tf_slice_rt_threads(rt) <= threads);
		struct count_ctx c;
		memset(&c, 0, sizeof c);
		for (int run = 0; run < 50; run++)
			tf_slice_run(rt, count_fn, &c);
		for (int i = 0; i < 32; i++)
			assert_int_equal(c.hits[i], 50);
		tf_slice_rt_free(rt);
	}
	tf_slice_rt_free(NULL);
}

/* Data-parallel step: replica r computes G_r = X_r^T . dY_r on its shard. */
struct dp_ctx {
	const float *X, *dY; /* global batch B x K and B x N */
	size_t B, K, N;
	float **grads; /* per replica K x N */
};

static void dp_fn(struct tf_slice_replica *r, void *arg)
{
	struct dp_ctx *c = arg;
	size_t start, count;
	tf_slice_shard(c->B, r->replicas, r->index, &start, &count);
	tf_slice_gemm(r, 1, 0, c->K, count, c->N, c->X + start * c->K, c->K, c->dY + start * c->N,
	              c->N, c->grads[r->index], c->N);
}

static float *dp_step(const char *spec, int threads, struct tf_slice_stats *st)
{
	struct tf_tpu_slice s = parse(spec);
	struct tf_slice_rt *rt;
	assert_int_equal(tf_slice_rt_new(&s, threads, 1, &rt), 0);
	size_t B = 100, K = 33, N = 20;
	float *X = malloc(B * K * sizeof *X), *dY = malloc(B * N * sizeof *dY);
	srand(3);
	for (size_t i = 0; i < B * K; i++)
		X[i] = (float)ldexp((double)rand() / RAND_MAX - 0.5, rand() % 30 - 15);
	for (size_t i = 0; i < B * N; i++)
		dY[i] = (float)((double)rand() / RAND_MAX - 0.5);
	int R = tf_slice_rt_replicas(rt);
	float **grads = calloc((size_t)R, sizeof *grads);
	for (int i = 0; i < R; i++)
		grads[i] = calloc(K * N, sizeof(float));
	struct dp_ctx c = {X, dY, B, K, N, grads};
	tf_slice_run(rt, dp_fn, &c);
	tf_slice_allreduce(rt, grads, K * N);
	for (int i = 1; i < R; i++)
		assert_memory_equal(grads[0], grads[i], K * N * sizeof(float));
	float *out = malloc(K * N * sizeof *out);
	memcpy(out, grads[0], K * N * sizeof *out);
	tf_slice_stats(rt, st);
	for (int i = 0; i < R; i++)
		free(grads[i]);
	free(grads);
	free(X);
	free(dY);
	tf_slice_rt_free(rt);
	return out;
}

static void test_slice_allreduce_same_bits_any_thread_count(void **state)
{
	(void)state;
	const char *specs[] = {"v4-8", "v4-32", "v5litepod-16", "v2-8"};
	for (size_t i = 0; i < 4; i++) {
		struct tf_slice_stats s1, s2;
		float *a = dp_step(specs[i], 1, &s1), *b = dp_step(specs[i], 2, &s2);
		assert_memory_equal(a, b, 33 * 20 * sizeof(float));
		assert_int_equal(s1.cycles, s2.cycles);
		assert_true(s1.device_seconds == s2.device_seconds);
		free(a);
		free(b);
	}
}

static void test_slice_allreduce_ring_order(void **state)
{
	(void)state;
	/* v5e:2x4: 8 replicas (1 core per chip), rings over x (2) then y (4). */
	struct tf_tpu_slice s = parse("v5e:2x4");
	struct tf_slice_rt *rt;
	assert_int_equal(tf_slice_rt_new(&s, 2, 0, &rt), 0);
	enum { P = 8, N = 13 };
	float v[P][N], *bufs[P];
	srand(11);
	for (int r = 0; r < P; r++) {
		for (int e = 0; e < N; e++)
			v[r][e] = (float)ldexp((double)rand() / RAND_MAX - 0.5, rand() % 40 - 20);
		bufs[r] = malloc(N * sizeof(float));
		memcpy(bufs[r], v[r], sizeof v[r]);
	}
	tf_slice_allreduce(rt, bufs, N);
	/* Expected: x rings (replicas 2y and 2y+1), two chunks: chunk 0 = v1 + v0,
	 * chunk 1 = v0 + v1; then y rings (stride 2), four chunks, chunk j summed from member
	 * j+1 round to member j. */
	float xr[P][N];
	for (int y = 0; y < 4; y++) {
		for (int e = 0; e < N; e++) {
			int j = 0;
			for (int jj = 0; jj < 2; jj++)
				if ((size_t)e >= (size_t)N * jj / 2 &&
				    (size_t)e < (size_t)N * (jj + 1) / 2)
					j = jj;
			float a = v[2 * y + (j + 1) % 2][e], b = v[2 * y + j][e];
			xr[2 * y][e] = xr[2 * y + 1][e] = a + b;
		}
	}
	for (int x = 0; x < 2; x++) {
		for (int e = 0; e < N; e++) {
			int j = 0;
			for (int jj = 0; jj < 4; jj++)
				if ((size_t)e >= (size_t)N * jj / 4 &&
				    (size_t)e < (size_t)N * (jj + 1) / 4)
					j = jj;
			float acc = xr[x + 2 * ((j + 1) % 4)][e];
			for (int st = 2; st <= 4; st++)
				acc = acc + xr[x + 2 * ((j + st) % 4)][e];
			for (int y = 0; y < 4; y++)
				assert_memory_equal(&bufs[x + 2 * y][e], &acc, sizeof acc);
		}
	}
	/* alpha-beta: x ring p=2, y ring p=4, no on-chip ring */
	double bytes = N * 4.0, a = s.gen->ici_alpha, bw = s.gen->ici_bw;
	double want = 2 * 1 * a + 2.0 * 1 / 2 * bytes / bw + 2 * 3 * a + 2.0 * 3 / 4 * bytes / bw;
	assert_true(fabs(tf_slice_allreduce_seconds(&s, bytes) - want) < 1e-15);
	struct tf_slice_stats st;
	tf_slice_stats(rt, &st);
	assert_int_equal(st.allreduces, 1);
	assert_true(fabs(st.collective_seconds - want) < 1e-15);
	for (int r = 0; r < P; r++)
		free(bufs[r]);
	tf_slice_rt_free(rt);
}

/* The ring semantics written out plainly: per dimension (cores, x, y, z), per ring, chunk j
 * summed from member j+1 round to member j, copied to all members. */
static void ring_reference(const struct tf_tpu_slice *s, float **bufs, size_t n)
{
	int cpc = s->gen->cores_per_chip;
	int size[4] = {cpc, s->dims[0], s->dims[1], s->dims[2]};
	int stride[4] = {1, cpc, cpc * s->dims[0], cpc * s->dims[0] * s->dims[1]};
	int R = s->cores;
	float *acc = malloc(n * sizeof *acc);
	for (int d = 0; d < 4; d++) {
		int p = size[d], st = stride[d];
		if (p <= 1)
			continue;
		for (int base = 0; base < R; base++) {
			if ((base / st) % p)
				continue;
			for (int j = 0; j < p; j++) {
				size_t lo = n * (size_t)j / (size_t)p,
				       hi = n * (size_t)(j + 1) / (size_t)p;
				for (size_t e = lo; e < hi; e++) {
					float a = bufs[base + ((j + 1) % p) * st][e];
					for (int k = 2; k <= p; k++)
						a = a + bufs[base + ((j + k) % p) * st][e];
					acc[e] = a;
				}
				for (int m = 0; m < p; m++)
					memcpy(bufs[base + m * st] + lo, acc + lo,
					       (hi - lo) * sizeof *acc);
			}
		}
	}
	free(acc);
}

/* Wrap-around links double a ring's bandwidth term: v4-128 (4x4x4) wraps in every dimension,
 * v4-32 (2x2x4) only along z, v5p-32 (2x2x4, smaller than a cube) nowhere. */
static void test_slice_allreduce_torus_vs_mesh(void **state)
{
	(void)state;
	double bytes = 1 << 20;
	struct tf_tpu_slice s = parse("v4-32");
	assert_int_equal(s.wrap[0], 0);
	assert_int_equal(s.wrap[1], 0);
	assert_int_equal(s.wrap[2], 1);
	const struct tf_tpu_gen *g = s.gen;
	double a = g->ici_alpha, B = g->ici_bw, hbm = g->hbm_bw;
	double want = 2.0 * 1 / 2 * bytes / hbm                    /* the chip's 2 cores */
	              + 2 * (2 * 1 * a + 2.0 * 1 / 2 * bytes / B)  /* x, y: mesh, p = 2 */
	              + 2 * 3 * a + 2.0 * 3 / 4 * bytes / (2 * B); /* z: ring both ways */
	assert_true(fabs(tf_slice_allreduce_seconds(&s, bytes) - want) < 1e-15);
	struct tf_tpu_slice p = parse("v5p-32");
	assert_int_equal(p.wrap[0] + p.wrap[1] + p.wrap[2], 0);
	struct tf_tpu_slice c = parse("v5p-128");
	assert_int_equal(c.wrap[0] + c.wrap[1] + c.wrap[2], 3);
}

/* tf_slice_allreduce_gen's generator for the test: replica r's values are bufs[r]; each call
 * is counted, and ranges must lie inside [0, n). */
struct gen_ctx {
	float *const *bufs;
	size_t n;
	_Atomic size_t floats; /* generated, over all calls */
};

static void copy_gen(int replica, size_t lo, size_t hi, float *out, void *arg)
{
	struct gen_ctx *g = arg;
	if (lo >= hi || hi > g->n)
		abort();
	memcpy(out, g->bufs[replica] + lo, (hi - lo) * sizeof(float));
	atomic_fetch_add(&g->floats, hi - lo);
}

static void test_slice_allreduce_blocks_match_ring_reference(void **state)
{
	(void)state;
	const char *specs[] = {"v4-32", "v3-32", "v5e:2x4", "v4:1x1x1", "v5p-16"};
	const size_t sizes[] = {1, 7, 2048, 2049, 10007, 70001};
	for (size_t si = 0; si < sizeof specs / sizeof specs[0]; si++) {
		struct tf_tpu_slice s = parse(specs[si]);
		int R = s.cores;
		for (size_t zi = 0; zi < sizeof sizes / sizeof sizes[0]; zi++) {
			size_t n = sizes[zi];
			float **want = calloc((size_t)R, sizeof *want);
			float **got[2];
			srand((unsigned)(n + si));
			for (int t = 0; t < 2; t++)
				got[t] = calloc((size_t)R, sizeof *got[t]);
			for (int r = 0; r < R; r++) {
				want[r] = malloc(n * sizeof(float));
				for (size_t e = 0; e < n; e++)
					want[r][e] = (float)ldexp((double)rand() / RAND_MAX - 0.5,
					                          rand() % 50 - 25);
				for (int t = 0; t < 2; t++) {
					got[t][r] = malloc(n * sizeof(float));
					memcpy(got[t][r], want[r], n * sizeof(float));
				}
			}
			unsigned saved = tf_mxu_csr_enter(1);
			ring_reference(&s, want, n);
			tf_mxu_csr_leave(saved);
			for (int t = 0; t < 2; t++) {
				struct tf_slice_rt *rt;
				assert_int_equal(tf_slice_rt_new(&s, t + 1, 1, &rt), 0);
				/* generated block by block: the same bits, each replica's
				 * values asked for once, the buffers untouched */
				struct gen_ctx g = {.bufs = got[t], .n = n};
				float *sum = malloc(n * sizeof(float));
				struct tf_slice_stats st;
				tf_slice_allreduce_gen(rt, n, copy_gen, &g, sum);
				tf_slice_stats(rt, &st);
				if (memcmp(sum, want[0], n * sizeof(float)))
					fail_msg("%s n=%zu threads=%d: allreduce_gen differs",
					         specs[si], n, t + 1);
				assert_int_equal(atomic_load(&g.floats), n * (size_t)R);
				assert_int_equal(st.allreduces, 1);
				free(sum);
				/* first only replica 0's buffer, then every buffer */
				float *orig = malloc(2 * n * sizeof(float) + 1);
				memcpy(orig, got[t][0], n * sizeof(float));
				memcpy(orig + n, got[t][R - 1], n * sizeof(float));
				tf_slice_allreduce_first(rt, got[t], n);
				if (memcmp(got[t][0], want[0], n * sizeof(float)) ||
				    (R > 1 && memcmp(got[t][R - 1], orig + n, n * sizeof(float))))
					fail_msg("%s n=%zu threads=%d: allreduce_first differs",
					         specs[si], n, t + 1);
				memcpy(got[t][0], orig, n * sizeof(float));
				free(orig);
				tf_slice_allreduce(rt, got[t], n);
				tf_slice_allreduce(rt, got[t], 0); /* empty is fine */
				tf_slice_rt_free(rt);
				for (int r = 0; r < R; r++)
					if (memcmp(got[t][r], want[r], n * sizeof(float)))
						fail_msg("%s n=%zu threads=%d replica %d differs",
						         specs[si], n, t + 1, r);
			}
			for (int r = 0; r < R; r++) {
				free(want[r]);
				free(got[0][r]);
				free(got[1][r]);
			}
			free(want);
			free(got[0]);
			free(got[1]);
		}
	}
}

static void test_slice_device_time(void **state)
{
	(void)state;
	struct tf_slice_stats st;
	float *g = dp_step("v4-8", 2, &st);
	free(g);
	/* 100 rows over 8 replicas: shards of 13 or 12; the slowest sets the time. Each is
	 * (K=33) x (shard) . (shard) x 20: one fold of 2R + C + T - 2 with T = 33. */
	struct tf_mxu_model m;
	tf_mxu_model(TF_MXU_WS, 33, 13, 20, 128, 128, 4, &m);
	assert_int_equal(st.runs, 1);
	assert_int_equal(st.cycles, m.core_cycles);
	assert_true(fabs(st.compute_seconds - (double)m.core_cycles / 1050e6) < 1e-15);
	assert_int_equal(st.macs, (uint64_t)33 * 100 * 20);
	assert_true(st.mxu_utilization > 0 && st.mxu_utilization < 1);
	assert_true(fabs(st.device_seconds - st.compute_seconds - st.collective_seconds) < 1e-15);
}

/* Device time per GEMM is a roofline: a tall GEMM with K = N = 128 moves more bytes per
 * MXU cycle than a v4 core's HBM share delivers (600 GB/s at 1.05 GHz: 571 bytes/cycle). */
static void test_slice_gemm_roofline(void **state)
{
	(void)state;
	const struct tf_tpu_gen *v4 = tf_tpu_gen_find("v4");
	struct tf_mxu_model m;
	tf_mxu_model(TF_MXU_WS, 10000, 128, 128, 128, 128, 4, &m);
	uint64_t bytes, c = tf_slice_gemm_cycles(v4, 10000, 128, 128, m.core_cycles, &bytes);
	assert_int_equal(bytes, (10000 * 128 + 128 * 128) * 2 + 10000 * 128 * 4);
	double per_cycle = 1200e9 / 2 / 1050e6;
	assert_int_equal(c, (uint64_t)ceil((double)bytes / per_cycle));
	assert_true(c > m.core_cycles); /* memory-bound */
	/* a square GEMM is compute-bound: the roofline is its MXU cycles */
	tf_mxu_model(TF_MXU_WS, 1024, 1024, 1024, 128, 128, 4, &m);
	assert_int_equal(tf_slice_gemm_cycles(v4, 1024, 1024, 1024, m.core_cycles, NULL),
	                 m.core_cycles);
}

static void test_slice_hbm_and_shard(void **state)
{
	(void)state;
	struct tf_tpu_slice s = parse("v4-8");
	char err[256] = "";
	assert_int_equal(tf_slice_check_hbm(&s, 10e9, err, sizeof err), 0);
	assert_int_equal(tf_slice_check_hbm(&s, 20e9, err, sizeof err), -ENOMEM);
	assert_non_null(strstr(err, "v4 TensorCore has 17.2 GB"));
	size_t start, count, total = 0;
	static const size_t want[4] = {3, 3, 2, 2};
	for (int i = 0; i < 4; i++) {
		tf_slice_shard(10, 4, i, &start, &count);
		assert_int_equal(start, total);
		assert_int_equal(count, want[i]);
		total += count;
	}
	assert_int_equal(tf_slice_rt_new(NULL, 1, 1, &(struct tf_slice_rt *){NULL}), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_slice_every_replica_runs_once),
	    cmocka_unit_test(test_slice_allreduce_same_bits_any_thread_count),
	    cmocka_unit_test(test_slice_allreduce_ring_order),
	    cmocka_unit_test(test_slice_allreduce_blocks_match_ring_reference),
	    cmocka_unit_test(test_slice_allreduce_torus_vs_mesh),
	    cmocka_unit_test(test_slice_device_time),
	    cmocka_unit_test(test_slice_gemm_roofline),
	    cmocka_unit_test(test_slice_hbm_and_shard),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

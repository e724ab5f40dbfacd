/* s3_ckpt.c — checkpoint save/load throughput to an S3 server: a 64 MiB checkpoint (4 tensors
 * of 16 MiB, so multipart with parallel parts) saved and loaded TF_BENCH_REPS times (default
 * 3); prints the median of each. Run by bench/s3.sh, which starts a local S3 server and sets
 * TF_S3_BENCH_URL (s3://BUCKET/PREFIX) and the AWS_* variables; skips without them. */
#include "common/common.h"
#include "storage/ckpt.h"
#include "storage/objstore.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

int main(void)
{
	const char *url = getenv("TF_S3_BENCH_URL");
	if (!url || !*url) {
		printf(
		    "s3_ckpt: skipped: TF_S3_BENCH_URL is unset (bench/s3.sh runs this against a "
		    "local S3 server)\n");
		return 0;
	}
	int reps = getenv("TF_BENCH_REPS") ? atoi(getenv("TF_BENCH_REPS")) : 3;
	if (reps < 1 || reps > 50)
		reps = 3;
	struct tf_objstore *s;
	char err[512];
	if (tf_objstore_open(url, &s, err, sizeof err)) {
		fprintf(stderr, "s3_ckpt: %s\n", err);
		return 1;
	}
	enum { NT = 4 };
	size_t per = 16u << 20;
	struct tf_ckpt_tensor t[NT];
	char names[NT][16];
	for (int i = 0; i < NT; i++) {
		unsigned char *b = tf_xmalloc(per);
		uint32_t x = 0x9e3779b9u * (uint32_t)(i + 1);
		for (size_t j = 0; j < per; j++) {
			x ^= x << 13;
			x ^= x >> 17;
			x ^= x << 5;
			b[j] = (unsigned char)x;
		}
		snprintf(names[i], sizeof names[i], "layer%d", i);
		t[i] = (struct tf_ckpt_tensor){names[i], b, per};
	}
	double *save = tf_xcalloc((size_t)reps, sizeof *save);
	double *load = tf_xcalloc((size_t)reps, sizeof *load);
	int rc = 0;
	for (int r = 0; r < reps && !rc; r++) {
		double t0 = tf_now_monotonic();
		rc = tf_ckpt_save(s, "bench", 1000 + r, t, NT, "{\"bench\":true}");
		save[r] = tf_now_monotonic() - t0;
		if (rc)
			break;
		struct tf_ckpt *c;
		t0 = tf_now_monotonic();
		rc = tf_ckpt_load(s, "bench", 1000 + r, &c);
		load[r] = tf_now_monotonic() - t0;
		if (rc)
			break;
		for (int i = 0; i < NT; i++) {
			size_t n;
			const void *p = tf_ckpt_tensor(c, names[i], &n);
			if (!p || n != per || memcmp(p, t[i].data, per)) {
				fprintf(stderr, "s3_ckpt: tensor %s came back different\n",
				        names[i]);
				rc = 1;
			}
		}
		tf_ckpt_free(c);
	}
	if (rc) {
		fprintf(stderr, "s3_ckpt: %s\n", tf_objstore_errmsg(s));
	} else {
		qsort(save, (size_t)reps, sizeof *save, cmp_double);
		qsort(load, (size_t)reps, sizeof *load, cmp_double);
		double mib = (double)(NT * per) / (1 << 20);
		printf("tpuflow ckpt save  %4.0f MiB: median %.3f s  %7.1f MiB/s  (%d runs)\n", mib,
		       save[reps / 2], mib / save[reps / 2], reps);
		printf("tpuflow ckpt load  %4.0f MiB: median %.3f s  %7.1f MiB/s  (%d runs)\n", mib,
		       load[reps / 2], mib / load[reps / 2], reps);
		struct tf_ckpt_gc_opts go = {.keep_last = 1};
		tf_ckpt_gc(s, "bench", &go, NULL);
	}
	for (int i = 0; i < NT; i++)
		free((void *)t[i].data);
	free(save);
	free(load);
	tf_objstore_free(s);
	return rc ? 1 : 0;
}

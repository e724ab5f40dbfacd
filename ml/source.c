/* source.c — Fashion-MNIST IDX reader (gzip through zlib) and the CSV source. */
#include "ml/source.h"

#include "common/common.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

const char *const tf_fashion_classes[10] = {
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
    "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot",
};

void tf_rawset_release(struct tf_rawset *r)
{
	if (!r)
		return;
	free(r->u8);
	free(r->f32);
	free(r->labels);
	memset(r, 0, sizeof *r);
}

#define GZ_MAX ((size_t)1 << 32) /* decompressed bytes an IDX file may have */

/* Reads a whole gzip file into memory, at most GZ_MAX bytes of it. */
static int gz_read_all(const char *path, unsigned char **out, size_t *olen, char *err,
                       size_t errlen)
{
	gzFile gz = gzopen(path, "rb");
	if (!gz) {
		tf_errf(err, errlen,
		        "cannot open '%s': %s; install the data set with "
		        "'apt-get install dataset-fashion-mnist' (package dataset-fashion-mnist) "
		        "or pass its directory",
		        path, strerror(errno ? errno : ENOENT));
		return -ENOENT;
	}
	gzbuffer(gz, 1 << 17);
	size_t cap = 1 << 20, len = 0;
	unsigned char *buf = tf_xmalloc(cap);
	for (;;) {
		if (cap - len < (1 << 16)) {
			void *nb = cap < GZ_MAX ? realloc(buf, cap * 2) : NULL;
			if (!nb) {
				/* a small file can inflate without end (a gzip bomb) */
				tf_errf(
				    err, errlen,
				    "'%s' decompresses to more than %zu MiB (or memory ran out); "
				    "it is not an IDX file of this data set",
				    path, len >> 20);
				gzclose(gz);
				free(buf);
				return -EBADMSG;
			}
			buf = nb;
			cap *= 2;
		}
		int n = gzread(gz, buf + len, (unsigned)(cap - len));
		if (n < 0) {
			int zerr;
			tf_errf(err, errlen,
			        "'%s': gzip error: %s; the file is damaged, reinstall "
			        "dataset-fashion-mnist",
			        path, gzerror(gz, &zerr));
			gzclose(gz);
			free(buf);
			return -EBADMSG;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	gzclose(gz);
	*out = buf;
	*olen = len;
	return 0;
}

static uint32_t be32(const unsigned char *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Parses an IDX file of unsigned bytes with ndims dimensions (magic 0x0000080N). */
static int idx_parse(const char *path, const unsigned char *b, size_t len, int ndims,
                     uint32_t *dims, const unsigned char **data, char *err, size_t errlen)
{
	size_t hdr = 4 + 4 * (size_t)ndims;
	if (len < hdr || be32(b) != (0x00000800u | (uint32_t)ndims)) {
		tf_errf(err, errlen, "'%s': not an IDX file of %d-dimensional unsigned bytes", path,
		        ndims);
		return -EBADMSG;
	}
	size_t total = 1;
	int wrapped = 0;
	for (int i = 0; i < ndims; i++) {
		dims[i] = be32(b + 4 + 4 * i);
		wrapped |= __builtin_mul_overflow(total, (size_t)dims[i], &total);
	}
	if (wrapped) {
		tf_errf(err, errlen,
		        "'%s': IDX dimensions %u x %u x %u overflow; the file is damaged", path,
		        dims[0], ndims > 1 ? dims[1] : 1, ndims > 2 ? dims[2] : 1);
		return -EBADMSG;
	}
	if (len - hdr != total) {
		tf_errf(err, errlen, "'%s': IDX header promises %zu bytes of data, file has %zu",
		        path, total, len - hdr);
		return -EBADMSG;
	}
	*data = b + hdr;
	return 0;
}

int tf_fashion_load(const char *dir, int train, struct tf_rawset *out, char *err, size_t errlen)
{
	const char *pre = train ? "train" : "t10k";
	char ipath[PATH_MAX], lpath[PATH_MAX];
	unsigned char *ib = NULL, *lb = NULL;
	size_t il, ll;
	const unsigned char *idata, *ldata;
	uint32_t idims[3], ldims[1];
	int rc;

	if (!dir || !*dir)
		dir = TF_FASHION_MNIST_DIR;
	snprintf(ipath, sizeof ipath, "%s/%s-images-idx3-ubyte.gz", dir, pre);
	snprintf(lpath, sizeof lpath, "%s/%s-labels-idx1-ubyte.gz", dir, pre);
	if ((rc = gz_read_all(ipath, &ib, &il, err, errlen)) ||
	    (rc = gz_read_all(lpath, &lb, &ll, err, errlen)))
		goto out;
	if ((rc = idx_parse(ipath, ib, il, 3, idims, &idata, err, errlen)) ||
	    (rc = idx_parse(lpath, lb, ll, 1, ldims, &ldata, err, errlen)))
		goto out;
	if (idims[0] != ldims[0]) {
		tf_errf(err, errlen, "'%s' has %u images but '%s' has %u labels", ipath, idims[0],
		        lpath, ldims[0]);
		rc = -EBADMSG;
		goto out;
	}
	struct tf_rawset r = {.n = idims[0],
	                      .dim = (size_t)idims[1] * idims[2],
	                      .rows = (int)idims[1],
	                      .cols = (int)idims[2],
	                      .num_classes = 0};
	/* r.n * r.dim is the checked IDX product, bounded by the file's length */
	r.u8 = tf_xmalloc(r.n * r.dim);
	memcpy(r.u8, idata, r.n * r.dim);
	r.labels = tf_xmalloc(r.n * sizeof *r.labels);
	for (size_t i = 0; i < r.n; i++) {
		r.labels[i] = ldata[i];
		if (ldata[i] + 1 > r.num_classes)
			r.num_classes = ldata[i] + 1;
	}
	*out = r;
out:
	free(ib);
	free(lb);
	return rc;
}

/* Splits a CSV line in place on commas (no quoting: numeric tables only). */
static size_t split_fields(char *line, char **f, size_t max)
{
	size_t n = 0;
	char *p = line;
	for (;;) {
		if (n < max)
			f[n] = p;
		n++;
		char *c = strchr(p, ',');
		if (!c)
			break;
		*c = 0;
		p = c + 1;
	}
	return n;
}

static char *trim(char *s)
{
	while (*s == ' ' || *s == '\t' || *s == '"')
		s++;
	size_t l = strlen(s);
	while (l && (s[l - 1] == ' ' || s[l - 1] == '\t' || s[l - 1] == '\r' || s[l - 1] == '\n' ||
	             s[l - 1] == '"'))
		s[--l] = 0;
	return s;
}

/* Doubles the row capacity of r (starting small for wide tables: a header's column count
 * is untrusted), with every product checked. 0 or -ENOMEM; r stays valid on failure. */
static int csv_grow(struct tf_rawset *r, size_t *cap)
{
	/* a row takes at least dim bytes of text, so rows * dim stays below the file's size */
	size_t first = ((size_t)1 << 22) / r->dim, fb, lb;
	size_t ncap = *cap ? 2 * *cap : first < 1 ? 1 : first > 1024 ? 1024 : first;
	if (__builtin_mul_overflow(ncap, r->dim, &fb) ||
	    __builtin_mul_overflow(fb, sizeof(float), &fb) ||
	    __builtin_mul_overflow(ncap, sizeof(int64_t), &lb))
		return -ENOMEM;
	float *f = realloc(r->f32, fb);
	if (!f)
		return -ENOMEM;
	r->f32 = f;
	int64_t *l = realloc(r->labels, lb);
	if (!l)
		return -ENOMEM;
	r->labels = l;
	*cap = ncap;
	return 0;
}

int tf_csv_load(const char *path, const char *label_col, struct tf_rawset *out, char *err,
                size_t errlen)
{
	char *text = NULL, **fields = NULL;
	size_t tlen, nf, label = SIZE_MAX, cap = 0;
	struct tf_rawset r = {0};
	int rc;

	if (!label_col || !*label_col)
		label_col = "label";
	if ((rc = tf_read_file(path, (size_t)1 << 32, &text, &tlen))) {
		tf_errf(err, errlen, "cannot read CSV '%s': %s", path, strerror(-rc));
		goto out;
	}
	char *save = NULL, *line = strtok_r(text, "\n", &save);
	if (!line) {
		tf_errf(err, errlen, "'%s': empty CSV file (a header line is needed)", path);
		rc = -EBADMSG;
		goto out;
	}
	nf = 1;
	for (const char *q = line; *q; q++)
		nf += *q == ',';
	fields = tf_xcalloc(nf, sizeof *fields);
	split_fields(line, fields, nf);
	for (size_t i = 0; i < nf; i++)
		if (!strcmp(trim(fields[i]), label_col))
			label = i;
	if (label == SIZE_MAX || nf < 2) {
		tf_errf(err, errlen,
		        "'%s': no label column '%s' in the header (or no feature "
		        "columns); name it with csv_label",
		        path, label_col);
		rc = -EBADMSG;
		goto out;
	}
	r.dim = nf - 1;
	size_t lineno = 1;
	while ((line = strtok_r(NULL, "\n", &save))) {
		lineno++;
		if (!*trim(line))
			continue;
		size_t got = split_fields(line, fields, nf);
		if (got != nf) {
			tf_errf(err, errlen, "%s:%zu: %zu columns, the header has %zu", path,
			        lineno, got, nf);
			rc = -EBADMSG;
			goto out;
		}
		if (r.n == cap && (rc = csv_grow(&r, &cap))) {
			tf_errf(err, errlen, "%s:%zu: no memory for %zu rows of %zu columns", path,
			        lineno, r.n + 1, nf);
			goto out;
		}
		for (size_t i = 0, j = 0; i < nf; i++) {
			char *s = trim(fields[i]), *end;
			errno = 0;
			if (i == label) {
				long long v = strtoll(s, &end, 10);
				if (!*s || *end || errno || v < 0 || v > 65535) {
					tf_errf(err, errlen,
					        "%s:%zu: label '%s' is not an integer in "
					        "0..65535",
					        path, lineno, s);
					rc = -EBADMSG;
					goto out;
				}
				r.labels[r.n] = v;
				if (v + 1 > r.num_classes)
					r.num_classes = (int)v + 1;
			} else {
				double v = strtod(s, &end);
				if (!*s || *end || !isfinite(v)) {
					tf_errf(err, errlen,
					        "%s:%zu: column %zu: '%s' is not a finite "
					        "number",
					        path, lineno, i + 1, s);
					rc = -EBADMSG;
					goto out;
				}
				r.f32[r.n * r.dim + j++] = (float)v;
			}
		}
		r.n++;
	}
	if (r.n == 0) {
		tf_errf(err, errlen, "'%s': no data rows", path);
		rc = -EBADMSG;
		goto out;
	}
	if (r.num_classes < 2)
		r.num_classes = 2;
	*out = r;
	memset(&r, 0, sizeof r);
out:
	tf_rawset_release(&r);
	free(fields);
	free(text);
	return rc;
}

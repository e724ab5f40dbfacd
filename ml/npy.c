/* npy.c — reading and writing NumPy .npy arrays (see npy.h). */
#include "ml/npy.h"

#include "common/common.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void tf_npy_release(struct tf_npy *a)
{
	if (!a)
		return;
	free(a->data);
	a->data = NULL;
}

int tf_npy_read(const char *path, struct tf_npy *out, char *err, size_t errlen)
{
	char *buf = NULL;
	size_t len;
	int rc = tf_read_file(path, (size_t)1 << 34, &buf, &len);
	if (rc) {
		tf_errf(err, errlen, "cannot read '%s': %s", path, strerror(-rc));
		return rc;
	}
	rc = -EBADMSG;
	const unsigned char *u = (const unsigned char *)buf;
	if (len < 10 || memcmp(buf, "\x93NUMPY", 6)) {
		tf_errf(err, errlen, "'%s' is not a .npy file", path);
		goto out;
	}
	size_t hlen, hstart;
	if (u[6] == 1) {
		hlen = u[8] | (size_t)u[9] << 8;
		hstart = 10;
	} else {
		if (len < 12)
			goto bad;
		hlen = u[8] | (size_t)u[9] << 8 | (size_t)u[10] << 16 | (size_t)u[11] << 24;
		hstart = 12;
	}
	if (hstart + hlen > len)
		goto bad;
	char *h = tf_xmalloc(hlen + 1);
	memcpy(h, buf + hstart, hlen);
	h[hlen] = 0;
	/* drop the padding (messages quote the header); hlen still locates the data */
	for (size_t t = hlen; t && (h[t - 1] == ' ' || h[t - 1] == '\n');)
		h[--t] = 0;
	struct tf_npy a = {0};
	size_t esz;
	if (strstr(h, "'|u1'") || strstr(h, "'<u1'")) {
		a.dtype = TF_NPY_U8;
		esz = 1;
	} else if (strstr(h, "'<f4'")) {
		a.dtype = TF_NPY_F32;
		esz = 4;
	} else if (strstr(h, "'<f8'")) {
		a.dtype = TF_NPY_F64;
		esz = 8;
	} else {
		tf_errf(err, errlen,
		        "'%s': unsupported dtype (use uint8, little-endian float32 "
		        "or float64): %s",
		        path, h);
		free(h);
		goto out;
	}
	if (strstr(h, "'fortran_order': True")) {
		tf_errf(err, errlen,
		        "'%s': Fortran-ordered arrays are not supported; save with "
		        "numpy.ascontiguousarray",
		        path);
		free(h);
		goto out;
	}
	char *sh = strstr(h, "'shape':");
	char *lp = sh ? strchr(sh, '(') : NULL;
	if (!lp) {
		free(h);
		goto bad;
	}
	/* Every dimension and the product are checked: a header is untrusted, and a wrapped
	 * product would let a later n x dim check pass on a tiny buffer. */
	a.count = 1;
	for (char *p = lp + 1; *p && *p != ')';) {
		while (*p == ' ' || *p == ',')
			p++;
		if (*p == ')')
			break;
		char *end;
		errno = 0;
		unsigned long long v = *p >= '0' && *p <= '9' ? strtoull(p, &end, 10) : 0;
		if (*p < '0' || *p > '9' || errno || a.ndim == 4 || v > SIZE_MAX ||
		    __builtin_mul_overflow(a.count, (size_t)v, &a.count)) {
			tf_errf(err, errlen,
			        "'%s': bad .npy shape (at most 4 non-negative dimensions whose "
			        "product fits in memory): %s",
			        path, h);
			free(h);
			goto out;
		}
		a.shape[a.ndim++] = (size_t)v;
		p = end;
	}
	free(h);
	size_t bytes;
	if (a.ndim == 0 || __builtin_mul_overflow(a.count, esz, &bytes) ||
	    len - hstart - hlen < bytes) {
		tf_errf(
		    err, errlen,
		    "'%s': the header promises %zu values of %zu bytes, the file holds %zu bytes "
		    "of data",
		    path, a.count, esz, len - hstart - hlen);
		goto out;
	}
	/* bounded by the file's own size, which tf_read_file capped */
	a.data = malloc(bytes + 1);
	if (!a.data) {
		tf_errf(err, errlen, "'%s': no memory for %zu bytes of data", path, bytes);
		rc = -ENOMEM;
		goto out;
	}
	memcpy(a.data, buf + hstart + hlen, bytes);
	*out = a;
	rc = 0;
	goto out;
bad:
	tf_errf(err, errlen, "'%s': damaged or unsupported .npy header or data", path);
out:
	free(buf);
	return rc;
}

int tf_npy_write_f32(const char *path, const float *data, size_t rows, size_t cols)
{
	char hdr[128];
	int n = snprintf(hdr, sizeof hdr,
	                 "{'descr': '<f4', 'fortran_order': False, 'shape': "
	                 "(%zu, %zu), }",
	                 rows, cols);
	size_t total = 10 + (size_t)n + 1;
	size_t pad = (64 - total % 64) % 64;
	FILE *f = fopen(path, "wb");
	if (!f)
		return -errno;
	unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, 0, 0};
	size_t hl = (size_t)n + pad + 1;
	pre[8] = (unsigned char)(hl & 0xff);
	pre[9] = (unsigned char)(hl >> 8);
	fwrite(pre, 1, 10, f);
	fwrite(hdr, 1, (size_t)n, f);
	for (size_t i = 0; i < pad; i++)
		fputc(' ', f);
	fputc('\n', f);
	fwrite(data, sizeof(float), rows * cols, f);
	int bad = ferror(f);
	if (fclose(f) || bad)
		return -EIO;
	return 0;
}

/* example.c — hand-written protobuf wire format for tf.train.Example (see example.h).
 * Wire types used: 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32. */
#include "ml/example.h"

#include <errno.h>
#include <string.h>

static void put_varint(struct tf_buf *b, uint64_t v)
{
	unsigned char tmp[10];
	size_t n = 0;
	do {
		tmp[n] = (unsigned char)(v & 0x7f);
		v >>= 7;
		if (v)
			tmp[n] |= 0x80;
		n++;
	} while (v);
	tf_buf_append(b, tmp, n);
}

static size_t varint_size(uint64_t v)
{
	size_t n = 1;
	while (v >= 0x80) {
		v >>= 7;
		n++;
	}
	return n;
}

/* Reads a varint at *p (< end); advances *p. 0 or -EBADMSG. */
static int get_varint(const unsigned char **p, const unsigned char *end, uint64_t *out)
{
	uint64_t v = 0;
	for (int shift = 0; shift < 64; shift += 7) {
		if (*p >= end)
			return -EBADMSG;
		unsigned char c = *(*p)++;
		v |= (uint64_t)(c & 0x7f) << shift;
		if (!(c & 0x80)) {
			*out = v;
			return 0;
		}
	}
	return -EBADMSG;
}

/* Skips one field's value of the given wire type. */
static int skip_field(const unsigned char **p, const unsigned char *end, unsigned wt)
{
	uint64_t v;
	switch (wt) {
	case 0:
		return get_varint(p, end, &v);
	case 1:
		if (end - *p < 8)
			return -EBADMSG;
		*p += 8;
		return 0;
	case 2:
		if (get_varint(p, end, &v) || v > (uint64_t)(end - *p))
			return -EBADMSG;
		*p += v;
		return 0;
	case 5:
		if (end - *p < 4)
			return -EBADMSG;
		*p += 4;
		return 0;
	default:
		return -EBADMSG;
	}
}

/* Size of the list message of one feature. */
static size_t list_size(const struct tf_feature_in *f)
{
	size_t payload;
	switch (f->kind) {
	case TF_FEATURE_BYTES:
		return 1 + varint_size(f->bytes) + f->bytes;
	case TF_FEATURE_FLOAT:
		payload = 4 * f->count;
		break;
	case TF_FEATURE_INT64:
		payload = 0;
		for (size_t i = 0; i < f->count; i++)
			payload += varint_size((uint64_t)((const int64_t *)f->data)[i]);
		break;
	default:
		return 0;
	}
	return f->count ? 1 + varint_size(payload) + payload : 0;
}

void tf_example_encode(const struct tf_feature_in *f, size_t n, struct tf_buf *out)
{
	size_t entry_sizes_total = 0;
	for (size_t i = 0; i < n; i++) {
		size_t kl = strlen(f[i].name), ls = list_size(&f[i]);
		size_t feat = f[i].kind == TF_FEATURE_NONE ? 0 : 1 + varint_size(ls) + ls;
		size_t entry = 1 + varint_size(kl) + kl + 1 + varint_size(feat) + feat;
		entry_sizes_total += 1 + varint_size(entry) + entry;
	}
	/* Example.features (field 1, length-delimited) */
	put_varint(out, (1 << 3) | 2);
	put_varint(out, entry_sizes_total);
	for (size_t i = 0; i < n; i++) {
		size_t kl = strlen(f[i].name), ls = list_size(&f[i]);
		size_t feat = f[i].kind == TF_FEATURE_NONE ? 0 : 1 + varint_size(ls) + ls;
		size_t entry = 1 + varint_size(kl) + kl + 1 + varint_size(feat) + feat;
		put_varint(out, (1 << 3) | 2); /* Features.feature map entry */
		put_varint(out, entry);
		put_varint(out, (1 << 3) | 2); /* entry.key */
		put_varint(out, kl);
		tf_buf_append(out, f[i].name, kl);
		put_varint(out, (2 << 3) | 2); /* entry.value: Feature */
		put_varint(out, feat);
		if (f[i].kind == TF_FEATURE_NONE)
			continue;
		put_varint(out, ((uint64_t)f[i].kind << 3) | 2); /* oneof field = kind number */
		put_varint(out, ls);
		if (!f[i].count)
			continue;
		if (f[i].kind == TF_FEATURE_BYTES) {
			put_varint(out, (1 << 3) | 2);
			put_varint(out, f[i].bytes);
			tf_buf_append(out, f[i].data, f[i].bytes);
		} else if (f[i].kind == TF_FEATURE_FLOAT) {
			put_varint(out, (1 << 3) | 2); /* packed */
			put_varint(out, 4 * f[i].count);
			const float *v = f[i].data;
			for (size_t j = 0; j < f[i].count; j++) {
				uint32_t u;
				unsigned char le[4];
				memcpy(&u, &v[j], 4);
				for (int k = 0; k < 4; k++)
					le[k] = (unsigned char)(u >> (8 * k));
				tf_buf_append(out, le, 4);
			}
		} else {
			const int64_t *v = f[i].data;
			size_t payload = ls - 1 - varint_size(ls - 1);
			put_varint(out, (1 << 3) | 2); /* packed */
			put_varint(out, payload);
			for (size_t j = 0; j < f[i].count; j++)
				put_varint(out, (uint64_t)v[j]);
		}
	}
}

/* Decodes one map entry (key, Feature) into a view. */
static int decode_entry(const unsigned char *p, const unsigned char *end, struct tf_feature_view *v)
{
	memset(v, 0, sizeof *v);
	while (p < end) {
		uint64_t tag, len;
		if (get_varint(&p, end, &tag))
			return -EBADMSG;
		if ((tag >> 3) == 1 && (tag & 7) == 2) {
			if (get_varint(&p, end, &len) || len > (uint64_t)(end - p))
				return -EBADMSG;
			v->name = p;
			v->name_len = len;
			p += len;
		} else if ((tag >> 3) == 2 && (tag & 7) == 2) {
			if (get_varint(&p, end, &len) || len > (uint64_t)(end - p))
				return -EBADMSG;
			const unsigned char *f = p, *fend = p + len;
			p += len;
			/* Feature: the last kind field present wins (oneof semantics) */
			while (f < fend) {
				uint64_t ft, fl;
				if (get_varint(&f, fend, &ft))
					return -EBADMSG;
				unsigned num = (unsigned)(ft >> 3);
				if ((ft & 7) == 2 && num >= 1 && num <= 3) {
					if (get_varint(&f, fend, &fl) || fl > (uint64_t)(fend - f))
						return -EBADMSG;
					v->kind = (enum tf_feature_kind)num;
					v->list = f;
					v->list_len = fl;
					f += fl;
				} else if (skip_field(&f, fend, ft & 7)) {
					return -EBADMSG;
				}
			}
		} else if (skip_field(&p, end, tag & 7)) {
			return -EBADMSG;
		}
	}
	return 0;
}

int tf_example_decode(const void *data, size_t len, struct tf_feature_view *views, size_t max)
{
	const unsigned char *p = data, *end = p + len;
	int n = 0;
	while (p < end) {
		uint64_t tag, l;
		if (get_varint(&p, end, &tag))
			return -EBADMSG;
		if (!((tag >> 3) == 1 && (tag & 7) == 2)) {
			if (skip_field(&p, end, tag & 7))
				return -EBADMSG;
			continue;
		}
		if (get_varint(&p, end, &l) || l > (uint64_t)(end - p))
			return -EBADMSG;
		const unsigned char *fs = p, *fend = p + l;
		p += l;
		while (fs < fend) {
			uint64_t et, el;
			if (get_varint(&fs, fend, &et))
				return -EBADMSG;
			if (!((et >> 3) == 1 && (et & 7) == 2)) {
				if (skip_field(&fs, fend, et & 7))
					return -EBADMSG;
				continue;
			}
			if (get_varint(&fs, fend, &el) || el > (uint64_t)(fend - fs))
				return -EBADMSG;
			struct tf_feature_view tmp;
			if (decode_entry(fs, fs + el, &tmp))
				return -EBADMSG;
			fs += el;
			if ((size_t)n < max)
				views[n] = tmp;
			n++;
		}
	}
	return n;
}

const struct tf_feature_view *tf_example_find(const struct tf_feature_view *v, size_t n,
                                              const char *name)
{
	size_t nl = strlen(name);
	for (size_t i = 0; i < n; i++)
		if (v[i].name_len == nl && !memcmp(v[i].name, name, nl))
			return &v[i];
	return NULL;
}

int tf_feature_bytes(const struct tf_feature_view *v, const unsigned char **out, size_t *olen)
{
	if (v->kind != TF_FEATURE_BYTES)
		return -EBADMSG;
	const unsigned char *p = v->list, *end = p + v->list_len;
	while (p < end) {
		uint64_t tag, l;
		if (get_varint(&p, end, &tag))
			return -EBADMSG;
		if ((tag >> 3) == 1 && (tag & 7) == 2) {
			if (get_varint(&p, end, &l) || l > (uint64_t)(end - p))
				return -EBADMSG;
			*out = p;
			*olen = l;
			return 0;
		}
		if (skip_field(&p, end, tag & 7))
			return -EBADMSG;
	}
	return -ENOENT;
}

int tf_feature_int64s(const struct tf_feature_view *v, int64_t *out, size_t max)
{
	if (v->kind != TF_FEATURE_INT64)
		return -EBADMSG;
	const unsigned char *p = v->list, *end = p + v->list_len;
	size_t n = 0;
	while (p < end) {
		uint64_t tag, x, l;
		if (get_varint(&p, end, &tag))
			return -EBADMSG;
		if ((tag >> 3) == 1 && (tag & 7) == 0) {
			if (get_varint(&p, end, &x))
				return -EBADMSG;
			if (n < max)
				out[n] = (int64_t)x;
			n++;
		} else if ((tag >> 3) == 1 && (tag & 7) == 2) {
			if (get_varint(&p, end, &l) || l > (uint64_t)(end - p))
				return -EBADMSG;
			const unsigned char *q = p, *qend = p + l;
			p += l;
			while (q < qend) {
				if (get_varint(&q, qend, &x))
					return -EBADMSG;
				if (n < max)
					out[n] = (int64_t)x;
				n++;
			}
		} else if (skip_field(&p, end, tag & 7)) {
			return -EBADMSG;
		}
	}
	return (int)n;
}

static float le_float(const unsigned char *q)
{
	uint32_t u =
	    (uint32_t)q[0] | (uint32_t)q[1] << 8 | (uint32_t)q[2] << 16 | (uint32_t)q[3] << 24;
	float f;
	memcpy(&f, &u, 4);
	return f;
}

int tf_feature_floats(const struct tf_feature_view *v, float *out, size_t max)
{
	if (v->kind != TF_FEATURE_FLOAT)
		return -EBADMSG;
	const unsigned char *p = v->list, *end = p + v->list_len;
	size_t n = 0;
	while (p < end) {
		uint64_t tag, l;
		if (get_varint(&p, end, &tag))
			return -EBADMSG;
		if ((tag >> 3) == 1 && (tag & 7) == 5) {
			if (end - p < 4)
				return -EBADMSG;
			if (n < max)
				out[n] = le_float(p);
			n++;
			p += 4;
		} else if ((tag >> 3) == 1 && (tag & 7) == 2) {
			if (get_varint(&p, end, &l) || l > (uint64_t)(end - p) || l % 4)
				return -EBADMSG;
			for (size_t i = 0; i < l; i += 4, n++)
				if (n < max)
					out[n] = le_float(p + i);
			p += l;
		} else if (skip_field(&p, end, tag & 7)) {
			return -EBADMSG;
		}
	}
	return (int)n;
}
